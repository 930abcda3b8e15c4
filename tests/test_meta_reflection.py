"""Compulsory meta-reflection (issue 54): a mature agent's countdown in its status, the overdue
warning every tick after the grace period, `meta_reflect` on a prompt drawn for its audience, the
start tick protected from pruning, an identical replay, and nothing of it on a default station.

One small station (a worker and a supervisor, replay models saying exactly what each test needs)
is run once for the module and replayed once; the other checks read its database."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import act, make_station, prompt_at, recursive, replay_model, reply, session_of, stored, turn

from rooms.meta_reflection import SHIPPED_PROMPTS, load_prompts
from rooms.reflection import ReflectionChamber
from station.apps.world import Station
from station.core.config import ConfigError, parse_config
from station.core.engine import Engine
from station.core.store import Store, canonical_dump

TICKS = 9
IDLE = "Nothing to do this turn."
META = reply(act("goto reflect"), act("meta_reflect"))
PROMPTS = """
- text: "Worker question: which assumption have you never checked?"
  audience: non_supervisor
- text: "Supervisor question: is the station exploring widely enough?"
  audience: supervisor
"""
# Every 3 ticks, warned from 1 tick overdue, 2 reflection ticks. The worker lets it slip (warned at
# ticks 5 and 6), meta-reflects at tick 6, then tries to prune that tick at tick 8.
WORKER = [IDLE] * 5 + [META, "First thought.", "Second thought.", IDLE,
                       reply(act("goto token_management"), act("prune_response 6"))]
SUPERVISOR = [META, "A supervisor's thought.", "Another one."]


def config(tmp: Path) -> dict:
    (tmp / "prompts.yaml").write_text(PROMPTS, encoding="utf-8")
    return {
        "agents": [
            recursive(replay_model(tmp / "worker.jsonl", WORKER, pad=20)),
            recursive(replay_model(tmp / "sup.jsonl", SUPERVISOR, pad=20), lineage="Sage", role="supervisor"),
        ],
        "lifecycle": {"maturity_ticks": 0},
        "reflection": {"meta_every_ticks": 3, "meta_grace_ticks": 1, "meta_rounds": 2,
                       "meta_prompt_file": str(tmp / "prompts.yaml")},
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Station]]:
    tmp = tmp_path_factory.mktemp("meta")
    cfg = config(tmp)
    st = make_station(tmp / "source", cfg.pop("agents"), **cfg)
    Engine(st).run(ticks=TICKS)
    yield tmp, st
    st.close()


def status_line(st: Station, name: str, tick: int) -> str:
    found = re.search(r"^- Meta-Reflection: (.*)$", prompt_at(st, tick, session_of(st, name)), re.MULTILINE)
    return found.group(1) if found else ""


def test_the_countdown_is_in_the_status_and_an_overdue_agent_is_warned_every_tick(run) -> None:
    _, st = run
    worker = "Spiro I"
    shown = [status_line(st, worker, t).split(" (")[0] for t in range(1, TICKS + 1)]
    assert shown == ["due in 3 ticks", "due in 2 ticks", "due in 1 tick", "due now", "overdue by 1 tick",
                     "overdue by 2 ticks", "due in 2 ticks", "due in 1 tick", "due now"]
    assert "`/execute_action{meta_reflect}`" in status_line(st, worker, 4)  # says how, once it is due
    warned = st.store.all("SELECT tick, text FROM messages WHERE agent=? AND kind='meta_reflection'", (worker,))
    assert [r["tick"] for r in warned] == [5, 6]  # after the grace tick, every tick, until it meta-reflects
    assert "overdue by 2 ticks" in warned[1]["text"]
    assert "overdue by 2 ticks" in prompt_at(st, 6, session_of(st, worker))  # delivered in that turn's prompt


def test_meta_reflect_runs_on_a_prompt_for_the_agents_audience_and_restarts_the_countdown(run) -> None:
    _, st = run
    steps = json.loads(turn(st, 6, session_of(st, "Spiro I"))["internal"])
    assert [s["reply"] for s in steps] == ["First thought.", "Second thought."]
    assert "Worker question: which assumption have you never checked?" in steps[0]["prompt"]
    assert steps[1]["prompt"].startswith("Reflection Tick 2 / 2")
    sup = json.loads(turn(st, 1, session_of(st, "Sage I"))["internal"])
    assert "Supervisor question" in sup[0]["prompt"] and "Worker question" not in sup[0]["prompt"]
    after = prompt_at(st, 7, session_of(st, "Spiro I"))
    assert "Your meta-reflection of 2 ticks is complete. The next one is due in 3 ticks." in after
    assert "**Meta-reflection.** Once you are mature, this station asks you to meta-reflect at least every 3" in after
    assert "your newest 4 meta-reflections started" in after  # the room's first-visit help explains it
    finished = st.store.all("SELECT tick, agent FROM events WHERE kind='meta_reflection_finished' ORDER BY id")
    assert [(r["tick"], r["agent"]) for r in finished] == [(1, "Sage I"), (6, "Spiro I")]


def test_the_start_tick_of_a_meta_reflection_cannot_be_pruned(run) -> None:
    _, st = run
    assert stored(st, "Spiro I")["flags"]["protected_ticks"] == {"meta_reflection": [6]}
    lines = prompt_at(st, TICKS, session_of(st, "Spiro I"))
    assert "Nothing was pruned: block 1 (6-6): tick(s) [6] are protected" in lines
    assert "| 6 (Protected) |" in lines  # the Token Management table says so


def test_a_replay_rebuilds_the_same_world(run) -> None:
    tmp, st = run
    data = st.store.get_meta("initial_config") or st.store.get_meta("config")
    cfg = parse_config(data, "source", stored=True)
    source = Store(tmp / "source")
    replayed = Station.create(tmp / "replayed", cfg, recorded=True)
    try:
        Engine(replayed, replay_source=source).run(ticks=TICKS)
        assert canonical_dump(replayed.store) == canonical_dump(st.store)
    finally:
        replayed.close()
        source.close()


def test_a_default_station_asks_for_no_meta_reflection(tmp_path: Path) -> None:
    st = make_station(tmp_path / "s", [recursive(replay_model(tmp_path / "a.jsonl", [META], pad=5))],
                      lifecycle={"maturity_ticks": 0})
    try:
        Engine(st).run(ticks=2)
        prompt = prompt_at(st, 2)
        assert "- Meta-Reflection:" not in prompt  # no countdown in the status
        assert "Help Message - Reflection Chamber" in prompt and "**Meta-reflection.**" not in prompt
        assert "This station asks for no meta-reflection" in prompt
        assert "meta_since" not in stored(st, "Spiro I")["rooms"].get("reflect", {})  # no countdown kept
        assert "meta_reflection" not in [hook.name for hook in st.ctx.hooks]  # nothing to pay per turn
        assert not st.store.all("SELECT 1 FROM messages WHERE kind='meta_reflection'")
    finally:
        st.close()


def test_the_shipped_prompts_serve_both_audiences() -> None:
    prompts = load_prompts(SHIPPED_PROMPTS)
    assert 6 <= len(prompts) <= 10
    assert {p.audience for p in prompts} == {"all", "supervisor", "non_supervisor"}


@pytest.mark.parametrize(("text", "expected"), [
    ("- text: Hello\n  audience: admins\n", "prompt #1: audience 'admins' is not one of all, supervisor, non_supervisor"),
    ("- Fine\n- text: Hi\n  when: [X]\n", "prompt #2: unknown key(s) when (it reads: text, audience)"),
    ("- text: Only for supervisors\n  audience: supervisor\n", "no prompt is meant for non_supervisor agents"),
    ("{a: 1}", "expected a non-empty YAML list of prompts"),
    ("- [unclosed", "not a UTF-8 YAML file"),
])
def test_a_bad_prompt_file_stops_the_start_with_a_clear_error(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    cfg = parse_config({"reflection": {"meta_every_ticks": 5, "meta_prompt_file": str(path)}})
    with pytest.raises(ConfigError, match=re.escape(expected)) as err:
        ReflectionChamber().hooks(cfg)
    assert str(err.value).startswith(f"reflection.meta_prompt_file ({path})") and "\n" not in str(err.value)
