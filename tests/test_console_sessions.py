"""Console sessions (issue 51 item 6; docs/security.md): each login gets a session value of its own,
a logout ends it, and a session ends by itself after a while without use (idle) and some time after
its login (absolute). An ended session's cookie opens nothing: the browser is shown the login page,
saying why. Over real HTTP (the app served by uvicorn, as `station serve` does); time is an injected
clock, never a sleep.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from test_web_security import JSON, cookie_of, serve

from station.apps.web.app import create_app

pytestmark = pytest.mark.slow  # reads the demo station (built once, slowly), like the other web modules


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def logged_in(url: str, app) -> tuple[httpx.Client, str]:
    """A new browser logged in through the app's current printed address, and its session value."""
    browser = httpx.Client(base_url=url)
    opened = browser.get(app.state.login.address())
    assert opened.status_code == 303, opened.text
    value = cookie_of(opened)
    assert value
    return browser, value


def with_cookie(url: str, value: str) -> httpx.Client:
    """Another client that presents a session value it got hold of (a copied or leftover cookie)."""
    port = url.rsplit(":", 1)[1]
    return httpx.Client(base_url=url, cookies={f"station_session_{port}": value})


def test_each_login_gets_a_session_value_of_its_own(demo60: Path) -> None:
    app = create_app(demo60)
    with serve(app) as url:
        first, one = logged_in(url, app)
        second, two = logged_in(url, app)
        third, three = logged_in(url, app)
        assert len({one, two, three}) == 3, "two logins got the same session value"
        assert len(one) >= 40  # 256 random bits, URL-safe
        for browser in (first, second, third):
            assert "Guest_1" in browser.get("/agents/Guest_1").text
            browser.close()
        set_cookie = httpx.get(url + app.state.login.address()).headers["set-cookie"].lower()
        assert "max-age=" in set_cookie and "httponly" in set_cookie and "samesite=strict" in set_cookie


def test_logout_ends_that_session_only(demo60: Path) -> None:
    app = create_app(demo60)
    with serve(app) as url:
        browser, value = logged_in(url, app)
        other, _ = logged_in(url, app)
        page = browser.get("/agents/Guest_1")
        assert 'action="/logout"' in page.text and 'method="post"' in page.text  # the header's logout button

        # A post from another site's page cannot log the operator out (nor anything else)
        forged = browser.post("/logout", headers={"origin": "http://evil.example"})
        assert forged.status_code == 403
        assert browser.get("/agents/Guest_1").status_code == 200

        out = browser.post("/logout", headers={"origin": url})
        assert out.status_code == 200 and "Logged out" in out.text and 'action="/login"' in out.text
        assert not cookie_of(out) and "station_session" in out.headers["set-cookie"]  # the cookie is deleted

        # The old value, kept by someone (a copy of the cookie, the same browser's leftover), opens nothing
        with with_cookie(url, value) as kept:
            refused = kept.get("/agents/Guest_1")
            assert refused.status_code == 401 and "Guest_1" not in refused.text.replace('value="/agents/Guest_1"', "")
            assert "ended" in refused.text and "log in again" in refused.text.lower()
            assert kept.get("/api/live", headers=JSON).status_code == 401
            assert kept.post("/operator/pause", headers={**JSON, "origin": url}).status_code == 403
        assert "Guest_1" in other.get("/agents/Guest_1").text  # the other login goes on
        # Logging in again gives a fresh value
        again, new = logged_in(url, app)
        assert new != value and again.get("/agents/Guest_1").status_code == 200
        for client in (browser, other, again):
            client.close()


def test_a_session_ends_after_its_idle_and_its_absolute_limits(demo60: Path) -> None:
    clock = Clock()
    app = create_app(demo60, session_idle_s=600, session_max_s=3600, session_clock=clock)
    with serve(app) as url:
        idle, idle_value = logged_in(url, app)
        busy, busy_value = logged_in(url, app)
        clock.now += 500
        assert busy.get("/api/live", headers=JSON).status_code == 200  # used: its idle time starts again
        clock.now += 200  # idle's last use was 700 s ago, busy's 200 s
        with with_cookie(url, idle_value) as kept:
            refused = kept.get("/agents/Guest_1")
            assert refused.status_code == 401 and "expired" in refused.text and "log in again" in refused.text.lower()
        assert busy.get("/agents/Guest_1").status_code == 200

        # Used every 500 s, busy still ends an hour after its login
        while clock.now + 500 < 1000 + 3600:
            clock.now += 500
            assert busy.get("/api/live", headers=JSON).status_code == 200
        clock.now = 1000 + 3600 + 1
        with with_cookie(url, busy_value) as kept:
            assert kept.get("/agents/Guest_1").status_code == 401
            assert kept.get("/api/live", headers=JSON).status_code == 401
        # A login now starts a full new session
        fresh, _ = logged_in(url, app)
        clock.now += 599
        assert fresh.get("/agents/Guest_1").status_code == 200
        for client in (idle, busy, fresh):
            client.close()
