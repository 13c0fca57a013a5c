"""dev-stats errors.

Hierarchy::

    AppError (pin_sessions.platform.errors)
    └── DevStatsError
        └── SummaryPeriodInvalid      DEV_STATS_PERIOD_INVALID (400)
"""

from __future__ import annotations

from pin_sessions.platform.errors import AppError


class DevStatsError(AppError):
    code = "DEV_STATS_ERROR"


class SummaryPeriodInvalid(DevStatsError):
    code = "DEV_STATS_PERIOD_INVALID"
    status = 400
    title = "The summary period is not valid"
