"""The web viewer over HTTP (FastAPI's test client, no browser): every page renders real data
from a scripted 60-tick station, bad addresses get 404s, agent-written HTML is escaped, and
operator actions need the token when the server is reachable from other machines.
"""
from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, copy_station
from fastapi.testclient import TestClient
from helpers import web_client

from station.apps.web.app import create_app
from station.core.store import Store


@pytest.fixture(scope="module")
def client(demo60: Path) -> TestClient:
    return web_client(create_app(demo60))


def first(pattern: str, html: str) -> str:
    found = re.search(pattern, html)
    assert found, f"{pattern!r} not in the page"
    return found.group(1)


def test_every_page_renders_the_stations_data(client: TestClient, demo60: Path) -> None:
    store = Store(demo60)
    paper = store.one("SELECT number, title FROM capsules WHERE room='archive' AND deleted=0 ORDER BY number")
    best = store.one("SELECT id, title FROM evaluations WHERE score IS NOT NULL ORDER BY score DESC")
    founder = store.one("SELECT name FROM agents WHERE kind='recursive' ORDER BY session")
    store.close()
    overview = client.get("/").text
    assert "Tick" in overview and "61" in overview and "Best on task 1" in overview
    assert client.get("/agents/Guest_1").status_code == 200
    assert f"/papers/{paper['number']}" in client.get("/papers").text
    assert paper["title"] in client.get(f"/papers/{paper['number']}").text
    research = client.get("/research").text
    assert re.search(r"id=.score-plot-1", research) and best["title"] in research
    assert best["title"] in client.get(f"/research/{best['id']}").text
    assert founder["name"] in client.get("/lineages").text
    for path in ("/mail", "/operator", "/agents"):
        assert client.get(path).status_code == 200
    store = Store(demo60)
    thread = store.one("SELECT number, title FROM capsules WHERE room='public_memory' AND deleted=0 ORDER BY number")
    mail = store.one("SELECT number, title FROM capsules WHERE room='mail' AND deleted=0 ORDER BY number")
    missing = store.scalar("SELECT MAX(number) + 1 FROM capsules WHERE room='mail'")
    store.close()
    assert thread and mail, "the demo station has forum threads and mail by tick 60"
    # A thread's address holds its number in its room: the number agents and `station thread` use.
    assert f"/forum/{thread['number']}" in client.get("/forum").text
    assert thread["title"] in client.get(f"/forum/{thread['number']}").text
    assert mail["title"] in client.get(f"/mail/{mail['number']}").text
    assert client.get(f"/mail/{missing}").status_code == 404


def test_a_dialogue_is_paged_and_jumps_to_a_tick(client: TestClient, demo60: Path) -> None:
    page = client.get("/agents/Guest_1?tick=3").text
    assert "id=\"tick-3\"" in page
    store = Store(demo60)
    try:  # the longest dialogue opens at its latest page
        name = store.scalar("SELECT agent FROM turns GROUP BY agent ORDER BY COUNT(*) DESC, agent LIMIT 1")
    finally:
        store.close()
    latest = client.get(f"/agents/{name.replace(' ', '%20')}").text
    pages = int(first(r"Page (\d+) of", latest))
    assert first(r"Page \d+ of (\d+)", latest) == str(pages)
    assert latest.count("class=\"turn\"") <= 20


@pytest.mark.parametrize("path", ["/papers/999999", "/papers/99999999999999999999999999", "/papers/abc",
                                  "/research/0", "/research/-5", "/agents/Nobody", "/forum/123456789",
                                  "/mail/99999999999999999999", "/nowhere", "/agents/Guest_1/extra"])
