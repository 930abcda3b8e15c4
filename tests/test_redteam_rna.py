"""Red team: forging the RNA modelling score, through the real sandbox, CPU, the small sample,
budgets counted in epochs.

RNA trains one dataset per trial (7 trials, 7 datasets), so one hostile evaluation carries one
attack per dataset (in the training phase only, so that the check passes) and the seventh
dataset trains the shipped baseline honestly beside them: every attack is judged from the
station's verdict on its own dataset, and the honest one must measure the number below (the honest
trial's accuracy on the tests' keyed data, same seeds and epochs). The attacks:

- APA: a network that looks the validation split up (through the documented hooks: it reads
  val.csv in create_network, from the data folder or the host's path, and matches each sequence);
  against the one-stage harness it scored R² 1.0;
- CRI-Off: predictions that look at the other sequences of the batch (their position in it);
- Modif: a large table embedded in the exported apply function;
- CRI-On: an export forged to call back into Python;
- PRS: replacing the harness's entry point with one that returns perfect-looking results;
- MRL: crashing this dataset on purpose (a trial that fails is not dropped);
- every process: reading the validation split or the scorer's inputs at import time.

One more evaluation stops at the check: a host callback in the network cannot even be exported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import shared_task_data

from evaluators.base import Verdict, create_task
from evaluators.rna.beacon import DATASETS
from station.core.config import ExecutorConfig
from station.core.run_types import Mount, RunResult
from station.executors import create_executor

TINY = {"size": "small", "max_epochs": 3, "patience": 2, "grace_s": 240, "trial_cpus": 0.25}
# the honest ncRNA trial (size small, 3 epochs, patience 2) on the tests' keyed data: 17 of 80 right,
# measured twice alike (on the old seed-0 data the one-stage harness had 15 of 80, 0.1875)
HONEST_NCRNA_ACCURACY = 0.2125
ATTACKS = {"APA": "lookup", "CRI-Off": "neighbours", "Modif": "table", "CRI-On": "callback", "PRS": "patch", "MRL": "crash"}
ATTACKED = [d.name for d in DATASETS if d.name in ATTACKS]

HOSTILE = '''
# ---- the attacks: one per dataset, in the training phase ----
import dataclasses
import glob
import json
import os

import jax
import numpy as np
import station_jax.rna as h

SETTINGS = json.loads(os.environ.get("STATION_TRIAL", '{"phase": "check", "trial": 0}'))
TRAINING = SETTINGS["phase"] == "train"
NAME = SETTINGS["datasets"][SETTINGS["trial"]]["name"] if "datasets" in SETTINGS else None
ATTACK = ATTACKS.get(NAME) if TRAINING else None

# at import time, in every process that runs this code: where are the scored sequences?
found = {
    "data": sorted(os.path.relpath(os.path.join(root, name), "task_data/rna")
                   for root, _, names in os.walk("task_data/rna") for name in names),
    "cwd": sorted(os.listdir(".")),
    "host": [path for path in HOST_PATHS if os.path.exists(path)],
    "anywhere": glob.glob("**/val.csv", recursive=True) + glob.glob("**/input_0.npy", recursive=True),
}
with open(f"probe/{SETTINGS['phase']}{SETTINGS['trial']}.json", "w") as f:
    json.dump(found, f)


class Lookup(nn.Module):
    """Each sequence's label, looked up by its nearest validation sequence."""

    keys: object
    values: object

    @nn.compact
    def __call__(self, x, deterministic=True):
        bias = self.param("bias", nn.initializers.zeros, (1,))
        distance = jnp.abs(x[:, None] - jnp.asarray(self.keys)[None]).sum((2, 3))
        return jnp.asarray(self.values)[jnp.argmin(distance, axis=1)] + bias[0]


class Neighbours(nn.Module):
    """Each sequence's position in its batch: it ranks the batch, not the sequence."""

    @nn.compact
    def __call__(self, x, deterministic=True):
        bias = self.param("bias", nn.initializers.zeros, (1,))
        return jnp.arange(x.shape[0], dtype=jnp.float32) + bias[0]


TABLE = np.random.default_rng(0).random((600_000,), dtype=np.float32)  # 2.4 MB


class Table(nn.Module):
    d_output: int

    @nn.compact
    def __call__(self, x, deterministic=True):
        return nn.Dense(self.d_output)(x).mean(axis=1) + jnp.asarray(TABLE)[: self.d_output]


