"""The archive reviewer (spec capsules §7): reading verdicts, the reviewing dialogue, what a verdict does.

Stations run in-process. Agents are `replay` models that submit exactly the papers a test needs
(`goto archive`, `create` with a YAML paper); the reviewer is either a `replay` model whose
answers the test writes line by line, or the offline `scripted-reviewer`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import (
    act,
    events,
    make_station,
    prompt_at,
    record_requests,
    recursive,
    replay_model,
    reply,
    section,
    yaml_block,
)

from rooms.archive.reviewer import Reviewer
from rooms.archive.verdict import parse_paper_verdict
from station.apps.world import Station
from station.core.engine import Engine, StationPaused
from station.core.store import Store, canonical_dump
from station.models.replay import ReplayModel
from station.models.scripted_reviewer import ACK, ScriptedReviewer, score_paper

GOOD = ("We tune the step size of a local search and compare it against a fixed-step baseline. "
        + " ".join(f"In evaluation {n} the score reached 0.{n}1 after {n * 10} rounds." for n in range(11, 31)))
SHORT = "We think larger steps might help. More work is needed."


def paper(title: str = "Adaptive steps for local search", content: str = GOOD, *,
          abstract: str = "Adaptive step sizes beat a fixed step in five runs.", tags: str = "search, tuning") -> str:
    body = {"title": title, "abstract": abstract, "tags": tags, "content": content}
    return yaml_block(yaml.safe_dump(body, sort_keys=False, width=10_000))


def submit(*extra: str, **kwargs: Any) -> str:
    return reply(act("goto archive"), act("create"), paper(**kwargs), *extra)


def verdict(score: Any, comment: str = "Clear method and honest numbers.",
            suggestion: str = "Try a second problem size.", **extra: Any) -> str:
    body = {"score": score, "comment": comment, "suggestion": suggestion, **extra}
    return "Checklist: every requirement is met.\n\n" + yaml_block(yaml.safe_dump(body, sort_keys=False))


def reviewer_replay(tmp_path: Path, lines: list[str]) -> dict[str, Any]:
    return replay_model(tmp_path / "reviewer.jsonl", lines, name="reviewer-replay")


def scripted(name: str = "scripted-reviewer") -> dict[str, Any]:
    return {"provider": "scripted", "name": name}


def station(tmp_path: Path, author: list[str], reviewer_model: dict[str, Any], *, kin: bool = False,
            reviewer: dict[str, Any] | None = None, **overrides: Any) -> Station:
    """Spiro I writes `author`'s replies; Nova I (another lineage) only watches; Spiro II if `kin`."""
    agents = [recursive(replay_model(tmp_path / "author.jsonl", author, name="author", pad=12), lineage="Spiro")]
    if kin:
        agents.append(recursive(replay_model(tmp_path / "kin.jsonl", [], name="kin", pad=12), lineage="Spiro"))
    agents.append(recursive(replay_model(tmp_path / "watcher.jsonl", [], name="watcher", pad=12), lineage="Nova"))
    overrides.setdefault("lifecycle", {"maturity_ticks": None})
    return make_station(tmp_path / "station", agents, reviewer={"model": reviewer_model, **(reviewer or {})},
                        **overrides)


def inbox(st: Station, agent: str, kind: str | None = None) -> list[str]:
    sql, params = "SELECT text FROM messages WHERE agent=?", [agent]
    if kind is not None:
        sql, params = sql + " AND kind=?", params + [kind]
    return [r[0] for r in st.store.all(sql + " ORDER BY id", tuple(params))]


def submissions(st: Station) -> list[dict[str, Any]]:
    return [dict(r) for r in st.store.all("SELECT * FROM paper_submissions ORDER BY id")]


def reviews(st: Station) -> list[tuple[str, int, str, str, str]]:
    return [(r["kind"], r["attempt"], r["input_key"], r["status"], r["decision"])
            for r in st.store.all("SELECT * FROM paper_reviews ORDER BY id")]


