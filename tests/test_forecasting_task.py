"""The forecasting task through the real sandbox on the small simulated data, with budgets in
epochs: the baseline trains on the training split and the station scores its checkpoints on the
validation split in a sandbox of its own (early stopping is the station's); a trial that
diverges, crashes or hangs before any checkpoint is reported and leaves the evaluation without a
score; contract violations are refused clearly; only the training split is visible to a run;
seeds and hyperparameter draws are stable; three seeds run in parallel on a real local Ray
instance. The attacks on the score are in test_redteam_jax.py.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_baseline, shared_task_data
from test_forecasting_data import zapbench_windows

from evaluators.base import create_task
from evaluators.jaxtrain.station_jax import hooks
from evaluators.jaxtrain.station_jax.windows import CONTEXT
from station.core.config import ExecutorConfig
from station.core.run_types import Mount, RunResult
from station.executors import create_executor

TINY = {"size": "small", "trials": 2, "trial_budget_s": 600, "max_epochs": 3, "patience": 2, "grace_s": 90}
HEAD = '''import json, os
import jax.numpy as jnp
import flax.linen as nn
SETTINGS = json.loads(os.environ.get("STATION_TRIAL", '{"trial": 0, "phase": "check"}'))
TRAINING = SETTINGS["phase"] == "train"
TRIAL = SETTINGS["trial"]


class Linear(nn.Module):
    @nn.compact
    def __call__(self, x, training=False):
        h = nn.Dense(32)(jnp.swapaxes(x, 1, 2))
        return jnp.swapaxes(h, 1, 2)


def create_network(hparams):
    return Linear()
'''


PERSISTENCE = HEAD + '''

class Persistence(nn.Module):
    @nn.compact
    def __call__(self, x, training=False):
        unused = self.param("unused", nn.initializers.zeros, (1,))
        return jnp.repeat(x[:, -1:, :], 32, axis=1) + 0.0 * unused


def create_network(hparams):
    return Persistence()
'''


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with shared_task_data(tmp_path_factory, "forecast") as root:
        yield root


@pytest.fixture(scope="module")
def local(cache: Path):
    task = create_task("forecasting", TINY)
    executor = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())
    yield executor
    executor.close()


def evaluate(executor, code: str, timeout_s: float | None = None, **params):
    task = create_task("forecasting", {**TINY, **params})
    if timeout_s is not None:  # each run's hard limit, as a config's timeout_s sets it
        task.timeout_s = timeout_s
    result = task.execute(executor, code, mounts=[], label="test-forecast")
    return task, result, (task.score(result) if result.status == "ok" else None)


def baseline_run(tmp_path_factory: pytest.TempPathFactory, executor) -> tuple[RunResult, object]:
    """The baseline on TINY, once per test run: test_redteam_jax's honest control is the same run."""
    return shared_baseline(tmp_path_factory, "forecasting", TINY, lambda code: evaluate(executor, code))


def test_the_baseline_trains_and_the_station_scores_its_checkpoints(tmp_path_factory, local) -> None:
    # the epoch limit ends training, not the clock: the score must not depend on the machine's speed
    result, verdict = baseline_run(tmp_path_factory, local)
    assert result.status == "ok", result.stderr[-3000:]
    assert verdict.success, verdict.details
    assert -0.5 < verdict.score < 0  # minus a mean absolute error
    assert set(verdict.metrics) == {"Val_MAE_1", "Val_MAE_4", "Val_MAE_8", "Val_MAE_16", "Val_MAE_32"}
    trials = result.value["trials"]
    station, reported = trials[0]["station"], trials[0]["reported"]
    assert station["checkpoints"] == 3 == len(station["curve"]) == reported["epochs"]
    assert 1 <= station["best_checkpoint"] <= 3 and station["stop"] == "max-epochs"
    assert -verdict.score == pytest.approx(sum(t["station"]["best"]["mae"] for t in trials) / 2)
    assert "val_mae" not in reported and "curve" not in reported  # the run has no validation data
    assert "2 trials, scored by the station" in verdict.details and "persistence" in verdict.details
    assert "Reported by the run: 3 epochs" in verdict.details
    assert [t["seed"] for t in trials] == [0, 1]  # BASE_SEED 0 + trial
    assert "=== trial 1 ===" in result.stdout and "train loss" in result.stdout
    panels = [p["title"] for p in verdict.figure["panels"]]
    assert panels == ["validation MAE (measured by the station)", "training loss (reported by the run)"]


