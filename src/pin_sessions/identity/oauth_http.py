"""The OAuth endpoints and the key set, over HTTP (SPEC §8).

``POST /oauth/token`` and ``POST /oauth/introspect`` take form bodies (RFC 6749 §3.2,
RFC 7662 §2.1) and answer errors in RFC 6749 §5.2's JSON — the format OAuth client
libraries parse — with ``Cache-Control: no-store``. Client authentication is HTTP Basic
(``client_secret_basic``, each half form-urlencoded as §2.3.1 says) or the form's
``client_id`` and ``client_secret`` (``client_secret_post``), not both. A form is read
strictly: one value per parameter (§3.2), valid UTF-8, at most a handful of fields; an
empty parameter counts as absent (§3.1).

The routes read :class:`~pin_sessions.identity.oauth.OAuthServer` and the process's
:class:`~pin_sessions.platform.key_set.KeySet` from ``services.IdentityServices``, which the
composition root builds.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import parse_qsl, unquote_plus

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from pin_sessions.identity.clients import Client
from pin_sessions.identity.errors import (
    InvalidClient,
    InvalidRequest,
    OAuthError,
    TooManyClientFailures,
    UnsupportedGrantType,
)
from pin_sessions.identity.oauth import (
    INTROSPECTION_PATH,
    JWKS_PATH,
    METADATA_PATH,
    TOKEN_PATH,
    OAuthServer,
)
from pin_sessions.identity.services import IdentityDep
from pin_sessions.platform.auth import AUTHORIZATION_HEADER
from pin_sessions.platform.http.dependencies import ClientIp, Now
from pin_sessions.platform.http.headers import DuplicateHeader, single_header
from pin_sessions.platform.http.openapi import example, problems
from pin_sessions.platform.key_set import KeySet
from pin_sessions.settings import JWKS_MAX_AGE

router = APIRouter(tags=["oauth"])

FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
MAX_FORM_FIELDS = 8
CLIENT_CREDENTIALS = "client_credentials"
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
# SPEC §8: clients may cache the key set (and the metadata) this long.
PUBLIC_CACHE = {"Cache-Control": f"public, max-age={int(JWKS_MAX_AGE.total_seconds())}"}
BASIC_CHALLENGE = 'Basic realm="pin-sessions", charset="UTF-8"'


class TokenOut(BaseModel):
    """A service's access token (RFC 6749 §5.1): send it as `Authorization: Bearer …`."""

    model_config = example(
        {
            "access_token": "eyJhbGciOiJFUzI1NiIsImtpZCI6Ii4uLiIsInR5cCI6ImF0K2p3dCJ9...",
            "token_type": "Bearer",
            "expires_in": 900,
            "scope": "user-activity.internal",
        }
    )

    access_token: str
    token_type: str
    expires_in: int
    scope: str


class OAuthErrorOut(BaseModel):
    """An OAuth error (RFC 6749 §5.2), the format OAuth clients parse."""

    model_config = example(
        {"error": "invalid_client", "error_description": "client authentication failed"}
    )

    error: str
    error_description: str