def test_unknown_or_impossible_addresses_are_404s(client: TestClient, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404 and "Not found" in answer.text


def test_huge_page_and_tick_numbers_fall_back_to_a_real_page(client: TestClient) -> None:
    for query in ("page=99999999999999999999999", "tick=99999999999999999999999", "page=-3", "tick=-1"):
        assert client.get(f"/agents/Guest_1?{query}").status_code == 200
    assert client.get("/agents/Guest_1?page=x").status_code == 404


def test_a_station_from_before_the_last_schema_change_is_served(demo60: Path, tmp_path: Path) -> None:
    """Upgrading Station and serving an older station: its tables are brought up to date at start,
    so the dialogue pages (which read the newest turn columns) are served, not a 500."""
    directory = copy_station(demo60, tmp_path / "st")
    store = Store(directory)
    with store.transaction():  # the schema before v3: what v5, v4 and v3 added goes
        for statement in ("DROP TRIGGER spend_totals_add", "DROP TABLE spend_totals", "DROP INDEX turns_session",
                          "DROP INDEX events_kind", "DROP INDEX messages_pending", "DROP INDEX agents_location",
                          "DROP INDEX agents_offered", "ALTER TABLE agents DROP COLUMN location",
                          "ALTER TABLE agents DROP COLUMN offered", "ALTER TABLE turns DROP COLUMN finish_reason"):
            store.execute(statement)
        store.execute("UPDATE schema_versions SET version=2 WHERE component='station'")
    store.close()
    client = web_client(create_app(directory))
    page = client.get("/agents/Guest_1?page=1")
    assert page.status_code == 200 and "Tick 1" in page.text


def test_agent_written_html_is_escaped(demo60: Path, tmp_path: Path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    store = Store(directory)
    with store.transaction():
        number = store.scalar("SELECT MIN(number) FROM capsules WHERE room='archive' AND deleted=0")
        cid = store.scalar("SELECT id FROM capsules WHERE room='archive' AND number=?", (number,))
        store.execute("UPDATE capsule_messages SET content=? WHERE capsule=? AND k=1",
                      ("<script>alert('x')</script> [link](javascript:alert(1)) <img src=x onerror=alert(2)>", cid))
        store.execute("UPDATE capsules SET title=? WHERE id=?", ("<b onmouseover=alert(3)>Title</b>", cid))
        store.execute("UPDATE turns SET reply=? WHERE id=(SELECT MIN(id) FROM turns)", ("<script>bad()</script>",))
    store.close()
    client = web_client(create_app(directory))
    for path in (f"/papers/{number}", "/papers", "/agents/Guest_1?page=1"):
        html = client.get(path).text
        assert "<script>alert" not in html and "<script>bad" not in html and "onerror=alert" not in html.replace(
            "&lt;img src=x onerror=alert(2)&gt;", "")
        assert "<b onmouseover" not in html
        assert "javascript:" not in re.sub(r"\[link\]\(javascript:alert\(1\)\)", "", html)
    assert "&lt;script&gt;alert" in client.get(f"/papers/{number}").text


def test_operator_actions_need_the_token_off_loopback(demo60: Path, tmp_path: Path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    with pytest.raises(ValueError, match="needs a token"):
        create_app(directory, host="0.0.0.0")
    client = TestClient(create_app(directory, host="0.0.0.0", token="s3cret-token-0123456"))
    form = {"to": "*", "text": "Hello from the operator."}
    assert "set-cookie" not in client.get("/operator").headers  # nothing handed out without a login
    assert client.post("/operator/message", data=form).status_code == 403
    assert client.post("/operator/message", data={**form, "token": "wrong"}).status_code == 403
    assert client.post("/operator/pause", data={}).status_code == 403
    assert client.post("/login", data={"token": "nope"}).status_code == 403
    ok = client.post("/operator/message", data=form, headers={"x-station-token": "s3cret-token-0123456",
                                                               "accept": "application/json"})
    assert ok.status_code == 200 and ok.json()["ok"]
    store = Store(directory)
    queued = [json.loads(r["command"]) for r in store.all("SELECT command FROM operator_queue")]
    store.close()
    assert queued == [{"op": "message", "to": "*", "text": "Hello from the operator."}]


def test_on_loopback_only_the_login_address_gives_the_cookie(demo60: Path, tmp_path: Path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    app = create_app(directory)
    stranger = TestClient(app)
    refused = stranger.post("/operator/set", data={"key": "turns", "value": "concurrent"})
    assert refused.status_code == 403 and "set-cookie" not in refused.headers
    page = stranger.get("/operator")
    assert page.status_code == 401 and "set-cookie" not in page.headers  # no page hands out a cookie
    login = stranger.get(app.state.login.address(), follow_redirects=False)  # the printed address does
    assert "samesite=strict" in login.headers["set-cookie"].lower()
    done = stranger.post("/operator/set", data={"key": "turns", "value": "concurrent"},
                         headers={"accept": "application/json"})
    assert done.status_code == 200
    refused = stranger.post("/operator/set", data={"key": "lifecycle.max_age", "value": "3"},
                            headers={"accept": "application/json"})
    assert refused.status_code == 400 and "cannot be changed" in refused.json()["error"]
    bad_spawn = stranger.post("/operator/spawn", data={"spec": "kind: wizard"}, headers={"accept": "application/json"})
    assert bad_spawn.status_code == 400 and "spawn" in bad_spawn.json()["error"]


def test_search_finds_what_agents_wrote_and_survives_odd_queries(client: TestClient, demo60: Path) -> None:
    store = Store(demo60)
    title = store.scalar("SELECT title FROM capsules WHERE room='archive' AND deleted=0 ORDER BY number")
    store.close()
    word = max(re.findall(r"[A-Za-z]{6,}", title), key=len)
    found = client.get(f"/search?q={word}").text
    assert "matches" in found or "match" in found
    assert "<mark>" in found and "/papers/" in found
    dialogue = client.get("/search?q=codex").text
    assert "/agents/" in dialogue and "dialogue" in dialogue
    for odd in ('"', "AND OR NOT", "*", "<script>alert(1)</script>", "x" * 5000, "NEAR(", ""):
        answer = client.get("/search", params={"q": odd})
        assert answer.status_code == 200 and "<script>alert(1)" not in answer.text


def test_the_study_views_show_tokens_rooms_and_talk(client: TestClient) -> None:
    page = client.get("/study").text
    assert "id='token-plot'" in page and "id=\"room-actions\"" in page
    assert "<polyline class='series'" in page  # at least one agent's line (plots.line_plot)
    narrow = client.get("/study?first=1&last=5").text
    assert "ticks 1–5" in narrow
    assert client.get("/study?first=99999999999999999999&last=-4").status_code == 200


def test_an_open_dialogue_page_can_fetch_the_turns_after_it(client: TestClient) -> None:
    newer = client.get("/agents/Guest_1/turns?after=1").text
    assert "id=\"tick-2\"" in newer and "id=\"tick-1\"" not in newer
    assert client.get("/agents/Guest_1/turns?after=100000").text.strip() == ""
    assert client.get("/agents/Nobody/turns?after=1").status_code == 404


def test_operator_forms_reach_the_running_world(demo60: Path, tmp_path: Path) -> None:
    from station.apps.world import Station
    from station.core.engine import Engine

    directory = copy_station(demo60, tmp_path / "st")
    client = web_client(create_app(directory))
    store = Store(directory)
    request = store.one("SELECT id, agent FROM human_requests WHERE resolved_tick IS NULL ORDER BY id")
    target = store.one("SELECT name FROM agents WHERE state='active' ORDER BY position")["name"]
    store.close()
    json_accept = {"accept": "application/json"}
    forms = [("message", {"to": target, "text": "A word from the operator."}),
             ("spawn", {"spec": "kind: guest\nmodel: {provider: scripted, name: scripted-newcomer}\nnote: by hand"}),
             ("end_agent", {"agent": target})]
    if request:
        forms.append(("answer", {"request_id": str(request["id"]), "text": "Here is your answer."}))
    # refused at once, as on the command line, rather than dropped with an alert at the next tick
    for action, form, why in [("answer", {"request_id": "999", "text": "?"}, "no request #999"),
                              ("message", {"to": "Nobody", "text": "?"}, "no active agent named 'Nobody'")]:
        refused = client.post(f"/operator/{action}", data=form, headers=json_accept)
        assert refused.status_code == 400 and why in refused.json()["error"], refused.text
    for action, form in forms:
        answer = client.post(f"/operator/{action}", data=form, headers=json_accept)
        assert answer.status_code == 200, answer.text
    station = Station.open(directory)
    try:
        Engine(station).run(ticks=1)
        assert [a for a in station.agents.all() if a.note == "by hand"]  # the spawned guest
        assert station.ctx.agents.get(target).state == "ended"
        texts = [r["text"] for r in station.store.all("SELECT text FROM messages WHERE agent=?", (target,))]
        assert any("A word from the operator." in t for t in texts)
        if request:
            assert station.store.scalar("SELECT response FROM human_requests WHERE id=?",
                                        (request["id"],)) == "Here is your answer."
    finally:
        station.close()


def test_serving_off_loopback_without_a_token_is_refused_at_start(demo60: Path, capsys, monkeypatch) -> None:
    from station.apps import cli

    monkeypatch.delenv("STATION_WEB_TOKEN", raising=False)
    assert cli.main(["serve", str(demo60), "--host", "0.0.0.0"]) == 2
    assert "needs a token" in capsys.readouterr().err


def test_export_refuses_a_folder_that_is_not_empty(demo60: Path, tmp_path: Path, capsys) -> None:
    from station.apps import cli

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "keep.txt").write_text("mine")
    assert cli.main(["export", str(demo60), "--out", str(tmp_path / "site")]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "site" / "keep.txt").read_text() == "mine"


# -- the operator page's forms -------------------------------------------------------------------
def banner(kind: str, html: str) -> str | None:
    """The text of the page's success ("done") or error banner, or None."""
    found = re.search(rf'<p class="{kind}" id="{kind}"[^>]*>(.*?)</p>', html, re.S)
    return found.group(1) if found else None


def test_a_refused_form_comes_back_to_the_page_with_its_message(demo60: Path, tmp_path: Path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    client = web_client(create_app(directory))
    refused = client.post("/operator/set", data={"key": "lifecycle.<b>max_age</b>", "value": "3"})
    assert refused.status_code == 400
    assert "cannot be changed" in banner("error", refused.text) and "&lt;b&gt;max_age" in refused.text
    assert 'value="lifecycle.&lt;b&gt;max_age&lt;/b&gt;"' in refused.text  # what was typed is kept, escaped
    assert "<b>max_age" not in refused.text and banner("done", refused.text) is None
    for spec, says in (("kind: [wizard", "not valid YAML"), ("- a list", "must be a mapping"),
                       ("kind: <script>x()</script>", "spawn:")):
        answer = client.post("/operator/spawn", data={"spec": spec})
        assert answer.status_code == 400 and says in banner("error", answer.text), spec
        assert "<script>x()" not in answer.text
    assert "bad form" in banner("error", client.post("/operator/answer", data={"request_id": "x"}).text)
    # The same refusals stay JSON for API clients.
    api = client.post("/operator/set", data={"key": "lifecycle.max_age", "value": "3"},
                      headers={"accept": "application/json"})
    assert api.status_code == 400 and "cannot be changed" in api.json()["error"]


def test_a_done_form_shows_its_whole_outcome_once_without_text_in_the_address(demo60: Path, tmp_path: Path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    client = web_client(create_app(directory))
    answer = client.post("/operator/set", data={"key": "turns", "value": "concurrent"}, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/operator"
    page = client.get("/operator")
    assert re.fullmatch(r"operator command #\d+ \(set\) queued", banner("done", page.text))
    assert banner("done", client.get("/operator").text) is None  # shown once


def test_a_wrong_token_or_none_is_told_on_the_page(demo60: Path, tmp_path: Path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    client = TestClient(create_app(directory, host="0.0.0.0", token="s3cret-token-0123456"))
    wrong = client.post("/login", data={"token": "nope"})
    assert wrong.status_code == 403 and "Wrong token" in banner("error", wrong.text)
    assert 'action="/login"' in wrong.text  # the login form is still there
    locked = client.post("/operator/message", data={"to": "*", "text": "hi"})
    assert locked.status_code == 403 and "log in" in banner("error", locked.text)
    assert client.post("/login", data={"token": "nope"}, headers={"accept": "application/json"}).json() \
        == {"error": "Wrong token: not logged in."}
    client.post("/login", data={"token": "s3cret-token-0123456"})
    assert client.post("/operator/message", data={"to": "*", "text": "hi"}).status_code == 200


# -- Resume with a tick limit --------------------------------------------------------------------
def test_resume_runs_until_the_tick_limit_and_stops(demo60: Path, tmp_path: Path) -> None:
    from station.apps.web.runner import StationRunner

    directory = copy_station(demo60, tmp_path / "st")
    runner = StationRunner(directory)
    client = web_client(create_app(directory, runner=runner))
    page = client.get("/operator").text
    assert 'placeholder="no limit"' in page and "no tick limit" in page
    for typed, says in (("sixty", "whole number"), ("60", "at least the current tick, 61"), ("1.5", "whole number")):
        answer = client.post("/operator/resume", data={"until_tick": typed})
        assert answer.status_code == 400 and says in banner("error", answer.text), typed
        assert f'value="{typed}"' in answer.text
    assert not runner.running_here
    try:
        done = client.post("/operator/resume", data={"until_tick": "61"})
        assert banner("done", done.text) == "the station is running until the end of tick 61"
        deadline = time.monotonic() + 300
        while runner.running_here and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not runner.running_here, "the run did not stop at its tick limit"
    finally:
        runner.pause()
        runner.wait(60)
    store = Store(directory)
    assert runner.why == "finished tick 61" and store.get_meta("tick") == 62
    store.close()
    assert first(r'id="run-limit">([^<]*)<', client.get("/operator").text) == ""


def test_the_run_section_shows_the_active_tick_limit(demo60: Path, tmp_path: Path, monkeypatch) -> None:
    from station.apps.web.runner import StationRunner

    directory = copy_station(demo60, tmp_path / "st")
    runner, hold = StationRunner(directory), threading.Event()
    monkeypatch.setattr(runner, "_run", lambda until_tick: hold.wait(60))  # a run that lasts until released
    client = web_client(create_app(directory, runner=runner))
    for typed, shown in (("120", "running until the end of tick 120"), ("", "running with no tick limit")):
        hold.clear()
        try:
            page = client.post("/operator/resume", data={"until_tick": typed}).text
            assert first(r'id="run-limit">([^<]*)<', page) == shown
            assert client.get("/api/live").json()["limit"] == shown
        finally:
            hold.set()
            runner.wait(10)


# -- the overview's evaluation banners -----------------------------------------------------------
def research_station(directory: Path) -> Path:
    """A fresh research station (the demo config, task 1 has a 120 s time limit), no tick run."""
    from station.apps.world import Station
    from station.core.config import load_config

    Station.create(directory, load_config(ROOT / "configs" / "demo.yaml")).close()
    return directory


def add_evaluation(store: Store, *, author: str = "Guest_1", status: str = "queued", finished_tick: int | None = None,
                   title: str = "An idea") -> int:
    from rooms.research.store import insert_evaluation

    session = store.scalar("SELECT session FROM agents WHERE name=?", (author,))
    with store.transaction():
        number = insert_evaluation(store, task="1", author=author, session=session, lineage=None, tick=1,
                                   title=title, tags=["x"], abstract="a", code="pass")
        store.execute("UPDATE evaluations SET status=?, finished_tick=? WHERE id=?", (status, finished_tick, number))
    return number


def alerts_of(client: TestClient) -> str:
    return first(r'(?s)<div id="alerts"[^>]*>(.*?)</div>', client.get("/").text)


def test_the_overview_warns_when_most_recent_evaluations_failed(tmp_path: Path) -> None:
    directory = research_station(tmp_path / "st")
    client, store = web_client(create_app(directory)), Store(directory)
    try:
        for _ in range(4):
            add_evaluation(store, status="failed", finished_tick=1)
        assert "failure-rate" not in alerts_of(client)  # 4 of 4: too few to judge by
        add_evaluation(store, status="timed_out", finished_tick=1)
        assert "5 of the last 5 evaluations failed" in alerts_of(client)
        finished = [add_evaluation(store, status="finished", finished_tick=2) for _ in range(15)]
        assert "failure-rate" not in alerts_of(client)  # 5 of the last 20
        with store.transaction():
            store.execute(f"UPDATE evaluations SET status='failed' WHERE id IN ({','.join('?' * 5)})",
                          tuple(finished[:5]))
        assert "failure-rate" not in alerts_of(client)  # 10 of 20 is not more than half
        with store.transaction():
            store.execute("UPDATE evaluations SET status='failed' WHERE id=?", (finished[5],))
        alerts = alerts_of(client)
        assert "11 of the last 20 evaluations failed" in alerts and 'href="/research/queue"' in alerts
        live = client.get("/api/live?html=alerts,evaluations").json()["html"]
        assert "11 of the last 20 evaluations failed" in live["alerts"] and "evaluations" in live
        assert "html" not in client.get("/api/live").json()  # only pages that show live parts ask for them
    finally:
        store.close()


def test_the_overview_shows_each_open_evaluation_honestly(tmp_path: Path) -> None:
    from station.core.run_lock import run_lock

    directory = research_station(tmp_path / "st")
    client, store = web_client(create_app(directory)), Store(directory)
    now = time.time()
    try:
        baseline = store.scalar("SELECT MIN(id) FROM evaluations")  # the System baseline, never run
        running = add_evaluation(store, title="<script>bad()</script>")
        stuck, waiting, done = (add_evaluation(store) for _ in range(3))
        with store.transaction():
            for number, started, state in ((running, now - 41, "running"), (stuck, now - 500, "running"),
                                           (waiting, now - 100, "done")):
                store.execute("INSERT INTO evaluation_runs(evaluation, version, state, started_at, finished_at, "
                              "executor, progress) VALUES(?, 1, ?, ?, ?, 'local', 'epoch 3')",
                              (number, state, started, started + 90 if state == "done" else None))
            store.put_input(f"eval-run/{done}/1", "eval_run", 1, None, {"status": "ok", "score": 1.0})
        # A stopped station runs nothing: a run left 'running' died with its process.
        page = client.get("/").text
        for number in (running, stuck, waiting):
            assert f'<a href="/research/{number}">#{number}</a> queued' in page
        assert f'<a href="/research/{done}">#{done}</a> finished, not delivered yet' in page
        assert "overdue" not in page and "waiting" not in alerts_of(client)
        assert "&lt;script&gt;bad()" in page and "<script>bad()" not in page
        with run_lock(directory):  # now a process runs the station; it started 1000 s ago
            os.utime(directory / "run.lock", (now - 1000, now - 1000))
            page = client.get("/").text
            elapsed = int(first(rf'<a href="/research/{running}">#{running}</a> running (\d+) s \(epoch 3\)', page))
            assert 41 <= elapsed < 120
            alerts = alerts_of(client)
            assert re.search(rf"#{stuck}</a> has been running \d+ min, longer than its task's time limit of 2 min",
                             alerts)
            assert f"#{running}</a> has been running" not in alerts
            # the baseline has waited the whole run (1000 s > 2 x 120 s); the other one since its last run ended
            assert re.search(rf"#{baseline}</a> has waited \d+ min in the queue of the running station", alerts)
            assert f"#{waiting}</a> has waited" not in alerts
            live = client.get("/api/live?html=evaluations").json()
            assert live["state"] == "running elsewhere"
            assert re.search(rf"#{stuck}</a> running \d+ min", live["html"]["evaluations"])
    finally:
        store.close()


def test_the_overview_says_why_the_station_is_paused(tmp_path: Path) -> None:
    from station.apps import report

    directory = research_station(tmp_path / "st")
    client = web_client(create_app(directory))
    assert "pause-reason" not in client.get("/").text
    (directory / report.PAUSE_FILE).write_text("the budget <b>ran out</b>\n", encoding="utf-8")
    alerts = alerts_of(client)
    assert 'id="pause-reason"' in alerts and "the budget &lt;b&gt;ran out&lt;/b&gt;" in alerts
    assert "pause-reason" in client.get("/api/live?html=alerts").json()["html"]["alerts"]
