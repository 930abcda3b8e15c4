"""The viewer as an analysis tool, over HTTP on the scripted 60-tick station: every object links to
what it relates to (agent ↔ evaluations, papers, threads, lineage; evaluation ↔ author, citing
papers, the submission it built on), the leaderboard filters and sorts from its address, a
submission's code is diffed against an earlier one, unpublished papers are listed, and the
evaluation queue names what runs, waits and failed.
"""
from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import quote

import pytest
from conftest import copy_station
from fastapi.testclient import TestClient
from helpers import web_client

from station.apps.web import refs
from station.apps.web.app import create_app
from station.core.store import Store


@pytest.fixture(scope="module")
def client(demo60: Path) -> TestClient:
    return web_client(create_app(demo60))


def query(directory: Path, sql: str, params: tuple = ()) -> list:
    store = Store(directory)
    try:
        return [tuple(r) for r in store.all(sql, params)]
    finally:
        store.close()


def board_ids(html: str) -> list[int]:
    table = html[html.index('id="leaderboard"'):]
    return [int(n) for n in re.findall(r'<tr><td><a href="/research/(\d+)">', table)]


# -- ids in text ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, ids", [
    ("the best run (evaluation 22) improves", [22]),
    ("Evaluation ID 58 and eval #7", [58, 7]),
    ("evaluations 18, 22 and 31 agree", [18, 22, 31]),
    ("scored 2.5 at tick 40; see #9", []),  # a bare number or #9 names no evaluation
])
def test_evaluation_ids_are_found_in_what_agents_write(text: str, ids: list[int]) -> None:
    assert refs.mentioned(text) == ids


def test_ids_become_links_or_are_marked_but_code_and_links_stay_as_they_are() -> None:
    html = ("<p>evaluation 3 beat evaluation 99</p><pre><code>evaluation 3</code></pre>"
            '<p><a href="https://x.example">eval 3</a></p>')
    out = str(refs.link_mentions(html, known={3}))
    assert out.count('<a class="ref" href="/research/3">3</a>') == 1
    assert '<span class="missing-ref" title="this station has no evaluation #99">99</span>' in out
    assert "<code>evaluation 3</code>" in out and '<a href="https://x.example">eval 3</a>' in out


# -- links ------------------------------------------------------------------------------------------
def test_an_agent_page_links_to_everything_its_life_produced(client: TestClient, demo60: Path) -> None:
    (session, name), = query(demo60, "SELECT session, name FROM agents WHERE kind='recursive' AND session IN "
                                     "(SELECT session FROM paper_submissions WHERE capsule_number IS NOT NULL) "
                                     "ORDER BY session LIMIT 1")
    guest = query(demo60, "SELECT name FROM agents WHERE session=? AND name!=?", (session, name))
    evaluations = [r[0] for r in query(demo60, "SELECT id FROM evaluations WHERE session=?", (session,))]
    papers = [r[0] for r in query(demo60, "SELECT capsule_number FROM paper_submissions WHERE session=? "
                                          "AND capsule_number IS NOT NULL", (session,))]
    page = client.get(f"/agents/{quote(name)}").text
    works = page[page.index('id="works"'):page.index('id="dialogue"')]
    assert evaluations and all(f'href="/research/{n}"' in works for n in evaluations)
    assert all(f'href="/papers/{n}"' in works for n in papers)
    assert f'href="/research?author={quote(name)}"' in works
    lineage = name.rsplit(" ", 1)[0]
    assert f'href="/lineages?lineage={quote(lineage)}#lineage-{lineage}"' in works
    if guest:  # a guest and its ascended self are one life: each page names the other
        assert f'href="/agents/{quote(guest[0][0])}"' in works
    assert f'id="lineage-{lineage}"' in client.get(f"/lineages?lineage={quote(lineage)}").text  # its page


