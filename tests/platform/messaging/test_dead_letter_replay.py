"""The runbook's dead-letter replay (docs/operations.md), run as written on both buses: the
consumer that parked a message applies it once; another consumer of the topic does not
apply it again."""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from pin_sessions.platform.database import Connection
from pin_sessions.platform.messaging.envelope import Message
from pin_sessions.platform.outbox import append
from tests.conftest import T0
from tests.platform.messaging.pipeline import Pipeline, RecordingHandler, eventually, thing
from tests.support.promql import PROJECT_ROOT

RUNBOOK = PROJECT_ROOT / "docs" / "operations.md"


class FixedLater(RecordingHandler):
    """Refuses poison until the fix is deployed (``fixed``), then records it like the rest."""

    fixed = False

    async def handle(self, conn: Connection, message: Message, now: datetime) -> None:
        if self.fixed and message.payload.get("Poison"):
            message = Message(
                **{**message.__dict__, "payload": {**message.payload, "Poison": False}}
            )
        await super().handle(conn, message, now)


def replay_statements() -> list[str]:
    """The SQL block of the runbook's replay, one statement each, `:id` as `$1`."""
    section = RUNBOOK.read_text(encoding="utf-8").split("## Dead letters: inspect and replay")[1]
    block = next(b for b in re.findall(r"```sql\n(.*?)```", section, re.S) if "begin;" in b)
    statements = [s.strip() for s in block.split(";") if s.strip()]
    assert statements[0] == "begin" and statements[-1] == "commit"
    return [s.replace(":id", "$1") for s in statements[1:-1]]


async def test_the_runbook_replay_applies_a_parked_message_once_where_it_was_parked(
    pipeline: Pipeline,
) -> None:
    topic = pipeline.topic()
    parking, other = pipeline.consumer_name("parking"), pipeline.consumer_name("other")
    poison = thing(topic, uuid.uuid4(), 1, poison=True)
    async with pipeline.runtime.database.transaction() as conn:
        await append(conn, poison, now=T0)
    fixed_later = FixedLater(parking, topic)
    # `other` had no bug: it applied the message the first time round.
    always_fine = FixedLater(other, topic)
    always_fine.fixed = True
    pipeline.start_consumers(fixed_later, always_fine)

    async def parked() -> bool:
        async with pipeline.runtime.database.connection() as conn:
            rows = await conn.fetchval("select count(*) from messaging.dead_letters")
        return rows == 1 and len(await pipeline.applied(other)) == 1

    await eventually(parked, tasks=pipeline.tasks)
    fixed_later.fixed = True
    async with pipeline.runtime.database.transaction() as conn:
        letter = await conn.fetchval("select id from messaging.dead_letters")
        for statement in replay_statements():
            await conn.execute(statement, *([letter] if "$1" in statement else []))

    async def replayed() -> bool:
        return len(await pipeline.applied(parking)) == 1

    await eventually(replayed, tasks=pipeline.tasks)
    async with pipeline.runtime.database.connection() as conn:
        assert await conn.fetchval("select count(*) from messaging.dead_letters") == 0
    assert [m for _, _, m in await pipeline.applied(parking)] == [poison.message_id]
    assert [m for _, _, m in await pipeline.applied(other)] == [poison.message_id]
