"""A multistart at stagnation (`multistart.on_stagnation`) and the station's caps over all branches.

One small station (2 scripted agents, stagnation after 2 ticks, 2 branches x 2 ticks) is SIGKILLed
while its multistart runs, then run again: it resumes the multistart, installs the chosen branch as
the station and goes on. One multistart from a config with a tiny money cap is stopped by the cap."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from station.apps.cli import main
from station.apps.multistart_spend import CARRIED, spent
from station.core.store import Store, canonical_dump

ROOT = Path(__file__).resolve().parents[1]
PRICES = {"scripted-newcomer": {"input": 1.0, "output": 1.0}, "scripted-grader": {"input": 1.0, "output": 1.0}}


def config(tmp: Path, **changes: Any) -> Path:
    data = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    data["agents"][0]["count"] = 2
    data["prices"] = PRICES
    data.update(changes)
    path = tmp / "station.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def ledger(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / "multistart.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def query(directory: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(f"file:{directory / 'station.db'}?mode=ro", uri=True) as conn:
        return conn.execute(sql).fetchall()


def twice(directory: Path) -> list[tuple]:
    return query(directory, "SELECT tick, session FROM turns GROUP BY tick, session HAVING COUNT(*) > 1")


@pytest.fixture(scope="module")
def stagnated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("stagnation")
    settings = {"on_stagnation": True, "branches": 2, "ticks": 2, "parallel": 2}
    path = config(tmp, stagnation={"threshold_ticks": 2, "deep_threshold_ticks": 30}, multistart=settings)
    station = tmp / "st"
    run = [sys.executable, "-m", "station.apps.cli", "run", str(path), "--dir", str(station), "--until-tick", "6"]
    process = subprocess.Popen(run, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = station / "multistarts" / "tick-3"
    while process.poll() is None and "running" not in {b["state"] for b in ledger(out).get("branch", {}).values()}:
        time.sleep(0.05)
    process.kill()  # SIGKILL while its branches run (they die with it)
    process.wait()
    killed = ledger(out)
    resumed = subprocess.run(run[:4] + run[5:], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    return {"station": station, "out": out, "killed": killed, "stdout": resumed.stdout}


def test_stagnation_runs_one_multistart_and_the_run_goes_on_as_the_chosen_branch(stagnated: dict[str, Any]) -> None:
    station, out = stagnated["station"], stagnated["out"]
    assert stagnated["killed"]["choice"] is None  # the kill came during the multistart
    assert [p.name for p in (station / "multistarts").iterdir()] == ["tick-3"]  # once for the episode
    done = ledger(out)
    assert done["from_tick"] == 2 and done["swap"] == "done"
    assert {b["state"] for b in done["branch"].values()} == {"done"}
    chosen = out / "branches" / str(done["choice"]["branch"])
    branch_inputs = query(chosen, "SELECT seq, key, payload FROM inputs ORDER BY seq")
    installed = query(station, "SELECT seq, key, payload FROM inputs ORDER BY seq")
    assert installed[: len(branch_inputs)] == branch_inputs  # the chosen branch, and what it ran on since
    assert query(station, "SELECT value FROM meta WHERE key='tick'") == [("7",)]  # ran on to --until-tick 6
    assert query(out / "before", "SELECT value FROM meta WHERE key='tick'") == [("3",)]  # the station as it was
    for directory in (station, *(out / "branches" / n for n in done["branch"])):
        assert twice(directory) == []  # no turn was run twice
    assert f"branch {done['choice']['branch']} is the station now ({station})" in stagnated["stdout"]


def test_the_installed_station_counts_the_start_and_the_branches_not_chosen(stagnated: dict[str, Any]) -> None:
    out = stagnated["out"]
    chosen = str(ledger(out)["choice"]["branch"])
    start = spent(out / "before")
    others = [spent(out / "branches" / n) - start for n in ledger(out)["branch"] if n != chosen]
    assert start.usd > 0 and others[0].usd > 0
    carried = query(stagnated["station"], f"SELECT SUM(cost_usd) FROM spend WHERE who='{CARRIED}'")[0][0]
    assert carried == pytest.approx(start.usd + sum(o.usd for o in others))


def test_the_installed_station_replays_to_the_same_world(stagnated: dict[str, Any], tmp_path: Path) -> None:
    assert main(["replay", str(stagnated["station"]), str(tmp_path / "replica")]) == 0

    def world(directory: Path) -> dict[str, Any]:
        dump = canonical_dump(Store(directory))
        dump["meta"] = [row for row in dump["meta"] if row[0] != "research_tasks"]  # a run's cache, not world
        return dump

    assert world(tmp_path / "replica") == world(stagnated["station"])


def test_the_cap_counts_every_branch_and_stops_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config(tmp_path, budget={"station_usd": 0.03})  # about three ticks of one branch
    out = tmp_path / "ms"
    args = ["multistart", str(path), "--branches", "2", "--ticks", "4", "--parallel", "2", "--out", str(out)]
    assert main(args) == 0
    done = ledger(out)
    assert "reached the station's money budget" in done["cap_reached"] or "station cap" in done["cap_reached"]
    assert {b["state"] for b in done["branch"].values()} == {"stopped"}  # no branch ran its 4 ticks
    assert "the branches were stopped" in capsys.readouterr().err
    total = spent(out / "branches" / "1").usd + spent(out / "branches" / "2").usd
    assert spent(out / "station").usd == pytest.approx(total)  # the installed one counts both
    assert main(["run", "--dir", str(out / "station"), "--until-tick", "9"]) == 3  # and pauses at the cap
    assert "budget.station_usd" in capsys.readouterr().err
