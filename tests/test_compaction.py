"""Automatic context compaction (issue 54): an agent nearing its model's window has its older
dialogue replaced by a summary instead of dying; protected ticks and its last turns stay whole;
the summary call is counted under the agent; a replay is identical; off, agents die as before.

One agent (a replay model whose long replies fill a 6,000-token window in 8 ticks) lives in two
small stations, compaction on and off; the summaries come from a configured scripted model."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import events, make_station, prompt_at, recursive, replay_model, stored

from station.apps.web import events as web_events
from station.apps.world import Station
from station.core.compaction import REQUEST_HEADER
from station.core.config import ConfigError, parse_config
from station.core.engine import Engine
from station.core.lifecycle import TOKENS
from station.core.store import Store, canonical_dump
from station.models.scripted import ScriptedModel

TICKS = 14
LONG = "I keep thinking about the task. " * 40  # about 320 tokens a reply
HELD = 3  # a tick a feature protects through the agent's `protected_ticks` flag
KEEP = 2


def build(tmp: Path, name: str, enabled: bool, summariser: dict | None = None) -> Station:
    model = {**replay_model(tmp / f"{name}.jsonl", [LONG] * 40), "context_limit": 6500, "max_output_tokens": 500}
    summariser = summariser or {"provider": "scripted", "name": "summariser"}
    compaction = {"enabled": enabled, "keep_turns": KEEP, "model": summariser}
    st = make_station(tmp / name, [recursive(model)], tokens={"compaction": compaction}, lifecycle={"maturity_ticks": 0})
    hold(st)
    Engine(st).run(ticks=TICKS)
    return st


def hold(st: Station) -> None:
    """What meta-reflection does for the tick a reflection starts in, set before the run."""
    with st.store.transaction():
        agent = st.ctx.agents.get("Spiro I")
        agent.flags["protected_ticks"] = {"test": [HELD]}
        st.ctx.agents.save(agent)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Station]]:
    tmp = tmp_path_factory.mktemp("compaction")
    st = build(tmp, "on", enabled=True)
    yield tmp, st
    st.close()


def test_an_agent_near_its_window_is_compacted_instead_of_dying(run, tmp_path: Path) -> None:
    _, st = run
    off = build(tmp_path, "off", enabled=False)
    try:
        assert (stored(off, "Spiro I")["state"], stored(off, "Spiro I")["exit_reason"]) == ("ended", TOKENS)
        assert stored(off, "Spiro I")["exit_tick"] == 8
        assert events(off, "context_compacted") == []
    finally:
        off.close()
    assert stored(st, "Spiro I")["state"] == "active"
    done = events(st, "context_compacted")
    assert [(tick, p["ticks"]) for tick, _, p in done] == [(8, [1, 5]), (11, [1, 8]), (14, [1, 11])]
    threshold = 0.85 * (6500 - 500)
    assert all(p["tokens_before"] >= threshold > p["tokens_after"] for _, _, p in done)
    told = prompt_at(st, 8)  # the agent reads what happened in the very prompt that follows
    assert "compacted it: ticks 1 to 5" in told and "from 5,487 to about 3,476 tokens" in told
    assert max(r["context_tokens"] for r in st.store.all("SELECT context_tokens FROM turns")) < 6000
    feed = [e["text"] for e in feed_of(st) if e["kind"] == "context_compacted"]
    assert feed[-1] == "Spiro I's context compacted: ticks 1-5, 5,487 to 3,476 tokens"  # the viewer's overview


def feed_of(st: Station) -> list[dict]:
    db = sqlite3.connect(st.dir / "station.db")
    try:
        return web_events.recent(db, 50)
    finally:
        db.close()


def test_protected_ticks_and_the_last_turns_survive_and_the_stored_dialogue_is_whole(run) -> None:
    _, st = run
    agent = st.ctx.agents.get("Spiro I")
    sent = st.ctx.conversations.context(agent.session, agent.pruned)
    ticks = [int(m) for m in re.findall(r"^- Station Tick: (\d+)$", "\n".join(x["text"] for x in sent), re.MULTILINE)]
    assert ticks == [1, HELD, 12, 13, 14]  # help (tick 1) and the held tick; the last turns; nothing between
    labels = [x["text"] for x in sent if x["text"].startswith("System: ")]
    assert labels == ["System: Compacted Ticks 1-11"]
    summary = next(x["text"] for x in sent if x["text"].startswith("Summary: "))
    assert summary.splitlines()[-1].startswith("notes: ")  # the scripted summary keeps the policy's notes
    stored_ticks = {r[0] for r in st.store.all("SELECT tick FROM conversation WHERE session=?", (agent.session,))}
    assert stored_ticks == set(range(1, TICKS + 1))  # the viewer's record keeps every turn
    assert sum(1 for b in agent.pruned if b["summary"]) == 1  # older compactions' blocks were replaced


def test_the_summary_call_is_counted_under_the_agent(run) -> None:
    _, st = run
    done = events(st, "context_compacted")
    assert len(done) == 3
    calls = st.store.all("SELECT input_tokens + output_tokens AS n FROM spend WHERE who=? AND model=?",
                         ("Spiro I", "summariser"))
    assert sorted(r["n"] for r in calls) == sorted(p["spent_tokens"] for _, _, p in done)
    turns = st.store.scalar("SELECT SUM(input_tokens + output_tokens) FROM turns WHERE agent='Spiro I'")
    assert stored(st, "Spiro I")["tokens_spent"] == turns + sum(p["spent_tokens"] for _, _, p in done)


def test_a_replay_reuses_the_summaries_and_rebuilds_the_same_world(run) -> None:
    tmp, st = run
    cfg = parse_config(st.store.get_meta("initial_config") or st.store.get_meta("config"), "source", stored=True)
    source = Store(tmp / "on")
    replayed = Station.create(tmp / "replayed", cfg, recorded=True)
    hold(replayed)
    try:
        Engine(replayed, replay_source=source).run(ticks=TICKS)
        assert canonical_dump(replayed.store) == canonical_dump(st.store)
        assert len(events(replayed, "context_compacted")) == 3
        assert replayed.store.scalar("SELECT COUNT(*) FROM spend") == 0  # no model was asked again
    finally:
        replayed.close()
        source.close()


def test_a_compaction_without_a_summary_changes_nothing_and_the_agent_ends_as_before(tmp_path: Path) -> None:
    silent = replay_model(tmp_path / "summaries.jsonl", [""] * 40, name="silent")
    st = build(tmp_path, "silent", enabled=True, summariser=silent)
    try:
        assert [p.get("failed") for _, _, p in events(st, "context_compacted")] == ["the summary was empty"]
        assert (stored(st, "Spiro I")["exit_reason"], stored(st, "Spiro I")["exit_tick"]) == (TOKENS, 8)
        assert stored(st, "Spiro I")["pruned"] == []
        assert "Spiro I's context was not compacted: the summary was empty" in [e["text"] for e in feed_of(st)]
    finally:
        st.close()


def test_the_scripted_model_answers_a_compaction_request_with_a_short_summary() -> None:
    notes = {"visited": ["archive", "research"]}
    history = [
        {"role": "user", "text": "## System Information\n- Station Tick: 1"},
        {"role": "assistant", "text": "Looking around.\nnotes: " + json.dumps(notes)},
    ]
    request = {"role": "user", "text": REQUEST_HEADER + "\n\nSummarise ticks 1 to 1."}
    text = ScriptedModel().complete([*history, request], system=None, agent="Spiro I").text
    assert text.splitlines() == [
        "Summary of my earlier dialogue: 1 replies.",
        "Rooms I worked in: archive, research.",
        "notes: " + json.dumps(notes, sort_keys=True),
    ]


def test_compaction_is_off_by_default_and_a_bad_share_is_named() -> None:
    assert parse_config({}).tokens.compaction.enabled is False
    with pytest.raises(ConfigError, match=r"tokens\.compaction\.at_share") as err:
        parse_config({"tokens": {"compaction": {"at_share": 1.5}}})
    assert "less than 1" in str(err.value)
