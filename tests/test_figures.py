"""Evaluations carry the data the viewer draws: a valid circle packing its circles, a JAX task the
learning curves of every scored trial (named as each task names them), the scRNA task what each
metric adds to the score; the figure reaches the recorded payload as plain JSON, and payloads
without a figure keep their old shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from evaluators.base import Verdict, create_task
from evaluators.circle_packing import CirclePacking
from evaluators.jaxtrain.station_jax.windows import gather
from evaluators.jaxtrain.task import MAX_CURVE_POINTS
from evaluators.rna.beacon import DATASETS
from evaluators.scrna.task import METRICS
from rooms.research.worker import run_payload
from station.apps.web.plots import figure_html
from station.core.run_types import RunResult

FORECAST = {"size": "small", "trials": 3, "trial_budget_s": 3, "max_epochs": 3, "patience": 2, "grace_s": 90}
SOKOBAN = {"grid": 5, "boxes": 1, "train_levels": 300, "eval_levels": 40, "max_steps": 30, "n_envs": 16,
           "unroll": 8, "env_steps": 4000, "trials": 2, "trial_budget_s": 600, "grace_s": 120}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every task's data in a fresh cache, built on first use (small sizes: seconds)."""
    root = tmp_path_factory.mktemp("figures")
    patch = pytest.MonkeyPatch()
    for name in ("FORECAST", "RNA", "SOKOBAN", "SCRNA"):
        patch.setenv(f"STATION_{name}_DATA", str(root / name.lower()))
    yield root
    patch.undo()


def plain_json(figure: Any) -> Any:
    """The figure survives strict JSON (no NaN, no numpy types) unchanged."""
    return json.loads(json.dumps(figure, allow_nan=False))


def quarter_packing() -> tuple[list[list[float]], list[float]]:
    """4 circles of radius 1/4 touching each other and the sides: exactly valid in float64."""
    return [[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]], [0.25] * 4


# -- circle packing -----------------------------------------------------------------------------------
def test_a_valid_packing_carries_its_circles() -> None:
    centers, radii = quarter_packing()
    verdict = CirclePacking(4).score(RunResult(status="ok", value=(centers, radii)))
    assert verdict.success
    figure = plain_json(verdict.figure)
    assert figure == {"kind": "circles", "width": 1.0, "height": 1.0,
                      "circles": [[x, y, r] for (x, y), r in zip(centers, radii)]}
    assert "id='packing'" in figure_html(figure) and figure_html(figure).count("<circle") == 4


def test_circles_are_rounded_to_six_significant_digits() -> None:
    third = 1 / 3 - 1e-9
    verdict = CirclePacking(2).score(RunResult(status="ok", value=([[third, 0.5], [1 - third, 0.5]], [0.16, 0.16])))
    assert verdict.success
    assert verdict.figure is not None and verdict.figure["circles"][0] == [0.333333, 0.5, 0.16]


def test_an_invalid_packing_has_no_figure_and_its_payload_keeps_the_old_keys() -> None:
    centers, radii = quarter_packing()
    radii[0] = 0.3  # crosses the sides and its neighbours
    verdict = CirclePacking(4).score(RunResult(status="ok", value=(centers, radii)))
    assert not verdict.success and verdict.figure is None
    assert set(verdict.to_payload()) == {"success", "score", "details", "metrics", "sort_key"}


def test_the_recorded_payload_of_a_run_holds_the_figure() -> None:
    centers, radii = quarter_packing()
    payload = run_payload(CirclePacking(4), RunResult(status="ok", value=(centers, radii)), "local")
    assert payload["success"] and payload["figure"]["kind"] == "circles"
    assert len(json.loads(json.dumps(payload, allow_nan=False))["figure"]["circles"]) == 4


# -- JAX training tasks ----------------------------------------------------------------------------------
def forecast_trials(task: Any, curves: list[list[float | None]]) -> dict[str, Any]:
    """Trials whose best checkpoint predicted all zeros (a finite, poor forecast), with the given
    station-measured curves (None: a checkpoint whose outputs could not count)."""
    folder = task.dataset.scored_windows()
    _, targets = gather(np.load(folder / "frames.npy"), np.load(folder / "starts.npy"))
    sums = np.abs(targets).sum(axis=(0, 2), dtype=np.float64)[None]
    best = task.measure(0, {"abs_error": sums, "windows": np.array([len(targets)]), "nonfinite": np.array(0)})
    return {"trials": [
        {"trial": n, "status": "ok", "seed": n, "reported": {"seed": n, "train_curve": [0.5, 0.4, 0.3][: len(curve)]},
         "station": {"checkpoints": len(curve), "curve": curve, "best_checkpoint": 1, "best": best,
                     "stop": "max-epochs", "failure": None, "notes": []}}
        for n, curve in enumerate(curves)]}


def test_forecasting_draws_the_validation_mae_and_training_loss_of_every_scored_trial(data: Path) -> None:
    task = create_task("forecasting", {**FORECAST, "trials": 2})
    value = forecast_trials(task, [[0.3, 0.2, 0.1], [0.4, None, 0.2]])
    verdict = task.score(RunResult(status="ok", value=value))
    assert verdict.success, verdict.details
    figure = plain_json(verdict.figure)
    assert figure["kind"] == "curves" and figure["x_label"] == "epoch"
    mae, loss = figure["panels"]
    assert (mae["title"], mae["lower_is_better"], loss["title"]) == (
        "validation MAE (measured by the station)", True, "training loss (reported by the run)")
    assert [s["label"] for s in mae["series"]] == ["trial 0", "trial 1"]
    assert mae["series"][0] == {"label": "trial 0", "values": [0.3, 0.2, 0.1]}
    # the unmeasured epoch is left out, and the epochs kept say where the others were
    assert mae["series"][1] == {"label": "trial 1", "values": [0.4, 0.2], "x": [1.0, 3.0]}
    html = figure_html(figure)
    assert "id='curve-0'" in html and "id='curve-1'" in html and "validation MAE" in html


