"""The dashboard's ASGI app: routes, the security middleware, login, and its lifespan.

:func:`create_app` returns a Starlette app. Requests go through, outermost first:

1. the raw path is routed on, so that a ``/`` quoted as ``%2F`` in a queue name or job id
   stays inside its path segment (handlers unquote each segment);
2. security headers on every response, errors included (a strict CSP with no inline script
   or style, ``X-Frame-Options: DENY``, ``nosniff``, ``no-referrer``, ``no-store``);
3. errors become a page (503 when the server cannot be reached, 500 otherwise), never a
   traceback;
4. the signed session cookie (:mod:`corral.dashboard.auth`);
5. authentication: a request that is not authenticated gets the 401 login page.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import redis
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.dashboard import actions, pages
from corral.dashboard.auth import (
    CSRF_FIELD,
    Auth,
    AuthMiddleware,
    BasicAuth,
    NoAuth,
    SessionCodec,
    SessionMiddleware,
    TokenAuth,
    check_login,
    csrf_ok,
    new_token,
    read_form,
    www_authenticate,
)
from corral.dashboard.queues import Client, QueueDirectory
from corral.dashboard.rendering import Dashboard, dashboard, error_page, links, render

logger = logging.getLogger("corral.dashboard")

#: The environment variable a token is read from when none is given.
TOKEN_ENV = "CORRAL_DASHBOARD_TOKEN"

#: The Content-Security-Policy of every response: nothing inline, nothing from elsewhere.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
_STATIC = Path(__file__).resolve().parent / "static"


class RawPathMiddleware:
    """Route on ``raw_path``: each segment stays percent-encoded until a handler unquotes it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw:
            scope = {**scope, "path": raw.decode("latin-1")}
        await self.app(scope, receive, send)


class SecurityHeadersMiddleware:
    """Adds :data:`SECURITY_HEADERS` (and ``Cache-Control: no-store`` off the static files)
    to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = "/static/" in scope["path"]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0] != b"cache-control"
                           or static]  # fmt: skip
                headers.extend(SECURITY_HEADERS)
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class ErrorPageMiddleware:
    """An exception becomes a page: 503 for an unreachable server, 500 for anything else
    (logged with its traceback; the page shows none)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            if started:
                raise
            request = Request(scope, receive)
            if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OSError)):
                where = dashboard(request).directory.where
                logger.warning("dashboard: cannot reach the server at %s: %s", where, exc)
                response: Response = error_page(
                    request, 503, f"cannot reach the server at {where}: {exc}"
                )
            else:
                logger.exception("dashboard: %s %s failed", scope["method"], scope["path"])
                response = error_page(request, 500, f"{type(exc).__name__}: the request failed")
            await response(scope, receive, send)


# -- login ---------------------------------------------------------------------------------


def _next_url(request: Request, given: object) -> str:
    """Where to go after login: a path of this app (never another site)."""
    home = links(request).home()
    if isinstance(given, str) and given.startswith(home) and not given.startswith("//"):
        return given
    return home


async def refuse(request: Request) -> Response:
    """The answer to a request that is not authenticated: 401 and, for a token, the login
    form (which comes back to the page asked for)."""
    board = dashboard(request)
    headers = {}
    challenge = www_authenticate(board.auth)
    if challenge:
        headers["WWW-Authenticate"] = challenge
    if isinstance(board.auth, BasicAuth):
        response = error_page(request, 401, "this dashboard needs a user name and password")
        response.headers.update(headers)
        return response
    wanted = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return render(
        request,
        "login.html",
        {"next": wanted if request.method == "GET" else links(request).home(), "error": ""},
        status=401,
        headers=headers,
    )


async def login(request: Request) -> Response:
    board = dashboard(request)
    if not isinstance(board.auth, TokenAuth):
        return RedirectResponse(links(request).home(), status_code=303)
    if request.method == "GET":
        return render(request, "login.html", {"next": request.query_params.get("next", ""),
                                              "error": ""})  # fmt: skip
    form = await read_form(request)
    target = _next_url(request, form.get("next"))
    if not csrf_ok(request, form.get(CSRF_FIELD)):
        return render(request, "login.html", {"next": target, "error": "the form expired: "
                      "log in again"}, status=403)  # fmt: skip
    if not check_login(board.auth, form.get("token")):
        return render(request, "login.html", {"next": target, "error": "wrong token"}, status=401)
    # A new session (and CSRF token) at login, so none chosen before it survives.
    request.scope["session"] = {"auth": True}
    return RedirectResponse(target, status_code=303)