def test_an_evaluation_links_its_author_the_papers_citing_it_and_what_it_built_on(
    demo60_cited: tuple[Path, int, int]
) -> None:
    # Paper bodies cite evaluations by id ("evaluation 22"): a paper citing one of its author's evaluations.
    directory, number, cited = demo60_cited
    content, author = query(directory, "SELECT m.content, c.author FROM capsules c JOIN capsule_messages m "
                                       "ON m.capsule=c.id WHERE c.room='archive' AND c.number=? AND m.k=1", (number,))[0]
    client = web_client(create_app(directory))
    page = client.get(f"/research/{cited}").text
    assert f'href="/papers/{number}"' in page[page.index('id="cited-by"'):]
    assert f'<a href="/agents/{quote(author)}" id="author">' in page
    built_on = int(re.search(r'href="/research/(\d+)" id="built-on"', page).group(1))
    session, task = query(directory, "SELECT session, task FROM evaluations WHERE id=?", (cited,))[0]
    previous = query(directory, "SELECT MAX(id) FROM evaluations WHERE session=? AND task=? AND id<?",
                     (session, task, cited))[0][0]
    assert built_on == previous  # no id in its abstract: the author's previous submission
    paper = client.get(f"/papers/{number}").text
    assert f'<a class="ref" href="/research/{cited}">{cited}</a>' in paper
    listed = paper[paper.index('id="cited"'):paper.index('id="review"')]
    assert all(f'<a href="/research/{n}">{n}</a>' in listed for n in refs.mentioned(content))


def test_the_overview_shows_research_progress_at_a_glance(client: TestClient, demo60: Path) -> None:
    progress = client.get("/").text.split('id="progress"', 1)[1].split("</figure>", 1)[0]
    scored = query(demo60, "SELECT COUNT(*) FROM evaluations WHERE score IS NOT NULL")[0][0]
    assert "score-plot-1" in progress and progress.count("<circle class='dot'") == scored


