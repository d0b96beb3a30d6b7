"""The app's shared settings and how a page is rendered (Jinja2, autoescape on everywhere).

Every page gets the same context: the links under the mount path, the CSRF token, whether
actions are shown (not in read-only mode), the flash messages (taken from the session once
shown) and the page's live stream URL, which the static JS opens.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import jinja2
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse

from corral.dashboard import views
from corral.dashboard.auth import Auth, csrf_token
from corral.dashboard.queues import STATES, QueueDirectory

logger = logging.getLogger("corral.dashboard")

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("corral.dashboard", "templates"),
    # Everything escaped, not only *.html: no template may emit job text unescaped.
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.globals.update(states=STATES, rate=views.rate, duration=views.duration)


@dataclass
class Dashboard:
    """What every handler needs: the queues, the auth, the mode, the live hub."""

    directory: QueueDirectory
    auth: Auth
    read_only: bool
    title: str = "corral"
    hub: Any = None
    #: Why there are no live updates, once the hub could not be made.
    live_error: str | None = None
    _hub_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def live_hub(self) -> Any:
        """The live hub, started at the first stream asked for (a mounted app's lifespan
        does not run unless the host app runs it); ``None`` without live updates."""
        if self.hub is not None or self.live_error is not None:
            return self.hub
        async with self._hub_lock:
            if self.hub is None and self.live_error is None:
                self.hub = await self._start_hub()
        return self.hub

    async def _start_hub(self) -> Any:
        from corral.dashboard.live import LiveHub

        await self.directory.client()
        factory = self.directory.blocking_client_factory()
        if factory is None:
            self.live_error = "live updates need one node that holds every queue"
            logger.warning("dashboard: no live updates: %s", self.live_error)
            return None
        hub = LiveHub(factory, self.directory.prefix)
        await hub.start()
        return hub

    async def close(self) -> None:
        """Stop the live hub and close the client (the app's lifespan does it)."""
        if self.hub is not None:
            hub, self.hub = self.hub, None
            await hub.close()
        await self.directory.close()


def dashboard(request: Request) -> Dashboard:
    found: Dashboard = request.app.state.dashboard
    return found


def links(request: Request) -> views.Links:
    return views.Links(request.scope.get("root_path", ""))


def flash(request: Request, kind: str, text: str) -> None:
    """Keep a message for the next page shown (``kind``: ``ok`` or ``error``)."""
    session: dict[str, Any] = request.scope.setdefault("session", {})
    messages = list(session.get("flash", []))[-4:]
    messages.append({"kind": kind, "text": text[:500]})
    session["flash"] = messages


def render(
    request: Request,
    template: str,
    context: dict[str, Any],
    *,
    status: int = 200,
    live: str | None = None,
    fragment: bool = False,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    """The page ``template`` with the shared context (``live``: its stream URL)."""
    board = dashboard(request)
    session: dict[str, Any] = request.scope.get("session", {})
    messages = [] if fragment else session.pop("flash", [])
    auth = request.scope.get("corral.auth")
    page = _env.get_template(template).render(
        {
            "links": links(request),
            "csrf": csrf_token(request) if auth != "bearer" else "",
            "read_only": board.read_only,
            "title": board.title,
            "prefix": board.directory.prefix,
            "flashes": messages,
            "live_url": live or "",
            "logged_in": auth == "session",
            "fragment": fragment,
            **context,
        }
    )
    return HTMLResponse(page, status_code=status, headers=headers)


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    """The page of an HTTP error (never a traceback)."""
    titles = {
        400: "Bad request",
        401: "Log in",
        403: "Forbidden",
        404: "Not found",
        405: "Method not allowed",
        500: "Server error",
        503: "Server unavailable",
    }
    return render(
        request,
        "error.html",
        {"status": status, "heading": titles.get(status, "Error"), "message": message},
        status=status,
    )


def fail(status: int, message: str) -> HTTPException:
    """An error the app's handler renders as :func:`error_page`."""
    return HTTPException(status_code=status, detail=message)
