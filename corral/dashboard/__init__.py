"""A web dashboard of corral's queues: an ASGI app to serve (``corral dashboard``) or mount.

Needs the ``dashboard`` extra (``pip install 'corral[dashboard]'``: Starlette, Jinja2,
uvicorn). See docs/dashboard.md; the code lives in the modules named by noun beside this one
(:mod:`~corral.dashboard.app` for the routes and middleware, :mod:`~corral.dashboard.auth`,
:mod:`~corral.dashboard.pages`, :mod:`~corral.dashboard.actions`,
:mod:`~corral.dashboard.views`).

Example::

    from starlette.applications import Starlette
    from starlette.routing import Mount
    from corral.dashboard import create_app

    app = Starlette(routes=[Mount("/corral", create_app(auth="a-long-random-token"))])
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"corral.dashboard needs its extra ({exc.name} is missing): pip install 'corral[dashboard]'"
    ) from exc

from corral.dashboard.app import create_app
from corral.dashboard.auth import BasicAuth, NoAuth, TokenAuth

__all__ = ["BasicAuth", "NoAuth", "TokenAuth", "create_app"]
