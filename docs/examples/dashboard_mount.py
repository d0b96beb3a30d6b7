"""The dashboard mounted in a host app under /corral (docs/dashboard.md, "Mount it in your
app"), called with httpx as a browser or a script would: bearer token, links under the
mount path, a POST without its CSRF token refused."""

import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

from corral import Queue
from corral.dashboard import create_app

URL = os.environ.get("CORRAL_REDIS_URL")  # the tests give their server; else the embedded one
TOKEN = "a-long-random-token"

with Queue("invoices", connection=URL) as queue:
    queue.obliterate(force=True)  # start empty: the embedded server keeps old jobs
    queue.add("render", {"n": 1})

dashboard = create_app(connection=URL, auth=TOKEN)


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    # A mounted app's lifespan runs only when the host runs it: this closes the dashboard's
    # client and live hub at shutdown.
    async with dashboard.router.lifespan_context(dashboard):
        yield


app = Starlette(routes=[Mount("/corral", app=dashboard)], lifespan=lifespan)


async def main() -> None:
    transport = httpx.ASGITransport(app=app)
    async with (
        lifespan(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client,
    ):
        page = await client.get("/corral/")
        print("without the token:", page.status_code)
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        page = await client.get("/corral/", headers=bearer)
        links = sorted(set(re.findall(r'href="(/corral/queues/invoices)"', page.text)))
        print("overview:", page.status_code, "links:", links)
        print("csp:", page.headers["content-security-policy"].split(";")[0])
        # A browser's POST comes with the session cookie, and needs the form's CSRF token.
        login = await client.get("/corral/login")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', login.text)
        assert csrf is not None
        form = {"token": TOKEN, "csrf_token": csrf.group(1)}
        logged_in = await client.post("/corral/login", data=form)
        print("login:", logged_in.status_code, "cookie:", "corral_session" in client.cookies)
        refused = await client.post("/corral/queues/invoices/pause", data={})
        print("pause without CSRF token:", refused.status_code)


if __name__ == "__main__":
    import asyncio

    asyncio.run(main())
