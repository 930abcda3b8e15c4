"""`station external`: a station's best submission run again the paper's external way, printed as
mean ± standard error, kept, and shown by the viewer beside the internal score. Here on the
demo's circle-packing task (deterministic: the same number again); the test split of forecasting
and the held-out draw of batch integration are in their task's tests.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ROOT, station_cli, web_client

from station.apps.web.app import create_app


@pytest.fixture(scope="module")
def station(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's demo station for 6 ticks: the first submissions scored."""
    folder = tmp_path_factory.mktemp("external")
    done = station_cli("run", str(ROOT / "configs" / "demo.yaml"), "--dir", "st", "--ticks", "6", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert best_row(folder / "st")["score"] > 0
    return folder


def test_the_best_submission_scores_again_and_is_kept(station: Path) -> None:
    done = station_cli("external", "st", cwd=station)
    assert done.returncode == 0, done.stderr
    best = best_row(station / "st")
    assert f"evaluation #{best['id']}" in done.stdout
    internal = f"{best['score']:.7f}"  # the task's display precision
    assert f"internal:  {internal}" in done.stdout and f"external:  {internal} (one score: no ±)" in done.stdout
    assert "the internal evaluation, run again" in done.stdout
    assert "run 1 of 1" in done.stderr

    done = station_cli("external", "st", "--seeds", "2", "--json", cwd=station)
    assert done.returncode == 0, done.stderr
    (shown,) = json.loads(done.stdout)
    assert shown["evaluation"] == best["id"] and shown["samples"] == [best["score"]] * 2
    assert shown["mean"] == best["score"] and shown["se"] == 0.0 and shown["status"] == "finished"
    assert "run again 2 times" in shown["protocol"]
    kept = read_kept(station / "st")
    assert [(k["evaluation"], json.loads(k["samples"])) for k in kept] == [
        (best["id"], [best["score"]]), (best["id"], [best["score"]] * 2)]


def test_the_viewer_shows_internal_and_external_scores_side_by_side(station: Path) -> None:
    if not read_kept(station / "st"):
        assert station_cli("external", "st", cwd=station).returncode == 0
    best = best_row(station / "st")
    client = web_client(create_app(station / "st"))
    page = client.get("/research").text
    assert 'id="external-table"' in page and f'href="/research/{best["id"]}">#{best["id"]}</a>' in page
    assert page.count(f"{best['score']:.6g}") >= 2  # the internal and the external score
    one = client.get(f"/research/{best['id']}").text
    assert 'id="external-table"' in one and "the internal evaluation, run again" in one


@pytest.mark.parametrize("args, message", [
    (["--task", "9"], "has no task '9'"),
    (["--evaluation", "999"], "no evaluation #999"),
    (["--seeds", "0"], "--seeds must be at least 1"),
])
def test_bad_requests_are_clear_errors_and_run_nothing(station: Path, args: list[str], message: str) -> None:
    before = len(read_kept(station / "st"))
    done = station_cli("external", "st", *args, cwd=station)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(read_kept(station / "st")) == before


def best_row(directory: Path) -> dict:
    from helpers import read

    (row,) = read(directory, "SELECT id, score FROM evaluations WHERE status='finished' "
                             "ORDER BY score DESC, tick, id LIMIT 1")
    return {"id": row[0], "score": row[1]}


def read_kept(directory: Path) -> list[dict]:
    import sqlite3

    db = sqlite3.connect(f"file:{directory / 'station.db'}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute("SELECT * FROM external_evaluations ORDER BY id")]
    except sqlite3.OperationalError:
        return []  # the table is made when the command first opens the station
    finally:
        db.close()


def test_each_task_says_how_it_is_evaluated_externally() -> None:
    """The paper's protocol per task: Sokoban on 10 seeds with batches of 32 and more time (on a
    copy: the station's own task is unchanged); circle packing runs again (RNA: tests/test_rna_task.py)."""
    from evaluators.base import create_task

    sokoban = create_task("sokoban", {"trials": 4, "trial_budget_s": 60})
    plan = sokoban.external()
    (run,) = plan.runs
    assert (run.trials, run.n_envs, run.trial_budget_s, run.external_mode) == (10, 32, 120, True)
    assert (sokoban.trials, sokoban.n_envs, sokoban.trial_budget_s, sokoban.external_mode) == (4, 64, 60, False)
    assert plan.protocol.startswith("10 seeds; 32 environments per batch, 2 minutes per trial")
    assert create_task("sokoban", {}).external(seeds=3).runs[0].trials == 3
    with pytest.raises(ValueError, match="seeds must be between 1 and 64"):
        sokoban.external(seeds=65)
    circles = create_task("circle_packing", {"n": 26}).external(seeds=3)
    assert len(circles.runs) == 3 and circles.protocol == "the internal evaluation, run again 3 times"
