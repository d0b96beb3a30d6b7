"""Authentication (token, login cookie, basic auth, none), security headers on every answer,
and escaping of every job-derived string."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

import pytest

from corral.dashboard import BasicAuth, NoAuth
from corral.dashboard.auth import COOKIE, SessionCodec, TokenAuth
from tests.dashboard.conftest import TOKEN, XSS, TestClient, csrf_of, log_in

PAGES = [
    "/",
    "/queues/emails",
    "/queues/emails/waiting",
    "/queues/reports/jobs/bad",
    "/queues/emails/schedulers",
    "/queues/emails/metrics",
    "/queues/emails/search?q=a",
    "/live",
    "/queues/emails/live",
]


def basic(user: str, password: str) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {raw}"}


@pytest.mark.parametrize("url", PAGES)
def test_without_a_token_every_page_is_401_with_the_login_form(
    seeded: str, make_client: Callable[..., TestClient], url: str
) -> None:
    page = make_client().get(url)
    assert page.status_code == 401
    assert page.headers["www-authenticate"].startswith("Bearer")
    assert 'data-testid="login-form"' in page.text
    assert "emails" not in page.text.replace(url, "")  # nothing of the queues shows


@pytest.mark.parametrize(
    "header", ["Bearer wrong-token-12345", f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", TOKEN]
)
def test_a_wrong_token_is_401(
    seeded: str, make_client: Callable[..., TestClient], header: str
) -> None:
    client = make_client(headers={"Authorization": header})
    assert client.get("/").status_code == 401
    assert client.post("/queues/emails/pause").status_code == 401


def test_the_bearer_token_works(api: TestClient) -> None:
    assert api.get("/").status_code == 200


def test_static_files_need_no_login(seeded: str, make_client: Callable[..., TestClient]) -> None:
    assert make_client().get("/static/corral.css").status_code == 200


def test_login_sets_a_signed_http_only_same_site_cookie(
    seeded: str, make_client: Callable[..., TestClient]
) -> None:
    client = make_client()
    form = client.get("/queues/emails/waiting?page=1")  # 401: the form comes back here
    assert form.status_code == 401
    assert 'name="next" value="/queues/emails/waiting?page=1"' in form.text
    response = client.post(
        "/login",
        data={
            "token": TOKEN,
            "csrf_token": csrf_of(form.text),
            "next": "/queues/emails/waiting?page=1",
        },
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/queues/emails/waiting?page=1"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # plain http here; https requests get Secure
    assert client.get("/").status_code == 200


def test_the_cookie_is_secure_over_https(
    seeded: str, make_client: Callable[..., TestClient]
) -> None:
    client = make_client()
    client.base_url = "https://testserver"  # type: ignore[assignment]
    page = client.get("https://testserver/login")
    assert "Secure" in page.headers["set-cookie"]


def test_a_wrong_login_is_refused(seeded: str, make_client: Callable[..., TestClient]) -> None:
    client = make_client()
    form = client.get("/login")
    response = client.post("/login", data={"token": "nope", "csrf_token": csrf_of(form.text)})
    assert response.status_code == 401
    assert 'data-testid="login-error"' in response.text
    assert client.get("/").status_code == 401
    # Without the form's CSRF token the right token does not log in either.
    refused = client.post("/login", data={"token": TOKEN})
    assert refused.status_code == 403
    assert client.get("/").status_code == 401


def test_login_never_redirects_to_another_site(
    seeded: str, make_client: Callable[..., TestClient]
) -> None:
    client = make_client()
    form = client.get("/login")
    for target in ("https://evil.example/", "//evil.example/"):
        response = client.post(
            "/login",
            data={
                "token": TOKEN,
                "csrf_token": csrf_of(client.get("/login").text),
                "next": target,
            },
        )
        assert response.headers["location"] == "/"
    assert form.status_code == 200


def test_a_forged_or_altered_cookie_is_ignored(
    seeded: str, make_client: Callable[..., TestClient]
) -> None:
    forged = SessionCodec(TokenAuth("another-token-123").secret).dumps({"auth": True, "exp": 2**40})
    client = make_client()
    client.cookies.set(COOKIE, forged)
    assert client.get("/").status_code == 401
    good = SessionCodec(TokenAuth(TOKEN).secret).dumps({"auth": True, "exp": 2**40})
    client.cookies.set(COOKIE, good[:-2] + ("A" if good[-2] != "A" else "B") + good[-1])
    assert client.get("/").status_code == 401
    expired = SessionCodec(TokenAuth(TOKEN).secret).dumps({"auth": True, "exp": 1})
    client.cookies.set(COOKIE, expired)
    assert client.get("/").status_code == 401


def test_logout_ends_the_session(seeded: str, make_client: Callable[..., TestClient]) -> None:
    client = make_client()
    csrf = log_in(client)
    assert client.post("/logout", data={"csrf_token": csrf}).status_code == 303
    assert client.get("/").status_code == 401


def test_basic_auth(seeded: str, make_client: Callable[..., TestClient]) -> None:
    auth = BasicAuth("ops", "p4ss:word")
    anonymous = make_client(auth=auth)
    page = anonymous.get("/")
    assert page.status_code == 401
    assert page.headers["www-authenticate"].startswith("Basic")
    assert make_client(auth=auth, headers=basic("ops", "wrong")).get("/").status_code == 401
    assert make_client(auth=auth, headers=basic("root", "p4ss:word")).get("/").status_code == 401
    bearer = make_client(auth=auth, headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.get("/").status_code == 401
    client = make_client(auth=auth, headers=basic("ops", "p4ss:word"))
    html = client.get("/").text
    assert 'data-testid="queues"' in html
    # Browsers send basic credentials on their own: POSTs still need the CSRF token.
    assert client.post("/queues/emails/pause").status_code == 403
    csrf = csrf_of(client.get("/queues/emails/pause").text)
    assert client.post("/queues/emails/pause", data={"csrf_token": csrf}).status_code == 303


def test_no_auth(seeded: str, make_client: Callable[..., TestClient]) -> None:
    client = make_client(auth=NoAuth())
    html = client.get("/").text
    assert 'data-testid="queues"' in html
    assert client.post("/queues/emails/pause").status_code == 403  # CSRF still
    csrf = csrf_of(client.get("/queues/emails/pause").text)
    assert client.post("/queues/emails/pause", data={"csrf_token": csrf}).status_code == 303


def test_the_token_comes_from_the_environment(
    seeded: str, make_client: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRAL_DASHBOARD_TOKEN", "from-the-env-123")
    client = make_client(auth=None, headers={"Authorization": "Bearer from-the-env-123"})
    assert client.get("/").status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/queues/reports/jobs/bad",
        "/nowhere",
        "/queues/nope",
        "/static/corral.css",
        "/queues/emails/waiting?page=0",
        "/login",
    ],
)
@pytest.mark.parametrize("authed", [True, False])
def test_security_headers_on_every_answer(
    seeded: str, make_client: Callable[..., TestClient], url: str, authed: bool
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"} if authed else None
    response = make_client(headers=headers).get(url)
    csp = response.headers["content-security-policy"]
    for directive in (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
    ):
        assert directive in csp
    assert "unsafe-inline" not in csp
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/queues/reports",
        "/queues/reports/failed",
        "/queues/reports/jobs/xss",
        "/queues/reports/jobs/xss?fragment=1",
        "/queues/reports/failed?fragment=1",
        "/queues/reports/search?q=boom",
        "/queues/reports/jobs/xss/remove",
    ],
)
def test_job_text_is_escaped(api: TestClient, url: str) -> None:
    html = api.get(url).text
    assert "<script>alert" not in html
    assert "<img src=x" not in html
    assert not re.search(r"<[^>]*onerror=", html)
    if "xss" in url or "failed" in url or "boom" in url:
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_every_xss_string_shows_as_text_on_the_job_page(api: TestClient) -> None:
    html = api.get("/queues/reports/jobs/xss").text
    for part in ("job-name", "failed-reason", "logs", "job-data"):
        section = html[html.index(f'data-testid="{part}"') :]
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section[:2000], part
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert XSS[1] not in html