async def logout(request: Request) -> Response:
    form = await read_form(request)
    if csrf_ok(request, form.get(CSRF_FIELD)):
        request.scope["session"] = {}
    return RedirectResponse(links(request).login(), status_code=303)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    response = error_page(request, exc.status_code, str(exc.detail))
    if exc.headers:
        response.headers.update(exc.headers)
    return response


def _routes() -> list[BaseRoute]:
    both = ["GET", "POST"]
    routes: list[BaseRoute] = [
        Route("/", pages.overview),
        Route("/live", pages.overview_live),
        Route("/login", login, methods=both),
        Route("/logout", logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=_STATIC), name="static"),
        Route("/queues/{name}", pages.queue_page),
        Route("/queues/{name}/live", pages.queue_live),
        Route("/queues/{name}/schedulers", pages.schedulers_page),
        Route("/queues/{name}/metrics", pages.metrics_page),
        Route("/queues/{name}/search", pages.search_page),
    ]
    routes += [
        Route(f"/queues/{{name}}/{action}", actions.queue_action, methods=both)
        for action in actions.QUEUE_ACTIONS
    ]
    routes.append(Route("/queues/{name}/jobs/{job_id}", pages.job_page))
    routes += [
        Route(f"/queues/{{name}}/jobs/{{job_id}}/{action}", actions.job_action, methods=both)
        for action in actions.JOB_ACTIONS
    ]
    routes.append(Route("/queues/{name}/{state}", pages.state_page))
    return routes


def resolve_auth(auth: Auth | str | None) -> Auth:
    """``auth`` as given (a str is a token), else the token of ``CORRAL_DASHBOARD_TOKEN``,
    else a random token, logged once (the CLI prints its own instead)."""
    if isinstance(auth, (TokenAuth, BasicAuth, NoAuth)):
        return auth
    if isinstance(auth, str):
        return TokenAuth(auth)
    if auth is not None:
        raise TypeError(f"auth must be a token, TokenAuth, BasicAuth or NoAuth, got {auth!r}")
    from_env = os.environ.get(TOKEN_ENV)
    if from_env:
        return TokenAuth(from_env)
    token = new_token()
    logger.warning("corral dashboard: no token given and %s unset; this one works: %s",
                   TOKEN_ENV, token)  # fmt: skip
    return TokenAuth(token)


def create_app(
    *,
    connection: str | Client | None = None,
    prefix: str = "bull",
    queues: Sequence[str] | None = None,
    auth: Auth | str | None = None,
    read_only: bool = False,
    secure_cookie: bool | None = None,
    title: str = "corral",
) -> Starlette:
    """The dashboard as an ASGI app, to serve (``corral dashboard``) or mount in a Starlette or
    FastAPI app: ``app.mount("/corral", create_app(...))``. Every link and form action is
    relative to the mount path.

    Args:
        connection: a URL (``redis://``, ``rediss://``, ``redis+sentinel://``,
            ``redis+cluster://``), a redis-py asyncio client made with
            ``decode_responses=True``, or ``None`` for ``CORRAL_REDIS_URL`` / ``REDIS_URL``.
        prefix: the key prefix of the queues.
        queues: the only queues shown; ``None`` for every queue of the prefix.
        auth: a token (``str`` or :class:`TokenAuth`), :class:`BasicAuth`, or
            :class:`NoAuth`; ``None`` reads ``CORRAL_DASHBOARD_TOKEN``, else makes a random
            token and logs it.
        read_only: hide every action and refuse every POST with 403.
        secure_cookie: mark the session cookie ``Secure``; ``None`` does so when the
            request came over https (behind a proxy, run uvicorn with ``--proxy-headers``).
        title: shown in the header of every page.

    Example::

        from fastapi import FastAPI
        from corral.dashboard import create_app

        app = FastAPI()
        app.mount("/corral", create_app(connection="redis://localhost:6379/0", auth="s3cret-token"))
    """
    chosen = resolve_auth(auth)
    board = Dashboard(
        directory=QueueDirectory(connection, prefix, queues),
        auth=chosen,
        read_only=read_only,
        title=title,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await board.close()

    app = Starlette(
        routes=_routes(),
        middleware=[
            Middleware(RawPathMiddleware),
            Middleware(SecurityHeadersMiddleware),
            Middleware(ErrorPageMiddleware),
            Middleware(SessionMiddleware, codec=SessionCodec(chosen.secret), secure=secure_cookie),
            Middleware(AuthMiddleware, auth=chosen, refuse=refuse),
        ],
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.dashboard = board
    return app
