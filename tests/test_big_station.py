"""A populous station stays readable page by page: the agents index, the overview, the lineages and the
study page show one bounded page with working next links, `station agents`, `dialogue`, `papers` and
`thread` say how many more there are and how to see them, and `station export` writes such a station with
its crawl on disk. The station is made by scripts/make_big_station.py (a real station whose history is
written into its tables), small enough to build in a second, big enough to need more than one page."""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers import ROOT, station_cli, web_client

from station.apps.web import data, study
from station.apps.web.app import create_app
from station.apps.web.export import FRONTIER, export
from station.core.agents import Agent

sys.path.insert(0, str(ROOT / "scripts"))
from make_big_station import make_big_station  # noqa: E402

AGENTS, TICKS = 60, 120


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("big") / "station"
    make_big_station(directory, agents=AGENTS, ticks=TICKS, full_ticks=30, say=lambda line: None)
    return directory


@pytest.fixture(scope="module")
def client(big: Path):
    return web_client(create_app(big))


def query(directory: Path, sql: str, params: tuple = ()) -> list[tuple]:
    db = sqlite3.connect(directory / "station.db")
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def names_on(html: str, table: str) -> list[str]:
    body = html[html.index(f'id="{table}"') :].split("</table>", 1)[0]
    return [n.replace("%20", " ") for n in re.findall(r'<tr><td><a href="/agents/([^"]+)">', body)]


def test_the_made_station_is_a_consistent_world(big: Path) -> None:
    summary = json.loads((big / "big.json").read_text())
    assert summary["agents"] == AGENTS and summary["ticks"] == TICKS
    records = [Agent.from_json(d) for (d,) in query(big, "SELECT data FROM agents")]
    active = [a for a in records if a.state == "active"]
    assert len(active) == AGENTS and len(records) > 2 * AGENTS  # generations ended and were replaced
    by_name = {a.name: a for a in records}
    for a in records:  # a guest that ascended names an agent of its own session; heirs are one generation on
        if a.ascended_to:
            assert by_name[a.ascended_to].session == a.session and by_name[a.ascended_to].lineage
        if a.succeeded_by:
            assert by_name[a.succeeded_by].generation == a.generation + 1
    # each living agent took a turn in each of the last ticks, under the name it had then
    last = query(big, "SELECT COUNT(*), COUNT(DISTINCT session) FROM turns WHERE tick=?", (TICKS,))[0]
    assert last == (AGENTS, AGENTS)
    assert query(big, "SELECT value FROM meta WHERE key='tick'")[0][0] == str(TICKS + 1)
    status = station_cli("status", str(big), "--json", cwd=ROOT)
    assert status.returncode == 0, status.stderr
    counts = json.loads(status.stdout)["counts"]
    assert counts["turns"] == query(big, "SELECT COUNT(*) FROM turns")[0][0]
    assert counts["agents_ever"] == len(records)