def archive_messages(st: Station, number: int) -> list[dict[str, Any]]:
    return [dict(r) for r in st.store.all(
        "SELECT m.* FROM capsule_messages m JOIN capsules c ON c.id=m.capsule "
        "WHERE c.room='archive' AND c.number=? ORDER BY m.k", (number,))]


def reviewer_hook(st: Station) -> Reviewer:
    return next(h for h in st.ctx.hooks if isinstance(h, Reviewer))


# -- reading a verdict ------------------------------------------------------------------------
def test_a_yaml_block_gives_score_comment_suggestion_and_extra_fields() -> None:
    text = ("Checklist:\n- 1.1 met\n\n```YAML\nscore: 7\ncomment: Solid.\nsuggestion: |\n  More settings.\n"
            "novelty_score: 8\nclarity: '6.5'\nverdict_note: fine\ndecision: accept\n```\nThanks.")
    v = parse_paper_verdict(text, ["novelty_score", "clarity", "verdict_note", "missing_one"])
    assert v is not None and v.status == "success"
    assert (v.score, v.comment, v.suggestion, v.decision) == (7, "Solid.", "More settings.", "accept")
    assert v.extra == {"novelty_score": 8, "clarity": 6.5, "verdict_note": "fine", "missing_one": None}


@pytest.mark.parametrize("raw, expected", [(14, 10), (0, 1), (-3, 1), (10, 10), ("7/10", 7), (6.8, 6), ("9", 9)])
def test_the_score_is_clamped_to_1_to_10(raw: Any, expected: int) -> None:
    v = parse_paper_verdict(yaml_block(yaml.safe_dump({"score": raw, "comment": "c"})))
    assert v is not None and v.score == expected and v.status == "success"


def test_only_the_first_yaml_block_counts() -> None:
    v = parse_paper_verdict(yaml_block("score: 4\ncomment: first") + "\nlater:\n" + yaml_block("score: 9\ncomment: second"))
    assert v is not None and (v.score, v.comment) == (4, "first")


def test_free_text_fallback_reads_10_as_10_and_the_last_score_wins() -> None:
    v = parse_paper_verdict("My verdict. Score: 10")
    assert v is not None and v.score == 10 and v.status == "parsing_error"
    assert v.comment is None and v.suggestion is None
    v = parse_paper_verdict("At first I thought score: 3, but after checking the IDs, **Score:** 8 is fair.")
    assert v is not None and v.score == 8
    # A block without a usable score falls back to the text, and so does broken YAML.
    v = parse_paper_verdict("score:9 overall\n" + yaml_block("comment: no score here"))
    assert v is not None and (v.score, v.status) == (9, "parsing_error")
    v = parse_paper_verdict("```yaml\nscore: [unclosed\n```\nscore: 5")
    assert v is not None and (v.score, v.status) == (5, "parsing_error")


def test_no_score_at_all_is_no_verdict() -> None:
    assert parse_paper_verdict("I liked it a lot.") is None
    assert parse_paper_verdict(yaml_block("comment: fine\nsuggestion: none")) is None
    assert parse_paper_verdict("score: 11 and score: 0") is None  # out of range is not a score
    assert parse_paper_verdict("novelty_score: 9") is None  # another field's score is not the score
    assert parse_paper_verdict(yaml_block("score: high")) is None


# -- the scripted reviewer ----------------------------------------------------------------------
def test_the_scripted_reviewer_scores_by_its_fixed_rule() -> None:
    assert score_paper(SHORT)[0] == 3
    assert score_paper(GOOD)[0] == 9  # long, numeric, baseline, evaluation IDs (3+2+2+1+1)
    assert score_paper(" ".join(["word"] * 150) + " 1 2 3 4 5")[0] == 7
    assert score_paper("Our baseline, eval #4 and ID 7.")[0] == 5
    assert score_paper(" ".join(["x"] * 200) + " baseline")[0] == 6