def test_the_station_measures_the_score_from_the_predictions_and_stops_early_itself(local) -> None:
    """A network that copies the last frame scores exactly the persistence predictor's MAE,
    which the dataset computes independently, whatever the trial itself claims. It never changes
    (learning rate 0, and its one parameter is unused): no checkpoint after the first is better,
    so the station stops the run after `patience` more, whatever the run's own epoch limit.
    (One evaluation for both facts: each was one evaluation of a network that never changes.)"""
    code = PERSISTENCE + '''

def create_optimizer(learning_rate):
    import optax
    return optax.sgd(0.0)
'''
    task, result, verdict = evaluate(local, code, trials=1, max_epochs=10, patience=2)
    assert verdict is not None and verdict.success, result.stderr[-3000:]
    persistence = task.dataset.references()["persistence"]
    assert -verdict.score == pytest.approx(persistence["mae"], rel=1e-5)
    trial = result.value["trials"][0]
    assert trial["station"]["stop"] == "early-stopping" and trial["station"]["checkpoints"] == 3
    assert trial["station"]["best_checkpoint"] == 1 and trial["reported"]["stop"] == "station"


def test_the_external_evaluation_scores_the_test_split_at_the_epoch_validation_picked(local) -> None:
    """The paper's external evaluation of ZAPBench, with 2 seeds: each seed scores minus the
    persistence MAE on the test windows ZAPBench scores (their context taken from the end of
    validation), built here from the raw arrays; the internal evaluation never scores them."""
    plan = create_task("forecasting", TINY).external(seeds=2)
    assert len(plan.runs) == 1 and plan.runs[0].trials == 2 and "test split" in plan.protocol
    result = plan.runs[0].execute(local, PERSISTENCE, mounts=[], label="test-external")
    verdict = plan.runs[0].score(result)
    assert verdict.success, verdict.details
    dataset = plan.runs[0].dataset
    windows = zapbench_windows({f"{split}_{part}": array for split in ("train", "val", "test")
                                for part, array in zip(("data", "condition_labels"), dataset.load(split))}, "test")
    expected = float(np.abs(np.repeat(windows[:, CONTEXT - 1:CONTEXT], 32, axis=1) - windows[:, CONTEXT:]).mean())
    assert verdict.samples == pytest.approx([-expected, -expected], rel=1e-5)
    assert verdict.score == pytest.approx(-expected, rel=1e-5)
    assert set(verdict.metrics) == {f"Test_MAE_{h}" for h in (1, 4, 8, 16, 32)}
    assert "test MAE" in verdict.details and "Scored on the test split" in verdict.details
    validation = dataset.references()["persistence"]["mae"]
    assert f"val MAE {validation:.6f}" in verdict.details and abs(validation - expected) > 1e-4
    internal = create_task("forecasting", TINY)
    assert not internal.external_mode and internal.scored_splits() == ("val",)  # the copy changed, not the task


def test_a_diverging_a_crashing_and_a_hanging_trial_are_reported_and_leave_no_score(local) -> None:
    code = HEAD + '''
import time

def compute_loss(predictions, targets, params, x):
    loss = jnp.mean(jnp.abs(predictions - targets))
    return loss * jnp.nan if TRAINING and TRIAL == 1 else loss


def create_network(hparams):
    if TRAINING and TRIAL == 2:
        raise RuntimeError("trial two breaks")
    if TRAINING and TRIAL == 3:
        time.sleep(600)
    return Linear()
'''
    # a trial trains in a few seconds; one epoch: trial 1's loss is not finite from the first
    task, result, verdict = evaluate(local, code, trials=4, timeout_s=30, max_epochs=1)
    assert result.status == "ok"
    statuses = [t["status"] for t in result.value["trials"]]
    assert statuses == ["ok", "ok", "error", "timeout"]
    assert not verdict.success and "3 of 4 trials have no checkpoint" in verdict.details
    assert "Trial 0 (seed 0): val MAE" in verdict.details
    assert "Trial 1: no measured checkpoint" in verdict.details
    assert "the training loss (epoch 1) is not finite" in verdict.details
    assert "Trial 2" in verdict.details and "trial two breaks" in verdict.details
    assert "Trial 3" in verdict.details and "timed out" in verdict.details
    assert result.value["trials"][3]["duration_s"] < 30 + 20  # killed at its own hard limit


