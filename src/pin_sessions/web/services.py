"""What the pages' routes use, as the composition root builds it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Protocol

from fastapi import Depends

from pin_sessions.platform.http.wiring import provided


@dataclass(frozen=True)
class PageFeatures:
    """What the pages offer on this server."""

    # The one-click sign-in with a development code (PIN_DEV_CODES=1).
    dev_codes: bool = False


class PermissionGrants(Protocol):
    """What identity offers operators; the composition root passes identity's use cases."""

    async def grant_permissions(
        self, phone_number: str, permissions: Iterable[str], now: datetime
    ) -> uuid.UUID: ...


@dataclass(frozen=True)
class WebServices:
    """The pages' features, and the grant behind the development viewer route."""

    features: PageFeatures
    grants: PermissionGrants


WebDep = Annotated[WebServices, Depends(provided(WebServices))]
