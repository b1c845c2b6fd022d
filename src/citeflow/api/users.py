"""Who is asking, as Open WebUI forwards it: for per-user logs and per-user rate limits.

Open WebUI (with ``ENABLE_FORWARD_USER_INFO_HEADERS=true``) tells a connection which of its users
a request is for, in one of two ways:

* a signed ``X-OpenWebUI-User-Jwt`` (HS256 under its ``FORWARD_USER_INFO_HEADER_JWT_SECRET``;
  claims ``sub``, ``name``, ``email``, ``role``, issuer ``open-webui``, a few minutes' expiry).
  With ``CITEFLOW_OPENWEBUI_JWT_SECRET`` set to the same secret, citeflow accepts only this:
  an invalid or expired token is HTTP 401, and the plain headers are ignored;
* plain ``X-OpenWebUI-User-Id``, ``-Name`` (URL-quoted), ``-Email`` and ``-Role`` headers,
  believed as they come (anyone holding an API key could set them), when no secret is set.

The user's id then keys the per-minute chat limit (each Open WebUI user gets the budget, instead
of all of them sharing the Open WebUI server's key) and goes into the access log line. Metrics
never carry it (`citeflow.api.metrics`: no label holds a user), only its role. Its name and
e-mail address are not read.
"""

from __future__ import annotations

from dataclasses import dataclass

import jwt
from starlette.requests import Request

from citeflow.api.errors import AuthenticationError

JWT_HEADER = "x-openwebui-user-jwt"
ID_HEADER = "x-openwebui-user-id"
ROLE_HEADER = "x-openwebui-user-role"
ISSUER = "open-webui"
#: longest forwarded value kept (ids are UUIDs; roles are short)
MAX_CHARS = 256


@dataclass(frozen=True, slots=True)
class ForwardedUser:
    """An Open WebUI user, as its server forwarded them (what citeflow uses of them)."""

    id: str
    role: str = ""
    signed: bool = False


def forwarded_user(request: Request, jwt_secret: str | None) -> ForwardedUser | None:
    """The user Open WebUI says the request is for, or None.

    Raises:
        AuthenticationError: a secret is configured and the request's ``X-OpenWebUI-User-Jwt``
            is not signed with it, has expired, or names no user (401).
    """
    headers = request.headers
    if jwt_secret:
        token = headers.get(JWT_HEADER)
        if token is None:
            return None
        try:
            claims = jwt.decode(
                token,
                jwt_secret,
                algorithms=["HS256"],
                issuer=ISSUER,
                options={"require": ["sub", "exp"]},
            )
        except jwt.PyJWTError as exc:
            raise AuthenticationError(
                f"the X-OpenWebUI-User-Jwt header is not valid ({exc}): Open WebUI's "
                "FORWARD_USER_INFO_HEADER_JWT_SECRET must equal CITEFLOW_OPENWEBUI_JWT_SECRET",
                code="invalid_user_token",
            ) from None
        return ForwardedUser(
            id=_clip(str(claims["sub"])),
            role=_clip(str(claims.get("role", ""))),
            signed=True,
        )
    user_id = headers.get(ID_HEADER, "").strip()
    if not user_id:
        return None
    return ForwardedUser(
        id=_clip(user_id),
        role=_clip(headers.get(ROLE_HEADER, "").strip()),
    )


def _clip(value: str) -> str:
    return value[:MAX_CHARS]
