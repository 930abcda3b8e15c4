"""`station multistart`: branches from one start that really differ (branch seeds), a choice by each rule,
the chosen branch installed and running on, and a multistart killed (SIGKILL) at random moments that
resumes each time without running anything twice. One small multistart (3 branches x 4 ticks, 2 at a
time), killed and resumed, is shared by the tests."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from station.apps.cli import main
from station.apps.multistart import LEDGER, Branch, best_score, summary_metric
from station.core.config import ModelConfig
from station.models import ModelPool

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo.yaml"
ARGS = ["--branches", "3", "--ticks", "4", "--parallel", "2"]


def multistart(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "station.apps.cli", "multistart", str(DEMO), *ARGS, "--out", str(out), *extra]


def ledger(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / LEDGER).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def db(directory: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{directory / 'station.db'}?mode=ro", uri=True)


def inputs(directory: Path) -> list[tuple]:
    with db(directory) as conn:
        return conn.execute("SELECT seq, key, payload FROM inputs ORDER BY seq").fetchall()


KILLS = 6  # kill -9s at random moments, placed by a seeded random.Random
STEPS = {"pending": 0, "forked": 1, "running": 2, "done": 3}


def progress(out: Path) -> int:
    """The multistart's committed work: its ledger's steps and every branch's units (engine meta 'units')."""
    book = ledger(out)
    units = sum(STEPS[b["state"]] for b in book.get("branch", {}).values()) + 2 * bool(book.get("choice"))
    for directory in (out / "branches").glob("[0-9]*"):
        if (directory / "station.db").exists():
            with db(directory) as conn:
                row = conn.execute("SELECT value FROM meta WHERE key='units'").fetchone()
                units += json.loads(row[0]) if row else 0
    return units


