"""What every group of settings is made of: durations, batch sizes, the group model, and the
rule a group breaks about one of its fields, named as the variable that sets it."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

ENV_PREFIX = "PIN_"
NESTED_DELIMITER = "__"


def _seconds_or_iso(value: Any) -> Any:
    """Accept plain seconds (``"300"``, ``"0.5"``) besides pydantic's ISO-8601 parsing."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        if not text.upper().startswith("P"):
            raise ValueError("must be seconds or an ISO-8601 duration such as PT5M") from None
        return value
    # float() also reads "inf" and "nan"; and past timedelta's range it raises OverflowError,
    # which pydantic lets escape as a traceback instead of naming the variable.
    if not math.isfinite(seconds):
        raise ValueError("must be a finite number of seconds")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError("is too long for a duration") from None


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be > 0 seconds")
    return value


def _not_negative(value: timedelta) -> timedelta:
    if value < timedelta(0):
        raise ValueError("must be >= 0 seconds")
    return value


Duration = Annotated[timedelta, BeforeValidator(_seconds_or_iso)]
PositiveDuration = Annotated[Duration, AfterValidator(_positive)]
NonNegativeDuration = Annotated[Duration, AfterValidator(_not_negative)]
BatchSize = Annotated[int, Field(gt=0)]


class Group(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PollingSettings(Group):
    """What the job runner reads from every job's group: its cadence."""

    polling_interval: PositiveDuration


class JobSettings(PollingSettings):
    """A batch job's group: its cadence, batch and run budget.

    ``max_run_duration`` is a guard, not a deadline: it is read between batches, and
    what a run leaves is the next tick's.
    """

    batch_size: BatchSize
    max_run_duration: PositiveDuration


class SettingRuleError(ValueError):
    """A cross-field rule broken by one variable; carries the field it names."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(rule)
        self.field = field
        self.rule = rule


class SettingsError(Exception):
    """Settings could not be loaded; ``str()`` is one line per broken rule."""


def env_name(loc: tuple[str, ...]) -> str:
    """The variable that sets the field at ``loc``: ``PIN_HTTP__PORT`` for ``("http", "port")``."""
    return ENV_PREFIX + NESTED_DELIMITER.join(part.upper() for part in loc)