def test_a_long_curve_is_thinned_evenly_to_the_cap(data: Path) -> None:
    task = create_task("forecasting", {**FORECAST, "trials": 1})
    long = [1 / (epoch + 1) for epoch in range(10_000)]
    verdict = task.score(RunResult(status="ok", value=forecast_trials(task, [long])))
    series = verdict.figure["panels"][0]["series"][0] if verdict.figure else {}
    assert len(series["values"]) == MAX_CURVE_POINTS == len(series["x"])
    assert series["x"][0] == 1 and series["x"][-1] == 10_000 and series["values"][-1] == pytest.approx(1e-4)


def test_sokoban_draws_the_training_solve_rate_against_env_steps(data: Path) -> None:
    task = create_task("sokoban", {**SOKOBAN, "trials": 1})
    idle = np.zeros((len(task.levels.ensure().eval_levels()), task.max_steps), np.int8)
    best = task.measure(0, {"output_0": idle})  # what the station measured of the trial's policy
    curve = [[12_800, 0.0], [25_600, 0.125], [38_400, "x"]]  # a malformed point is left out
    value = {"trials": [{"trial": 0, "status": "ok", "seed": 0, "reported": {"seed": 0, "train_curve": curve},
                         "station": {"checkpoints": 1, "curve": [best["metric"]], "best_checkpoint": 1,
                                     "best": best, "stop": "max-epochs", "failure": None, "notes": []}}]}
    verdict = task.score(RunResult(status="ok", value=value))
    assert verdict.success
    figure = plain_json(verdict.figure)
    assert figure["x_label"] == "env steps"
    (panel,) = figure["panels"]
    assert panel["title"] == "training solve rate (reported by the run)" and panel["lower_is_better"] is False
    assert panel["series"] == [{"label": "trial 0", "values": [0.0, 0.125], "x": [12_800.0, 25_600.0]}]


def test_rna_draws_a_curve_per_dataset_and_keeps_its_details(data: Path) -> None:
    task = create_task("rna_modelling", {"size": "small", "max_epochs": 2, "patience": 2, "grace_s": 120})
    task.data.ensure()
    trials = []
    for n, dataset in enumerate(DATASETS):
        labels = task.data.labels(dataset.name)
        pred = np.eye(dataset.d_output)[labels] if dataset.task_type == "multiclass_classification" else labels
        best = task.measure(n, {"output_0": pred.reshape(len(labels), -1).astype(np.float32)})
        trials.append({"trial": n, "status": "ok", "seed": 1, "reported": {"seed": 1, "epochs": 2, "train_curve": [1.0, 0.6]},
                       "station": {"checkpoints": 2, "curve": [0.5, 0.9], "best_checkpoint": 2, "best": best,
                                   "stop": "max-epochs", "failure": None, "notes": []}})
    trials[4] = {"trial": 4, "status": "error", "seed": None, "error": "RuntimeError: out of luck", "reported": None,
                 "station": {"checkpoints": 0, "curve": [], "best_checkpoint": None, "best": None, "stop": "run-ended",
                             "failure": "the run ended before it exported its apply function", "notes": []}}
    verdict = task.score(RunResult(status="ok", value={"trials": trials}))
    assert not verdict.success  # one dataset is missing: no score, but the curves of the others are drawn
    assert "PRS (trial 4): no measured checkpoint: " in verdict.details and "out of luck" in verdict.details
    assert "APA (trial 0, seed 1): " in verdict.details and "A constant predictor" in verdict.details
    figure = plain_json(verdict.figure)
    labels = [s["label"] for s in figure["panels"][0]["series"]]
    assert len(labels) == 6 and labels[0].startswith("APA") and not any(label.startswith("PRS") for label in labels)
    assert figure["panels"][0]["lower_is_better"] is False
    assert figure["panels"][1]["title"] == "training loss (reported by the run)"


# -- scRNA ---------------------------------------------------------------------------------------------
def test_scrna_shows_what_each_metric_adds_to_the_score(data: Path) -> None:
    task = create_task("batch_integration", {"size": "small", "normalisation": "openproblems"})
    raw = {name: 0.5 for name in METRICS} | {"kbet": float("nan")}
    # the ten metrics are slow to compute; here the dataset hands back fixed raw values
    task.dataset = SimpleNamespace(name="stub", n_cells=10, score_arrays=lambda value, **options: (raw, {}))
    verdict = task.score(RunResult(status="ok", value={"n_obs": 10, "X_emb": np.zeros((10, 2), np.float32)}))
    assert verdict.success and verdict.score is not None
    figure = plain_json(verdict.figure)
    assert figure["kind"] == "contributions" and figure["score"] == pytest.approx(verdict.score)
    rows = figure["rows"]
    assert len(rows) == 10 and rows[0]["metric"] == "ASW_batch"
    assert sum(row["share"] for row in rows) == pytest.approx(verdict.score)
    kbet = next(row for row in rows if row["metric"] == "kBET")
    assert kbet["raw"] is None and kbet["normalised"] == 0.0  # NaN counts 0, as in the score
    assert all(row["share"] == pytest.approx(row["normalised"] / 10) for row in rows)
    assert "id='contributions'" in figure_html(figure)


def test_a_verdict_payload_has_a_figure_key_only_when_there_is_one() -> None:
    assert "figure" not in Verdict(True, 1.0).to_payload()
    figure = {"kind": "circles", "circles": []}
    assert Verdict(True, 1.0, figure=figure).to_payload()["figure"] == figure
