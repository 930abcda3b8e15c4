"""`station multistart`: branches from one start that really differ (branch seeds), a choice by each rule,
the chosen branch installed and running on, and a multistart killed (SIGKILL) between branches that
resumes without running anything twice. One small multistart (3 branches x 4 ticks, 2 at a time) is
shared by the tests."""

from __future__ import annotations

import json
import os
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


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A multistart SIGKILLed once a branch is done (the others forked, one maybe half-run), then run again."""
    out = tmp_path_factory.mktemp("multistart") / "ms"
    process = subprocess.Popen(multistart(out), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while process.poll() is None and not any(b["state"] == "done" for b in ledger(out).get("branch", {}).values()):
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    before = ledger(out)
    done_before = {n: inputs(out / "branches" / n) for n, b in before["branch"].items() if b["state"] == "done"}
    resumed = subprocess.run(multistart(out), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    return {"out": out, "before": before, "done_before": done_before, "stdout": resumed.stdout}


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


def test_a_resumed_multistart_runs_nothing_twice(killed_and_resumed: dict[str, Any]) -> None:
    out, before = killed_and_resumed["out"], killed_and_resumed["before"]
    assert before["choice"] is None and any(b["state"] != "done" for b in before["branch"].values())
    for n, recorded in killed_and_resumed["done_before"].items():  # finished before the kill: untouched
        assert inputs(out / "branches" / n) == recorded
        assert f"branch {n}: running" not in killed_and_resumed["stdout"]
    for n in ("1", "2", "3"):
        with db(out / "branches" / n) as conn:
            assert json.loads(conn.execute("SELECT value FROM meta WHERE key='tick'").fetchone()[0]) == 5
            twice = "SELECT tick, session FROM turns GROUP BY tick, session HAVING COUNT(*) > 1"
            assert conn.execute(twice).fetchall() == []
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
