"""Identity's HTTP routes (SPEC §4): camelCase JSON, unknown fields refused, no IP out.

Module-level routes; they read the context's use cases from ``services.IdentityServices``,
which the composition root builds (with PIN_DEV_CODES=1 holding the development codes, when
it mounts ``dev_router`` too).
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Request, Response, status
from fastapi.responses import StreamingResponse

from pin_sessions.identity import devices, domain
from pin_sessions.identity.codes import DevCodes
from pin_sessions.identity.errors import ConfirmationNotFound
from pin_sessions.identity.operations import Device, IdentityOperations
from pin_sessions.identity.schemas import (
    ConfirmBody,
    DevCodeOut,
    DeviceOut,
    NoFieldsBody,
    RefreshBody,
    SessionOut,
    SessionsOut,
    SignInRequestBody,
    SignInRequestOut,
    TokenPairOut,
)
from pin_sessions.identity.services import IdentityDep
from pin_sessions.identity.user_data import UserData
from pin_sessions.platform.auth_errors import SessionNotActive
from pin_sessions.platform.http.anonymous_id import OptionalDevice, anonymous_id_parameter
from pin_sessions.platform.http.dependencies import (
    ClaimedUser,
    ClientIp,
    CurrentUser,
    Now,
    live_user,
)
from pin_sessions.platform.http.openapi import parameters, problems
from pin_sessions.platform.streamed_json import stream_json

router = APIRouter(prefix="/api/identity", tags=["identity"])
# Mounted only with PIN_DEV_CODES=1: otherwise the path does not exist at all.
dev_router = APIRouter(prefix="/dev", tags=["development"])


async def _identity(services: IdentityDep) -> IdentityOperations:
    return services.operations


async def _user_data(services: IdentityDep) -> UserData:
    return services.user_data


async def _dev_codes(services: IdentityDep) -> DevCodes:
    if services.dev_codes is None:
        # The composition root mounts dev_router only beside the codes.
        raise LookupError("dev_router is mounted without the development codes")
    return services.dev_codes


async def _device(request: Request, client_ip: ClientIp) -> Device:
    return Device(request.headers.get("user-agent", ""), domain.storable_ip(client_ip))


Identity = Annotated[IdentityOperations, Depends(_identity)]
UserDataDep = Annotated[UserData, Depends(_user_data)]
ClientDevice = Annotated[Device, Depends(_device)]
NoFields = Annotated[NoFieldsBody | None, Body()]


_SIGN_IN_REQUEST_PROBLEMS = problems(400, 413, 422, 429, 503)
_SIGN_IN_REQUEST_PROBLEMS[503] = {
    **_SIGN_IN_REQUEST_PROBLEMS[503],
    "description": "The SMS gateway did not take the code (`IDENTITY_CODE_DELIVERY_FAILED`; "
    "the request counts against no limit), or the database did not answer in time",
}


@router.post(
    "/sign-in/requests",
    status_code=status.HTTP_201_CREATED,
    responses=_SIGN_IN_REQUEST_PROBLEMS,
)
async def request_sign_in(
    body: SignInRequestBody, identity: Identity, device: ClientDevice, now: Now
) -> SignInRequestOut:
    """Send a one-time code to the phone by SMS.

    At most 5 per phone per 15 min, `PIN_SIGN_IN__PER_IP_LIMIT` per client address per
    hour and `PIN_SIGN_IN__GLOBAL_LIMIT` per minute for the service: past any of them,
    429 with `Retry-After`.
    """
    created = await identity.request_sign_in(body.phone_number, device.ip, now)
    return SignInRequestOut(request_id=created.request_id, expires_at=created.expires_at)


@router.post(
    "/sign-in/confirm",
    responses=problems(400, 404, 409, 410, 413, 422, 429, 503),
    openapi_extra=parameters(anonymous_id_parameter(required=False)),
)
async def confirm_sign_in(
    body: ConfirmBody,
    identity: Identity,
    device: ClientDevice,
    anonymous_id: OptionalDevice,
    now: Now,
) -> TokenPairOut:
    """Trade the code for an access and a refresh token."""
    pair = await identity.confirm_sign_in(body.request_id, body.code, anonymous_id, device, now)
    return TokenPairOut.of(pair)


@router.post("/sessions/refresh", responses=problems(400, 401, 413, 422, 503))
async def refresh(
    body: RefreshBody, identity: Identity, device: ClientDevice, now: Now
) -> TokenPairOut:
    """Rotate the refresh token; the old one is void (a racing retry gets the same pair)."""
    return TokenPairOut.of(await identity.refresh(body.refresh_token, device.ip, now))


@router.get("/sessions", responses=problems(400, 401, 503))
async def list_sessions(user: CurrentUser, identity: Identity, now: Now) -> SessionsOut:
    """The user's live sessions, one per signed-in device."""
    rows = await identity.devices(user, now)
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
    user: CurrentUser, identity: Identity, now: Now, _body: NoFields = None
) -> Response:
    """End the session of this access token."""
    await identity.logout(user, now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete(
    "/sessions/{sessionId}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problems(400, 401, 404, 413, 422, 503),
)
async def revoke_session(
    session_id: Annotated[uuid.UUID, Path(alias="sessionId")],
    user: CurrentUser,
    identity: Identity,
    now: Now,
    _body: NoFields = None,
) -> Response:
    """End one of the user's own sessions."""
    await identity.revoke_session(user, session_id, now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete(
    "/sessions",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problems(400, 401, 413, 422, 503),
)
async def revoke_other_sessions(
    user: CurrentUser, identity: Identity, now: Now, _body: NoFields = None
) -> Response:
    """End every session of the user but this one."""
    await identity.revoke_other_sessions(user, now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/me/export",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "Everything identity holds about the caller (SPEC §10), streamed",
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
        **problems(400, 401, 404, 503),
    },
)
async def export_me(
    request: Request, claimed: ClaimedUser, data: UserDataDep, now: Now
) -> StreamingResponse:
    """The caller's phone, sign-in history and devices; IP addresses masked."""
    if await data.erasure(claimed.user_id) is None:
        await live_user(request)
    document = await data.export(claimed.user_id, now)
    return StreamingResponse(
        stream_json(document),
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


@router.delete(
    "/me",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problems(400, 401, 413, 422, 503),
)
async def erase_me(
    request: Request, claimed: ClaimedUser, data: UserDataDep, now: Now, _body: NoFields = None
) -> Response:
    """Erase the caller's account (SPEC §10); needs an access token at most 10 minutes old.

    Repeating it answers 204 again and changes nothing, even though the token's session is
    gone by then — also when the repeat runs at the same time as the first, whose erasure
    may end the session between the two checks below.
    """
    if await data.erasure(claimed.user_id) is None:
        try:
            user = await live_user(request)
        except SessionNotActive:
            if await data.erasure(claimed.user_id) is None:
                raise
        else:
            await data.erase_own(user, now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@dev_router.get("/sign-in-codes/{requestId}", responses=problems(404, 422, 503))
async def sign_in_code(
    request_id: Annotated[uuid.UUID, Path(alias="requestId")],
    codes: Annotated[DevCodes, Depends(_dev_codes)],
) -> DevCodeOut:
    """The code sent for a sign-in request."""
    code = await codes.code(request_id)
    if code is None:
        raise ConfirmationNotFound()
    return DevCodeOut(code=code)
