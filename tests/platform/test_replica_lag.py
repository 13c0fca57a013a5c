"""How far a read replica is behind, from WAL positions alone (SPEC §11): no server's clock,
no statement; the positions are the primary's, the replayed one the replica's."""

from __future__ import annotations

from datetime import timedelta

from pin_sessions.platform.replica import Position, Positions, ReplicaState, judge, lag_behind

KEEP = timedelta(seconds=11)


def noted(*positions: tuple[float, int]) -> Positions:
    kept = Positions(KEEP)
    for at, lsn in positions:
        kept.add(Position(at, lsn))
    return kept


def test_a_replica_that_replayed_every_position_is_not_behind() -> None:
    positions = noted((0.0, 100), (1.0, 200), (2.0, 300)).oldest_first()

    assert lag_behind(positions, 300, now=2.5) == 0.0
    assert lag_behind(positions, 350, now=2.5) == 0.0


def test_the_lag_is_the_age_of_the_oldest_position_not_replayed() -> None:
    positions = noted((0.0, 100), (1.0, 200), (2.0, 300)).oldest_first()

    assert lag_behind(positions, 200, now=2.5) == 0.5
    assert lag_behind(positions, 150, now=2.5) == 1.5


def test_an_idle_primary_keeps_a_caught_up_replica_at_zero_however_long() -> None:
    """Where now() - pg_last_xact_replay_timestamp() would grow without a write."""
    kept = noted(*((float(second), 500) for second in range(3600)))

    assert kept.oldest_first() == (Position(0.0, 500),)
    assert lag_behind(kept.oldest_first(), 500, now=3600.0) == 0.0


def test_a_replica_that_stopped_receiving_falls_behind_an_idle_primary() -> None:
    """Nothing written since 500, but the replica never got it: as old as 500 is."""
    kept = noted(*((float(second), 500) for second in range(30)))

    assert lag_behind(kept.oldest_first(), 400, now=30.0) is None
    assert kept.oldest_first()[0].at == 0.0  # so the caller knows it is at least 30 s


def test_behind_even_the_oldest_position_the_lag_is_not_known_exactly() -> None:
    positions = noted((5.0, 100), (6.0, 200)).oldest_first()

    assert lag_behind(positions, 50, now=6.5) is None


def test_positions_are_kept_as_long_as_they_can_decide_a_lag_beyond_the_bound() -> None:
    kept = noted(*((float(second), 100 * second) for second in range(60)))

    oldest = kept.oldest_first()[0]
    # The next position is younger than KEEP, so the oldest is at least KEEP old.
    assert 59.0 - kept.oldest_first()[1].at < KEEP.total_seconds() <= 59.0 - oldest.at
    assert len(kept.oldest_first()) <= KEEP.total_seconds() + 2
    # A replica that lacks it is known to lag more than the bound.
    assert lag_behind(kept.oldest_first(), oldest.lsn - 1, now=59.0) is None


def test_a_replica_within_the_bound_serves_and_one_past_it_is_lagging() -> None:
    positions = noted((0.0, 100), (10.0, 200), (20.0, 300)).oldest_first()

    assert judge(positions, 300, now=20.5, max_lag=10.0) == (ReplicaState.OK, 0.0)
    assert judge(positions, 200, now=25.0, max_lag=10.0) == (ReplicaState.OK, 5.0)
    assert judge(positions, 150, now=25.0, max_lag=10.0) == (ReplicaState.LAGGING, 15.0)


def test_a_replica_behind_everything_a_new_process_noted_is_not_judged_yet() -> None:
    """It may be a second behind, or a day: only once the positions span the bound is it
    known to be past it."""
    assert judge((), 100, now=0.0, max_lag=10.0) == (ReplicaState.UNKNOWN, None)
    young = noted((0.0, 500), (1.0, 600)).oldest_first()
    assert judge(young, 100, now=2.0, max_lag=10.0) == (ReplicaState.UNKNOWN, None)
    spanning = noted((0.0, 500), (11.0, 600)).oldest_first()
    assert judge(spanning, 100, now=12.0, max_lag=10.0) == (ReplicaState.LAGGING, 12.0)
