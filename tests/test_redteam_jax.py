"""Red team: forging a trained JAX task's score (forecasting), through the real sandbox, CPU, tiny
budgets counted in epochs. Each attack is refused or scores no better than what it honestly
computes, and the shipped baseline beside it scores exactly as before (the number below: the
baseline's two-stage score on the tests' keyed data, same seeds and epochs, measured twice alike;
on the old seed-0 data: -0.26784, one-stage harness, which the two-stage score matched within 0.002).

The attacks: replacing the harness's entry point; a network that looks the validation split up
(through the documented hooks, or through the host's path); reading scored inputs at import time;
a prediction that looks at other windows; host callbacks and a large table inside the exported
function; a symlinked checkpoint that points the station at its own data; crashing the worse
seed on purpose; ignoring the station's epoch limit; poisoning the evaluation's compilation cache.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_task_data
from test_forecasting_task import baseline_run

from evaluators.base import create_task
from evaluators.jaxtrain.station_jax.windows import gather
from station.core.config import ExecutorConfig
from station.core.run_types import Mount
from station.executors import create_executor

TINY = {"size": "small", "trials": 1, "trial_budget_s": 600, "max_epochs": 2, "patience": 2, "grace_s": 120}
BASELINE_SCORE = -0.2723660774844095  # size small, 2 trials, 3 epochs, on the tests' fixed key (see the test)
HEAD = '''import json, os
import numpy as np
import jax, jax.numpy as jnp
import flax.linen as nn
SETTINGS = json.loads(os.environ.get("STATION_TRIAL", '{"trial": 0, "phase": "check"}'))
TRAINING = SETTINGS["phase"] == "train"
'''


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with shared_task_data(tmp_path_factory, "forecast") as root:
        yield root


@pytest.fixture(scope="module")
def local(cache: Path):
    task = create_task("forecasting", TINY)
    task.dataset.ensure()
    executor = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())
    yield executor
    executor.close()


def evaluate(executor, code: str, mounts: list[Mount] | None = None, **params):
    task = create_task("forecasting", {**TINY, **params})
    result = task.execute(executor, code, mounts=mounts or [], label="redteam-forecast")
    return task, result, (task.score(result) if result.status == "ok" else None)


def first_frame_mae(task) -> float:
    """The MAE of predicting every target frame as the window's first input frame: what a
    network that copies x[0] scores, computed here from the data."""
    folder = task.dataset.scored_windows()
    x, y = gather(np.load(folder / "frames.npy"), np.load(folder / "starts.npy"))
    return float(np.abs(np.repeat(x[:, :1], 32, axis=1) - y).mean())


def test_the_honest_baseline_scores_as_before(tmp_path_factory, local) -> None:
    result, verdict = baseline_run(tmp_path_factory, local)  # 2 trials, 3 epochs; made once per test run
    assert verdict is not None and verdict.success, result.stderr[-3000:]
    assert verdict.score == pytest.approx(BASELINE_SCORE, abs=2e-3)
    assert "scored by the station from their checkpoints" in verdict.details
    assert "Reported by the run" in verdict.details


def test_replacing_the_harness_entry_point_gets_no_score(local) -> None:
    code = HEAD + '''
import station_jax.forecast as h


def fake(ns):
    if not TRAINING:
        return {"checked": True}
    return {"seed": 0, "epochs": 1, "val_mae": 0.0, "curve": [0.0], "val_pred": np.zeros((3, 32, 64), np.float32)}


h.main = fake


def create_network(hparams):
    return nn.Dense(32)
'''
    _, result, verdict = evaluate(local, code)
    assert result.status == "ok" and verdict is not None
    assert not verdict.success and verdict.score is None
    assert "the run ended before it exported its apply function" in verdict.details


def test_a_network_that_looks_up_the_validation_split_finds_no_file(local, cache: Path) -> None:
    """Through the documented hooks: create_network reads the validation split to build a lookup
    table (MAE 0 against the one-stage harness). The split is in no folder the run can open."""
    task = create_task("forecasting", TINY)
    host_val = task.dataset.input_dir / "val_data.npy"
    code = HEAD + f'''

class Lookup(nn.Module):
    table: object

    @nn.compact
    def __call__(self, x, training=False):
        bias = self.param("bias", nn.initializers.zeros, (1,))
        frames = jnp.asarray(self.table)
        match = jnp.argmin(jnp.abs(frames[None, :-35, :] - x[:, :1, :]).sum(-1), axis=1)
        idx = match[:, None] + 4 + jnp.arange(32)[None, :]
        return frames[idx] + bias


def create_network(hparams):
    for path in ("task_data/forecasting/val_data.npy", {str(host_val)!r}):
        try:
            return Lookup(np.load(path))
        except OSError:
            pass
    raise FileNotFoundError("no validation split anywhere")
'''
    _, result, verdict = evaluate(local, code)
    assert verdict is None and result.status == "error"
    assert "no validation split anywhere" in result.error


def test_scored_inputs_are_nowhere_at_import_time(local, tmp_path: Path) -> None:
    """The submission's Python runs only in the check and training runs: at import time it looks
    for the validation split and the scorer's inputs wherever they could be, and writes what it
    found into a folder the test reads."""
    task = create_task("forecasting", TINY)
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o777)
    scoring = task.scoring_dir(0)
    code = HEAD + f'''
import glob
found = {{
    "data": sorted(os.listdir("task_data/forecasting")),
    "cwd": sorted(os.listdir(".")),
    "host": [p for p in ({str(task.dataset.input_dir / "val_data.npy")!r}, {str(scoring / "input_0.npy")!r})
             if os.path.exists(p)],
    "anywhere": glob.glob("**/val_data.npy", recursive=True) + glob.glob("**/input_0.npy", recursive=True),
}}
with open(f"probe/{{SETTINGS['phase']}}{{SETTINGS['trial']}}.json", "w") as f:
    json.dump(found, f)


class Linear(nn.Module):
    @nn.compact
    def __call__(self, x, training=False):
        return jnp.swapaxes(nn.Dense(32)(jnp.swapaxes(x, 1, 2)), 1, 2)


def create_network(hparams):
    return Linear()
'''
    _, result, verdict = evaluate(local, code, mounts=[Mount(probe, "probe", writable=True)])
    assert verdict is not None and verdict.success, verdict.details if verdict else result.stderr[-3000:]
    seen = {p.name: json.loads(p.read_text()) for p in probe.iterdir()}
    assert set(seen) == {"check0.json", "train0.json"}  # never in the scorer's run
    for found in seen.values():
        assert found["data"] == ["train_condition_labels.npy", "train_data.npy"]
        assert found["host"] == [] and found["anywhere"] == []
        assert "scoring_data" not in found["cwd"] and "inbox" not in found["cwd"]


def test_a_prediction_cannot_look_at_other_windows(local) -> None:
    """In a batch of consecutive windows, window b+t+4's first input frame is window b's target t.
    Called one window at a time, the same network can only copy its own first frame."""
    code = HEAD + '''

class Neighbours(nn.Module):
    @nn.compact
    def __call__(self, x, training=False):
        bias = self.param("bias", nn.initializers.zeros, (1,))
        batch = x.shape[0]
        idx = jnp.clip(jnp.arange(batch)[:, None] + jnp.arange(32)[None, :] + 4, 0, batch - 1)
        return x[idx, 0, :] + 0.0 * bias


def create_network(hparams):
    return Neighbours()
'''
    task, result, verdict = evaluate(local, code)
    assert verdict is not None and verdict.success, result.stderr[-3000:]
    assert -verdict.score == pytest.approx(first_frame_mae(task), rel=1e-5)
    assert -verdict.score > 0.1  # nowhere near the lookup's near-zero MAE


def test_a_host_callback_in_the_network_is_refused(local) -> None:
    """jax.debug.print (or jax.pure_callback) in apply: JAX cannot even serialize it, so the check
    run fails like any crash, before a trial starts."""
    code = HEAD + '''

class Printing(nn.Module):
    @nn.compact
    def __call__(self, x, training=False):
        jax.debug.print("{}", x.sum())
        return jnp.swapaxes(nn.Dense(32)(jnp.swapaxes(x, 1, 2)), 1, 2)


def create_network(hparams):
    return Printing()
'''
    _, result, _ = evaluate(local, code)
    assert result.status == "error" and "host_callbacks" in result.error
    assert "trials" not in (result.value or {})


def test_a_forged_export_with_a_host_callback_is_refused_by_the_station(local) -> None:
    """The submission replaces the harness's export with one whose module calls back into Python
    (built by hand past JAX's own refusal): the station's scorer refuses it before running it."""
    code = HEAD + '''
import dataclasses
import station_jax.forecast as h
from jax import export
from jax._src.interpreters import mlir
from jax._src.lib import _jax


def forged(model, variables, n_neurons):
    leaves = jax.tree_util.tree_leaves(variables)
    specs = [jax.ShapeDtypeStruct(l.shape, l.dtype) for l in leaves]
    specs.append(jax.ShapeDtypeStruct((4, n_neurons), jnp.float32))
    out = jax.ShapeDtypeStruct((32, n_neurons), jnp.float32)

    def calls_back(*args):
        return (jax.pure_callback(lambda a: np.zeros((32, n_neurons), np.float32), out, args[-1]),)

    def honest_looking(*args):
        return (jnp.zeros((32, n_neurons), jnp.float32) + 0 * args[-1][:1],)

    plain = export.export(jax.jit(honest_looking), platforms=["cpu"])(*specs)
    module = jax.jit(calls_back).lower(*specs).compiler_ir("stablehlo")
    artifact = _jax.mlir.serialize_portable_artifact(mlir.module_to_bytecode(module), "1.0.0")
    return bytes(dataclasses.replace(plain, mlir_module_serialized=artifact).serialize())


h.export_apply = forged


class Linear(nn.Module):
    @nn.compact
    def __call__(self, x, training=False):
        return jnp.swapaxes(nn.Dense(32)(jnp.swapaxes(x, 1, 2)), 1, 2)


def create_network(hparams):
    return Linear()
'''
    _, result, verdict = evaluate(local, code)
    assert result.status == "ok" and verdict is not None and not verdict.success
    assert "refused" in verdict.details and "host callback (xla_ffi_python_cpu_callback)" in verdict.details


def test_a_large_table_inside_the_network_is_refused(local) -> None:
    code = HEAD + '''

TABLE = np.random.default_rng(0).random((600_000,), dtype=np.float32)  # 2.4 MB


class Table(nn.Module):
    @nn.compact
    def __call__(self, x, training=False):
        h = nn.Dense(32)(jnp.swapaxes(x, 1, 2))
        return jnp.swapaxes(h, 1, 2) + jnp.asarray(TABLE)[:32].reshape(1, 32, 1)


def create_network(hparams):
    return Table()
'''
    _, result, verdict = evaluate(local, code)
    assert verdict is not None and not verdict.success, result.stderr[-3000:]
    assert "embeds" in verdict.details and "bytes of constants" in verdict.details


def test_a_symlinked_checkpoint_does_not_lead_the_station_to_its_own_data(local) -> None:
    """The trainer cannot see the validation split, but the station can: a checkpoint that is a
    link to it would feed the station's own data to the exported function as its parameters."""
    task = create_task("forecasting", TINY)
    target = task.dataset.input_dir / "val_data.npy"
    code = HEAD + f'''
import time
import station_jax.forecast as h


def linked(cfg, hooks, data, model, trainer, trained, rest, opt_state, key, exchange):
    os.symlink({str(target)!r}, "checkpoints/checkpoint.npz")
    while os.path.lexists("checkpoints/checkpoint.npz") and not exchange.stopped():
        time.sleep(0.05)
    return {{"epochs": 1}}


h.train = linked


class Linear(nn.Module):
    @nn.compact
    def __call__(self, x, training=False):
        return jnp.swapaxes(nn.Dense(32)(jnp.swapaxes(x, 1, 2)), 1, 2)


def create_network(hparams):
    return Linear()
'''
    _, result, verdict = evaluate(local, code)
    assert verdict is not None and not verdict.success, result.stderr[-3000:]
    assert "the checkpoint is not a regular file" in verdict.details


def test_crashing_the_worse_seed_on_purpose_leaves_no_score(local) -> None:
    """Dropping a crashed trial from the mean would let a submission keep its best seeds only."""
    code = create_task("forecasting", TINY).baselines()[0].code + '''

_honest = create_network


def create_network(hparams):
    import json, os
    settings = json.loads(os.environ["STATION_TRIAL"])
    if settings["phase"] == "train" and settings["trial"] == 1:
        raise RuntimeError("this seed looked worse")
    return _honest(hparams)
'''
    _, result, verdict = evaluate(local, code, trials=2)
    assert result.status == "ok" and verdict is not None
    assert not verdict.success and verdict.score is None
    assert "1 of 2 trials have no checkpoint" in verdict.details and "this seed looked worse" in verdict.details


def test_the_station_ends_training_at_its_own_epoch_limit(local) -> None:
    """The run raises its own epoch limit (its settings are only an environment variable); the
    station takes no more than its limit and tells the run to stop."""
    code = create_task("forecasting", TINY).baselines()[0].code + '''
import json as _json, os as _os
_os.environ["STATION_TRIAL"] = _json.dumps({**_json.loads(_os.environ["STATION_TRIAL"]), "max_epochs": 50})
'''
    _, result, verdict = evaluate(local, code)
    assert verdict is not None and verdict.success, result.stderr[-3000:]
    trial = result.value["trials"][0]
    assert trial["station"]["checkpoints"] == 2 and trial["station"]["stop"] == "max-epochs"
    assert trial["reported"]["stop"] == "station" and trial["reported"]["epochs"] == 3


def test_a_poisoned_compilation_cache_stays_inside_its_own_evaluation(local, tmp_path: Path) -> None:
    """An evaluation's runs share a JAX compilation cache (the trials load what the check compiled).
    A submission that overwrites every entry in it with garbage and plants one of its own harms
    only itself: its trials still train and are scored (a bad entry is compiled again), the next
    evaluation starts with an empty cache, and the station's scorer has no cache at all."""
    from evaluators.jaxtrain.two_stage import COMPILE_CACHE_TARGET, TrialWatch

    poison = create_task("forecasting", TINY).baselines()[0].code + '''
import json as _json, os as _os
_cache = _os.environ["JAX_COMPILATION_CACHE_DIR"]
print("CACHE", _json.loads(_os.environ["STATION_TRIAL"])["phase"], sorted(_os.listdir(_cache)))
for _name in _os.listdir(_cache):
    with open(_os.path.join(_cache, _name), "wb") as _f:
        _f.write(b"not an executable")
with open(_os.path.join(_cache, "jit_step-planted-cache"), "wb") as _f:
    _f.write(b"planted")
'''
    task, result, verdict = evaluate(local, poison)
    assert verdict is not None and verdict.success, result.stderr[-3000:]
    assert "jit_step-planted-cache" in result.stdout  # the trial saw the check's cache, planted entry and all
    _, probe, _ = evaluate(local, HEAD + "\ndef test():\n    print('NEXT', sorted(os.listdir(os.environ['JAX_COMPILATION_CACHE_DIR'])))\n")
    assert "NEXT []" in probe.stdout, probe.stdout
    watch = TrialWatch(tmp_path, task.stop_rule(0), lambda outputs: {}, max_checkpoint_bytes=1 << 20)
    scorer = task._scorer_spec(task.run_spec("", mounts=[], label="t"), 0, watch)
    assert not any(m.target == COMPILE_CACHE_TARGET for m in scorer.mounts)
    assert not any(key.startswith("JAX_") for key in scorer.env)


def test_windows_a_network_spoils_are_not_dropped_from_the_mean(cache) -> None:
    """A network that answers NaN (or nothing) on the windows it forecasts badly would score only
    its good ones if the sums left those out: the station refuses any checkpoint whose sums do not
    hold every scored window, or that had a non-finite prediction."""
    task = create_task("forecasting", TINY)
    folder = task.dataset.scored_windows()
    _, targets = gather(np.load(folder / "frames.npy"), np.load(folder / "starts.npy"))
    every = np.abs(targets).sum(axis=(0, 2), dtype=np.float64)[None]
    honest = {"abs_error": every, "windows": np.array([len(targets)]), "nonfinite": np.array(0)}
    assert task.measure(0, honest)["mae"] > 0
    good_half = np.abs(targets[::2]).sum(axis=(0, 2), dtype=np.float64)[None]
    with pytest.raises(ValueError, match="NaN or infinite"):
        task.measure(0, {**honest, "abs_error": good_half, "windows": np.array([len(targets[::2])]),
                         "nonfinite": np.array(7)})
    with pytest.raises(ValueError, match="windows, not"):
        task.measure(0, {**honest, "abs_error": good_half, "windows": np.array([len(targets[::2])])})
    with pytest.raises(ValueError, match="shapes"):
        task.measure(0, {**honest, "abs_error": every[0]})
