"""Identity's services, as the composition root builds them for the routes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends

from pin_sessions.identity.codes import DevCodes
from pin_sessions.identity.oauth import OAuthServer
from pin_sessions.identity.operations import IdentityOperations
from pin_sessions.identity.user_data import UserData
from pin_sessions.platform.http.wiring import provided
from pin_sessions.platform.key_set import KeySet


@dataclass(frozen=True)
class IdentityServices:
    """What identity's routes (``http``, ``oauth_http``) use beyond the platform's."""

    operations: IdentityOperations
    user_data: UserData
    oauth: OAuthServer
    # The process's copy of the published keys, which the JWKS endpoint serves.
    key_set: KeySet
    # Only with PIN_DEV_CODES=1, when ``http.dev_router`` is mounted too.
    dev_codes: DevCodes | None = None


IdentityDep = Annotated[IdentityServices, Depends(provided(IdentityServices))]
