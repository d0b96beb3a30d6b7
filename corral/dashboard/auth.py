"""Who may use the dashboard: the token, HTTP basic auth, the session cookie and CSRF.

Three ways in, each compared in constant time:

- ``Authorization: Bearer <token>`` on any request (scripts, probes). Such a request is not
  made by a browser on its own, so its POSTs need no CSRF token.
- The login page: ``POST /login`` with the token sets a signed session cookie (HMAC-SHA256
  of its JSON; ``HttpOnly``, ``SameSite=Lax``, ``Secure`` when the request came over https,
  valid :data:`SESSION_SECONDS`). Lax rather than Strict so that a link to a job pasted in
  a chat opens logged in; cross-site POSTs still carry no cookie, and need the CSRF token
  anyway.
- HTTP basic auth, when the app is given :class:`BasicAuth` instead of a token: browsers ask
  for the user and password and send them with every request, so POSTs need the CSRF token.

The session cookie also carries the CSRF token (a random value bound to the session, put in a
hidden field of every form) and the flash messages shown after an action. Its key is derived
from the token (or password), so a new token ends every session.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.errors import InvalidOptionError

#: How long a login lasts.
SESSION_SECONDS = 12 * 3600
#: The session cookie's name.
COOKIE = "corral_session"
#: The form field that carries the CSRF token.
CSRF_FIELD = "csrf_token"
#: Paths under the app's root that need no login with a token (the login and logout forms).
OPEN_PATHS = ("/login", "/logout")


@dataclass(frozen=True)
class TokenAuth:
    """A token: sent as ``Authorization: Bearer <token>``, or typed in the login page."""

    token: str = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token) < 8:
            raise InvalidOptionError("the dashboard token must be text of at least 8 characters")

    @property
    def secret(self) -> bytes:
        return _derive(self.token)


@dataclass(frozen=True)
class BasicAuth:
    """HTTP basic auth with one user and password (the browser asks for them)."""

    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.username or ":" in self.username or not self.password:
            raise InvalidOptionError("basic auth needs a user (no ':') and a password")

    @property
    def secret(self) -> bytes:
        return _derive(f"{self.username}:{self.password}")

    @classmethod
    def parse(cls, text: str) -> BasicAuth:
        """``USER:PASS`` (the ``--basic-auth`` form)."""
        user, sep, password = text.partition(":")
        if not sep:
            raise InvalidOptionError(f"basic auth must be USER:PASS, got {text[:40]!r}")
        return cls(user, password)


@dataclass(frozen=True)
class NoAuth:
    """No authentication at all: only for a dashboard bound to a loopback address."""

    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)


Auth = TokenAuth | BasicAuth | NoAuth


def _derive(credential: str) -> bytes:
    return hmac.new(credential.encode(), b"corral dashboard session v1", hashlib.sha256).digest()


def new_token() -> str:
    """A random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


# -- the signed session cookie -------------------------------------------------------------


