"""dev-stats errors.

Hierarchy::

    AppError (pin_sessions.platform.errors)
    └── DevStatsError
        └── SummaryPeriodInvalid      DEV_STATS_PERIOD_INVALID (400)
"""

from __future__ import annotations

from pin_sessions.platform.errors import AppError


class DevStatsError(AppError):
    """Base of every dev-stats failure."""


class SummaryPeriodInvalid(DevStatsError):
    code = "DEV_STATS_PERIOD_INVALID"
    status = 400
    title = "The summary period is not valid"
    advice = (
        "from and to must be dates (YYYY-MM-DD) from 2000-01-01 to tomorrow, from not after "
        "to, spanning at most 366 days."
    )
