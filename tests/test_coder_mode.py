"""Coder mode (`research.mode: coder`, docs/coder.md): agents submit instructions, the research coder
implements them in the sandbox, runs official attempts and reports.

One small offline circle-packing station (two scripted agents, four circles, eight ticks) is run
once for the module: the scripted coder writes the instructed program with a slip, its first
attempt fails, it mends the file, the second attempt scores, it reports. The tests read that
station (results, `review`, `read_code`, the board, spend), replay it, copy it under a tiny cap,
and run two more small stations: one killed with `kill -9` during a session, one whose coder model
attacks the boundary from an immature author's instruction.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_station
from helpers import read

from rooms.research.worker import EvaluationWorker
from station.apps import report
from station.apps.cli_commands import replay
from station.apps.world import Station
from station.core import commands
from station.core.config import parse_config
from station.core.context import StationPaused
from station.core.engine import Engine
from station.core.store import Store, canonical_dump
from station.models.scripted_coder import ScriptedCoder
from station.workers.sandbox_tools import SandboxTools

ROOT = Path(__file__).resolve().parents[1]
TICKS = 4  # both agents' instructions, submitted at tick 2, delivered at the end of tick 3
CODER_PRICE = {"input": 1.0, "output": 1.0}  # dollars per million tokens: the coder's spend shows


def config(**research: Any) -> dict[str, Any]:
    agents = [
        {"count": 1, "kind": "recursive", "lineage": name, "model": {"provider": "scripted", "name": "scripted-newcomer"}}
        for name in ("Spiro", "Veritas")
    ]
    return {
        "name": "coder-mode",
        "seed": 5,
        "agents": agents,
        "lifecycle": {"maturity_ticks": 8},
        "notifications": {"tips_every_ticks": 0},
        "engine": {"backup_every_ticks": 0},
        "prices": {"scripted-coder": CODER_PRICE},
        "research": {
            "mode": "coder",
            "tasks": [{"evaluator": "circle_packing", "params": {"n": 4}, "timeout_s": 30, "baselines": False}],
            "executor": {"kind": "local", "max_parallel": 2},
            "delivery": "on_time",
            **research,
        },
    }


def station(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "station.apps.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def coder_station(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("coder") / "st"
    st = Station.create(directory, parse_config(config()))
    try:
        assert Engine(st).run(until_tick=TICKS) == f"finished tick {TICKS}"
    finally:
        st.close()
    return directory


def rows(directory: Path, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
    db = sqlite3.connect(directory / "station.db")
    db.row_factory = sqlite3.Row
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def comparable(dump: dict[str, list[list[Any]]], keys: set[str] | None = None) -> dict[str, list[list[Any]]]:
    """A world's dump with its inputs in key order and without the author the background workers
    note on theirs (a replay copies them in its order and with no agent, as test_recorded_replay
    says); `keys`: only those inputs (a session still running at the end is not applied yet)."""
    cols, *body = dump["inputs"]
    kind, agent = cols.index("kind"), cols.index("agent")
    background = {"eval_run", "worker_turn", "worker_tool"}
    body = [[None if i == agent and r[kind] in background else v for i, v in enumerate(r)][1:] for r in body]
    body = [r for r in body if keys is None or r[0] in keys]
    return {**dump, "inputs": [cols[1:], *sorted(body, key=lambda r: r[0])]}


# -- the offline station ----------------------------------------------------------------------------
def test_an_instruction_becomes_code_that_fails_is_mended_scores_and_is_reported(coder_station: Path) -> None:
    evaluations = rows(coder_station, "SELECT * FROM evaluations ORDER BY id")
    assert len(evaluations) >= 2
    for row in evaluations[:2]:
        assert row["status"] == "finished" and row["score"] == pytest.approx(1.0)
        assert "```python" in row["instruction"] and "construct_packing" in row["instruction"]
        assert row["sees_all"] == 0  # both authors were immature when they submitted
        attempts = rows(
            coder_station, "SELECT version, source, status FROM evaluation_versions WHERE evaluation=?", (row["id"],)
        )
        assert [tuple(a) for a in attempts] == [(1, "coder", "error"), (2, "coder", "ok")]
        assert row["reported_version"] == 2 and "improt" not in row["code"] and "def construct_packing" in row["code"]
        first = json.loads(rows(coder_station, "SELECT payload FROM inputs WHERE key=?", (f"eval-run/{row['id']}/1",))[0][0])
        assert "SyntaxError" in first["error"]  # the slip, caught by the official attempt
        assert row["coder_end"] == "finished"
        assert "## Final Result" in row["coder_report"] and "0.999999999999" in row["coder_report"]
        turns = rows(coder_station, "SELECT key FROM inputs WHERE key LIKE ?", (f"coder/{row['id']}/turn/%",))
        assert len(turns) == 6  # write, attempt, read, mend, attempt, finish

    message = rows(coder_station, "SELECT text FROM messages WHERE kind='evaluation' ORDER BY id")[0][0]
    assert "Score: 0.999999999999 (computed by the station)" in message
    assert "made 2 official attempt(s)" in message
    assert message.index("Score: 0.999") < message.index("Coder Report (the coder's own words")


def test_review_read_code_and_the_board_show_instruction_report_and_score(coder_station: Path, tmp_path: Path) -> None:
    st = Station.open(copy_station(coder_station, tmp_path / "copy"))  # read_code sends a message
    try:
        ctx = st.ctx
        room = ctx.rooms["research"]
        agent = ctx.agents.get("Spiro I")
        row = ctx.store.one("SELECT * FROM evaluations WHERE author=? ORDER BY id", ("Spiro I",))
        record = room.record_text(ctx, row)
        for part in ("Instruction:", "Implement this program", "Coder Report (the coder's own words",
                     "## Faithfulness and Confidence", f"read_code {row['id']}"):
            assert part in record, part
        assert re.search(r"^Score: 1\.0+ \(computed by the station\)$", record, re.MULTILINE)
        assert "improt" not in record  # review shows the instruction and the report, not the code
        with ctx.store.transaction():
            said = room.read_code(ctx, agent, str(row["id"]), None)
            nope = room.read_code(ctx, agent, "999", None)
            board = room.render(ctx, agent)
        assert "final code" in said.lines[0] and "not found" in nope.lines[0]
        sent = ctx.store.all("SELECT text FROM messages WHERE kind='research_review' ORDER BY id DESC LIMIT 1")[0][0]
        assert "version 2, written by the research coder" in sent and "def construct_packing" in sent
        assert f"| {row['title']} | Spiro I | 2 | 1.0000000 |" in board
        assert "instructions for the research coder" in board
        help_text = room.help(ctx, agent)
        assert "instruction: |" in help_text and "read_code <ID>" in help_text
        assert "`content` is not taken here" in help_text and "complete, runnable code" not in help_text
    finally:
        st.close()


def test_a_replay_rebuilds_the_same_world_without_a_model_or_a_sandbox(
    coder_station: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a replay called the coder's model or ran a tool")

    monkeypatch.setattr(ScriptedCoder, "complete", refuse)
    monkeypatch.setattr(SandboxTools, "run", refuse)
    monkeypatch.setattr(EvaluationWorker, "_run", refuse)
    out = tmp_path / "replayed"
    assert replay(coder_station, out, None, None)[0] == 0
    original, replayed = Store(coder_station), Store(out)
    try:
        again = canonical_dump(replayed)
        keys = {r[1] for r in again["inputs"][1:]}
        assert {"coder/1/turn/6", "eval-run/2/2"} <= keys  # the delivered sessions, whole
        assert comparable(again) == comparable(canonical_dump(original), keys)
    finally:
        original.close()
        replayed.close()
    assert not (out / "files" / "coder").exists()  # no session ran: no workspace was made


def test_the_coder_s_spend_shows_under_its_role_and_a_tiny_cap_pauses_the_station(
    coder_station: Path, tmp_path: Path
) -> None:
    st = Station.open_to_read(coder_station)
    try:
        data = report.status(st, running=False)
    finally:
        st.close()
    spent = data["spend"]["by_caller"]["coder"]["usd"]
    assert spent > 0
    assert f"coder ${spent:.4f}" in report.status_text(data)

    capped = copy_station(coder_station, tmp_path / "capped")
    store = Store(capped)
    try:  # what has been spent, plus less than one more coder call
        commands.queue(store, commands.set_command(store, "budget.station_usd", str(round(spent + 0.0001, 6))))
    finally:
        store.close()
    before = len(read(capped, "SELECT key FROM inputs WHERE key LIKE 'coder/%/turn/%'"))
    st = Station.open(capped)
    try:
        with pytest.raises(StationPaused, match=r"coder.*budget.station_usd"):
            Engine(st).run(until_tick=TICKS + 12)  # the agents' next instructions come meanwhile
    finally:
        st.close()
    assert len(read(capped, "SELECT key FROM inputs WHERE key LIKE 'coder/%/turn/%'")) == before  # nothing recorded