def test_the_scripted_reviewer_acknowledges_context_and_reviews_papers() -> None:
    model = ScriptedReviewer()
    ack = model.complete([{"role": "user", "text": "the criteria ..."}], system=None, agent="reviewer")
    assert ack.text == ACK and parse_paper_verdict(ack.text) is None
    sub = f"## New submission\n----- BEGIN PAPER CONTENT -----\n{GOOD}\n----- END PAPER CONTENT -----\nReview it."
    messages = [{"role": "user", "text": "criteria"}, {"role": "assistant", "text": ACK}, {"role": "user", "text": sub}]
    v = parse_paper_verdict(model.complete(messages, system=None, agent="reviewer").text)
    assert v is not None and v.status == "success" and v.score == 9 and v.comment and v.suggestion
    # A retry message holds no paper: the reviewer judges the paper it was last sent.
    retry = messages + [{"role": "assistant", "text": "hmm"}, {"role": "user", "text": "again, with YAML"}]
    again = parse_paper_verdict(model.complete(retry, system=None, agent="reviewer").text)
    assert again is not None and again.score == 9
    broken = ScriptedReviewer("scripted-reviewer-malformed")
    assert broken.complete(messages[:1], system=None, agent="reviewer").text == ACK
    assert parse_paper_verdict(broken.complete(messages, system=None, agent="reviewer").text) is None