class IntrospectionOut(BaseModel):
    """Whether the token is active now (RFC 7662 §2.2), and when it is, what it says."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "active": True,
                    "token_type": "Bearer",
                    "iss": "https://sessions.example.com",
                    "aud": "pin-api",
                    "sub": "3f0b1e52-7c1d-4a8e-9b6f-2d5c8e1a4b70",
                    "sid": "01a252d8-d4cc-7d8a-a9c5-adbfee5252f0",
                    "jti": "01a252da-6f1e-7a2b-8c3d-4e5f6a7b8c9d",
                    "iat": 1796558400,
                    "exp": 1796559300,
                    "auth_time": 1796558396.482913,
                }
            ]
        },
    )

    active: bool


class JwksOut(BaseModel):
    """The public keys tokens are signed with (RFC 7517): verify a token with the key whose
    `kid` its header names."""

    model_config = example(
        {
            "keys": [
                {
                    "kty": "EC",
                    "crv": "P-256",
                    "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
                    "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
                    "kid": "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs",
                    "use": "sig",
                    "alg": "ES256",
                }
            ]
        }
    )

    keys: list[dict[str, Any]]


_FORM_EXAMPLES = {
    "grant_type": {"grant_type": "client_credentials", "scope": "user-activity.internal"},
    "token": {"token": "eyJhbGciOiJFUzI1NiIsImtpZCI6Ii4uLiIsInR5cCI6ImF0K2p3dCJ9..."},
}


def _form_body(*fields: str, required: tuple[str, ...]) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {name: {"type": "string"} for name in fields},
        "required": list(required),
        "examples": [_FORM_EXAMPLES[name] for name in fields if name in _FORM_EXAMPLES][:1],
    }
    return {"requestBody": {"required": True, "content": {FORM_CONTENT_TYPE: {"schema": schema}}}}


_OAUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {
        "model": OAuthErrorOut,
        "description": "`invalid_request`, `invalid_scope` or `unsupported_grant_type`",
    },
    401: {
        "model": OAuthErrorOut,
        "description": "invalid_client",
        "headers": {
            "WWW-Authenticate": {
                "description": "`Basic`",
                "required": True,
                "schema": {"type": "string"},
            }
        },
    },
    429: {
        "model": OAuthErrorOut,
        "description": "temporarily_unavailable: too many failed client authentications",
        "headers": {
            "Retry-After": {
                "description": "Seconds to wait before asking again",
                "required": True,
                "schema": {"type": "integer", "minimum": 0},
            }
        },
    },
    **problems(413, 503),
}


METADATA_EXAMPLE = {
    "issuer": "https://sessions.example.com",
    "token_endpoint": "https://sessions.example.com/oauth/token",
    "jwks_uri": "https://sessions.example.com/.well-known/jwks.json",
    "introspection_endpoint": "https://sessions.example.com/oauth/introspect",
    "grant_types_supported": ["client_credentials"],
}


async def _oauth(services: IdentityDep) -> OAuthServer:
    return services.oauth


async def _key_set(services: IdentityDep) -> KeySet:
    return services.key_set


OAuth = Annotated[OAuthServer, Depends(_oauth)]


@router.post(
    TOKEN_PATH,
    response_model=TokenOut,
    operation_id="issueServiceToken",
    summary="Get a service's access token (client credentials)",
    responses=_OAUTH_RESPONSES,
    openapi_extra=_form_body(
        "grant_type", "scope", "client_id", "client_secret", required=("grant_type",)
    ),
)
async def token(request: Request, oauth: OAuth, now: Now, client_ip: ClientIp) -> Response:
    """The client-credentials grant (RFC 6749 §4.4): an access token for a registered
    service, with the scopes asked for (`scope`, space-separated; by default all the
    client's). Authenticate with HTTP Basic (client id and secret) or the `client_id` and
    `client_secret` fields. Errors are OAuth's JSON, not problem+json; 10 failed
    authentications a minute per client or address answer 429.
    """
    try:
        form = await _form(request)
        grant_type = form.get("grant_type")
        if grant_type is None:
            raise InvalidRequest("grant_type is required")
        if grant_type != CLIENT_CREDENTIALS:
            raise UnsupportedGrantType("only client_credentials is supported")
        client = await _authenticated(request, form, oauth, client_ip, now)
        grant = await oauth.client_credentials(client, form.get("scope"), now)
    except OAuthError as exc:
        return _error(exc)
    return JSONResponse(grant.to_json(), headers=NO_STORE)


@router.post(
    INTROSPECTION_PATH,
    response_model=IntrospectionOut,
    operation_id="introspectToken",
    summary="Ask whether a token is active (services)",
    responses=_OAUTH_RESPONSES,
    openapi_extra=_form_body(
        "token", "token_type_hint", "client_id", "client_secret", required=("token",)
    ),
)
async def introspect(request: Request, oauth: OAuth, now: Now, client_ip: ClientIp) -> Response:
    """Whether an access token is active now (RFC 7662) — signed by a published key,
    unexpired, and for a user's token, its session still live — and what it says when it
    is. The caller authenticates as a registered service, as for `issueServiceToken`.
    """
    try:
        form = await _form(request)
        await _authenticated(request, form, oauth, client_ip, now)
        token_value = form.get("token")
        if token_value is None:
            raise InvalidRequest("token is required")
    except OAuthError as exc:
        return _error(exc)
    return JSONResponse(await oauth.introspect(token_value, now), headers=NO_STORE)


@router.get(
    JWKS_PATH,
    response_model=JwksOut,
    operation_id="getSigningKeys",
    summary="The public keys tokens are signed with",
    responses=problems(503),
)
async def jwks(key_set: Annotated[KeySet, Depends(_key_set)]) -> Response:
    """Every published public key — the next, the current and retired ones whose tokens
    may still be valid — as a JWK Set (RFC 7517); cache it for 5 minutes."""
    document = await key_set.document()
    return Response(document, media_type="application/json", headers=PUBLIC_CACHE)


@router.get(
    METADATA_PATH,
    operation_id="getAuthorizationServerMetadata",
    summary="Where the token endpoint and keys are (RFC 8414)",
    responses={
        200: {
            "description": "Authorization server metadata",
            "content": {"application/json": {"example": METADATA_EXAMPLE}},
        }
    },
)
async def metadata(oauth: OAuth) -> JSONResponse:
    """The authorization server's metadata (RFC 8414): issuer, token, introspection and
    keys endpoints, and the grant types supported."""
    return JSONResponse(oauth.metadata(), headers=PUBLIC_CACHE)


async def _form(request: Request) -> dict[str, str]:
    content_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if content_type != FORM_CONTENT_TYPE:
        raise InvalidRequest(f"the body must be {FORM_CONTENT_TYPE}")
    try:
        text = (await request.body()).decode("utf-8")
        pairs = parse_qsl(
            text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS, errors="strict"
        )
    except ValueError:  # bad UTF-8 (raw or percent-encoded), or too many fields
        raise InvalidRequest("the body is not a valid form") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise InvalidRequest(f"{name[:40]} is given more than once")
        if value:
            form[name] = value
    return form


async def _authenticated(
    request: Request, form: dict[str, str], oauth: OAuthServer, client_ip: str | None, now: datetime
) -> Client:
    """The client the request authenticates as, within the failure limit (SPEC §11)."""
    try:
        client_id, secret = _client_credentials(request, form)
    except InvalidClient:
        # Missing or unreadable credentials fail like a wrong secret, and count alike.
        await oauth.authentication.refuse_malformed(form.get("client_id"), client_ip, now)
    return await oauth.authentication.authenticate(client_id, secret, client_ip, now)


def _client_credentials(request: Request, form: dict[str, str]) -> tuple[str, str]:
    """(client id, secret) from HTTP Basic or from the form; one method, never both."""
    try:
        header = single_header(request, AUTHORIZATION_HEADER)
    except DuplicateHeader:
        raise InvalidRequest("the Authorization header is given more than once") from None
    if header is None:
        client_id, secret = form.get("client_id"), form.get("client_secret")
        if client_id is None or secret is None:
            raise InvalidClient("client authentication is required")
        return client_id, secret
    if "client_secret" in form:
        raise InvalidRequest("use one client authentication method, not two")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        raise InvalidClient("client authentication must use HTTP Basic or the form")
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise InvalidClient("the Basic credentials are malformed") from None
    name, colon, secret = decoded.partition(":")
    if not colon:
        raise InvalidClient("the Basic credentials are malformed")
    client_id = unquote_plus(name)
    if form.get("client_id", client_id) != client_id:
        raise InvalidRequest("client_id differs from the Basic credentials")
    return client_id, unquote_plus(secret)


def _error(exc: OAuthError) -> JSONResponse:
    headers = dict(NO_STORE)
    if exc.status == 401:
        headers["WWW-Authenticate"] = BASIC_CHALLENGE
    if isinstance(exc, TooManyClientFailures):
        headers["Retry-After"] = str(exc.retry_after)
    body = {"error": exc.error, "error_description": exc.description}
    return JSONResponse(body, status_code=exc.status, headers=headers)