def branch_turns(out: Path) -> dict[str, list[tuple]]:
    found = {}
    for directory in (out / "branches").glob("[0-9]*"):
        if directory.name.isdigit() and (directory / "station.db").exists():
            with db(directory) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
                found[directory.name] = conn.execute("SELECT id, tick, session, reply FROM turns ORDER BY id").fetchall()
    return found


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A multistart SIGKILLed at KILLS random moments (start-up, forks, branches' turns, the choice), each
    time started again with the same command, and finally run to its end. After every kill the ledger and
    the branches are read: what each one had committed, and which were done."""
    out = tmp_path_factory.mktemp("multistart") / "ms"
    rng = random.Random(54)
    # Every third kill lands during start-up; the others once the multistart has committed a random
    # amount of its work (about 83 units in all: ledger steps and branch units), a random moment later.
    targets = iter(sorted(rng.sample(range(1, 80), KILLS - KILLS // 3)))
    kills: list[dict[str, Any]] = []
    outputs: list[str] = []
    for i in range(KILLS + 1):
        log = out.parent / f"run{i}.out"
        before = ledger(out)
        with open(log, "w") as handle:
            process = subprocess.Popen(multistart(out), cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT)
            if i < KILLS:
                if i % 3 == 2:  # the interpreter, the ledger read, the first fork or a branch starting
                    time.sleep(rng.uniform(0.05, 1.0))
                else:
                    target = next(targets)
                    while process.poll() is None and (not out.exists() or progress(out) < target):
                        time.sleep(0.005)
                    time.sleep(rng.uniform(0.0, 0.2))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
            code = process.wait(timeout=300)
        outputs.append(log.read_text())
        if i == KILLS:
            assert code == 0, outputs[-1]
            break
        assert code in (0, -signal.SIGKILL), outputs[-1]
        after = ledger(out) if out.exists() else {}
        if (out / LEDGER).exists():
            assert after, f"kill {i}: the ledger is not whole"
        kills.append({"before": before, "after": after, "turns": branch_turns(out) if out.exists() else {},
                      "killed": code == -signal.SIGKILL, "output": outputs[-1]})
    return {"out": out, "kills": kills, "outputs": outputs, "stdout": outputs[-1]}


def test_the_branches_differ_by_their_recorded_seed(killed_and_resumed: dict[str, Any]) -> None:
    out = killed_and_resumed["out"]
    replies = []
    for n in ("1", "2", "3"):
        with db(out / "branches" / n) as conn:
            assert json.loads(conn.execute("SELECT value FROM meta WHERE key='branch_seed'").fetchone()[0]) == int(n)
            replies.append(conn.execute("SELECT payload FROM inputs WHERE kind='reply' ORDER BY seq").fetchall())
    assert replies[0] != replies[1] and replies[1] != replies[2] and replies[0] != replies[2]
    with db(out / "start") as conn:  # the start is no branch: its models sample as any station's
        assert conn.execute("SELECT value FROM meta WHERE key='branch_seed'").fetchone() is None


def test_a_multistart_killed_at_random_moments_resumes_and_runs_nothing_twice(killed_and_resumed: dict[str, Any]) -> None:
    out, kills = killed_and_resumed["out"], killed_and_resumed["kills"]
    running = [k for k in kills if k["killed"] and any(b["state"] == "running" for b in k["after"].get("branch", {}).values())]
    print(f"\nkills: {[{n: b['state'] for n, b in k['after'].get('branch', {}).items()} for k in kills]}")
    assert len(running) >= 2, "too few kills landed while branches were running"
    final = branch_turns(out)
    for k, run_output in zip(kills, killed_and_resumed["outputs"][1:]):
        for n, turns in k["turns"].items():  # what was committed before a kill is kept as it was
            assert final[n][: len(turns)] == turns
        for n, b in k["after"].get("branch", {}).items():  # a branch done is never run again
            if b["state"] == "done":
                assert f"branch {n}: running" not in run_output
    for n in ("1", "2", "3"):
        with db(out / "branches" / n) as conn:
            assert json.loads(conn.execute("SELECT value FROM meta WHERE key='tick'").fetchone()[0]) == 5
            twice = "SELECT tick, session FROM turns GROUP BY tick, session HAVING COUNT(*) > 1"
            assert conn.execute(twice).fetchall() == []
            assert [t for (t,) in conn.execute("SELECT DISTINCT tick FROM turns ORDER BY tick")] == [1, 2, 3, 4]
    assert {b["state"] for b in ledger(out)["branch"].values()} == {"done"}


def test_best_score_chooses_the_best_first_task_score_and_installs_it(
    killed_and_resumed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    out = killed_and_resumed["out"]
    best = {}
    for n in (1, 2, 3):
        with db(out / "branches" / str(n)) as conn:
            query = "SELECT MAX(score) FROM evaluations WHERE task='1' AND status='finished'"
            best[n] = conn.execute(query).fetchone()[0]
    expected = max(best, key=lambda n: (best[n], -n))
    choice = ledger(out)["choice"]
    assert (choice["rule"], choice["branch"]) == ("best-score", expected)
    assert f"chosen: branch {expected}" in killed_and_resumed["stdout"]
    assert inputs(out / "station") == inputs(out / "branches" / str(expected))
    assert main(["status", str(out / "branches" / "3")]) == 0  # the others stay readable
    assert main(["run", "--dir", str(out / "station"), "--until-tick", "5"]) == 0  # the chosen one runs on
    assert "the station is at tick 6" in capsys.readouterr().out


def test_the_rules_order_the_branches(killed_and_resumed: dict[str, Any]) -> None:
    out = killed_and_resumed["out"]

    def row(n: int, score: float | None) -> Branch:
        return Branch(n, 4, score, 1, 0.0, out / "branches" / str(n))

    assert best_score([row(1, 1.0), row(2, 3.0), row(3, 3.0)], "")[0] == 2  # a tie: the lower branch
    assert best_score([row(1, None), row(2, None), row(3, 0.5)], "")[0] == 3
    chosen, why, values = summary_metric([row(1, None), row(2, None), row(3, None)], "best_score")
    for n in (1, 2, 3):  # the study's summary metric, read from each branch's own world
        with db(out / "branches" / str(n)) as conn:
            query = "SELECT MAX(score) FROM evaluations WHERE task='1' AND status='finished'"
            assert values[n] == pytest.approx(conn.execute(query).fetchone()[0])
    assert chosen == max(values, key=lambda n: (values[n], -n)) and why.startswith("the highest best_score")


def test_a_branch_seed_changes_only_what_samples() -> None:
    pool, branch = ModelPool(), ModelPool(branch_seed=2)
    scripted = ModelConfig(provider="scripted", name="scripted-newcomer", seed=7)
    assert pool.get(scripted).config == scripted  # no branch: today's settings, unchanged
    assert branch.get(scripted).config.seed != 7
    assert branch.get(scripted).config.seed != ModelPool(branch_seed=3).get(scripted).config.seed
    openai = ModelConfig(provider="openai", name="gpt-x", api_key_env="K", options={"temperature": 1})
    sent = branch.get(openai).config.options  # the request's body takes the options as they are
    assert sent["temperature"] == 1 and isinstance(sent["seed"], int)
    anthropic = ModelConfig(provider="anthropic", name="claude-x", api_key_env="K")
    assert branch.get(anthropic).config == anthropic


@pytest.mark.parametrize(
    "extra, error",
    [
        (["--branches", "0"], "--branches must be at least 1 (got 0)"),
        (["--choose", "metric"], "--choose 'metric': give best-score or metric:NAME"),
        (["--choose", "best"], "--choose 'best': give best-score or metric:NAME"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], error: str
) -> None:
    assert main(["multistart", str(DEMO), *ARGS, "--out", str(tmp_path / "ms"), *extra]) == 2
    err = capsys.readouterr().err
    assert error in err and err.count("\n") == 1
    assert not (tmp_path / "ms").exists()


def test_a_folder_of_another_multistart_or_none_is_refused(
    killed_and_resumed: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = killed_and_resumed["out"]
    assert main(["multistart", str(DEMO), "--branches", "2", "--ticks", "4", "--out", str(out)]) == 2
    assert "holds a multistart with other settings: branches 3 (asked 2)" in capsys.readouterr().err
    assert main(["multistart", str(DEMO), *ARGS, "--out", str(out), "--choose", "metric:acts"]) == 2
    assert "already chose branch" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    assert main(["multistart", str(DEMO), *ARGS, "--out", str(tmp_path / "full")]) == 2
    assert "is not empty and holds no multistart" in capsys.readouterr().err
    assert main(["multistart", str(tmp_path / "nothing"), *ARGS, "--out", str(tmp_path / "o")]) == 2
    assert "neither a config file nor a station directory" in capsys.readouterr().err