def read_validation(name, length):
    for path in (f"task_data/rna/{name}/val.csv", HOST_VAL % name):
        try:
            sequences, labels = h.read_split(path, "regression")
        except (OSError, h.ContractError):
            continue
        return h.one_hot(h.encode(sequences, length)), labels.astype(np.float32)
    raise FileNotFoundError("no validation split anywhere")


_honest = create_network


def create_network(hparams):
    if ATTACK == "lookup":
        return Lookup(*read_validation(hparams["dataset"], hparams["max_seq_len"]))
    if ATTACK == "neighbours":
        return Neighbours()
    if ATTACK == "table":
        return Table(hparams["d_output"])
    if ATTACK == "crash":
        raise RuntimeError("this dataset looked worse")
    return _honest(hparams)


def forged(model, variables, dataset):
    """An export whose module calls back into Python, built by hand past JAX's own refusal."""
    from jax import export
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax

    leaves = jax.tree_util.tree_leaves(variables)
    specs = [jax.ShapeDtypeStruct(leaf.shape, leaf.dtype) for leaf in leaves]
    specs.append(jax.ShapeDtypeStruct((dataset["max_seq_len"], 4), jnp.float32))
    out = jax.ShapeDtypeStruct((1,), jnp.float32)

    def calls_back(*args):
        return (jax.pure_callback(lambda a: np.ones((1,), np.float32), out, args[-1]),)

    def honest_looking(*args):
        return (jnp.zeros((1,), jnp.float32) + 0 * args[-1][0, :1],)

    plain = export.export(jax.jit(honest_looking), platforms=["cpu"])(*specs)
    module = jax.jit(calls_back).lower(*specs).compiler_ir("stablehlo")
    artifact = _jax.mlir.serialize_portable_artifact(mlir.module_to_bytecode(module), "1.0.0")
    return bytes(dataclasses.replace(plain, mlir_module_serialized=artifact).serialize())


def fake_main(ns):
    n = 80
    return {"dataset": NAME, "epochs": 9, "best_epoch": 9, "stop": "early-stopping", "val_metric": 1.0,
            "curve": [1.0], "val_pred": np.zeros((n, 3), np.float32)}


if ATTACK == "callback":
    h.export_apply = forged
if ATTACK == "patch":
    h.main = fake_main