# -- verdicts in a running station ---------------------------------------------------------------
def test_an_accepted_paper_is_published_with_its_review_and_announced(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    sent = record_requests(monkeypatch)
    st = station(tmp_path, [submit()], reviewer_replay(tmp_path, [
        "Understood; send the first paper.", verdict(8, novelty_score=7, clarity="good")]),
        reviewer={"extra_fields": ["novelty_score", "clarity", "rigour"]})
    Engine(st).run(ticks=2)

    [sub] = submissions(st)
    assert (sub["status"], sub["attempts"], sub["score"], sub["decided_tick"], sub["capsule_number"]) == \
        ("accepted", 1, 8, 1, 1)
    record = json.loads(sub["verdict"])
    assert record["status"] == "success" and record["comment"] == "Clear method and honest numbers."
    assert record["extra"] == {"novelty_score": 7, "clarity": "good", "rigour": None}

    body, review = archive_messages(st, 1)
    assert body["content"] == GOOD and body["author"] == "Spiro I" and body["author_lineage"] == "Spiro"
    assert review["k"] == 2 and review["author"] == "Archive Review System" and review["tick"] == 1
    text = review["content"]
    assert "Score: 8/10" in text and "Novelty Score: 7" in text and "Clarity: good" in text and "Rigour: n/a" in text
    assert "Clear method and honest numbers." in text and "Try a second problem size." in text
    assert "automated peer review" in text
    # The author has read the paper and its review already.
    capsule = st.store.scalar("SELECT id FROM capsules WHERE room='archive' AND number=1")
    assert {r[0] for r in st.store.all("SELECT k FROM capsule_reads WHERE session=1 AND capsule=?", (capsule,))} \
        >= {1, 2}

    [notice] = inbox(st, "Spiro I", "review")
    assert "accepted" in notice and "paper 1" in notice and "8/10" in notice
    assert "Clear method and honest numbers." in notice and "Try a second problem size." in notice
    assert notice in section(prompt_at(st, 2, session=1), "## System Messages")
    [news] = inbox(st, "Nova I", "publication")
    assert "Spiro I" in news and "Adaptive steps for local search" in news and "paper 1" in news
    assert inbox(st, "Spiro I", "publication") == []

    # One dialogue: the context turn, answered, and then the paper (tags joined with ", ").
    calls = [m for agent, m in sent if agent == "reviewer"]
    assert len(calls) == 2 and len(calls[0]) == 1
    context = calls[0][0]["text"]
    assert "Requirements for publication" in context and "The archive is still empty." in context
    assert "No research task is set" in context
    assert [m["role"] for m in calls[1]] == ["user", "assistant", "user"]
    assert "- Tags: search, tuning" in calls[1][2]["text"] and GOOD in calls[1][2]["text"]
    assert f"- Length: {len(GOOD.split())} words" in calls[1][2]["text"]
    assert "novelty_score: <your value>" in calls[1][2]["text"]
    assert reviews(st) == [("context", 1, "review-context/1/1", "acknowledged", "acknowledged"),
                           ("review", 1, "review/1/1", "success", "accepted")]
    # The reviewer is nobody's correspondent: no agent record, no inbox.
    assert st.store.scalar("SELECT COUNT(*) FROM agents WHERE name LIKE '%review%'") == 0
    assert events(st, "paper_reviewed") == [(1, "Spiro I", {"submission": 1, "decision": "accepted", "score": 8,
                                                            "paper": 1})]
    assert st.ctx.room("archive").lineage_credits(st.ctx) == {"Spiro": 1}


def test_a_rejected_paper_is_not_published_and_a_revision_is_reviewed_with_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = record_requests(monkeypatch)
    revised = GOOD + " A second setting with 64 points gave 0.93."
    st = station(tmp_path, [submit(content=SHORT), submit(title="Adaptive steps, revised", content=revised)],
                 reviewer_replay(tmp_path, ["Understood.", verdict(4, comment="No experiments.",
                                                                   suggestion="Run the baseline."),
                                            "Better now.\n\nscore: 7"]))
    Engine(st).run(ticks=1)
    [sub] = submissions(st)
    assert (sub["status"], sub["score"], sub["capsule_number"]) == ("rejected", 4, None)
    assert st.store.scalar("SELECT COUNT(*) FROM capsules WHERE room='archive'") == 0
    [notice] = inbox(st, "Spiro I", "review")
    assert "not accepted" in notice and "4/10" in notice and "at least 6/10" in notice
    assert "No experiments." in notice and "Run the baseline." in notice and "no cooldown" in notice
    assert inbox(st, "Nova I", "publication") == []
    assert st.ctx.room("archive").lineage_credits(st.ctx) == {}

    # No cooldown after a rejection: the revision goes in at tick 2, into the same dialogue.
    Engine(st).run(ticks=1)
    first, second = submissions(st)
    assert (second["status"], second["score"], second["capsule_number"], second["tick"]) == ("accepted", 7, 1, 2)
    assert json.loads(second["verdict"])["status"] == "parsing_error"
    assert "Only the score could be read" in archive_messages(st, 1)[1]["content"]
    last = [m for agent, m in sent if agent == "reviewer"][-1]
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
    assert SHORT in last[2]["text"] and "No experiments." in last[3]["text"] and revised in last[4]["text"]
    assert st.ctx.room("archive").lineage_credits(st.ctx) == {}  # 7 is accepted but not high quality


def test_an_unreadable_verdict_is_asked_for_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sent = record_requests(monkeypatch)
    st = station(tmp_path, [submit()], reviewer_replay(tmp_path, [
        "Understood.", "A fine paper overall, I would say.", verdict(9)]))
    Engine(st).run(ticks=1)
    [sub] = submissions(st)
    assert (sub["status"], sub["attempts"], sub["score"]) == ("accepted", 2, 9)
    assert reviews(st) == [("context", 1, "review-context/1/1", "acknowledged", "acknowledged"),
                           ("review", 1, "review/1/1", "unreadable", "retry"),
                           ("review", 2, "review/1/2", "success", "accepted")]
    retry = [m for agent, m in sent if agent == "reviewer"][-1]
    assert retry[-2]["text"] == "A fine paper overall, I would say."
    assert "could not find a readable verdict" in retry[-1]["text"]
    assert st.ctx.room("archive").lineage_credits(st.ctx) == {"Spiro": 1}
    assert events(st, "operator_alert") == []


def test_a_reviewer_that_never_gives_a_score_fails_the_paper_without_holding_the_station(tmp_path: Path) -> None:
    later = submit(title="Second try")
    st = station(tmp_path, [submit(), later], scripted("scripted-reviewer-malformed"),
                 reviewer={"max_attempts": 3})
    assert Engine(st).run(ticks=5) == "finished tick 5"
    assert st.ctx.tick == 6
    first, second = submissions(st)
    assert (first["status"], first["attempts"], first["decided_tick"], first["capsule_number"]) == \
        ("failed", 3, 1, None)
    assert (second["status"], second["decided_tick"]) == ("failed", 2)  # a failure starts no cooldown
    assert [r[2] for r in reviews(st) if r[2].startswith("review/1/")] == ["review/1/1", "review/1/2", "review/1/3"]
    notices = inbox(st, "Spiro I", "review")
    assert len(notices) == 2 and all("could not be reviewed" in n and "3 attempts" in n for n in notices)
    alerts = events(st, "operator_alert")
    assert [(tick, agent, p["submission"]) for tick, agent, p in alerts] == [(1, "Spiro I", 1), (2, "Spiro I", 2)]
    # The failed exchanges left the dialogue; only the context turn is live.
    states = st.store.all("SELECT submission, state FROM reviewer_turns ORDER BY seq")
    assert [(r[0], r[1]) for r in states if r[0] is None] == [(None, "live"), (None, "live")]
    assert {r[1] for r in states if r[0] is not None} == {"dropped"}


def test_a_reviewer_that_cannot_be_used_pauses_the_station_and_the_paper_waits(tmp_path: Path) -> None:
    # An empty replay file: every call fails for good (like a refused key). That must not cost
    # the paper its attempts: the station pauses, and nothing about the paper is recorded.
    st = station(tmp_path, [submit()], reviewer_replay(tmp_path, []), reviewer={"max_attempts": 2})
    with pytest.raises(StationPaused, match="exhausted"):
        Engine(st).run(ticks=2)
    [sub] = submissions(st)
    assert (sub["status"], sub["attempts"]) == ("pending", 0)
    assert st.store.scalar("SELECT COUNT(*) FROM inputs WHERE kind LIKE 'review%'") == 0


def test_a_paper_whose_author_left_is_still_published_and_the_lineage_is_told(tmp_path: Path) -> None:
    leave = submit(act("goto exit"), act("exit"))
    st = station(tmp_path, [leave, act("exit")], scripted(), kin=True)
    Engine(st).run(ticks=1)
    [sub] = submissions(st)
    assert st.ctx.agents.get("Spiro I").state == "ended"  # type: ignore[union-attr]
    assert (sub["status"], sub["capsule_number"], sub["score"]) == ("accepted", 1, 9)
    body, review = archive_messages(st, 1)
    assert body["author"] == "Spiro I" and review["author"] == "Archive Review System"
    assert inbox(st, "Spiro I", "review") == []
    [kin] = inbox(st, "Spiro II", "review")
    assert "Spiro I" in kin and "paper 1" in kin and "9/10" in kin
    assert inbox(st, "Spiro II", "publication") == []  # told once, as kin
    [news] = inbox(st, "Nova I", "publication")
    assert "paper 1" in news


def test_immature_agents_hear_no_announcement(tmp_path: Path) -> None:
    st = station(tmp_path, [submit()], scripted(), lifecycle={"maturity_ticks": 5})
    author = st.ctx.agents.get("Spiro I")
    assert author is not None
    author.birth_tick = -10  # the author is old enough to use the Archive; Nova I is not
    st.ctx.agents.save(author)
    Engine(st).run(ticks=1)
    assert submissions(st)[0]["status"] == "accepted"
    assert inbox(st, "Nova I", "publication") == []


def test_the_dialogue_is_pruned_and_the_context_turn_rewritten(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """history_max 4, history_keep 2: before the 5th review the two oldest are pruned and turn 1 is new."""
    sent: list[list[dict[str, str]]] = []
    original = ScriptedReviewer.complete

    def complete(self: ScriptedReviewer, messages: list[dict[str, str]], **kw: Any) -> Any:
        sent.append([dict(m) for m in messages])
        return original(self, messages, **kw)

    monkeypatch.setattr(ScriptedReviewer, "complete", complete)
    papers = [submit(title=f"Paper {n}", content=GOOD + f" Run {n}.") for n in range(1, 6)]
    st = station(tmp_path, papers, scripted(), reviewer={"history_max": 4, "history_keep": 2},
                 archive={"cooldown_ticks": 0})
    Engine(st).run(ticks=5)
    assert [s["capsule_number"] for s in submissions(st)] == [1, 2, 3, 4, 5]
    keys = [r[0] for r in st.store.all("SELECT key FROM inputs WHERE kind LIKE 'review%' ORDER BY seq")]
    assert keys == ["review-context/1/1", "review/1/1", "review/2/1", "review/3/1", "review/4/1",
                    "review-context/2/1", "review/5/1"]
    # Papers published since the reviewer was last told are listed with the next submission, once.
    second = sent[2][-1]["text"]
    assert '- Paper 1: "Paper 1" by Spiro I' in second and "since you were last told" in second
    assert "Paper 1:" not in sent[3][-1]["text"] and '- Paper 2: "Paper 2"' in sent[3][-1]["text"]
    # The rewritten context lists every paper published so far, and is sent first.
    context = sent[5]
    assert len(context) == 1 and all(f'"Paper {n}"' in context[0]["text"] for n in (1, 2, 3, 4))
    fifth = sent[6]
    assert fifth[0]["text"] == context[0]["text"]
    assert [m["text"].count("----- BEGIN PAPER CONTENT") for m in fifth if m["role"] == "user"] == [0, 1, 1, 1]
    assert "Run 3." in fifth[2]["text"] and "Run 4." in fifth[4]["text"] and "Run 5." in fifth[6]["text"]
    assert "since you were last told" not in fifth[6]["text"]
    live = st.store.all("SELECT DISTINCT submission FROM reviewer_turns WHERE state='live' AND submission IS NOT NULL")
    assert sorted(r[0] for r in live) == [3, 4, 5]
    pruned = st.store.all("SELECT DISTINCT submission FROM reviewer_turns WHERE state='pruned'")
    assert sorted(r[0] or 0 for r in pruned) == [0, 1, 2]  # the old context turn and the two oldest reviews
    assert st.store.scalar("SELECT generation FROM reviewer_state") == 2


# -- replay -------------------------------------------------------------------------------------
def _no_calls(self: Any, *args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a replay asked the reviewer model")


def test_replay_rebuilds_the_same_verdicts_without_asking_the_reviewer(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    author = [submit(content=SHORT), submit(title="Revised"), submit(title="Third")]
    st = station(src, author, reviewer_replay(src, ["Understood.", verdict(3), "no verdict", verdict(8),
                                                    *["no verdict"] * 6]),
                 archive={"cooldown_ticks": 0})
    Engine(st).run(ticks=3)
    assert [s["status"] for s in submissions(st)] == ["rejected", "accepted", "failed"]  # no usable verdict
    st.close()

    monkeypatch.setattr(ReplayModel, "complete", _no_calls)
    monkeypatch.setattr(ScriptedReviewer, "complete", _no_calls)
    dst = tmp_path / "dst"
    dst.mkdir()
    source = Store(src / "station")
    # The copy is configured with another reviewer entirely: the recorded verdicts decide.
    again = station(dst, author, scripted("scripted-reviewer-malformed"), archive={"cooldown_ticks": 0})
    try:
        assert Engine(again, replay_source=source).run(until_tick=3) == "finished tick 3"
        a, b = canonical_dump(source), canonical_dump(again.store)
    finally:
        source.close()
        again.close()
    for table in ("paper_submissions", "paper_reviews", "reviewer_turns", "reviewer_state", "capsules",
                  "capsule_messages", "messages", "events", "inputs"):
        assert a[table] == b[table], table


# -- hold_tick: false ---------------------------------------------------------------------------
def _wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for the background reviewer"
        time.sleep(0.05)


def test_without_hold_the_ticks_go_on_and_verdicts_land_when_ready(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    gate = threading.Event()
    original = ScriptedReviewer.complete

    def slow(self: ScriptedReviewer, messages: list[dict[str, str]], **kw: Any) -> Any:
        gate.wait(30)
        return original(self, messages, **kw)

    monkeypatch.setattr(ScriptedReviewer, "complete", slow)
    st = station(tmp_path, [submit()], scripted(), reviewer={"hold_tick": False})
    hook = reviewer_hook(st)
    try:
        assert Engine(st).run(ticks=3) == "finished tick 3"  # the reviewer is stuck; the ticks are not
        assert submissions(st)[0]["status"] == "pending"
        gate.set()
        _wait_for(lambda: st.store.get_input("review/1/1") is not None)
        Engine(st).run(ticks=1)
    finally:
        gate.set()
        hook.stop_worker()
    [sub] = submissions(st)
    assert (sub["status"], sub["decided_tick"], sub["capsule_number"]) == ("accepted", 4, 1)
    ready = {r[0]: json.loads(r[1])["ready"] for r in
             st.store.all("SELECT key, payload FROM inputs WHERE kind='reviews_ready' ORDER BY seq")}
    assert ready == {"reviews-ready/1": [], "reviews-ready/2": [], "reviews-ready/3": [], "reviews-ready/4": [1]}
    assert review_text_tick(st) == 4
    assert "accepted" in inbox(st, "Spiro I", "review")[0]


def review_text_tick(st: Station) -> int:
    return archive_messages(st, 1)[1]["tick"]


def test_without_hold_a_replay_applies_the_same_verdicts_at_the_same_ticks(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    author = [submit(), submit(title="Short one", content=SHORT), submit(title="Third")]
    st = station(src, author, scripted(), reviewer={"hold_tick": False, "history_max": 2, "history_keep": 1},
                 archive={"cooldown_ticks": 0})
    hook = reviewer_hook(st)
    try:
        for _ in range(3):
            Engine(st).run(ticks=1)
            _wait_for(lambda: not hook.worker or all(
                st.store.get_input(f"review/{s['id']}/1") for s in submissions(st)))
        Engine(st).run(ticks=2)
    finally:
        hook.stop_worker()
    assert [s["status"] for s in submissions(st)] == ["accepted", "rejected", "accepted"]
    assert st.store.scalar("SELECT COUNT(*) FROM inputs WHERE key LIKE 'review-context/%'") == 2  # pruned once
    st.close()

    monkeypatch.setattr(ScriptedReviewer, "complete", _no_calls)
    dst = tmp_path / "dst"
    dst.mkdir()
    source = Store(src / "station")
    again = station(dst, author, scripted(), reviewer={"hold_tick": False, "history_max": 2, "history_keep": 1},
                    archive={"cooldown_ticks": 0})
    try:
        assert Engine(again, replay_source=source).run(until_tick=5) == "finished tick 5"
        assert reviewer_hook(again).worker is None  # a replay starts no worker
        a, b = canonical_dump(source), canonical_dump(again.store)
    finally:
        source.close()
        again.close()
    for table in ("paper_submissions", "paper_reviews", "reviewer_turns", "reviewer_state", "capsules",
                  "capsule_messages", "messages", "events", "turns"):
        assert a[table] == b[table], table
