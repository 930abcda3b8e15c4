"""The Stagnation Protocol hook (spec research §5): per-task detection, Protocol I, Deep Stagnation code names
and their cycling, the tagged-track fix, breakthroughs, persistence across a restart.

Stations run in-process with small thresholds (Protocol I after 3 ticks without a new best, Deep
Stagnation and each next code name after 4 more). Agents reply with filler; delivered results are
simulated by writing finished evaluations straight into the store between engine runs (as the
evaluation hook would when applying a result). The research tasks are a tiny probe task registered
here, so the tests do not depend on a real evaluator.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers import events, guest, make_station, recursive, replay_model

from evaluators import base as evaluator_base
from rooms.research.stagnation import CODE_NAMES, Stagnation, best_result, next_code_name
from rooms.research.store import insert_evaluation
from station.apps.world import Station
from station.core.engine import Engine

THRESHOLD, DEEP = 3, 4


@evaluator_base.register("stagnation_probe")
class ProbeTask(evaluator_base.Task):
    title = "Probe problem"
    description = "A task for hook tests; nothing is ever run."

    def spec(self) -> str:
        return "Make the number large."

    def score(self, result: Any) -> evaluator_base.Verdict:  # pragma: no cover - never run
        return evaluator_base.Verdict(success=True, score=1.0)


def station(tmp_path: Path, *, tasks: int = 1, breakthrough: str = "tag", enabled: bool = True,
            with_guest: bool = True) -> Station:
    agents = [recursive(replay_model(tmp_path / "spiro.jsonl", [], name="spiro", pad=80))]
    if with_guest:
        agents.append(guest(replay_model(tmp_path / "guest.jsonl", [], name="guest", pad=80)))
    return make_station(
        tmp_path / "st", agents,
        research={"tasks": [{"evaluator": "stagnation_probe"}] * tasks},
        stagnation={"enabled": enabled, "threshold_ticks": THRESHOLD, "deep_threshold_ticks": DEEP,
                    "breakthrough": breakthrough})


def run_to(st: Station, tick: int) -> None:
    """Run until `tick` has started (the hook has checked at its start)."""
    Engine(st).run(until_tick=tick - 1)
    assert st.ctx.tick == tick


def deliver(st: Station, score: float, *, task: str = "1", tags: tuple[str, ...] = ("probe",),
            sort_key: list[float] | None = None, status: str = "finished") -> int:
    """A result delivered now (in the current tick), as the evaluation hook would apply it."""
    with st.store.transaction():
        number = insert_evaluation(st.store, task=task, author="Spiro I", session=1, lineage="Spiro",
                                   tick=st.ctx.tick, title="try", tags=list(tags), abstract="a try",
                                   code="print(1)", holds_tick=False)
        st.store.execute("UPDATE evaluations SET status=?, score=?, sort_key=?, finished_tick=? WHERE id=?",
                         (status, score if status == "finished" else None,
                          json.dumps(sort_key) if sort_key else None, st.ctx.tick, number))
    return number


def messages(st: Station, agent: str | None = None) -> list[Any]:
    sql, params = "SELECT * FROM messages WHERE kind='stagnation'", ()
    if agent is not None:
        sql, params = sql + " AND agent=?", (agent,)
    return st.store.all(sql + " ORDER BY id", params)


def state(st: Station, task: str = "1") -> Any:
    return st.store.one("SELECT * FROM stagnation_state WHERE task=?", (task,))


def addenda(st: Station, task: str = "1", *, live: bool = True) -> list[Any]:
    sql = "SELECT * FROM research_addenda WHERE task=?" + (" AND removed_tick IS NULL" if live else "")
    return st.store.all(sql + " ORDER BY id", (task,))


def status_meta(st: Station) -> str:
    return st.store.get_meta("station_status")


def changes(st: Station) -> list[tuple[int, str, str, str | None]]:
    return [(tick, p["task"], p["status"], p["tag"]) for tick, _, p in events(st, "stagnation_changed")]


# -- the escalation -------------------------------------------------------------------------------
def test_protocol_one_then_deep_stagnation_then_next_code_name(tmp_path: Path) -> None:
    st = station(tmp_path)
    run_to(st, THRESHOLD)  # no result since tick 1: 2 ticks, not yet
    assert messages(st) == [] and state(st)["status"] == "Healthy" and status_meta(st) == "Healthy"

    run_to(st, 1 + THRESHOLD)
    sent = messages(st)
    assert [m["agent"] for m in sent] == ["Spiro I"]  # the guest gets nothing
    assert "Stagnation Protocol I" in sent[0]["text"] and f"{THRESHOLD} ticks" in sent[0]["text"]
    assert "Research Task #" not in sent[0]["text"]  # one task: no need to name it
    assert state(st)["status"] == "Stagnation" and status_meta(st) == "Stagnation"

    run_to(st, 1 + THRESHOLD + DEEP - 1)
    assert len(messages(st)) == 1  # Protocol I exactly once
    assert addenda(st) == []

    run_to(st, 1 + THRESHOLD + DEEP)
    first = CODE_NAMES[0]
    row = state(st)
    assert (row["status"], row["tag"]) == ("Deep Stagnation", first)
    assert status_meta(st) == f"Deep Stagnation - {first}"
    last = messages(st)[-1]
    assert len(messages(st)) == 2 and "Deep Stagnation" in last["text"] and f"`{first}`" in last["text"]
    [addendum] = addenda(st)
    assert addendum["label"] == f"Stagnation Protocol II: {first}" and first in addendum["text"]
    assert addendum["tick"] == 1 + THRESHOLD + DEEP

    run_to(st, 1 + THRESHOLD + 2 * DEEP)  # no progress at all: the next code name
    second = CODE_NAMES[1]
    assert state(st)["tag"] == second and status_meta(st) == f"Deep Stagnation - {second}"
    [addendum] = addenda(st)
    assert addendum["label"] == f"Stagnation Protocol II: {second}"
    old = [a for a in addenda(st, live=False) if a["label"].endswith(first)]
    assert old[0]["removed_tick"] == 1 + THRESHOLD + 2 * DEEP
    assert [m["agent"] for m in messages(st)] == ["Spiro I"] * 3
    assert changes(st) == [(4, "1", "Stagnation", None), (8, "1", "Deep Stagnation", first),
                           (12, "1", "Deep Stagnation", second)]
    history = st.store.all("SELECT status, tag, tick FROM stagnation_history ORDER BY id")
    assert [tuple(r) for r in history] == [("Stagnation", None, 4), ("Deep Stagnation", first, 8),
                                           ("Deep Stagnation", second, 12)]
    st.close()


def test_results_count_from_their_delivery_and_ties_are_no_progress(tmp_path: Path) -> None:
    st = station(tmp_path, with_guest=False)
    run_to(st, 3)
    deliver(st, 1.0)  # delivered at tick 3: the clock counts from 3
    run_to(st, 5)
    deliver(st, 1.0)  # equal, not better
    deliver(st, 0.5)
    deliver(st, 9.0, status="failed")  # failures never count
    run_to(st, 3 + THRESHOLD - 1)
    assert messages(st) == []
    run_to(st, 3 + THRESHOLD)
    assert state(st)["status"] == "Stagnation" and state(st)["best_tick"] == 3
    st.close()


# -- the tagged track (the cycling fix) -----------------------------------------------------------
def deep_with_baseline(tmp_path: Path, breakthrough: str) -> Station:
    """A station whose only task has a best of 10 (tick 1) and entered Deep Stagnation at tick 8."""
    st = station(tmp_path, breakthrough=breakthrough, with_guest=False)
    deliver(st, 10.0, tags=("baseline",))
    run_to(st, 8)
    assert state(st)["status"] == "Deep Stagnation" and state(st)["tag"] == CODE_NAMES[0]
    return st


def test_tagged_progress_keeps_the_code_name(tmp_path: Path) -> None:
    st = deep_with_baseline(tmp_path, "tag")
    tag = CODE_NAMES[0]
    run_to(st, 9)
    deliver(st, 1.0, tags=(tag, "restart"))  # the tagged baseline: far below the overall best
    run_to(st, 11)
    deliver(st, 2.0, tags=(tag,))  # the tagged track improves at tick 11
    deliver(st, 50.0, task="1", tags=("other",), status="failed")
    run_to(st, 12)
    deliver(st, 1.5, tags=(tag,))  # not better than the tagged best: no reset
    run_to(st, 11 + DEEP - 1)  # without the tagged work it would have cycled at tick 12
    row = state(st)
    assert (row["status"], row["tag"], row["clock_tick"]) == ("Deep Stagnation", tag, 11)
    assert [a["label"] for a in addenda(st)] == [f"Stagnation Protocol II: {tag}"]
    assert [p["best"] for _, _, p in events(st, "stagnation_tag_progress")] == [[1.0], [2.0]]
    assert len(messages(st)) == 2  # Protocol I and Protocol II only

    run_to(st, 11 + DEEP)  # the tagged track stalled too: the next code name
    assert state(st)["tag"] == CODE_NAMES[1]
    st.close()


def test_global_breakthrough_mode_cycles_despite_tagged_progress(tmp_path: Path) -> None:
    st = deep_with_baseline(tmp_path, "global")
    tag = CODE_NAMES[0]
    run_to(st, 9)
    deliver(st, 1.0, tags=(tag,))
    run_to(st, 11)
    deliver(st, 2.0, tags=(tag,))
    run_to(st, 12)
    assert state(st)["tag"] == CODE_NAMES[1]
    assert events(st, "stagnation_tag_progress") == []
    st.close()


def test_new_overall_best_ends_the_protocol(tmp_path: Path) -> None:
    st = deep_with_baseline(tmp_path, "tag")
    run_to(st, 10)
    deliver(st, 10.5, tags=(CODE_NAMES[0],))
    run_to(st, 11)
    row = state(st)
    assert (row["status"], row["tag"], row["best_tick"]) == ("Healthy", None, 10)
    assert status_meta(st) == "Healthy"
    assert addenda(st) == [] and addenda(st, live=False)[0]["removed_tick"] == 11
    congratulation = messages(st)[-1]
    assert congratulation["tick"] == 11 and "Breakthrough" in congratulation["text"]
    assert changes(st)[-1] == (11, "1", "Healthy", None)

    run_to(st, 10 + THRESHOLD)  # the clock restarted at the delivery tick
    assert state(st)["status"] == "Stagnation"
    run_to(st, 10 + THRESHOLD + DEEP)
    assert state(st)["tag"] == CODE_NAMES[1]  # a code name is never issued twice
    st.close()


def test_a_breakthrough_during_protocol_one(tmp_path: Path) -> None:
    st = station(tmp_path, with_guest=False)
    run_to(st, 5)
    assert state(st)["status"] == "Stagnation"
    deliver(st, 0.1)  # the first result of the task is a new best
    run_to(st, 6)
    assert state(st)["status"] == "Healthy" and "Breakthrough" in messages(st)[-1]["text"]
    st.close()


# -- several tasks ----------------------------------------------------------------------------------
def test_tasks_are_watched_independently(tmp_path: Path) -> None:
    st = station(tmp_path, tasks=2)
    deliver(st, 5.0, task="1")
    deliver(st, 5.0, task="2")
    run_to(st, 3)
    deliver(st, 6.0, task="2")  # progress on task 2 only
    run_to(st, 4)
    assert state(st, "1")["status"] == "Stagnation" and state(st, "2")["status"] == "Healthy"
    [notice] = messages(st)
    assert "Research Task #1: Probe problem" in notice["text"]
    run_to(st, 6)
    assert state(st, "2")["status"] == "Stagnation"
    assert "Research Task #2: Probe problem" in messages(st)[-1]["text"]

    run_to(st, 8)
    tag = state(st, "1")["tag"]
    assert tag == CODE_NAMES[0] and state(st, "2")["status"] == "Stagnation"
    assert status_meta(st) == f"Deep Stagnation - {tag}"
    assert len(addenda(st, "1")) == 1 and addenda(st, "2") == []
    deliver(st, 99.0, task="2", tags=(tag,))  # task 2's result, even under task 1's code name
    run_to(st, 9)
    assert state(st, "1")["status"] == "Deep Stagnation" and state(st, "1")["clock_tick"] == 8
    assert state(st, "2")["status"] == "Healthy"
    assert "Research Task #2" in messages(st)[-1]["text"] and "Breakthrough" in messages(st)[-1]["text"]
    run_to(st, 10)
    assert state(st, "2")["status"] == "Healthy"
    run_to(st, 12)
    assert state(st, "1")["tag"] == CODE_NAMES[1]
    assert {m["agent"] for m in messages(st)} == {"Spiro I"}
    st.close()


# -- persistence and switches -------------------------------------------------------------------------
def test_state_survives_a_restart(tmp_path: Path) -> None:
    st = station(tmp_path)
    run_to(st, 5)
    assert state(st)["status"] == "Stagnation"
    directory = st.dir
    st.close()

    st = Station.open(directory)
    run_to(st, 7)
    assert len(messages(st)) == 1  # no second Protocol I
    run_to(st, 9)
    assert state(st)["tag"] == CODE_NAMES[0]
    st.close()

    st = Station.open(directory)
    run_to(st, 12)
    assert state(st)["tag"] == CODE_NAMES[1]
    assert changes(st) == [(4, "1", "Stagnation", None), (8, "1", "Deep Stagnation", CODE_NAMES[0]),
                           (12, "1", "Deep Stagnation", CODE_NAMES[1])]
    st.close()


def test_disabled_does_nothing(tmp_path: Path) -> None:
    st = station(tmp_path, enabled=False)
    assert not any(isinstance(h, Stagnation) for h in st.ctx.hooks)
    run_to(st, 12)
    assert messages(st) == [] and status_meta(st) == "Healthy"
    assert events(st, "stagnation_changed") == []
    st.close()


def test_no_research_tasks_no_hook(tmp_path: Path) -> None:
    st = make_station(tmp_path / "st", [recursive(replay_model(tmp_path / "r.jsonl", [], pad=20))],
                      stagnation={"threshold_ticks": 1, "deep_threshold_ticks": 1})
    assert not any(isinstance(h, Stagnation) for h in st.ctx.hooks)
    run_to(st, 6)
    assert messages(st) == [] and status_meta(st) == "Healthy"
    st.close()


# -- pieces ---------------------------------------------------------------------------------------------
def test_best_uses_sort_keys_per_task(tmp_path: Path) -> None:
    st = station(tmp_path, tasks=2, with_guest=False)
    deliver(st, 3.0, sort_key=[1.0, 3.0])
    deliver(st, 2.0, sort_key=[2.0, 0.0])  # first element wins
    deliver(st, 100.0, task="2")
    best = best_result(st.store, "1")
    assert best is not None and best.key == (2.0, 0.0) and best.tick == 1
    assert best_result(st.store, "1", "nothing") is None
    st.close()


def test_code_names_skip_used_ones_and_come_round_with_a_suffix(tmp_path: Path) -> None:
    st = station(tmp_path, with_guest=False)
    deliver(st, 1.0, tags=(CODE_NAMES[0],))  # agents already use the first name as a tag
    assert next_code_name(st.store) == CODE_NAMES[1]
    with st.store.transaction():
        for name in CODE_NAMES:
            st.store.execute("INSERT INTO stagnation_history(task, status, tag, tick) VALUES('1', 'x', ?, 1)",
                             (name,))
    assert next_code_name(st.store) == f"{CODE_NAMES[0]}-2"
    with st.store.transaction():
        st.store.execute("INSERT INTO stagnation_history(task, status, tag, tick) VALUES('1', 'x', ?, 1)",
                         (f"{CODE_NAMES[0]}-2",))
    assert next_code_name(st.store) == f"{CODE_NAMES[1]}-2"
    assert len(set(CODE_NAMES)) == 50
    st.close()
