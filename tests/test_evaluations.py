"""Evaluations end to end: submitted in the Research Counter, run in the real sandbox, delivered once.

A station with replayed agents submits real code; the background evaluator runs it in the
local sandbox; results come back as one message each, the leaderboard shows them only then,
the tick waits for old evaluations, the debugger mends a misspelt name, System baselines run
at creation, and a replay rebuilds the same world without running anything.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import act, config, make_station, recursive, replay_model, reply, yaml_block

from evaluators.programs import program
from station.core.config import ConfigError, parse_config
from station.core.engine import Engine
from station.core.store import Store, canonical_dump
from station.executors.local import LocalExecutor

TINY = ("def construct_packing():\n    import numpy as np\n"
        "    return np.array([[0.25, 0.5], [0.75, 0.5]]), np.array([0.25, 0.25])\n")
SLOW = "import time\n\ndef construct_packing():\n    time.sleep({seconds})\n    return [[0.25, 0.5], [0.75, 0.5]], [0.25, 0.25]\n"


def submit(code: str, title: str = "An experiment", tags: str = "test", extra: dict[str, Any] | None = None) -> str:
    fields = {"title": title, "tags": tags, "abstract": "What it does, briefly.", "content": code, **(extra or {})}
    body = "\n".join(f"{k}: {json.dumps(v)}" for k, v in fields.items())
    return reply(act("goto research"), act("submit 1"), yaml_block(body))


def station(tmp_path: Path, replies: list[str], n: int = 2, **overrides: Any) -> Any:
    model = replay_model(tmp_path / "agent.jsonl", replies, pad=40)
    research = {"tasks": [{"evaluator": "circle_packing", "params": {"n": n}, "baselines": False,
                           "timeout_s": 20}], "executor": {"max_parallel": 2}}
    research.update(overrides.pop("research", {}))
    return make_station(tmp_path / "st", [recursive(model)], research=research,
                        lifecycle={"maturity_ticks": 0}, **overrides)


def evaluations(st: Any) -> list[Any]:
    return st.store.all("SELECT * FROM evaluations ORDER BY id")


def result_messages(st: Any) -> list[Any]:
    return st.store.all("SELECT * FROM messages WHERE kind='evaluation' ORDER BY id")


def test_a_submission_is_run_scored_and_delivered_once(tmp_path: Path) -> None:
    st = station(tmp_path, [submit(TINY)])
    try:
        Engine(st).run(until_tick=4)
        (row,) = evaluations(st)
        assert row["status"] == "finished" and row["score"] == 0.5 and row["reported_version"] == 1
        (message,) = result_messages(st)
        assert "Evaluation #1" in message["text"] and "Score: 0.5" in message["text"]
        assert row["finished_tick"] <= 3  # wait_ticks 2: due before the end of tick 2
        versions = st.store.all("SELECT * FROM evaluation_versions")
        assert [(v["version"], v["source"], v["status"]) for v in versions] == [(1, "author", "ok")]
    finally:
        st.close()


def test_the_tick_waits_for_an_evaluation_that_is_old_enough(tmp_path: Path) -> None:
    st = station(tmp_path, [submit(SLOW.format(seconds=2))], research={"wait_ticks": 1})
    try:
        Engine(st).run(until_tick=2)
        (row,) = evaluations(st)
        assert row["status"] == "finished" and row["finished_tick"] == 1  # applied at the end of tick 1
        assert st.store.one("SELECT tick FROM messages WHERE kind='evaluation'")["tick"] == 1
    finally:
        st.close()


def test_on_time_delivery_hands_every_result_over_when_its_wait_runs_out_never_sooner(tmp_path: Path) -> None:
    """`research.delivery: on_time`: the baselines (tick 0) and a quick submission (tick 1) are
    complete long before their due tick, yet each is applied and told at the end of tick
    submission + wait_ticks - 1, so the world does not depend on how fast the machine ran them."""
    st = station(tmp_path, [submit(TINY)], research={
        "wait_ticks": 3, "delivery": "on_time",
        "tasks": [{"evaluator": "circle_packing", "params": {"n": 2}, "timeout_s": 20}]})
    try:
        Engine(st).run(until_tick=5)
        rows = evaluations(st)
        assert [r["author"] == "System" for r in rows] == [True] * (len(rows) - 1) + [False] and len(rows) > 1
        assert all(r["status"] == "finished" and r["finished_tick"] == r["tick"] + 2 for r in rows), \
            [(r["tick"], r["finished_tick"]) for r in rows]
        (message,) = result_messages(st)
        assert message["tick"] == 3
    finally:
        st.close()
    with pytest.raises(ConfigError, match="research: .*set wait_ticks"):
        parse_config(config([], research={"delivery": "on_time", "wait_ticks": None}))


def test_invalid_results_and_timeouts_are_failures_with_no_score(tmp_path: Path) -> None:
    overlap = "def construct_packing():\n    return [[0.25, 0.5], [0.75, 0.5]], [0.25, 0.3]\n"
    st = station(tmp_path, [submit(overlap, "Too big"), submit(SLOW.format(seconds=60), "Too slow")],
                 research={"tasks": [{"evaluator": "circle_packing", "params": {"n": 2}, "baselines": False,
                                      "timeout_s": 2}]})
    try:
        Engine(st).run(until_tick=5)
        first, second = evaluations(st)
        assert (first["status"], first["score"]) == ("failed", None)
        assert "Verification failed" in first["details"]
        assert (second["status"], second["score"]) == ("timed_out", None)
        assert second["error"].startswith("Execution timed out after")
        texts = [m["text"] for m in result_messages(st)]
        assert len(texts) == 2 and "time limit" in texts[1]
        # Neither is debugged: the debugger mends crashes, not verdicts or timeouts.
        assert st.store.scalar("SELECT COUNT(*) FROM evaluation_versions") == 2
    finally:
        st.close()


def test_the_debugger_mends_a_misspelt_name_and_the_author_hears_once(tmp_path: Path) -> None:
    code = program("grid", 4).replace("np.zeros(", "np.zeroes(", 1)
    assert "np.zeroes(" in code
    st = station(tmp_path, [submit(code, "Grid with a slip")], n=4)
    try:
        Engine(st).run(until_tick=4)
        (row,) = evaluations(st)
        assert row["status"] == "finished" and row["reported_version"] == 2 and row["score"] > 0
        versions = st.store.all("SELECT * FROM evaluation_versions ORDER BY version")
        assert [(v["source"], v["status"]) for v in versions] == [("author", "error"), ("debugger", "ok")]
        assert "np.zeros(" in versions[1]["code"]
        (message,) = result_messages(st)
        assert "zeroes" in message["text"] and "```diff" in message["text"] and "Score:" in message["text"]
    finally:
        st.close()


def test_no_debugger_is_respected_and_an_unfixable_crash_reports_the_original(tmp_path: Path) -> None:
    slip = program("grid", 4).replace("np.zeros(", "np.zeroes(", 1)
    crash = "def construct_packing():\n    raise RuntimeError('no idea')\n"
    st = station(tmp_path, [submit(slip, "Opted out", extra={"no_debugger": True}), submit(crash, "Hopeless")], n=4)
    try:
        Engine(st).run(until_tick=5)
        opted, hopeless = evaluations(st)
        assert opted["status"] == "failed" and opted["reported_version"] == 1
        assert "AttributeError" in opted["error"]
        assert hopeless["status"] == "failed" and "RuntimeError: no idea" in hopeless["error"]
        proposals = st.store.all("SELECT key FROM inputs WHERE key LIKE 'eval-debug/%'")
        assert [p["key"] for p in proposals] == [f"eval-debug/{hopeless['id']}/1"]
        texts = [m["text"] for m in result_messages(st)]
        assert "could not produce a version that runs" in texts[1]
    finally:
        st.close()


def test_system_baselines_run_at_creation_without_holding_the_tick(tmp_path: Path) -> None:
    st = station(tmp_path, [], research={"tasks": [{"evaluator": "circle_packing", "params": {"n": 26}}]})
    try:
        (row,) = evaluations(st)
        assert row["author"] == "System" and row["tick"] == 0 and not row["holds_tick"]
        engine, deadline = Engine(st), time.monotonic() + 60
        while evaluations(st)[0]["status"] == "queued" and time.monotonic() < deadline:
            engine.run(ticks=1)  # the tick never waits for it: it arrives when it is ready
            time.sleep(0.3)
        row = evaluations(st)[0]
        assert row["status"] == "finished" and row["score"] > 1.0 and row["finished_tick"] > 1
        assert result_messages(st) == []  # System gets no message
    finally:
        st.close()


def test_results_are_never_delivered_twice_when_the_station_reopens(tmp_path: Path) -> None:
    st = station(tmp_path, [submit(TINY), submit(TINY, "Again")])
    Engine(st).run(until_tick=2)
    st.close()
    from station.apps.world import Station
    again = Station.open(tmp_path / "st")
    try:
        Engine(again).run(until_tick=6)
        rows = evaluations(again)
        assert [r["status"] for r in rows] == ["finished", "finished"]
        ids = [re.search(r"Evaluation #(\d+)", m["text"]).group(1) for m in result_messages(again)]
        assert sorted(ids) == ["1", "2"]
    finally:
        again.close()


def test_a_replay_rebuilds_the_results_without_running_anything(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    slip = program("grid", 4).replace("np.zeros(", "np.zeroes(", 1)
    src = station(tmp_path, [submit(TINY), submit(slip, "Slip")], n=4)
    Engine(src).run(until_tick=5)
    src.close()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a replay must not run submissions")

    monkeypatch.setattr(LocalExecutor, "run", refuse)
    dst_dir = tmp_path / "replayed"
    dst_dir.mkdir()
    source = Store(tmp_path / "st")
    model = replay_model(dst_dir / "agent.jsonl", [], pad=40)
    dst = make_station(dst_dir / "st", [recursive(model)], research={
        "tasks": [{"evaluator": "circle_packing", "params": {"n": 4}, "baselines": False, "timeout_s": 20}],
        "executor": {"max_parallel": 2}}, lifecycle={"maturity_ticks": 0})
    try:
        assert Engine(dst, replay_source=source).run(until_tick=5) == "finished tick 5"
        a, b = canonical_dump(source), canonical_dump(dst.store)
        for table in ("evaluations", "evaluation_versions", "messages", "events"):
            assert a[table] == b[table], table
    finally:
        source.close()
        dst.close()


def test_the_stagnation_protocol_fires_on_real_results_and_ends_with_a_new_best(tmp_path: Path) -> None:
    better = ("def construct_packing():\n    r = 0.29\n"
              "    return [[r, r], [1 - r, 1 - r]], [r, r]\n")  # diagonal: 0.58 > 0.5
    replies = [submit(TINY, "Side by side")] + ["Waiting for ideas."] * 7 + [submit(better, "Diagonal")]
    st = station(tmp_path, replies, stagnation={"threshold_ticks": 3, "deep_threshold_ticks": 50})
    try:
        Engine(st).run(until_tick=12)
        changes = [json.loads(p["payload"]) for p in
                   st.store.all("SELECT payload FROM events WHERE kind='stagnation_changed' ORDER BY id")]
        ticks = [e["tick"] for e in st.store.all("SELECT tick FROM events WHERE kind='stagnation_changed'")]
        first, better_row = evaluations(st)
        assert (first["score"], better_row["score"]) == (0.5, 0.58)
        # Protocol I three ticks after the first result; the new best ends it at the next tick start.
        assert [c["status"] for c in changes[:2]] == ["Stagnation", "Healthy"]
        assert ticks[0] == first["finished_tick"] + 3 and ticks[1] == better_row["finished_tick"] + 1
        texts = [m["text"] for m in st.store.all("SELECT text FROM messages WHERE kind='stagnation' ORDER BY id")]
        assert len(texts) == len(changes) and "**Architect Message**" in texts[0]
    finally:
        st.close()


def test_station_evaluate_checks_a_submission_outside_any_station(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]

    def evaluate(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "station.apps.cli", "evaluate", *args], cwd=root,
                              capture_output=True, text=True, timeout=120)

    rows = tmp_path / "rows.py"
    rows.write_text(program("hex", 26))
    shown = evaluate("circle_packing:n=26", str(rows))
    assert shown.returncode == 0, shown.stderr
    assert "score:     2.5000000" in shown.stdout and "net-namespace" in shown.stdout
    as_json = json.loads(evaluate("circle_packing:n=26", str(rows), "--json").stdout)
    assert as_json["success"] and as_json["score"] == pytest.approx(2.5)

    grid = tmp_path / "grid.py"
    grid.write_text(program("grid", 32))
    from_config = evaluate("configs/circle_packing_n32.yaml", str(grid))
    assert from_config.returncode == 0 and "(n = 32)" in from_config.stdout

    broken = tmp_path / "broken.py"
    broken.write_text("def construct_packing():\n    return 1 / 0\n")
    crashed = evaluate("circle_packing:n=26", str(broken))
    assert crashed.returncode == 1 and "ZeroDivisionError" in crashed.stdout

    unknown = evaluate("no_such_task", str(rows))
    assert unknown.returncode == 2 and "unknown research task 'no_such_task'" in unknown.stderr