class SessionCodec:
    """Signs and checks the session cookie's value: ``base64(json).base64(hmac)``."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _sign(self, payload: bytes) -> bytes:
        return hmac.new(self._secret, payload, hashlib.sha256).digest()

    def dumps(self, session: dict[str, Any]) -> str:
        payload = base64.urlsafe_b64encode(json.dumps(session, separators=(",", ":")).encode())
        signature = base64.urlsafe_b64encode(self._sign(payload))
        return (payload + b"." + signature).decode()

    def loads(self, value: str) -> dict[str, Any]:
        """The session, or an empty one when the value is not ours, altered, or expired."""
        payload, _, signature = value.encode().partition(b".")
        try:
            expected = base64.urlsafe_b64encode(self._sign(payload))
            if not hmac.compare_digest(signature, expected):
                return {}
            session = json.loads(base64.urlsafe_b64decode(payload))
        except (binascii.Error, ValueError):
            return {}
        if not isinstance(session, dict) or session.get("exp", 0) < time.time():
            return {}
        return session


class SessionMiddleware:
    """Loads ``scope["session"]`` from the cookie and writes it back when it changed."""

    def __init__(self, app: ASGIApp, codec: SessionCodec, secure: bool | None = None) -> None:
        self.app = app
        self.codec = codec
        self.secure = secure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cookies = SimpleCookie()
        for name, value in scope["headers"]:
            if name == b"cookie":
                try:
                    cookies.load(value.decode("latin-1"))
                except Exception:  # a malformed header from some other app on the host
                    continue
        morsel = cookies.get(COOKIE)
        session = self.codec.loads(morsel.value) if morsel is not None else {}
        scope["session"] = session
        before = json.dumps(session, sort_keys=True)

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                after = scope["session"]
                if json.dumps(after, sort_keys=True) != before:
                    headers = MutableHeaders(scope=message)
                    headers.append("Set-Cookie", self._cookie(scope, after))
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    def _cookie(self, scope: Scope, session: dict[str, Any]) -> str:
        path = scope.get("root_path") or "/"
        secure = scope.get("scheme") == "https" if self.secure is None else self.secure
        if not session:
            value, age = "", 0
        else:
            session.setdefault("exp", int(time.time()) + SESSION_SECONDS)
            value, age = self.codec.dumps(session), max(int(session["exp"] - time.time()), 0)
        parts = [f"{COOKIE}={value}", f"Path={path}", f"Max-Age={age}", "HttpOnly",
                 "SameSite=Lax"]  # fmt: skip
        if secure:
            parts.append("Secure")
        return "; ".join(parts)


# -- who is asking -------------------------------------------------------------------------


def identify(scope: Scope, auth: Auth) -> str | None:
    """How the request is authenticated: ``"none"`` (no auth configured), ``"bearer"``,
    ``"basic"``, ``"session"``, or ``None`` (not at all)."""
    if isinstance(auth, NoAuth):
        return "none"
    header = ""
    for name, value in scope["headers"]:
        if name == b"authorization":
            header = value.decode("latin-1")
            break
    scheme, _, credentials = header.partition(" ")
    credentials = credentials.strip()
    if isinstance(auth, TokenAuth):
        if scheme.lower() == "bearer" and _same(credentials, auth.token):
            return "bearer"
        if scope.get("session", {}).get("auth") is True:
            return "session"
        return None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, _, password = decoded.partition(":")
        # Both compared whatever the first gives, so the time says nothing of which was wrong.
        good_user = _same(user, auth.username)
        good_password = _same(password, auth.password)
        if good_user and good_password:
            return "basic"
    return None


class AuthMiddleware:
    """Answers a request that is not authenticated with ``refuse`` (the 401 page)."""

    def __init__(
        self,
        app: ASGIApp,
        auth: Auth,
        refuse: Callable[[Request], Awaitable[Any]],
    ) -> None:
        self.app = app
        self.auth = auth
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        how = identify(scope, self.auth)
        scope["corral.auth"] = how
        root = scope.get("root_path", "")
        path = scope["path"][len(root) :] if scope["path"].startswith(root) else scope["path"]
        # The login form is open to the token's users; the CSS and JS to everyone (the
        # pages that say "log in" use them).
        open_path = path.startswith("/static/") or (
            path in OPEN_PATHS and isinstance(self.auth, TokenAuth)
        )
        if how is None and not open_path:
            response = await self.refuse(Request(scope, receive))
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


# -- CSRF ----------------------------------------------------------------------------------


#: The largest form body read (an action's fields are a few hundred bytes).
MAX_FORM_BYTES = 64 * 1024


async def read_form(request: Request) -> dict[str, str]:
    """The fields of an ``application/x-www-form-urlencoded`` POST (what the dashboard's
    forms send; Starlette's own parser would need python-multipart). Another body, or one
    over :data:`MAX_FORM_BYTES`, gives no fields, so the CSRF check refuses it."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return {}
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return {}
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=50)
    except (UnicodeDecodeError, ValueError):
        return {}
    return dict(pairs)


def csrf_token(request: Request) -> str:
    """The session's CSRF token (made, and the cookie set, at first use)."""
    session: dict[str, Any] = request.scope.setdefault("session", {})
    token = session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(24)
        session["csrf"] = token
    return token


def csrf_ok(request: Request, given: object) -> bool:
    """Whether a POST may go on: bearer-token requests always (no browser sends that header
    on its own); others when ``given`` is the session's CSRF token."""
    if request.scope.get("corral.auth") == "bearer":
        return True
    expected = request.scope.get("session", {}).get("csrf")
    if not isinstance(expected, str) or not isinstance(given, str):
        return False
    return _same(given, expected)


def check_login(auth: Auth, token: object) -> bool:
    """Whether the token typed in the login page is the dashboard's."""
    return isinstance(auth, TokenAuth) and isinstance(token, str) and _same(token, auth.token)


def www_authenticate(auth: Auth) -> str | None:
    """The ``WWW-Authenticate`` header of a 401."""
    if isinstance(auth, BasicAuth):
        return 'Basic realm="corral dashboard", charset="UTF-8"'
    if isinstance(auth, TokenAuth):
        return 'Bearer realm="corral dashboard"'
    return None