def test_the_paper_marks_an_id_that_names_no_evaluation(demo60: Path, tmp_path: Path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    store = Store(directory)
    with store.transaction():
        capsule = store.scalar("SELECT MIN(id) FROM capsules WHERE room='archive'")
        store.execute("UPDATE capsule_messages SET content=content || ' We also ran evaluation 4242.' "
                      "WHERE capsule=? AND k=1", (capsule,))
        number = store.scalar("SELECT number FROM capsules WHERE id=?", (capsule,))
    store.close()
    page = web_client(create_app(directory)).get(f"/papers/{number}").text
    assert 'title="this station has no evaluation #4242">4242</span>' in page
    assert 'href="/research/4242"' not in page
    cited = page[page.index('id="cited"'):page.index('id="review"')]  # the list of what the paper cites
    assert "no such evaluation in this station" in cited


def test_ids_are_the_same_on_the_web_as_in_the_cli(client: TestClient, demo60: Path) -> None:
    for room, path in (("public_memory", "forum"), ("mail", "mail")):
        for number, title in query(demo60, "SELECT number, title FROM capsules WHERE room=? AND deleted=0", (room,)):
            page = client.get(f"/{path}/{number}")
            assert page.status_code == 200 and title in page.text.replace("&#39;", "'")
            assert f"Thread {number}," in page.text


# -- leaderboard ------------------------------------------------------------------------------------
def test_the_leaderboard_filters_and_sorts_from_its_address(client: TestClient, demo60: Path) -> None:
    everything = board_ids(client.get("/research").text)
    assert len(everything) == query(demo60, "SELECT COUNT(*) FROM evaluations")[0][0]
    gauss = [r[0] for r in query(demo60, "SELECT id FROM evaluations WHERE lineage='Gauss'")]
    assert sorted(board_ids(client.get("/research?lineage=Gauss").text)) == sorted(gauss)
    by_score = board_ids(client.get("/research?lineage=Gauss&sort=score").text)
    scores = dict(query(demo60, "SELECT id, score FROM evaluations"))
    assert [scores[i] for i in by_score] == sorted((scores[i] for i in gauss), reverse=True)
    newest = board_ids(client.get("/research?sort=newest&from=20&to=40").text)
    window = [r[0] for r in query(demo60, "SELECT id FROM evaluations WHERE tick BETWEEN 20 AND 40 ORDER BY id DESC")]
    assert newest == window and window
    tagged = [r[0] for r in query(demo60, "SELECT evaluation FROM evaluation_tags WHERE tag='grid'")]
    assert sorted(board_ids(client.get("/research?tag=grid").text)) == sorted(tagged)
    system = board_ids(client.get("/research?author=System&task=1&status=finished").text)
    assert system == [r[0] for r in query(demo60, "SELECT id FROM evaluations WHERE author='System'")]
    page = client.get("/research?lineage=Gauss&sort=score").text
    assert '<option selected>Gauss</option>' in page and '<option selected>score</option>' in page
    # The plot shows the view: only the filtered lineage's points.
    dots = set(int(n) for n in re.findall(r"<a href=.?/research/(\d+).?><circle", page))
    assert dots and dots <= set(gauss)


def test_nonsense_in_the_address_shows_the_unfiltered_board(client: TestClient) -> None:
    page = client.get("/research?sort=drop%20table&status=evil&from=x&to=-3&page=99999999999999999999999")
    assert page.status_code == 200
    assert board_ids(page.text) == board_ids(client.get("/research").text)
    hostile = client.get("/research?author=%3Cscript%3Ealert(1)%3C/script%3E").text
    assert "<script>alert" not in hostile and "No submission matches this view." in hostile


# -- diff -------------------------------------------------------------------------------------------
def test_the_diff_shows_added_and_removed_lines_against_what_it_built_on(client: TestClient, demo60: Path) -> None:
    later, earlier = query(demo60, "SELECT b.id, MAX(a.id) FROM evaluations a JOIN evaluations b ON a.session=b.session "
                                   "AND a.task=b.task AND a.id<b.id AND a.code!=b.code GROUP BY b.id ORDER BY b.id "
                                   "LIMIT 1")[0]
    page = client.get(f"/research/{later}/diff").text
    assert f'id="diff-base">#{earlier} ' in page
    added = re.findall(r"<span class='add'>\+(.*?)</span>", page)
    removed = re.findall(r"<span class='del'>-(.*?)</span>", page)
    assert added and removed
    new_code, old_code = (query(demo60, "SELECT code FROM evaluations WHERE id=?", (i,))[0][0] for i in (later, earlier))
    assert all(html.unescape(line) in new_code.splitlines() for line in added)
    assert all(html.unescape(line) in old_code.splitlines() for line in removed)
    other = client.get(f"/research/{later}/diff?against=1").text
    assert 'id="diff-base">#1 ' in other
    assert client.get(f"/research/{later}/diff?against=999999").status_code == 404


def test_a_diff_of_hostile_code_is_escaped(demo60: Path, tmp_path: Path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    store = Store(directory)
    with store.transaction():
        store.execute("UPDATE evaluations SET code=code || ?  WHERE id=2", ("\n# </pre><script>alert(1)</script>\n",))
    store.close()
    page = web_client(create_app(directory)).get("/research/2/diff?against=1").text
    assert "<script>alert(1)" not in page and "&lt;/pre&gt;&lt;script&gt;alert(1)" in page


# -- papers and the queue -----------------------------------------------------------------------------
def test_rejected_submissions_are_listed_and_readable(client: TestClient, demo60: Path) -> None:
    rejected = query(demo60, "SELECT id, title FROM paper_submissions WHERE status='rejected'")
    assert rejected, "the demo station has rejected papers by tick 60"
    listing = client.get("/papers?show=rejected").text
    assert all(f'href="/submissions/{sid}"' in listing for sid, _ in rejected)
    assert f"rejected ({len(rejected)})" in client.get("/papers").text
    sid, title = rejected[0]
    page = client.get(f"/submissions/{sid}").text
    assert title.replace("'", "&#39;") in page and "rejected" in page
    assert client.get("/submissions/99999").status_code == 404


def test_the_queue_lists_recent_failures_with_their_cause(demo60: Path, tmp_path: Path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    store = Store(directory)
    with store.transaction():
        store.execute("UPDATE evaluations SET status='failed', score=NULL, error=? WHERE id=5",
                      ("ZeroDivisionError: division by zero\nTraceback line",))
        store.execute("UPDATE evaluations SET status='queued', score=NULL, finished_tick=NULL WHERE id=6")
    store.close()
    page = web_client(create_app(directory)).get("/research/queue").text
    failures = page[page.index('id="failures"'):]
    assert '<a href="/research/5">5</a>' in failures and "ZeroDivisionError: division by zero" in failures
    assert "Traceback line" not in failures
    waiting = page[page.index('id="open-evaluations"'):page.index('id="failures"')]
    assert '<a href="/research/6">#6</a> finished, not delivered yet' in waiting  # its run is recorded


# -- other lists ------------------------------------------------------------------------------------
def agent_names(html: str) -> list[str]:
    table = html[html.index('id="all-agents"'):]
    return re.findall(r'<tr><td><a href="/agents/[^"]+">([^<]+)</a>', table)


def test_the_agents_index_filters_from_its_address_and_pages_keep_the_filter(client: TestClient, demo60: Path) -> None:
    gauss = [r[0] for r in query(demo60, "SELECT name FROM agents WHERE lineage='Gauss' ORDER BY position DESC, name DESC")]
    assert gauss and agent_names(client.get("/agents?lineage=Gauss").text) == gauss
    ended_guests = {r[0] for r in query(demo60, "SELECT name FROM agents WHERE state='ended' AND kind='guest'")}
    assert set(agent_names(client.get("/agents?state=ended&kind=guest").text)) == ended_guests
    everyone = agent_names(client.get("/agents?state=nonsense").text)  # an unknown state filters nothing
    assert len(everyone) == min(100, query(demo60, "SELECT COUNT(*) FROM agents")[0][0])


def test_the_pager_keeps_the_filter(demo60: Path, tmp_path: Path, monkeypatch) -> None:
    from station.apps.web import data
    monkeypatch.setattr(data, "AGENTS_PER_PAGE", 2)
    page = web_client(create_app(demo60)).get("/agents?kind=recursive").text
    assert 'href="?kind=recursive&amp;page=2" rel="next"' in page


def test_threads_filter_by_writer_and_sort(client: TestClient, demo60: Path) -> None:
    (writer,), = query(demo60, "SELECT m.author FROM capsule_messages m JOIN capsules c ON c.id=m.capsule "
                               "WHERE c.room='public_memory' GROUP BY m.author ORDER BY COUNT(*) DESC LIMIT 1")
    wrote_in = {r[0] for r in query(demo60, "SELECT DISTINCT c.number FROM capsule_messages m JOIN capsules c ON "
                                            "c.id=m.capsule WHERE c.room='public_memory' AND m.author=?", (writer,))}
    page = client.get(f"/forum?writer={quote(writer)}").text
    assert {int(n) for n in re.findall(r'<a href="/forum/(\d+)">', page)} == wrote_in
    longest = client.get("/forum?sort=longest").text
    counts = [int(n) for n in re.findall(r"<td>(\d+)</td></tr>", longest)]
    assert counts == sorted(counts, reverse=True) and counts
    (recipient,), = query(demo60, "SELECT value FROM capsules, json_each(recipients) WHERE room='mail' LIMIT 1")
    sent = {r[0] for r in query(demo60, "SELECT number FROM capsules, json_each(recipients) WHERE room='mail' "
                                        "AND value=?", (recipient,))}
    assert sent <= {int(n) for n in re.findall(r'<a href="/mail/(\d+)">', client.get(f"/mail?writer={quote(recipient)}").text)}
    assert "No thread with a message by Nobody" in client.get("/forum?writer=Nobody").text


def test_the_overview_plot_keeps_every_improvement_and_a_sample_of_the_rest() -> None:
    from station.apps.web.board import glance

    points = [{"id": i, "tick": i, "task": "1", "lineage": "AB"[i % 2], "score": (i % 97) / 97 + i / 10_000}
              for i in range(1, 3001)]
    kept = glance(points, others=100)
    ids = {p["id"] for p in kept}
    best: dict = {}
    for p in points:  # every point that raised the task's or its lineage's best is drawn
        for key in (None, p["lineage"]):
            if p["score"] > best.get(key, -1):
                best[key] = p["score"]
                assert p["id"] in ids
    assert len(kept) < 300 and [p["id"] for p in kept] == sorted(ids)