def test_the_agents_index_shows_one_page_and_a_next_link_to_the_rest(client, big: Path) -> None:
    everyone = {n for (n,) in query(big, "SELECT name FROM agents")}
    assert len(everyone) > data.AGENTS_PER_PAGE
    first = client.get("/agents").text
    shown = names_on(first, "all-agents")
    assert len(shown) == data.AGENTS_PER_PAGE
    pages = -(-len(everyone) // data.AGENTS_PER_PAGE)
    assert f"Page 1 of {pages}" in first and 'rel="prev"' not in first
    seen = list(shown)
    page = first
    while 'rel="next"' in page:
        link = re.search(r'<a href="([^"]+)" rel="next">next</a>', page).group(1).replace("&amp;", "&")
        page = client.get("/agents" + link).text
        seen += names_on(page, "all-agents")
    assert len(seen) == len(everyone) and set(seen) == everyone  # every agent once, page by page
    newest = query(big, "SELECT name FROM agents ORDER BY position DESC, name DESC LIMIT 1")[0][0]
    assert shown[0] == newest


def test_the_overview_lists_a_page_of_the_active_agents_and_links_to_all(client, big: Path, monkeypatch) -> None:
    monkeypatch.setattr(data, "OVERVIEW_AGENTS", 25)
    page = client.get("/").text
    shown = names_on(page, "agents")
    in_turn_order = [n for (n,) in query(big, "SELECT name FROM agents WHERE state='active' ORDER BY position")]
    assert shown == in_turn_order[:25]
    more = page[page.index('id="more-agents"') :].split("</p>", 1)[0]
    assert f"{AGENTS - 25} more" in more and 'href="/agents?state=active"' in more
    active = client.get("/agents?state=active").text
    assert set(names_on(active, "all-agents")) == set(in_turn_order)


def test_lineages_come_in_pages_and_a_lineage_link_finds_its_page(client, big: Path, monkeypatch) -> None:
    monkeypatch.setattr(data, "LINEAGES_PER_PAGE", 20)
    founded = [
        n
        for (n,) in query(
            big, "SELECT lineage FROM agents WHERE lineage IS NOT NULL GROUP BY lineage ORDER BY MIN(position), lineage"
        )
    ]
    assert len(founded) > 40
    first = client.get("/lineages").text
    assert re.findall(r'<section class="lineage" id="lineage-(\w+)"', first) == founded[:20]
    assert 'href="?page=2" rel="next"' in first
    second = client.get("/lineages?page=2").text
    assert re.findall(r'<section class="lineage" id="lineage-(\w+)"', second) == founded[20:40]
    late = founded[45]
    moved = client.get(f"/lineages?lineage={quote(late)}", follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == f"/lineages?page=3#lineage-{late}"
    assert f'id="lineage-{late}"' in client.get("/lineages?page=3").text


def test_a_crowded_study_window_is_narrowed_to_its_latest_ticks(client, monkeypatch) -> None:
    monkeypatch.setattr(study, "MAX_TURNS", 150)
    monkeypatch.setattr(study, "LISTED", 10)
    page = client.get(f"/study?first=1&last={TICKS}").text
    # 60 agents act each of the last ticks: 150 turns are the last two ticks and a half
    assert f"Ticks 1–{TICKS} hold more than 150 turns: the latest ticks, {TICKS - 1}–{TICKS}, are shown" in page
    assert f"Behaviour, ticks {TICKS - 1}–{TICKS}" in page
    choices = re.findall(r'<input type="checkbox" name="agent"', page)
    assert 10 <= len(choices) <= 20  # the busiest ten, and the ones drawn
    rows = page[page.index('id="room-actions"') :].split("</table>", 1)[0].count("<tr><td><a")
    assert rows == 10 and "the 10 busiest of the 60 agents who acted here" in page


def test_the_agents_command_pages_and_says_how_many_more(big: Path) -> None:
    everyone = query(big, "SELECT name FROM agents ORDER BY position, name")
    total = len(everyone)
    head = station_cli("agents", str(big), "--all", "--limit", "10", cwd=ROOT)
    assert head.returncode == 0, head.stderr
    rows = [x for x in head.stdout.splitlines() if x.startswith("│ ")]
    assert len(rows) == 10  # ten agents (the header is drawn in ┃)
    assert rows[0].split("│")[1].strip() == everyone[0][0]
    assert head.stdout.splitlines()[-1] == f"agents 1-10 of {total}; next: --offset 10"
    tail = station_cli("agents", str(big), "--all", "--limit", "10", "--offset", str(total - 4), cwd=ROOT)
    assert tail.stdout.splitlines()[-1] == f"agents {total - 3}-{total} of {total}; previous: --offset {total - 14}"
    assert [x for x in tail.stdout.splitlines() if x.startswith("│ ")][-1].split("│")[1].strip() == everyone[-1][0]
    default = station_cli("agents", str(big), cwd=ROOT)  # the active ones: one page holds them all
    assert "next: --offset" not in default.stdout and default.stdout.count("│ active") == AGENTS
    refused = station_cli("agents", str(big), "--limit", "0", cwd=ROOT)
    assert refused.returncode == 2 and "--limit must be at least 1" in refused.stderr


def test_dialogue_papers_and_thread_show_a_page_with_the_way_to_the_rest(big: Path) -> None:
    ((name, session),) = query(big, "SELECT name, session FROM agents WHERE state='active' ORDER BY position LIMIT 1")
    turns = query(big, "SELECT COUNT(*) FROM turns WHERE session=?", (session,))[0][0]
    assert turns > 5
    latest = station_cli("dialogue", str(big), name, "--limit", "3", cwd=ROOT)
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout.count("station → agent") == 3
    assert latest.stdout.rstrip().splitlines()[-1] == (
        f"turns of {name} {turns - 2}-{turns} of {turns}; previous: --offset {turns - 6}"
    )
    oldest = station_cli("dialogue", str(big), name, "--limit", "2", "--offset", "0", cwd=ROOT)
    first_tick = query(big, "SELECT MIN(tick) FROM turns WHERE session=?", (session,))[0][0]
    assert f"tick {first_tick} " in oldest.stdout
    assert oldest.stdout.rstrip().splitlines()[-1] == f"turns of {name} 1-2 of {turns}; next: --offset 2"

    papers = query(big, "SELECT COUNT(*) FROM paper_submissions")[0][0]
    unpublished = query(big, "SELECT COUNT(*) FROM paper_submissions WHERE status!='accepted'")[0][0]
    listed = station_cli("papers", str(big), "--all", "--limit", "1", cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    if papers - unpublished > 1:
        assert f"papers 1-1 of {papers - unpublished}; next: --offset 1" in listed.stdout
    if unpublished > 1:
        assert f"submissions not published 1-1 of {unpublished}; next: --offset 1" in listed.stdout

    ((number, count),) = query(
        big, "SELECT number, message_count FROM capsules WHERE room='public_memory' ORDER BY message_count DESC LIMIT 1"
    )
    assert count > 2
    thread = station_cli("thread", str(big), str(number), "--limit", "2", cwd=ROOT)
    assert thread.returncode == 0, thread.stderr
    assert f"{count} message(s)" in thread.stdout
    assert thread.stdout.rstrip().splitlines()[-1] == f"messages 1-2 of {count}; next: --offset 2"


def test_export_keeps_its_crawl_on_disk_and_one_file_per_page(big: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    written = export(big, site, limit=120)
    assert written == 120 and not (site / FRONTIER).exists()  # the crawl's addresses are gone with the export
    agents = (site / "agents.html").read_text()
    assert 'href="agents/page-2.html" rel="next"' in agents  # the index's pages link on, as files
    # a lineage's address (/lineages?lineage=X) is saved as a stub that sends the reader on to its page
    link = re.search(r'href="(lineages/lineage-(\w+)\.html)#lineage-\w+"', (site / "index.html").read_text())
    assert link is not None
    stub = (site / link.group(1)).read_text()
    target = re.search(r'url=([^"]+)"', stub).group(1)
    assert (
        'http-equiv="refresh"' in stub and target.startswith("page-") and target.endswith(f"#lineage-{link.group(2)}")
    )
    page = re.fullmatch(r"page-(\d+)\.html#lineage-\w+", target).group(1)
    assert f'id="lineage-{link.group(2)}"' in web_client(create_app(big)).get(f"/lineages?page={page}").text
