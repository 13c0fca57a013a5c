"""Identity's HTTP routes (SPEC §4): camelCase JSON, unknown fields refused, no IP out."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from pin_sessions.identity import devices, domain
from pin_sessions.identity.codes import DevCodes
from pin_sessions.identity.errors import AnonymousIdInvalid, ConfirmationNotFound
from pin_sessions.identity.operations import Device, IdentityOperations, TokenPair
from pin_sessions.platform.auth import Authenticator, UserPrincipal
from pin_sessions.platform.clock import Clock
from pin_sessions.platform.http.anonymous_id import (
    ANONYMOUS_ID_HEADER,
    anonymous_id_parameter,
    parse_anonymous_id,
)
from pin_sessions.platform.http.client_address import Network, request_client_ip
from pin_sessions.platform.http.openapi import parameters, problems

MAX_REFRESH_TOKEN_LENGTH = 256
# A code of any other shape is simply a wrong code (400, one attempt used), not a 422 that
# would spare the guesser an attempt; the bound only keeps the input small.
MAX_CODE_LENGTH = 64


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid", frozen=True)


class _Out(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class NoFieldsBody(_Body):
    """Logout's and the revoke routes' body: absent or ``{}``; any field is refused (SPEC §4)."""


class SignInRequestBody(_Body):
    phone_number: Annotated[str, Field(pattern=domain.E164_PATTERN, description="E.164")]


class SignInRequestOut(_Out):
    request_id: uuid.UUID
    expires_at: datetime


class ConfirmBody(_Body):
    request_id: uuid.UUID
    code: Annotated[str, Field(max_length=MAX_CODE_LENGTH)]


class RefreshBody(_Body):
    refresh_token: Annotated[str, Field(min_length=1, max_length=MAX_REFRESH_TOKEN_LENGTH)]


class TokenPairOut(_Out):
    user_id: uuid.UUID
    session_id: uuid.UUID
    access_token: str
    access_token_expires_at: datetime
    refresh_token: str
    refresh_token_expires_at: datetime

    @classmethod
    def of(cls, pair: TokenPair) -> TokenPairOut:
        return cls(
            user_id=pair.user_id,
            session_id=pair.session_id,
            access_token=pair.access_token,
            access_token_expires_at=pair.access_token_expires_at,
            refresh_token=pair.refresh_token,
            refresh_token_expires_at=pair.refresh_token_expires_at,
        )


class DeviceOut(_Out):
    type: str
    os: str | None
    browser: str | None


class SessionOut(_Out):
    session_id: uuid.UUID
    status: str
    created_at: datetime
    last_used_at: datetime
    expires_at: datetime
    device: DeviceOut
    current: bool


class SessionsOut(_Out):
    items: list[SessionOut]


class DevCodeOut(_Out):
    code: str


def _device(request: Request, trusted_proxies: Sequence[Network]) -> Device:
    ip = request_client_ip(request, trusted_proxies)
    return Device(request.headers.get("user-agent", ""), domain.storable_ip(ip))


def _anonymous_id(request: Request) -> uuid.UUID | None:
    """The optional device header, read by hand so a bad one is a 400, as in user-activity."""
    raw = request.headers.get(ANONYMOUS_ID_HEADER)
    if raw is None:
        return None
    anonymous_id = parse_anonymous_id(raw)
    if anonymous_id is None:
        raise AnonymousIdInvalid()
    return anonymous_id


def build_identity_router(
    operations: IdentityOperations,
    authenticator: Authenticator,
    clock: Clock,
    *,
    trusted_proxies: Sequence[Network] = (),
) -> APIRouter:
    """The identity API; the client's IP is read through ``trusted_proxies``."""
    router = APIRouter(prefix="/api/identity", tags=["identity"])
    # A default, not an Annotated alias: string annotations cannot see a local alias.
    signed_in = Depends(authenticator.user())

    @router.post(
        "/sign-in/requests",
        status_code=status.HTTP_201_CREATED,
        responses=problems(400, 413, 422, 429, 503),
    )
    async def request_sign_in(body: SignInRequestBody, request: Request) -> SignInRequestOut:
        """Send a one-time code to the phone (5 per phone per 15 min)."""
        created = await operations.request_sign_in(
            body.phone_number, _device(request, trusted_proxies).ip, clock.now()
        )
        return SignInRequestOut(request_id=created.request_id, expires_at=created.expires_at)

    @router.post(
        "/sign-in/confirm",
        responses=problems(400, 404, 409, 410, 413, 422, 429, 503),
        openapi_extra=parameters(anonymous_id_parameter(required=False)),
    )
    async def confirm_sign_in(body: ConfirmBody, request: Request) -> TokenPairOut:
        """Trade the code for an access and a refresh token."""
        pair = await operations.confirm_sign_in(
            body.request_id,
            body.code,
            _anonymous_id(request),
            _device(request, trusted_proxies),
            clock.now(),
        )
        return TokenPairOut.of(pair)

    @router.post("/sessions/refresh", responses=problems(400, 401, 413, 422, 503))
    async def refresh(body: RefreshBody, request: Request) -> TokenPairOut:
        """Rotate the refresh token; the old one is void (a racing retry gets the same pair)."""
        return TokenPairOut.of(
            await operations.refresh(
                body.refresh_token, _device(request, trusted_proxies).ip, clock.now()
            )
        )

    @router.get("/sessions", responses=problems(401, 503))
    async def list_sessions(user: UserPrincipal = signed_in) -> SessionsOut:
        """The user's live sessions, one per signed-in device."""
        rows = await operations.devices(user, clock.now())
        return SessionsOut(
            items=[
                SessionOut(
                    session_id=row.id,
                    status=row.status.value,
                    created_at=row.created_at,
                    last_used_at=row.last_used_at,
                    expires_at=row.expires_at,
                    device=DeviceOut(**vars(devices.describe(row.device_user_agent))),
                    current=row.id == user.session_id,
                )
                for row in rows
            ]
        )

    @router.post(
        "/sessions/logout",
        status_code=status.HTTP_204_NO_CONTENT,
        responses=problems(400, 401, 413, 422, 503),
    )
    async def logout(
        _body: Annotated[NoFieldsBody | None, Body()] = None,
        user: UserPrincipal = signed_in,
    ) -> Response:
        """End the session of this access token."""
        await operations.logout(user, clock.now())
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    @router.delete(
        "/sessions/{sessionId}",
        status_code=status.HTTP_204_NO_CONTENT,
        responses=problems(400, 401, 404, 413, 422, 503),
    )
    async def revoke_session(
        session_id: Annotated[uuid.UUID, Path(alias="sessionId")],
        _body: Annotated[NoFieldsBody | None, Body()] = None,
        user: UserPrincipal = signed_in,
    ) -> Response:
        """End one of the user's own sessions."""
        await operations.revoke_session(user, session_id, clock.now())
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    @router.delete(
        "/sessions",
        status_code=status.HTTP_204_NO_CONTENT,
        responses=problems(400, 401, 413, 422, 503),
    )
    async def revoke_other_sessions(
        _body: Annotated[NoFieldsBody | None, Body()] = None,
        user: UserPrincipal = signed_in,
    ) -> Response:
        """End every session of the user but this one."""
        await operations.revoke_other_sessions(user, clock.now())
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    return router


def build_dev_codes_router(codes: DevCodes) -> APIRouter:
    """Mounted only with PIN_DEV_CODES=1: otherwise the path does not exist at all."""
    router = APIRouter(prefix="/dev", tags=["development"])

    @router.get("/sign-in-codes/{requestId}", responses=problems(404, 422, 503))
    async def sign_in_code(request_id: Annotated[uuid.UUID, Path(alias="requestId")]) -> DevCodeOut:
        """The code sent for a sign-in request."""
        code = await codes.code(request_id)
        if code is None:
            raise ConfirmationNotFound()
        return DevCodeOut(code=code)

    return router