def test_when_every_trial_crashes_the_evaluation_fails_like_a_crash(local) -> None:
    code = HEAD + '''
def create_network(hparams):
    if TRAINING:
        raise ValueError("only in training")
    return Linear()
'''
    _, result, _ = evaluate(local, code)
    assert result.status == "error" and "only in training" in result.error
    assert result.traceback and "create_network" in result.traceback


def test_a_crash_in_the_check_stops_before_any_trial(local) -> None:
    code = HEAD + '''
def create_network(hparams):
    return Linear(features=3)
'''
    _, result, _ = evaluate(local, code)
    assert result.status == "error" and "features" in result.error
    assert "trials" not in (result.value or {})


@pytest.mark.parametrize("body, message", [
    ('''
class Wrong(nn.Module):
    @nn.compact
    def __call__(self, x, training=False):
        return nn.Dense(8)(x)


def create_network(hparams):
    return Wrong()
''', "must map (batch, 4, 64) to (batch, 32, 64)"),
    ('''
def training_loop():
    pass
''', "defines training_loop()"),
    ('BASE_SEED = "seven"\n', "BASE_SEED must be an int"),
])
def test_contract_violations_are_reported_clearly(local, body: str, message: str) -> None:
    _, result, verdict = evaluate(local, HEAD + body, trials=1)
    assert verdict is not None and not verdict.success and verdict.score is None
    assert message in verdict.details, verdict.details


def test_test_mode_probes_the_data_and_the_test_split_is_out_of_reach(local, cache: Path) -> None:
    task = create_task("forecasting", TINY)
    private = task.dataset.ensure().private_dir
    code = HEAD + f'''
def test():
    import os
    print("LISTING", sorted(os.listdir("task_data/forecasting")))
    print("HARNESS", sorted(n for n in os.listdir("station_jax") if n.endswith(".py")))
    try:
        print("PRIVATE", os.listdir({str(private)!r}))
    except OSError as err:
        print("PRIVATE refused", type(err).__name__)
    try:
        open("station_jax/forecast.py", "a").write("# changed")
    except OSError as err:
        print("HARNESS read-only", type(err).__name__)
'''
    _, result, verdict = evaluate(local, code)
    assert not verdict.success and verdict.details == "Test mode - no scoring"
    listing = next(line for line in result.stdout.splitlines() if line.startswith("LISTING"))
    assert listing == "LISTING ['train_condition_labels.npy', 'train_data.npy']"  # no val, no test
    assert "forecast.py" in result.stdout and "HARNESS read-only" in result.stdout
    assert "test_data.npy" not in result.stdout.split("LISTING")[1]
    assert (private / "test_data.npy").exists()


def test_hyperparameter_draws_and_seeds_are_stable() -> None:
    space = {"learning_rate": hooks.loguniform(1e-4, 1e-2), "hidden": hooks.choice([32, 64, 128]),
             "depth": hooks.randint(1, 4), "dropout": hooks.uniform(0.0, 0.5), "fixed": [1, 2]}
    first = hooks.sample_hyperparameters(space, 5)
    assert first == hooks.sample_hyperparameters(dict(reversed(list(space.items()))), 5)  # order-free
    assert first["fixed"] == [1, 2] and first["hidden"] in (32, 64, 128) and 1 <= first["depth"] < 4
    assert 1e-4 <= first["learning_rate"] <= 1e-2
    draws = {json.dumps(hooks.sample_hyperparameters(space, seed), sort_keys=True) for seed in range(8)}
    assert len(draws) > 4
    with pytest.raises(hooks.ContractError):
        hooks.sample_hyperparameters(["not", "a", "dict"], 0)


class RecordingExecutor:
    """Our own executor protocol, recording the specs (to see GPU placement without a GPU)."""

    name = "recording"

    def __init__(self, gpus: int) -> None:
        self.gpus, self.specs = gpus, []

    def gpu_count(self) -> int:
        return self.gpus

    def run(self, spec):
        self.specs.append(spec)
        settings = json.loads(spec.env["STATION_TRIAL"])
        value = {"checked": True} if settings["phase"] == "check" else {"contract_error": "recorded only"}
        return RunResult(status="ok", value=value)


