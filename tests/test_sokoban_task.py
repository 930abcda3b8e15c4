"""The Sokoban task through the real sandbox with tiny budgets (counted in env steps): the
baseline trains on the training levels only, hands over its exported policy and final
parameters, and the station plays the held-out levels with them and counts solves by replaying
the actions; the six-argument training_step hook and recurrent networks work; a diverging trial
counts as 0 solved and a broken network is a clear contract error.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_baseline, shared_task_data

from evaluators.base import create_task
from station.core.config import ExecutorConfig
from station.core.run_types import RunResult
from station.executors import create_executor

TINY = {"grid": 5, "boxes": 1, "train_levels": 300, "eval_levels": 40, "max_steps": 30, "n_envs": 16,
        "unroll": 8, "env_steps": 4000, "trials": 2, "trial_budget_s": 600, "grace_s": 120}
HEAD = '''import json, os
import jax, jax.numpy as jnp
import flax.linen as nn
SETTINGS = json.loads(os.environ.get("STATION_TRIAL", '{"trial": 0, "phase": "check"}'))
TRAINING, TRIAL = SETTINGS["phase"] == "train", SETTINGS["trial"]


class Small(nn.Module):
    @nn.compact
    def __call__(self, obs, done, rnn_state=None):
        x = nn.relu(nn.Dense(32)(obs.reshape((obs.shape[0], -1))))
        return nn.Dense(4)(x), nn.Dense(1)(x)[:, 0]


def create_network(hparams):
    return Small()
'''


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    with shared_task_data(tmp_path_factory, "sokoban"):  # the levels made once per test run
        executor = create_executor(ExecutorConfig(kind="local"), hide=create_task("sokoban", TINY).private_paths())
        yield executor
        executor.close()


def evaluate(executor, code: str, **params):
    task = create_task("sokoban", {**TINY, **params})
    result = task.execute(executor, code, mounts=[], label="test-sokoban")
    return task, result, (task.score(result) if result.status == "ok" else None)


def baseline_run(tmp_path_factory: pytest.TempPathFactory, executor) -> tuple[RunResult, object]:
    """The baseline on TINY, once per test run: test_redteam_sokoban's honest control is the same run."""
    return shared_baseline(tmp_path_factory, "sokoban", TINY, lambda code: evaluate(executor, code))


def test_the_baseline_trains_and_the_station_plays_the_held_out_levels(tmp_path_factory, local) -> None:
    result, verdict = baseline_run(tmp_path_factory, local)
    assert verdict is not None and verdict.success, (result.error, result.stderr[-3000:])
    trials = result.value["trials"]
    assert [t["seed"] for t in trials] == [0, 1]
    assert all(t["reported"]["stop"] == "step-budget" and t["reported"]["env_steps"] == 3968 for t in trials)
    # one checkpoint per trial, the final parameters: nothing is picked on the held-out levels
    assert all(t["station"]["checkpoints"] == 1 and t["station"]["best_checkpoint"] == 1 for t in trials)
    rates = [t["station"]["best"]["score"] for t in trials]
    assert verdict.score == pytest.approx(round(float(np.mean(rates)), 1))
    assert all(f"solved {round(r * 40 / 100)} of 40 held-out levels" in verdict.details for r in rates)
    assert "scored by the station" in verdict.details and "Reported by the run: 3,968 env steps" in verdict.details
    assert "A uniformly random policy solves" in verdict.details


@pytest.mark.parametrize("gpus, devices, warned", [
    (1.0, ["cpu"], True),                      # a GPU was scheduled, but JAX has no CUDA build there
    (1.0, ["gpu (NVIDIA H100 80GB HBM3)"], False),
    (0.0, ["cpu"], False),
])
def test_a_gpu_that_jax_did_not_use_is_pointed_out(local, gpus: float, devices: list[str], warned: bool) -> None:
    task = create_task("sokoban", {**TINY, "trials": 1})
    idle = np.zeros((len(task.levels.ensure().eval_levels()), task.max_steps), np.int8)
    best = task.measure(0, {"output_0": idle})
    value = {"gpus_per_trial": gpus, "trials": [
        {"trial": 0, "status": "ok", "seed": 0, "reported": {"seed": 0, "device": devices},
         "station": {"checkpoints": 1, "curve": [best["metric"]], "best_checkpoint": 1, "best": best,
                     "stop": "max-epochs", "failure": None, "notes": []}}]}
    verdict = task.score(RunResult(status="ok", value=value))
    assert verdict.success
    assert ("JAX saw only the CPU" in verdict.details) is warned, verdict.details