'''


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with shared_task_data(tmp_path_factory, "rna") as root:
        yield root


@pytest.fixture(scope="module")
def local(cache: Path):
    task = create_task("rna_modelling", TINY)
    task.data.ensure()
    executor = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())
    yield executor
    executor.close()


def evaluate(executor, code: str, mounts: list[Mount] | None = None) -> tuple[Any, RunResult, Verdict | None]:
    task = create_task("rna_modelling", TINY)
    result = task.execute(executor, code, mounts=mounts or [], label="redteam-rna")
    return task, result, (task.score(result) if result.status == "ok" else None)


@pytest.fixture(scope="module")
def hostile(local, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One evaluation, one attack per dataset; ncRNA trains honestly. What each process found at
    import time is written into `probe/`, a folder the test reads."""
    task = create_task("rna_modelling", TINY)
    data = task.data.ensure()
    probe = tmp_path_factory.mktemp("rna-probe")
    probe.chmod(0o777)
    host_paths = [
        *(str(data.input_dir / d.name / "val.csv") for d in DATASETS),
        *(str(data.scoring_dir(d.name) / "input_0.npy") for d in DATASETS),
        *(str(data.private_dir / d.name / "test.csv") for d in DATASETS),
    ]
    prelude = f"ATTACKS = {ATTACKS!r}\nHOST_PATHS = {host_paths!r}\nHOST_VAL = {str(data.input_dir / '%s' / 'val.csv')!r}\n"
    code = task.baselines()[0].code + "\n" + prelude + HOSTILE
    _, result, verdict = evaluate(local, code, mounts=[Mount(probe, "probe", writable=True)])
    assert result.status == "ok" and verdict is not None, (result.error, result.stderr[-3000:])
    lines = {d.name: next(line for line in verdict.details.splitlines() if line.startswith(f"{d.name} (trial")) for d in DATASETS}
    seen = {p.name: json.loads(p.read_text()) for p in probe.iterdir()}
    trials = {d.name: t for d, t in zip(DATASETS, result.value["trials"])}
    return {"verdict": verdict, "lines": lines, "seen": seen, "trials": trials, "result": result}


def test_the_honest_dataset_beside_the_attacks_scores_as_before(hostile) -> None:
    verdict = hostile["verdict"]
    assert verdict.metrics["ncRNA_Accuracy"] == pytest.approx(HONEST_NCRNA_ACCURACY, abs=1.5 / 80)  # one flip at most
    assert "Reported by the run: 3 epochs" in hostile["lines"]["ncRNA"]


def test_a_failed_dataset_is_never_dropped_from_the_score(hostile) -> None:
    """Crashing the worse datasets on purpose (MRL), or failing them any other way below, leaves
    the evaluation without a score: every dataset counts."""
    verdict = hostile["verdict"]
    assert not verdict.success and verdict.score is None
    failed = [name for name in ATTACKED if name != "CRI-Off"]
    assert verdict.details.startswith(f"No score: {len(failed)} of 7 datasets have no metric ({', '.join(failed)})")
    assert "no measured checkpoint" in hostile["lines"]["MRL"] and "this dataset looked worse" in hostile["lines"]["MRL"]


def test_looking_up_the_validation_split_through_the_hooks_finds_no_file(hostile) -> None:
    line = hostile["lines"]["APA"]
    assert "no measured checkpoint" in line and "FileNotFoundError: no validation split anywhere" in line
    assert hostile["verdict"].metrics["APA_R2"] is None


def test_a_patched_harness_entry_point_gets_nothing_measured(hostile) -> None:
    line = hostile["lines"]["PRS"]
    assert "no measured checkpoint: the run ended before it exported its apply function" in line
    assert hostile["trials"]["PRS"]["reported"]["val_metric"] == 1.0  # its claim, kept as a claim and not scored
    assert hostile["verdict"].metrics["PRS_R2"] is None


def test_scored_inputs_are_nowhere_at_import_time(hostile) -> None:
    """The submission's Python runs in the check and training runs only, never in the scorer's,
    and none of them holds a validation sequence or the scorer's inputs."""
    seen = hostile["seen"]
    assert set(seen) == {"check0.json", *(f"train{n}.json" for n in range(7))}
    for found in seen.values():
        assert found["data"] == sorted(f"{d.name}/train.csv" for d in DATASETS)
        assert found["host"] == [] and found["anywhere"] == []
        assert not {"scoring_data", "inbox", "outbox"} & set(found["cwd"])


def test_a_prediction_depends_on_its_own_sequence_only(hostile) -> None:
    """Its position in a batch: over the station's rows that would rank the batch, but the
    station calls the network one sequence at a time, so every sequence is at position 0: a
    constant, whose Spearman correlation counts 0."""
    assert hostile["verdict"].metrics["CRI-Off_Spearman"] == 0.0
    assert "spearman 0.0000; best checkpoint 1 of 3" in hostile["lines"]["CRI-Off"]


def test_a_large_table_inside_the_apply_function_is_refused(hostile) -> None:
    line = hostile["lines"]["Modif"]
    assert "no measured checkpoint: refused:" in line and "embeds 2,400,0" in line and "bytes of constants" in line


def test_a_forged_export_with_a_host_callback_is_refused_by_the_station(hostile) -> None:
    line = hostile["lines"]["CRI-On"]
    assert "no measured checkpoint: refused:" in line and "host callback (xla_ffi_python_cpu_callback)" in line
    # refused before any was scored (a checkpoint the trainer offered meanwhile is handed over, never measured)
    station = hostile["trials"]["CRI-On"]["station"]
    assert station["best"] is None and not any(value is not None for value in station["curve"])


def test_a_host_callback_in_the_network_cannot_be_exported(local) -> None:
    """jax.debug.print in apply: JAX cannot serialize it, so the check fails like any crash,
    before a trial starts."""
    code = '''import flax.linen as nn
import jax
import jax.numpy as jnp


class Printing(nn.Module):
    @nn.compact
    def __call__(self, x, deterministic=True):
        jax.debug.print("{}", x.sum())
        return nn.Dense(1)(x).mean(axis=1)[:, 0]


def create_network(hparams):
    return Printing()
'''
    _, result, _ = evaluate(local, code)
    assert result.status == "error" and "host_callbacks" in (result.error or ""), result.error
    assert "trials" not in (result.value or {})