def test_trials_ask_for_a_gpu_each_when_the_executor_has_gpus(cache: Path) -> None:
    task = create_task("forecasting", TINY)
    with_gpu, without = RecordingExecutor(gpus=1), RecordingExecutor(gpus=0)
    task.execute(with_gpu, "x = 1", mounts=[], label="gpu")
    task.execute(without, "x = 1", mounts=[], label="cpu")
    check, *trials = with_gpu.specs
    assert check.num_gpus == 0 and json.loads(check.env["STATION_TRIAL"])["phase"] == "check"
    assert [s.num_gpus for s in trials] == [1.0, 1.0] and all(s.memory_mb is None for s in trials)
    assert all(s.env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false" for s in trials)
    assert [s.num_gpus for s in without.specs[1:]] == [0.0, 0.0]
    assert all(s.memory_mb == task.memory_mb for s in without.specs[1:])
    cpu_only = RecordingExecutor(gpus=1)
    task.execute(cpu_only, "x = 1", mounts=[], label="cpu-only", cpu_only=True)
    assert [s.num_gpus for s in cpu_only.specs[1:]] == [0.0, 0.0]


BARRIER = '''

# test only: each training trial waits until all three have started, which only trials that run
# side by side can do (one after another, the first would wait in vain)
import json as _json, os as _os, time as _time
_create = create_network


def create_network(hparams):
    trial = _json.loads(_os.environ["STATION_TRIAL"])
    if trial["phase"] == "train":
        open(f"barrier/{trial['trial']}", "w").close()
        deadline = _time.monotonic() + 120
        while len(_os.listdir("barrier")) < 3:
            if _time.monotonic() > deadline:
                raise RuntimeError("the other trials never started alongside this one")
            _time.sleep(0.05)
    return _create(hparams)
'''


def test_three_seeds_train_in_parallel_on_a_local_ray_instance(cache: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    # one epoch each: the trials' start side by side is what is checked, not their training
    task = create_task("forecasting", {**TINY, "trials": 3, "max_epochs": 1, "trial_cpus": 0.5})
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    ray = create_executor(ExecutorConfig(kind="ray", ray_num_cpus=2), hide=task.private_paths())
    try:
        result = task.execute(ray, task.baselines()[0].code + BARRIER, label="test-forecast-ray",
                              mounts=[Mount(barrier, "barrier", writable=True)])
    finally:
        ray.close()
    assert result.status == "ok", result.stderr[-3000:]
    assert result.value["check"]["checked"]
    assert sorted(p.name for p in barrier.iterdir()) == ["0", "1", "2"]
    verdict = task.score(result)
    assert verdict.success and "3 trials, scored by the station" in verdict.details, verdict.details
    assert [t["seed"] for t in result.value["trials"]] == [0, 1, 2]


def test_a_scripted_station_researches_forecasting_end_to_end(cache: Path, tmp_path: Path) -> None:
    """Scripted agents submit variants of the MLP; each is checked, trained and scored. Eleven
    ticks: the first variant comes at tick 5, the first built on persistence at tick 10 (scored at
    tick 11; each later one would be one more evaluation, checking nothing new). Then
    `station external` runs the best of them again on the test split, with two seeds."""
    from helpers import research_station_evaluations, station_cli

    rows = research_station_evaluations(tmp_path / "st", "forecast-station", {
        "tasks": [{"evaluator": "forecasting", "params": {**TINY, "trials": 1, "max_epochs": 1}}],
        "executor": {"max_parallel": 1}}, ticks=11, agents=2)
    system = [r for r in rows if r["author"] == "System"]
    agents = [r for r in rows if r["author"] != "System"]
    assert [r["title"] for r in system] == ["Shared-Neuron MLP"] and system[0]["status"] == "finished"
    assert system[0]["score"] < 0
    assert len(agents) >= 2 and sum(r["status"] == "finished" and r["score"] < 0 for r in agents) >= 2
    assert any("persistence" in r["title"] for r in agents)
    best = max((r for r in rows if r["status"] == "finished"), key=lambda r: r["score"])
    done = station_cli("external", "st", "--seeds", "2", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (shown,) = json.loads(done.stdout)
    assert shown["title"] == best["title"] and shown["internal"] == best["score"]
    assert shown["status"] == "finished" and len(shown["samples"]) == 2 and shown["mean"] < 0
    assert shown["se"] == pytest.approx(abs(shown["samples"][0] - shown["samples"][1]) / 2)
    assert "test split" in shown["protocol"] and set(shown["metrics"]) >= {"Test_MAE_1", "Test_MAE_32"}
    assert "run 1 of 1" in done.stderr
