"""A task folder that cannot work says so (issue 52, items 3 and 5; docs/tasks.md).

`station init` and `station run` run `station task check`'s checks before the first tick and refuse,
in one line, a folder whose initial program cannot score; a task whose evaluations keep failing the
same way makes `station status` Unhealthy; an OpenEvolve folder without `combined_score` is scored by
OpenEvolve's own rule (the mean of the numeric metrics), said loudly; `task check` names the config it
read and runs the initial program twice, warning when the scores differ; `station evaluate` says what
really ran. Real sandboxed runs, real stations, the real CLI (in-process).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from station.apps.cli import main as station

DATA = Path(__file__).parent / "data"
NOISY = DATA / "task_checks" / "noisy_mean"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = station(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def config_file(where: Path, research: dict[str, Any]) -> Path:
    settings = {
        "name": "checked",
        "seed": 3,
        "agents": [{"count": 1, "kind": "guest", "model": {"provider": "scripted", "name": "scripted-newcomer"}}],
        "notifications": {"tips_every_ticks": 0},
        "engine": {"backup_every_ticks": 0},
        "research": research,
    }
    path = where / "station.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    copy = tmp_path / "task"
    shutil.copytree(NOISY, copy)
    return copy


def test_init_and_run_refuse_in_one_line_a_folder_whose_initial_program_cannot_score(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, folder: Path
) -> None:
    config = config_file(tmp_path, {"tasks": [{"folder": "task"}]})
    program = folder / "initial_program.py"
    good = program.read_text()

    program.write_text(good.replace("return 0.5", "return 1 / 0"))  # crashes
    code, out, err = run(capsys, "init", str(config), "--dir", str(tmp_path / "st"))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"station: research task 1 ({folder}) cannot work: its baseline 'Initial program'")
    assert "ZeroDivisionError" in lines[0] and "nothing was created" in lines[0]
    assert "station task check" in lines[0] and not (tmp_path / "st").exists()

    program.write_text(good.replace("def guess():", "def guess(:"))  # does not parse
    code, _, err = run(capsys, "run", str(config), "--dir", str(tmp_path / "st"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "SyntaxError" in err, err
    assert not (tmp_path / "st").exists()

    program.write_text(good)
    code, out, err = run(capsys, "init", str(config), "--dir", str(tmp_path / "st"))
    assert code == 0, err
    assert "task 1: checked (its scorer imports; baselines: Initial program: 0.9" in out
    assert "warning: Score: the MEAN of" in out  # the check's warnings are said at creation too

    # a folder that passed and has not changed is not checked again: a restart costs no sandbox run
    from station.apps.task_checks import check_folder_tasks
    from station.apps.world import Station

    opened = Station.open(tmp_path / "st")
    try:
        stored = opened.config
    finally:
        opened.close()
    said: list[str] = []
    unchanged = check_folder_tasks(stored, tmp_path / "st", "unused", said.append)
    assert unchanged == json.loads((tmp_path / "st" / "task_checks.json").read_text()) and said == []

    # the folder changes while the station is stopped: its metric is now one the evaluator never reports
    (folder / "task.yaml").write_text("scorer:\n  metric: overall\n")
    code, _, err = run(capsys, "run", "--dir", str(tmp_path / "st"), "--until-tick", "3")
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("station: research task 1") and "no 'overall' metric" in last, err
    assert "the station did not run and is unchanged" in last

    # the web viewer's run (`station serve --run`, the operator's resume) makes the same check
    from station.apps.web.runner import StationRunner

    runner = StationRunner(tmp_path / "st")
    runner.resume(until_tick=3)
    runner.wait(300)
    assert runner.why is not None and runner.why.startswith("research task 1") and "no 'overall' metric" in runner.why
    from helpers import read

    assert read(tmp_path / "st", "SELECT COUNT(*) FROM turns") == [(0,)]


def test_a_task_whose_evaluations_keep_failing_the_same_way_makes_the_station_unhealthy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from rooms.research.store import insert_evaluation
    from station.core.store import Store

    config = config_file(tmp_path, {"tasks": [{"evaluator": "circle_packing", "params": {"n": 26}}]})
    assert run(capsys, "init", str(config), "--dir", str(tmp_path / "st"))[0] == 0
    store = Store(tmp_path / "st")

    def delivered(status: str, error: str | None, details: str = "") -> None:
        number = insert_evaluation(
            store, task="1", author="Agent", session=1, lineage=None, tick=1, title="t", tags=[], abstract="a",
            code="x = 1",
        )
        store.execute(
            "UPDATE evaluations SET status=?, error=?, details=?, finished_tick=1 WHERE id=?",
            (status, error, details, number),
        )

    def status() -> dict[str, Any]:
        code, out, err = run(capsys, "status", str(tmp_path / "st"), "--json")
        assert code == 0, err
        return json.loads(out)

    try:
        crash = "ModuleNotFoundError: No module named 'scipy'\nTraceback ..."
        for _ in range(4):
            delivered("failed", crash)
        assert status()["health"] == "Healthy"  # four in a row may be the agents' own mistakes
        delivered("timed_out", crash)
        data = status()
        assert data["health"] == "Unhealthy" and data["station_status"] == "Healthy"
        assert data["problems"] == [
            "task 1: the last 5 evaluations all failed the same way: "
            "ModuleNotFoundError: No module named 'scipy'"
        ]
        code, out, _ = run(capsys, "status", str(tmp_path / "st"))
        assert "problem: task 1: the last 5 evaluations all failed the same way: ModuleNotFoundError" in out
        delivered("failed", None, "Rejected by the task's scorer: overlapping circles")  # another way: no alarm
        assert status()["health"] == "Healthy"
    finally:
        store.close()


def test_openevolve_s_mean_rule_the_config_read_and_an_unseeded_evaluator_are_said_by_task_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, folder: Path
) -> None:
    code, statement, err = run(capsys, "task", "check", str(folder))
    assert code == 0, err
    assert "config: config.yaml (also here: config_fast.yaml; task.yaml `config: NAME` reads another)" in err
    # OpenEvolve's rule: numbers and booleans count; NaN, texts and the feature dimension complexity do not
    assert "warning: Score: the MEAN of the evaluator's numeric metrics closeness, valid (OpenEvolve's rule" in err
    (noise,) = [line for line in err.splitlines() if "when run again unchanged" in line]
    assert noise.startswith("warning: 'Initial program' scored 0.9") and "then 0.9" in noise
    assert "agents will take its noise for progress" in noise
    assert "**When the evaluator hands back no numeric `combined_score`, the score is the mean" in statement

    program = folder / "initial_program.py"
    code, out, err = run(capsys, "evaluate", str(folder), str(program), "--json")
    result = json.loads(out)
    assert code == 0 and result["success"], err
    assert result["score"] == (result["metrics"]["closeness"] + 1.0) / 2  # True counts as 1
    assert result["details"].startswith("Score: the MEAN of the evaluator's numeric metrics closeness, valid")

    (folder / "task.yaml").write_text("scorer:\n  metric: closeness\n")  # the folder names its score
    code, out, err = run(capsys, "evaluate", str(folder), str(program))
    assert code == 0, err
    assert "score:     0.80" in out and "MEAN" not in out
    (sandbox,) = [line for line in out.splitlines() if line.startswith("sandbox:")]
    assert "pid-namespace" in sandbox and "companion:" in sandbox  # the evaluator's run and the program's


def test_evaluate_says_when_nothing_ran(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    shinka = DATA / "evolve_formats" / "shinka_unit_vector"
    changed = (shinka / "initial.py").read_text().replace("def run_experiment", "def run_experiment_")
    (tmp_path / "p.py").write_text(changed)  # the frame outside its EVOLVE-BLOCKs changed: refused unrun
    code, out, _ = run(capsys, "evaluate", str(shinka), str(tmp_path / "p.py"))
    assert code == 1 and "sandbox:   nothing ran: the submission was refused before any run" in out
