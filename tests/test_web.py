"""The web viewer over HTTP (FastAPI's test client, no browser): every page renders real data
from a scripted 60-tick station, bad addresses get 404s, agent-written HTML is escaped, and
operator actions need the token when the server is reachable from other machines.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from conftest import copy_station
from station.store import Store
from station.web.app import create_app


@pytest.fixture(scope="module")
def client(demo60: Path) -> TestClient:
    return TestClient(create_app(demo60))


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
    assert "id='score-plot'" in research and best["title"] in research
    assert best["title"] in client.get(f"/research/{best['id']}").text
    assert founder["name"] in client.get("/lineages").text
    for path in ("/mail", "/operator", "/agents"):
        assert client.get(path).status_code == 200
    store = Store(demo60)
    thread = store.one("SELECT id, title FROM capsules WHERE room='public_memory' AND deleted=0 ORDER BY id")
    mail = store.one("SELECT id, title FROM capsules WHERE room='mail' AND deleted=0 ORDER BY id")
    store.close()
    assert thread and mail, "the demo station has forum threads and mail by tick 60"
    assert f"/forum/{thread['id']}" in client.get("/forum").text
    assert thread["title"] in client.get(f"/forum/{thread['id']}").text
    assert mail["title"] in client.get(f"/mail/{mail['id']}").text
    assert client.get(f"/mail/{thread['id']}").status_code == 404  # a forum thread is not a mail


def test_a_dialogue_is_paged_and_jumps_to_a_tick(client: TestClient) -> None:
    page = client.get("/agents/Guest_1?tick=3").text
    assert "id=\"tick-3\"" in page
    latest = client.get("/agents/Noema%20I").text
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
    client = TestClient(create_app(directory))
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
    client = TestClient(create_app(directory, host="0.0.0.0", token="s3cret-token"))
    form = {"to": "*", "text": "Hello from the operator."}
    assert "set-cookie" not in client.get("/operator").headers  # nothing handed out off loopback
    assert client.post("/operator/message", data=form).status_code == 403
    assert client.post("/operator/message", data={**form, "token": "wrong"}).status_code == 403
    assert client.post("/operator/pause", data={}).status_code == 403
    assert client.post("/login", data={"token": "nope"}).status_code == 403
    ok = client.post("/operator/message", data=form, headers={"x-station-token": "s3cret-token",
                                                               "accept": "application/json"})
    assert ok.status_code == 200 and ok.json()["ok"]
    store = Store(directory)
    queued = [json.loads(r["command"]) for r in store.all("SELECT command FROM operator_queue")]
    store.close()
    assert queued == [{"op": "message", "to": "*", "text": "Hello from the operator."}]


def test_on_loopback_the_browser_gets_the_token_and_other_sites_cannot_post(demo60: Path, tmp_path: Path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    stranger = TestClient(create_app(directory))
    assert stranger.post("/operator/set", data={"key": "turns", "value": "concurrent"}).status_code == 403
    page = stranger.get("/operator")  # a page load hands out the SameSite=Strict cookie
    assert "samesite=strict" in page.headers["set-cookie"].lower()
    done = stranger.post("/operator/set", data={"key": "turns", "value": "concurrent"},
                         headers={"accept": "application/json"})
    assert done.status_code == 200
    refused = stranger.post("/operator/set", data={"key": "lifecycle.max_age", "value": "3"})
    assert refused.status_code == 400 and "cannot be changed" in refused.json()["error"]
    bad_spawn = stranger.post("/operator/spawn", data={"spec": "kind: wizard"})
    assert bad_spawn.status_code == 400


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
    assert "<path d='M" in page  # at least one agent's line
    narrow = client.get("/study?first=1&last=5").text
    assert "ticks 1–5" in narrow
    assert client.get("/study?first=99999999999999999999&last=-4").status_code == 200


def test_an_open_dialogue_page_can_fetch_the_turns_after_it(client: TestClient) -> None:
    newer = client.get("/agents/Guest_1/turns?after=1").text
    assert "id=\"tick-2\"" in newer and "id=\"tick-1\"" not in newer
    assert client.get("/agents/Guest_1/turns?after=100000").text.strip() == ""
    assert client.get("/agents/Nobody/turns?after=1").status_code == 404


def test_operator_forms_reach_the_running_world(demo60: Path, tmp_path: Path) -> None:
    from station.engine import Engine
    from station.world import Station

    directory = copy_station(demo60, tmp_path / "st")
    client = TestClient(create_app(directory))
    client.get("/operator")  # the browser's token cookie
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
    from station import cli

    monkeypatch.delenv("STATION_WEB_TOKEN", raising=False)
    assert cli.main(["serve", str(demo60), "--host", "0.0.0.0"]) == 2
    assert "needs a token" in capsys.readouterr().err


def test_export_refuses_a_folder_that_is_not_empty(demo60: Path, tmp_path: Path, capsys) -> None:
    from station import cli

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "keep.txt").write_text("mine")
    assert cli.main(["export", str(demo60), "--out", str(tmp_path / "site")]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "site" / "keep.txt").read_text() == "mine"
