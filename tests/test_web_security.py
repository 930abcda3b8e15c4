"""The web console against other local accounts, DNS rebinding, cross-site forms, guessed tokens,
open redirects and tracking images, over real HTTP: the app served by uvicorn on a free loopback port (as `station serve` does, its
settings included), and `station serve` itself as a subprocess where its options matter.
No assertion depends on how fast the machine is: rate limits count tries, and every wait has
a generous deadline that only a broken server reaches.
"""
from __future__ import annotations

import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from conftest import ROOT, copy_station
from markupsafe import escape

from station.apps import cli, endpoints
from station.apps.web.app import create_app
from station.core.config import parse_config
from station.core.store import Store

TOKEN = "correct-horse-battery-staple"  # 28 characters
EVIL = "rebind.evil.example"
JSON = {"accept": "application/json"}
LEAKY_SPEC = ("kind: guest\nmodel: {provider: anthropic, name: claude-x, base_url: 'http://127.0.0.1:9/', "
              "api_key_env: ANTHROPIC_API_KEY}")
REFUSAL = ("refused: this model would send ANTHROPIC_API_KEY to http://127.0.0.1:9 which this station's config "
           "does not use; give --allow-new-endpoint on the command line if you mean it")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serve(app) -> Iterator[str]:
    """The app on a real socket, with the uvicorn settings `station serve` uses."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning",
                                           proxy_headers=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the web server did not start"
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(30)


def log_in(client: httpx.Client, app) -> httpx.Client:
    """Log `client` in through the app's current login address (as the operator does with the printed one)."""
    answer = client.get(app.state.login.address())
    assert answer.status_code == 303 and cookie_of(answer), answer.text
    return client


