"""The catalogue: what a user may be granted (permissions) and a service may hold (scopes).

Identity grants them, the other contexts check them: named once, here. Only these names
are ever granted (``users grant``), registered (``clients create``) or issued
(``/oauth/token``): a typo is refused with the list below rather than stored, where it
would grant nothing and say nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Users (access tokens' ``permissions``).
DEV_STATS_VIEW = "dev-stats.view"
HISTORY_VIEW_BY_USER = "user-activity.history.view-by-user"

# Services (m2m tokens' ``scope``).
USER_ACTIVITY_INTERNAL = "user-activity.internal"
ADMIN = "admin"

# What each permission lets a user do, as `users permissions` lists them.
PERMISSION_DESCRIPTIONS = {
    DEV_STATS_VIEW: "Read the dev-stats dashboard and the count of sessions open right now",
    HISTORY_VIEW_BY_USER: "Read any user's session history (managers)",
}

# What each scope lets a service do, as `clients scopes` and the OpenAPI document's OAuth 2
# flow list them.
SCOPE_DESCRIPTIONS = {
    USER_ACTIVITY_INTERNAL: "Read device links and users' session histories (/internal/**)",
    ADMIN: "Read users' session histories (GET /internal/users/{userId}/sessions)",
}


def unknown_names(names: Iterable[str], catalogue: Mapping[str, str]) -> list[str]:
    """The ``names`` the catalogue does not hold, sorted and once each."""
    return sorted(set(names) - catalogue.keys())


def listed(catalogue: Mapping[str, str]) -> str:
    """The catalogue's names for a sentence: ``admin, user-activity.internal``."""
    return ", ".join(sorted(catalogue))
