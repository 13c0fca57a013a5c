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
from pin_sessions.identity.errors import (
    CodeDeliveryFailed,
    ConfirmationAlreadyUsed,
    ConfirmationAttemptsExceeded,
    ConfirmationExpired,
    ConfirmationNotFound,
    InvalidConfirmationCode,
    OwnSessionNotFound,
    RecentSignInRequired,
    RefreshTokenReused,
    SessionExpired,
    SessionNotFound,
    SessionRevoked,
    TooManySignInRequests,
    UserErased,
)
from pin_sessions.identity.operations import Device, IdentityOperations
from pin_sessions.identity.schemas import (
    EXPORT_EXAMPLE,
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
from pin_sessions.platform.auth_errors import (
    AuthenticationRequired,
    SessionNotActive,
    UserTokenRequired,
)
from pin_sessions.platform.http.anonymous_id import (
    AnonymousIdInvalid,
    OptionalDevice,
    anonymous_id_parameter,
)
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


# The routes of a signed-in user: no token, a bad one, one of a service, one of an ended session.
_USER = (AuthenticationRequired, UserTokenRequired)


@router.post(
    "/sign-in/requests",
    status_code=status.HTTP_201_CREATED,
    operation_id="requestSignInCode",
    summary="Text a one-time sign-in code to a phone",
    responses=problems(400, 413, 422, 429, 503, TooManySignInRequests, CodeDeliveryFailed),
)
async def request_sign_in(
    body: SignInRequestBody, identity: Identity, device: ClientDevice, now: Now
) -> SignInRequestOut:
    """Send a 6-digit code to the phone by SMS; confirm it within 5 minutes with
    `confirmSignIn`, quoting the `requestId` answered here.

    At most 5 codes per phone per 15 minutes, 20 per client address per hour and 600 a
    minute for the whole service: past any of them, 429 with `Retry-After`. A code the SMS
    gateway did not take is a 503 `IDENTITY_CODE_DELIVERY_FAILED` and counts against no
    limit.
    """
    created = await identity.request_sign_in(body.phone_number, device.ip, now)
    return SignInRequestOut(request_id=created.request_id, expires_at=created.expires_at)


@router.post(
    "/sign-in/confirm",
    operation_id="confirmSignIn",
    summary="Trade a sign-in code for tokens",
    responses=problems(
        400,
        413,
        422,
        503,
        InvalidConfirmationCode,
        AnonymousIdInvalid,
        ConfirmationNotFound,
        ConfirmationAlreadyUsed,
        ConfirmationExpired,
        ConfirmationAttemptsExceeded,
    ),
    openapi_extra=parameters(anonymous_id_parameter(required=False)),
)
async def confirm_sign_in(
    body: ConfirmBody,
    identity: Identity,
    device: ClientDevice,
    anonymous_id: OptionalDevice,
    now: Now,
) -> TokenPairOut:
    """Check the code and sign the user in (a new user for a new phone): an access token
    (15 minutes) and a refresh token (30 days, rotated by `refreshSession`).

    With `X-Anonymous-Id`, the device's session is linked to the user. After 5 wrong codes
    the request is closed (429); a code is valid for 5 minutes (410) and signs in once (409).
    """
    pair = await identity.confirm_sign_in(body.request_id, body.code, anonymous_id, device, now)
    return TokenPairOut.of(pair)


@router.post(
    "/sessions/refresh",
    operation_id="refreshSession",
    summary="Rotate a refresh token for new tokens",
    responses=problems(
        400, 413, 422, 503, SessionNotFound, SessionExpired, SessionRevoked, RefreshTokenReused
    ),
)
async def refresh(
    body: RefreshBody, identity: Identity, device: ClientDevice, now: Now
) -> TokenPairOut:
    """Exchange the refresh token for a new access token and a new refresh token; the old
    one is then used up. The same token sent again within 10 seconds (a retry racing the
    first) gets the same pair; later, it is reuse and revokes every session of its family
    (401 `IDENTITY_REFRESH_TOKEN_REUSED`).
    """
    return TokenPairOut.of(await identity.refresh(body.refresh_token, device.ip, now))


@router.get(
    "/sessions",
    operation_id="listMySignInSessions",
    summary="List the caller's signed-in devices",
    responses=problems(400, 401, 503, *_USER),
)
async def list_sessions(user: CurrentUser, identity: Identity, now: Now) -> SessionsOut:
    """The caller's live sessions, one per signed-in device, the current one marked."""
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
    operation_id="signOut",
    summary="Sign out this device",
    responses=problems(400, 401, 413, 422, 503, *_USER),
)
async def logout(
    user: CurrentUser, identity: Identity, now: Now, _body: NoFields = None
) -> Response:
    """End the session of this access token: its refresh token stops working, and its
    access tokens within seconds."""
    await identity.logout(user, now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete(
    # Only a UUID matches, so a literal sibling (`/sessions/logout`) asked with another
    # method is its own 405, never this route's.
    "/sessions/{sessionId:uuid}",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="revokeSession",
    summary="Sign out one of the caller's devices",
    responses=problems(400, 401, 413, 422, 503, *_USER, OwnSessionNotFound),
)
async def revoke_session(
    session_id: Annotated[uuid.UUID, Path(alias="sessionId")],
    user: CurrentUser,
    identity: Identity,
    now: Now,
    _body: NoFields = None,
) -> Response:
    """End one of the caller's own sessions, by its `sessionId` from `listMySignInSessions`;
    another user's session is a 404, as one that does not exist."""
    await identity.revoke_session(user, session_id, now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete(
    "/sessions",
    status_code=status.HTTP_204_NO_CONTENT,
    operation_id="revokeOtherSessions",
    summary="Sign out every other device",
    responses=problems(400, 401, 413, 422, 503, *_USER),
)
async def revoke_other_sessions(
    user: CurrentUser, identity: Identity, now: Now, _body: NoFields = None
) -> Response:
    """End every session of the caller but the one of this access token."""
    await identity.revoke_other_sessions(user, now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/me/export",
    response_class=StreamingResponse,
    operation_id="exportMyAccount",
    summary="Download everything held about the caller's account",
    responses={
        200: {
            "description": "Everything the service holds about the caller's account, streamed",
            "content": {
                "application/json": {"schema": {"type": "object"}, "example": EXPORT_EXAMPLE}
            },
        },
        **problems(400, 401, 503, *_USER, UserErased),
    },
)
async def export_me(
    request: Request, claimed: ClaimedUser, data: UserDataDep, now: Now
) -> StreamingResponse:
    """The caller's phone number, sign-in history and devices, as one JSON document; IP
    addresses masked."""
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
    operation_id="eraseMyAccount",
    summary="Erase the caller's account",
    responses=problems(400, 401, 413, 422, 503, *_USER, RecentSignInRequired),
)
async def erase_me(
    request: Request, claimed: ClaimedUser, data: UserDataDep, now: Now, _body: NoFields = None
) -> Response:
    """Erase the caller's account: the phone number, the sessions and, in every part of the
    service, the activity linked to the user. Needs an access token issued in the last 10
    minutes (else 401 `IDENTITY_RECENT_SIGN_IN_REQUIRED`: sign in again). Repeating it
    answers 204 again.
    """
    # A repeat changes nothing, even though the token's session is gone by then — also
    # when it runs at the same time as the first, whose erasure may end the session between
    # the two checks below.
    if await data.erasure(claimed.user_id) is None:
        try:
            user = await live_user(request)
        except SessionNotActive:
            if await data.erasure(claimed.user_id) is None:
                raise
        else:
            await data.erase_own(user, now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@dev_router.get(
    "/sign-in-codes/{requestId}",
    operation_id="getDevelopmentSignInCode",
    summary="Read a sent code (development only)",
    responses=problems(404, 422, 503, ConfirmationNotFound),
)
async def sign_in_code(
    request_id: Annotated[uuid.UUID, Path(alias="requestId")],
    codes: Annotated[DevCodes, Depends(_dev_codes)],
) -> DevCodeOut:
    """The code texted for a sign-in request: served only where development codes are on,
    never in production."""
    code = await codes.code(request_id)
    if code is None:
        raise ConfirmationNotFound()
    return DevCodeOut(code=code)