@dataclass
class Serving:
    """A `station serve` subprocess: its loopback address and the lines it prints."""

    url: str
    lines: queue.Queue[str]

    def login_address(self) -> str:
        """The next login address the server prints (the first at start, then one after each use)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = re.search(r"(http://\S+/login\?token=\S+)", self.lines.get(timeout=60))
            if found:
                return found.group(1)
        raise AssertionError("station serve printed no login address")


@contextmanager
def station_serve(directory: Path, *args: str, token: str | None = TOKEN) -> Iterator[Serving]:
    """`station serve DIR ARGS` as a subprocess on a free port."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "STATION_WEB_TOKEN"}
    if token is not None:
        env["STATION_WEB_TOKEN"] = token
    process = subprocess.Popen([sys.executable, "-m", "station.apps.cli", "serve", str(directory), "--port", str(port),
                                *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline:
            try:
                httpx.get(url + "/static/style.css", timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert process.poll() is None, f"station serve stopped: {list(lines.queue)}"
        yield Serving(url, lines)
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def queued(directory: Path) -> list[dict]:
    store = Store(directory)
    try:
        return [json.loads(r["command"]) for r in store.all("SELECT command FROM operator_queue")]
    finally:
        store.close()


def shows_no_data(answer: httpx.Response, path: str = "") -> bool:
    """The answer names no agent (the page asked for, kept in the login form to go on to, aside)."""
    return "Guest_1" not in answer.text.replace(f'name="next" value="{path}"', "")


def cookie_of(answer: httpx.Response) -> str | None:
    """The login cookie an answer sets (its name carries the port)."""
    return next((v for k, v in answer.cookies.items() if k.startswith("station_session")), None)


@pytest.fixture
def station(demo60: Path, tmp_path: Path) -> Path:
    return copy_station(demo60, tmp_path / "st")


# -- Host allow-list -------------------------------------------------------------------------------
def test_a_foreign_host_gets_nothing_not_even_the_cookie(station: Path) -> None:
    app = create_app(station)
    with serve(app) as url:
        port = url.rsplit(":", 1)[1]
        login = app.state.login.address()
        for path in ("/", "/operator", "/agents/Guest_1", "/api/live", "/static/style.css", "/nowhere", login):
            answer = httpx.get(url + path, headers={"host": f"{EVIL}:{port}"})
            assert answer.status_code == 421, path
            assert "set-cookie" not in answer.headers and "Guest_1" not in answer.text
        assert app.state.login.address() == login  # the login address sent to a foreign Host is not used up
        # "testserver" is only let through for in-process callers (station export), never over a socket
        assert httpx.get(url + "/", headers={"host": "testserver"}).status_code == 421
        assert httpx.get(url + "/", headers={"host": f"{EVIL}:{port}", "x-forwarded-for": "testclient:50000"}
                         ).status_code == 421
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
            answer = httpx.get(url + app.state.login.address(), headers={"host": host})
            assert answer.status_code == 303 and cookie_of(answer), host  # loopback names may log in


def test_allow_host_adds_a_name_and_the_server_says_how(station: Path) -> None:
    with station_serve(station, "--allow-host", "station.example", "--allow-host", "10.1.2.3:8470") as served:
        url = served.url
        port = url.rsplit(":", 1)[1]
        refused = httpx.get(url + "/", headers={"host": f"{EVIL}:{port}"})
        assert refused.status_code == 421 and "--allow-host" in refused.text
        for host in (f"station.example:{port}", "10.1.2.3", f"127.0.0.1:{port}"):
            assert httpx.get(url + "/", headers={"host": host, "x-station-token": TOKEN}).status_code == 200, host


# -- Origin check and the rebinding spawn, end to end ------------------------------------------
def test_a_post_from_another_site_is_refused_even_with_the_cookie(station: Path) -> None:
    app = create_app(station)
    with serve(app) as url, httpx.Client(base_url=url) as browser:
        log_in(browser, app)  # the browser holds the login cookie
        form = {"key": "turns", "value": "concurrent"}
        for origin in ({"origin": "http://evil.example"}, {"origin": "null"},
                       {"origin": url.replace("127.0.0.1", "localhost")},  # another origin of the same machine
                       {"referer": "http://evil.example/page"}):
            answer = browser.post("/operator/set", data=form, headers={**JSON, **origin})
            assert answer.status_code == 403 and "another site" in answer.text, origin
        assert queued(station) == []
        for same in ({"origin": url}, {"referer": url + "/operator"}, {}):  # neither header: a script, let through
            assert browser.post("/operator/set", data=form, headers={**JSON, **same}).status_code == 200, same
        assert len(queued(station)) == 3


def test_the_rebinding_spawn_is_refused_and_nothing_is_spawned(station: Path) -> None:
    store = Store(station)
    agents_before = store.scalar("SELECT COUNT(*) FROM agents")
    store.close()
    app = create_app(station)
    with serve(app) as url, httpx.Client(base_url=url) as browser:
        port = url.rsplit(":", 1)[1]
        cookie = cookie_of(browser.get(app.state.login.address()))
        # The attack: a page on rebind.evil.example, now resolving to 127.0.0.1, posts the leaky spawn.
        attack = httpx.post(url + "/operator/spawn", data={"spec": LEAKY_SPEC},
                            headers={"host": f"{EVIL}:{port}", "origin": f"http://{EVIL}:{port}"},
                            cookies={f"station_session_{port}": cookie})
        assert attack.status_code == 421
        # The same spawn from the real console (allowed Host, same origin, the token): refused all the same.
        honest = browser.post("/operator/spawn", data={"spec": LEAKY_SPEC}, headers={"origin": url})
        assert honest.status_code == 403 and str(escape(REFUSAL)) in honest.text  # the page's error banner
        api = browser.post("/operator/spawn", data={"spec": LEAKY_SPEC}, headers={**JSON, "origin": url})
        assert api.status_code == 403 and api.json() == {"error": REFUSAL}
        # A key in options (Gemini's http_options) is an endpoint too.
        gemini = ("kind: guest\nmodel: {provider: gemini, name: g, options: "
                  "{http_options: {base_url: 'http://127.0.0.1:9'}}}")
        answer = browser.post("/operator/spawn", data={"spec": gemini}, headers=JSON)
        assert answer.status_code == 403 and "would send GEMINI_API_KEY to http://127.0.0.1:9" in answer.json()["error"]
        # A replayed model shows its file's lines as replies: no file the config does not replay.
        reader = "kind: guest\nmodel: {provider: replay, name: r, replay_file: /etc/passwd}"
        answer = browser.post("/operator/spawn", data={"spec": reader}, headers=JSON)
        assert answer.status_code == 403 and "would read /etc/passwd" in answer.json()["error"]
    assert queued(station) == []
    store = Store(station)
    assert store.scalar("SELECT COUNT(*) FROM agents") == agents_before
    store.close()


def test_the_command_line_refuses_a_new_endpoint_unless_told(station: Path, capsys) -> None:
    assert cli.main(["spawn", str(station), LEAKY_SPEC]) == 2
    err = capsys.readouterr().err
    assert err == f"station: {REFUSAL}\n"  # what and why, on one line
    assert queued(station) == []
    assert cli.main(["spawn", str(station), LEAKY_SPEC, "--allow-new-endpoint"]) == 0
    assert "allowed by --allow-new-endpoint: this model sends ANTHROPIC_API_KEY to http://127.0.0.1:9" \
        in capsys.readouterr().err
    assert queued(station)[0]["agent"]["model"]["base_url"] == "http://127.0.0.1:9/"
    # A harmless spawn needs no flag.
    assert cli.main(["spawn", str(station), "{kind: guest, model: {provider: scripted}}"]) == 0


def test_only_pairs_the_config_already_uses_pass() -> None:
    vllm = {"provider": "openai", "api": "chat", "name": "q", "base_url": "http://127.0.0.1:8000/v1/",
            "api_key_env": "VLLM_API_KEY"}
    config = parse_config({"agents": [{"model": vllm}]})

    def model(**changes):
        return parse_config({"agents": [{"model": {**vllm, **changes}}]}).agents[0].model

    endpoints.check(config, [model()])
    endpoints.check(config, [model(base_url="HTTP://127.0.0.1:8000/v1")])  # the same endpoint, spelled otherwise
    endpoints.check(config, [model(base_url=None, api_key_env="ANTHROPIC_API_KEY")])  # the provider's own API
    with pytest.raises(endpoints.NewEndpoint, match="send ANTHROPIC_API_KEY to http://127.0.0.1:8000/v1 which "
                       "this station's config does not send ANTHROPIC_API_KEY to"):
        endpoints.check(config, [model(api_key_env="ANTHROPIC_API_KEY")])  # a known server, another key
    with pytest.raises(endpoints.NewEndpoint, match="send OPENAI_API_KEY to http://x:9 which"):
        endpoints.check(config, [model(api_key_env=None, base_url="http://x:9/")])  # the default key
    # `station set` is checked the same way, on the config as it would be afterwards.
    with pytest.raises(endpoints.NewEndpoint):
        endpoints.check_set(config, "reviewer.model", {**vllm, "base_url": "http://x:9"})
    assert endpoints.check_set(config, "turns", "concurrent") == []


# -- other local accounts: every client logs in, also on loopback ---------------------------------
def agent_count(directory: Path) -> int:
    store = Store(directory)
    try:
        return store.scalar("SELECT COUNT(*) FROM agents")
    finally:
        store.close()


def test_another_local_account_gets_no_cookie_no_data_and_cannot_operate(station: Path) -> None:
    """The attack: a second account on the machine opens the loopback console, served without --token."""
    agents = agent_count(station)
    with station_serve(station, token=None) as served:
        url = served.url
        with httpx.Client(base_url=url) as stranger:
            for path in ("/", "/operator", "/agents/Guest_1", "/research/1", "/forum", "/papers", "/nowhere"):
                answer = stranger.get(path)
                assert answer.status_code == 401 and 'action="/login"' in answer.text, path
                assert "set-cookie" not in answer.headers and shows_no_data(answer, path), path
            live = stranger.get("/api/live", headers=JSON)
            assert live.status_code == 401 and "tick" not in live.json()
            for action, form in (("spawn", {"spec": "kind: guest\nmodel: {provider: scripted}"}),
                                 ("set", {"key": "budget.station_usd", "value": "1000"}), ("pause", {}),
                                 ("message", {"to": "*", "text": "hi"})):
                for headers in (JSON, {"origin": url}):  # a script, and the page's own form
                    answer = stranger.post(f"/operator/{action}", data=form, headers=headers)
                    assert answer.status_code == 403 and "set-cookie" not in answer.headers, action
                    assert "Guest_1" not in answer.text
            guessed = stranger.get("/login?token=" + "A" * 43)
            assert guessed.status_code == 403 and "set-cookie" not in guessed.headers
            assert not stranger.cookies
        assert queued(station) == [] and agent_count(station) == agents

        # The operator opens the address the server printed: logged in, sent on without the token in the address.
        address = served.login_address()
        assert address.startswith(url + "/login?token=") and len(address.rsplit("=", 1)[1]) >= 40
        with httpx.Client() as operator:
            opened = operator.get(address)
            assert opened.status_code == 303 and opened.headers["location"] == "/"
            cookie = cookie_of(opened)
            assert cookie and cookie not in address  # the session is a secret of its own
            assert "samesite=strict" in opened.headers["set-cookie"].lower()
            assert "Guest_1" in operator.get(url + "/agents/Guest_1").text
            assert operator.post(url + "/operator/set", data={"key": "turns", "value": "concurrent"},
                                 headers=JSON).status_code == 200
            again = operator.get(address)  # reopened from the history by the same browser: still in
            assert again.status_code == 303 and again.headers["location"] == "/"
        # Used up: the same address opens nothing for anyone else, and the server printed the next one.
        reused = httpx.get(address)
        assert reused.status_code == 403 and "used already" in reused.text and not cookie_of(reused)
        assert "Guest_1" not in reused.text
        following = served.login_address()
        assert following != address and cookie_of(httpx.get(following))
    assert queued(station) == [{"op": "set", "key": "turns", "value": "concurrent"}]


ELSEWHERE = ("https://evil.example/", "//evil.example/", "/\\evil.example", "\\\\evil.example", "/\t/evil.example",
             "http:evil.example", "javascript:alert(1)", "evil.example", " //evil.example", "/login?token=x",
             "//[evil", "http://[", "/\nevil.example")


def test_a_login_never_sends_the_browser_to_another_site(station: Path) -> None:
    app = create_app(station)
    with serve(app) as url, httpx.Client(base_url=url) as browser:
        for elsewhere in ELSEWHERE:
            token = app.state.login.address().rsplit("=", 1)[1]
            opened = browser.get("/login", params={"token": token, "next": elsewhere})
            assert opened.status_code == 303 and opened.headers["location"] == "/", elsewhere
            browser.cookies.clear()
            token = app.state.login.address().rsplit("=", 1)[1]
            typed = browser.post("/login", data={"token": token, "next": elsewhere}, headers={"origin": url})
            assert typed.status_code == 303 and typed.headers["location"] == "/", elsewhere
            browser.cookies.clear()


def test_the_login_form_goes_on_to_the_page_asked_for(station: Path) -> None:
    app = create_app(station)
    with serve(app) as url, httpx.Client(base_url=url) as browser:
        asked = browser.get("/agents/Guest_1?page=1")
        assert asked.status_code == 401 and 'name="next" value="/agents/Guest_1?page=1"' in asked.text
        token = app.state.login.address().rsplit("=", 1)[1]
        typed = browser.post("/login", data={"token": token, "next": "/agents/Guest_1?page=1"},
                             headers={"origin": url})
        assert typed.status_code == 303 and typed.headers["location"] == "/agents/Guest_1?page=1"
        assert "Tick 1" in browser.get(typed.headers["location"]).text
        # A printed address may name the page to open too.
        with httpx.Client(base_url=url) as other:
            opened = other.get(app.state.login.address("/research/1"))
            assert opened.status_code == 303 and opened.headers["location"] == "/research/1"


def test_the_servers_token_logs_in_and_public_read_opens_only_reading(station: Path) -> None:
    app = create_app(station, token=TOKEN)  # on loopback, a lasting token for scripts and the login form
    with serve(app) as url:
        assert httpx.get(url + "/agents/Guest_1").status_code == 401
        assert httpx.get(url + "/agents/Guest_1", headers={"x-station-token": TOKEN}).status_code == 200
        with httpx.Client(base_url=url) as browser:
            typed = browser.post("/login", data={"token": TOKEN}, headers={"origin": url})
            assert typed.status_code == 303 and cookie_of(typed) and cookie_of(typed) != TOKEN
            assert "Guest_1" in browser.get("/agents/Guest_1").text
        # A stale session cookie (an earlier server's, from a tab still polling) is no wrong guess.
        port = url.rsplit(":", 1)[1]
        with httpx.Client(base_url=url, cookies={f"station_session_{port}": "stale-" * 8}) as tab:
            for _ in range(8):
                assert tab.get("/api/live", headers=JSON).status_code == 401
            assert log_in(tab, app).get("/api/live", headers=JSON).status_code == 200
    with serve(create_app(station, public_read=True)) as url:
        assert "Guest_1" in httpx.get(url + "/agents/Guest_1").text
        assert httpx.post(url + "/operator/pause", headers=JSON).status_code == 403
        page = httpx.get(url + "/operator")
        assert page.status_code == 200 and 'action="/login"' in page.text  # reading, with the login form


# -- tokens: length, reading off loopback, login rate limit --------------------------------------
@pytest.mark.parametrize("given", [("--token", ""), ("--token", "fifteen-chars-x"), ("env", ""),
                                   ("env", "tiny")])
def test_an_empty_or_short_token_is_refused_at_start(demo60: Path, given: tuple[str, str]) -> None:
    how, token = given
    env = {k: v for k, v in os.environ.items() if k != "STATION_WEB_TOKEN"}
    args = ["--token", token] if how == "--token" else []
    if how == "env":
        env["STATION_WEB_TOKEN"] = token
    done = subprocess.run([sys.executable, "-m", "station.apps.cli", "serve", str(demo60), "--host", "0.0.0.0",
                           "--port", str(free_port()), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    source = "--token" if how == "--token" else "STATION_WEB_TOKEN"
    assert done.returncode == 2 and "serving" not in done.stderr
    assert f"station: the operator token from {source} is " in done.stderr and "at least 16 characters" in done.stderr


def test_off_loopback_reading_needs_the_token(station: Path) -> None:
    with station_serve(station, "--host", "0.0.0.0") as served:
        url = served.url
        for path in ("/", "/agents/Guest_1", "/research/1", "/operator", "/nowhere"):
            locked = httpx.get(url + path)
            assert locked.status_code == 401 and 'action="/login"' in locked.text, path
            assert shows_no_data(locked, path) and "set-cookie" not in locked.headers
        assert httpx.get(url + "/api/live", headers=JSON).status_code == 401
        assert httpx.get(url + "/static/style.css").status_code == 200  # no secrets there
        assert httpx.get(url + "/agents/Guest_1", headers={"x-station-token": TOKEN}).status_code == 200
        with httpx.Client(base_url=url) as browser:
            assert browser.post("/login", data={"token": TOKEN}).status_code == 303  # logged in
            assert "Guest_1" in browser.get("/agents/Guest_1").text
    with station_serve(station, "--host", "0.0.0.0", "--public-read") as served:
        url = served.url
        assert httpx.get(url + "/agents/Guest_1").status_code == 200
        assert httpx.post(url + "/operator/pause", headers=JSON).status_code == 403  # operating still needs it


def test_wrong_tokens_are_rate_limited_per_address(station: Path) -> None:
    with serve(create_app(station, host="0.0.0.0", token=TOKEN)) as url:
        with httpx.Client(base_url=url) as guesser:
            answers = [guesser.post("/login", data={"token": f"guess-{n}"}, headers=JSON) for n in range(5)]
            assert [a.status_code for a in answers] == [403] * 5
            for tried in ("guess-6", TOKEN):  # from now on every try waits, even the right token
                answer = guesser.post("/login", data={"token": tried}, headers=JSON)
                assert answer.status_code == 429 and int(answer.headers["retry-after"]) >= 1
            # Guessing through a page's token header is counted and stopped the same way.
            assert guesser.get("/", headers={"x-station-token": "guess-7"}).status_code == 429
        # Another address is not held up by this one's guesses.
        other = httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address="127.0.0.2"))
        with other:
            assert other.post("/login", data={"token": TOKEN}).status_code == 303  # logged in


# -- agent text never fetches anything -----------------------------------------------------------
def test_an_image_in_agent_text_is_a_link_and_raw_img_tags_stay_text(station: Path) -> None:
    store = Store(station)
    with store.transaction():
        thread = store.scalar("SELECT MIN(number) FROM capsules WHERE room='public_memory' AND deleted=0")
        store.execute("UPDATE capsule_messages SET content=? WHERE k=1 AND capsule="
                      "(SELECT id FROM capsules WHERE room='public_memory' AND number=?)",
                      ("Look: ![our plot](https://evil.example/track.png)\n\n<img src=\"https://evil.example/x.png\">"
                       "\n\n<p><img src=https://evil.example/y.png></p>", thread))
    store.close()
    app = create_app(station)
    with serve(app) as url, httpx.Client(base_url=url) as browser:
        page = log_in(browser, app).get(f"/forum/{thread}")
    assert page.status_code == 200
    assert "<img" not in page.text.lower()
    assert '<a class="image-link" href="https://evil.example/track.png" rel="nofollow noopener noreferrer">' \
           "image: our plot</a>" in page.text
    assert "&lt;img src=&quot;https://evil.example/x.png&quot;&gt;" in page.text
    assert "img-src 'self' data:" in page.headers["content-security-policy"]  # and the browser would refuse one
