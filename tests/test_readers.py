"""The terminal readers: `station papers`, `station paper` and `station thread` on a real demo station.

One scripted social demo station is run to tick 100 for the whole module (a few seconds); a few
rows are then added the way the rooms add them (a paper reply, a hostile forum thread, a deleted
message) so that replies, deletion and untrusted text are covered too.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import demo_config

from rooms.archive import REVIEWER
from rooms.capsule_store import Author, Capsules
from station.apps.cli import main
from station.apps.readers import get_paper, get_thread, list_papers
from station.apps.world import Station
from station.core.config import parse_config
from station.core.engine import Engine
from station.core.terminal_text import clean

HOSTILE = "Look: [bold red]x[/] and \x1b[31mred\x1b[0m text \x1b]0;pwned\x07 and [link=http://evil]y[/link]."
HOSTILE_TITLE = "[blink]Boom[/blink] \x1b[2Jthread"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("readers") / "station"
    st = Station.create(directory, parse_config(demo_config(), "social_demo"))
    try:
        Engine(st).run(until_tick=100)
        with st.store.transaction():
            archive = Capsules(st.store, "archive")
            paper = archive.get(1)
            assert paper is not None
            archive.add_message(paper, Author("Noether I", 999, "Noether", 1), 101, title="A question",
                                content="Did you try **larger** instances?")
            forum = Capsules(st.store, "public_memory")
            thread = forum.create(Author("Eidos I", 998, "Eidos", 1), 101, title=HOSTILE_TITLE,
                                  content="first message", abstract="about nothing")
            forum.add_message(thread, Author("Gauss I", 997, "Gauss", 1), 101, title=None, content=HOSTILE)
            forum.add_message(thread, Author("Arete I", 996, "Arete", 1), 101, title=None,
                              content="secret words that were deleted")
            forum.add_message(thread, Author("Eidos I", 998, "Eidos", 1), 102, title=None, content="last message")
            forum.delete_message(thread, 3, 102)
            last = st.store.scalar("SELECT MAX(number) FROM capsules WHERE room='archive'")
            archive.delete_capsule(archive.get(last), 102)  # its lineage took it back
            st.store.set_meta("test_thread", thread.number)
            st.store.set_meta("test_deleted_paper", last)
    finally:
        st.close()
    return directory


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich reads it: long lines stay whole for the assertions


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def stored(demo: Path) -> Station:
    return Station.open(demo)


def test_papers_lists_published_papers(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = stored(demo)
    try:
        data = list_papers(st.store)
        titles = {r["title"] for r in st.store.all("SELECT title FROM capsules WHERE room='archive' AND deleted=0")}
    finally:
        st.close()
    assert data["papers"] and not data["submissions"]
    assert [p["number"] for p in data["papers"]] == sorted(p["number"] for p in data["papers"])
    first = data["papers"][0]
    assert first["replies"] == 1 and first["score"] is not None and first["submission"] is not None
    code, out, err = run(capsys, "papers", str(demo))
    assert code == 0 and err == ""
    for title in titles:
        assert title in out
    assert f"{first['score']}/10" in out and first["author"]["name"] in out
    assert "s:" not in out.split("Read one with")[0]  # no unpublished submissions without --all


def test_papers_all_and_status_list_submissions(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = stored(demo)
    try:
        rejected = st.store.all("SELECT id, title FROM paper_submissions WHERE status='rejected' ORDER BY id")
    finally:
        st.close()
    assert rejected, "the demo has rejected papers by tick 100"
    code, out, _ = run(capsys, "papers", str(demo), "--all")
    assert code == 0 and "Submissions not published" in out and "rejected" in out
    assert all(f"s:{r['id']}" in out for r in rejected)
    code, out, _ = run(capsys, "papers", str(demo), "--status", "rejected")
    assert code == 0 and "Archive papers" not in out and f"s:{rejected[0]['id']}" in out
    code, out, _ = run(capsys, "papers", str(demo), "--status", "failed")
    assert code == 0 and "No papers match" in out
    code, out, _ = run(capsys, "papers", str(demo), "--status", "accepted")
    assert code == 0 and "Archive papers" in out and "Submissions not published" not in out


def test_paper_shows_body_review_and_replies(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = stored(demo)
    try:
        paper = get_paper(st.store, 1)
        body = st.store.one("SELECT m.content FROM capsule_messages m JOIN capsules c ON c.id=m.capsule "
                            "WHERE c.room='archive' AND c.number=1 AND m.k=1")["content"]
        sub = st.store.one("SELECT * FROM paper_submissions WHERE capsule_number=1")
    finally:
        st.close()
    assert paper["review"] is not None and paper["review"]["score"] == sub["score"]
    assert [r["author"]["name"] for r in paper["replies"]] == ["Noether I"]
    assert REVIEWER.name not in {r["author"]["name"] for r in paper["replies"]}
    code, out, err = run(capsys, "paper", str(demo), "1")
    assert code == 0 and err == ""
    assert paper["title"] in out and paper["author"]["name"] in out
    assert " ".join(body.split()[:12]) in " ".join(out.split())  # the body, rendered as Markdown
    assert f"score {sub['score']}/10" in out
    comment = paper["review"]["comment"]
    assert comment and " ".join(comment.split()[:8]) in " ".join(out.split())
    assert "Did you try larger instances?" in out  # the reply, **bold** rendered rather than shown raw
    assert out.index("Review") < out.index("Did you try larger")


def test_submission_shows_the_reviewer_dialogue(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = stored(demo)
    try:
        sid = st.store.scalar("SELECT MIN(id) FROM paper_submissions WHERE status='rejected'")
        response = st.store.scalar("SELECT response FROM paper_reviews WHERE submission=? AND kind='review'", (sid,))
    finally:
        st.close()
    code, out, _ = run(capsys, "paper", str(demo), f"s:{sid}")
    assert code == 0 and f"submission s:{sid}" in out and "rejected" in out and "Reviewer dialogue" in out
    assert "attempt 1" in out and "→ rejected" in out
    assert "Overall this deserves" in response and "Overall this deserves" in out
    code, again, _ = run(capsys, "paper", str(demo), "--submission", str(sid))
    assert code == 0 and again == out


def test_thread_shows_messages_in_order(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = stored(demo)
    try:
        thread = get_thread(st.store, "public", 1)
    finally:
        st.close()
    assert [m["k"] for m in thread["messages"]] == list(range(1, len(thread["messages"]) + 1))
    code, out, _ = run(capsys, "thread", str(demo), "1")
    assert code == 0 and thread["title"] in out
    positions = [out.index(f"1-{m['k']} · {m['author']['name']} · tick {m['tick']}") for m in thread["messages"]]
    assert positions == sorted(positions)
    assert all(name in out for name in thread["participants"])
    code, out, _ = run(capsys, "thread", str(demo), "1", "--room", "mail")
    assert code == 0 and "Mail 1" in out and "from " in out and " to " in out


def test_private_notes_need_a_lineage_when_ambiguous(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = stored(demo)
    try:
        scopes = [r[0] for r in st.store.all("SELECT scope FROM capsules WHERE room='private_memory' AND number=1")]
    finally:
        st.close()
    assert len(scopes) > 1
    code, _, err = run(capsys, "thread", str(demo), "1", "--room", "private")
    assert code == 2 and "--lineage" in err and scopes[0] in err
    code, out, _ = run(capsys, "thread", str(demo), "1", "--room", "private", "--lineage", scopes[0])
    assert code == 0 and f"Private note 1 · {scopes[0]} lineage" in out
    code, _, err = run(capsys, "thread", str(demo), "1", "--room", "public", "--lineage", scopes[0])
    assert code == 2 and "--lineage is only for private notes" in err


@pytest.mark.parametrize("args, message", [
    (("paper", "{dir}", "99"), "no paper 99 in the Archive (papers: 1-"),
    (("paper", "{dir}", "s:999"), "no submission s:999 (submissions: 1-"),
    (("paper", "{dir}", "seven"), "is not a paper number"),
    (("paper", "{dir}"), "give a paper number"),
    (("paper", "{dir}", "3", "--submission", "2"), "not both"),
    (("thread", "{dir}", "999"), "no forum thread 999 (threads: 1-"),
    (("thread", "{dir}", "999", "--room", "mail"), "no mail 999 (mails: 1-"),
    (("thread", "{dir}", "1", "--room", "private", "--lineage", "Nobody"), "no private notes of a lineage 'Nobody'"),
])
def test_unknown_ids_exit_2_with_a_clear_message(demo: Path, capsys: pytest.CaptureFixture[str],
                                                  args: tuple[str, ...], message: str) -> None:
    code, out, err = run(capsys, *(a.format(dir=demo) for a in args))
    assert code == 2 and out == ""
    assert err.startswith("station: ") and message in err


def test_agent_text_is_shown_literally_and_without_escapes(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = stored(demo)
    try:
        number = st.store.get_meta("test_thread")
    finally:
        st.close()
    code, out, _ = run(capsys, "thread", str(demo), str(number))
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out
    assert "[bold red]x[/]" in out and "[link=http://evil]y[/link]" in out  # rich markup not interpreted
    assert "[blink]Boom[/blink] thread" in out  # the hostile title, literally
    assert "red text" in out and "pwned" not in out  # colour codes and the window-title sequence removed
    assert "secret words" not in out and "(deleted)" in out  # message 3 was deleted
    assert out.index("first message") < out.index("[bold red]x[/]") < out.index("(deleted)") < out.index("last message")
    code, out, _ = run(capsys, "papers", str(demo))
    assert code == 0 and "\x1b" not in out


def test_clean_strips_control_sequences() -> None:
    assert clean("a\x1b[31mb\x1b[0m\x1b]8;;http://x\x1b\\c\x1b]8;;\x1b\\d") == "abcd"
    assert clean("x\r\ny\rz\x00\x08\x7f\x9b31m\u202eq\tw") == "x\ny\nzq\tw"
    assert clean("[bold]kept[/bold]") == "[bold]kept[/bold]"
    long = clean("w " * 200_000, limit=100)
    assert long.startswith("w w") and "more characters not shown" in long and len(long) < 200


def test_deleted_papers_only_with_all(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = stored(demo)
    try:
        gone = st.store.get_meta("test_deleted_paper")
        shown = [p["number"] for p in list_papers(st.store)["papers"]]
        everything = {p["number"]: p for p in list_papers(st.store, include_unpublished=True)["papers"]}
    finally:
        st.close()
    assert gone not in shown and everything[gone]["deleted"] and len(everything) == len(shown) + 1
    code, out, _ = run(capsys, "papers", str(demo), "--all")
    assert code == 0 and "(deleted)" in out
    code, out, _ = run(capsys, "paper", str(demo), str(gone))
    assert code == 0 and "deleted by its lineage" in out
