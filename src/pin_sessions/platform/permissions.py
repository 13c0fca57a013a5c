"""Names of what a user may be granted (permissions) and a service may hold (scopes).

Identity grants them, the other contexts check them: named once, here.
"""

from __future__ import annotations

# Users (access tokens' ``permissions``).
DEV_STATS_VIEW = "dev-stats.view"
HISTORY_VIEW_BY_USER = "user-activity.history.view-by-user"

# Services (m2m tokens' ``scope``).
USER_ACTIVITY_INTERNAL = "user-activity.internal"
ADMIN = "admin"

# What each scope lets a service do, as the OpenAPI document's OAuth 2 flow lists them.
SCOPE_DESCRIPTIONS = {
    USER_ACTIVITY_INTERNAL: "Read device links and users' session histories (/internal/**)",
    ADMIN: "Read users' session histories (GET /internal/users/{userId}/sessions)",
}