def test_a_custom_training_step_and_a_recurrent_network_are_used_and_a_diverging_trial_counts_as_0(local) -> None:
    """One evaluation for both (each evaluation is a check and its trials): trial 0 trains a
    recurrent network with its own training_step, which the harness uses; the same step makes
    trial 1 diverge, which is reported and counts as 0 solved, while trial 0 counts."""
    code = HEAD + '''

class Recurrent(nn.Module):
    @nn.compact
    def __call__(self, obs, done, rnn_state=None):
        if rnn_state is None:
            rnn_state = jnp.zeros((obs.shape[0], 16))
        rnn_state = jnp.where(done[:, None], 0.0, rnn_state)
        x = nn.Dense(16)(obs.reshape((obs.shape[0], -1)))
        rnn_state = jnp.tanh(x + nn.Dense(16)(rnn_state))
        return nn.Dense(4)(rnn_state), nn.Dense(1)(rnn_state)[:, 0], rnn_state


def create_network(hparams):
    return Recurrent()


def training_step(network, optimizer, params, opt_state, batch, hparams):
    from station_jax.sokoban import default_training_step
    print("CUSTOM STEP", batch["observations"].shape, batch["initial_rnn_states"].shape)
    params, opt_state = default_training_step(network, optimizer, params, opt_state, batch, hparams)
    if TRAINING and TRIAL == 1:
        params = jax.tree_util.tree_map(lambda p: p * jnp.nan, params)
    return params, opt_state
'''
    _, result, verdict = evaluate(local, code)
    assert verdict is not None and verdict.success, (result.error, result.stderr[-3000:])
    assert "CUSTOM STEP (16, 8, 5, 5, 8) (16, 16)" in result.stdout
    trial = result.value["trials"][0]
    assert trial["reported"]["recurrent"] is True and trial["station"]["best"] is not None
    kept = trial["station"]["best"]["score"]
    assert verdict.score == pytest.approx(round(kept / 2, 1))  # the diverged seed counts as 0 solved
    assert "(1 failed, counted as 0.0)" in verdict.details
    assert "Trial 1: no measured checkpoint" in verdict.details and "diverged" in verdict.details


@pytest.mark.parametrize("body, message", [
    ('''
class Wrong(nn.Module):
    @nn.compact
    def __call__(self, obs, done, rnn_state=None):
        return nn.Dense(5)(obs.reshape((obs.shape[0], -1))), jnp.zeros((obs.shape[0], 2))


def create_network(hparams):
    return Wrong()
''', "apply must return logits of shape (batch, 4) and value of shape (batch,)"),
    ('''
class Three(nn.Module):
    @nn.compact
    def __call__(self, obs, done, rnn_state=None):
        return nn.Dense(4)(obs.reshape((obs.shape[0], -1)))


def create_network(hparams):
    return Three()
''', "must return (logits, value) or (logits, value, rnn_state)"),
])
def test_a_broken_network_is_a_clear_contract_error(local, body: str, message: str) -> None:
    _, result, verdict = evaluate(local, HEAD + body, trials=1)
    assert verdict is not None and not verdict.success
    assert message in verdict.details, verdict.details


def test_the_level_set_is_held_out_and_reused(local, tmp_path: Path) -> None:
    task = create_task("sokoban", TINY)
    levels = task.levels.ensure()
    train = np.load(levels.train_dir / "train_levels.npy")
    held = levels.eval_levels()
    assert train.shape == (300, 5, 5) and held.shape == (40, 5, 5)
    assert not {lv.tobytes() for lv in train} & {lv.tobytes() for lv in held}
    # a run's data folder holds the training levels only; the scorer's the held-out ones; both are hidden
    assert sorted(p.name for p in task.data_dir().iterdir()) == ["train_levels.npy"]
    assert sorted(p.name for p in task.scoring_dir(0).iterdir()) == ["eval_levels.npy"]
    assert task.private_paths() == [levels.dir, levels.secret_dir]  # and the key the levels were drawn with
    stamp = (levels.train_dir / "train_levels.npy").stat().st_mtime_ns
    assert create_task("sokoban", TINY).levels.ensure().dir == levels.dir
    assert (levels.train_dir / "train_levels.npy").stat().st_mtime_ns == stamp
    assert 0.0 <= levels.random_solve_rate(30) < 1.0
