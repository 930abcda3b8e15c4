"""Red team: re-creating the scored data inside a training run (issue 50).

Forecasting, RNA and Sokoban data come from simulators that ship with the station, and a training
run sees its training split. The attack pastes the station's current simulator source (read with
`inspect.getsource`, so it follows every change to it) into a sandboxed run whose only data is the
task's training split, mounted as the task mounts it; it searches the public seeds for one whose
draw reproduces that split bit for bit, and re-draws the scored splits (validation, test, held-out
levels) from it: a network could then carry the answers in its parameters.

Against the old draw (the public seed given to the simulator directly) the attack finds the seed
and every scored split exactly, so the attack is real. Against the datasets the tasks now build
(seeds keyed by the data root's secret, evaluators/secret.py) no public seed reproduces the
training split, and the re-drawn scored splits are other data. The searches stop at a few dozen
seeds for the slow simulators (the point is the rule, not the range: a keyed seed is one of 2**63).
"""

from __future__ import annotations

import inspect
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_task_data

from evaluators import secret
from evaluators.base import create_task
from evaluators.forecasting import simulate as forecast_simulator
from evaluators.forecasting.dataset import ForecastDataset
from evaluators.rna import simulate as rna_simulator
from evaluators.rna.dataset import RnaData
from evaluators.sokoban import levels as level_generator
from evaluators.sokoban.dataset import LevelSet
from station.core.config import ExecutorConfig
from station.core.run_types import Mount, RunSpec
from station.executors import create_executor

PUBLIC = 3  # the public seed of the old-rule datasets: inside every search, and not the first seed tried
FORECAST = {"size": "small", "trials": 1}
RNA = {"size": "small"}
SOKOBAN = {"grid": 5, "boxes": 1, "train_levels": 300, "eval_levels": 40}
# words that would tell a run how its data were drawn, in the paths it can read
TELLTALE = re.compile(r"seed|sim-v|reverse-play|unkeyed|5x5|simulation\.key")

# -- the attacks: the simulator's own source, then a search over public seeds --------------------------------
FORECAST_ATTACK = """
import os
SEEDS = {seeds}
DATA = "task_data/forecasting"


def main():
    train = np.load(os.path.join(DATA, "train_data.npy"))
    size = next(s for s in SIZES.values() if s["n_neurons"] == train.shape[1])
    found = -1
    for seed in range(SEEDS):
        drawn = simulate(seed, **size)
        if np.array_equal(drawn["train_data"], train):
            found = seed
            break
    guess = simulate(max(found, 0), **size)  # else the likeliest: the default seed
    return {{"seed": found, "val": guess["val_data"], "test": guess["test_data"], **probe()}}
"""

RNA_ATTACK = """
import os
SEEDS = {seeds}
DATA = "task_data/rna"


def mrl_train_sequences():
    with open(os.path.join(DATA, "MRL", "train.csv")) as f:
        return [row.split(",")[0] for row in f.read().splitlines()[1:]]


def main():
    seen = mrl_train_sequences()
    size = next(name for name, counts in SIZES.items() if counts[0] == len(seen))
    found = -1
    for seed in range(SEEDS):
        drawn = simulate(seed, size)
        if [row[0] for row in drawn["MeanRibosomeLoading"][1]["train"]] == seen:
            found = seed
            break
    guess = simulate(max(found, 0), size)
    labels = {{}}
    for split in ("val", "test"):
        labels["ncrna_" + split] = np.array([int(r[1]) for r in guess["NoncodingRNAFamily"][1][split]])
        labels["mrl_" + split] = np.array([float(r[1]) for r in guess["MeanRibosomeLoading"][1][split]])
    return {{"seed": found, **labels, **probe()}}
"""

SOKOBAN_ATTACK = """
import os
SEEDS = {seeds}
HELD_OUT = {held_out}  # the task's statement says how many held-out levels there are
DATA = "task_data/sokoban"


def held_out_levels(stream, train, shape):
    # the old rule (dataset.py before keyed draws): the next stream, training levels left out
    seen, kept, batch = {{level.tobytes() for level in train}}, [], 0
    while len(kept) < HELD_OUT:
        for level in make_level_set(stream + 1000 * batch, HELD_OUT, *shape):
            if level.tobytes() not in seen and len(kept) < HELD_OUT:
                seen.add(level.tobytes())
                kept.append(level)
        batch += 1
    return np.stack(kept)


def main():
    train = np.load(os.path.join(DATA, "train_levels.npy"))
    boxes = int(np.isin(train[0], (BOX, BOX_ON_TARGET)).sum())
    shape = (*train.shape[1:], boxes)
    found = -1
    for seed in range(SEEDS):  # one level per guess first: a set's levels are drawn one stream each
        if np.array_equal(make_level_set(2 * seed, 1, *shape)[0], train[0]):
            if np.array_equal(make_level_set(2 * seed, len(train), *shape), train):
                found = seed
                break
    guess = held_out_levels(2 * max(found, 0) + 1, train, shape)
    return {{"seed": found, "held_out": guess, **probe()}}
"""

PROBE = """

def probe():
    # what else a run can read about its data: the mount table, its data folder, the station's key
    try:
        key = open({key!r}).read()
    except OSError as error:
        key = type(error).__name__
    try:
        mounts = open("/proc/self/mountinfo").read()
    except OSError:  # a sandbox may hide it: then it names nothing either
        mounts = ""
    listing = sorted(os.path.join(root, name) for root, dirs, names in os.walk(DATA) for name in dirs + names)
    return {{"mounts": mounts, "listing": listing, "key": key}}
"""


def attack_code(simulator, body: str, key: Path, **values: object) -> str:
    return inspect.getsource(simulator) + "\n\n" + body.format(**values) + PROBE.format(key=str(key))


def run_attack(code: str, train_dir: Path, target: str, hide: list[Path]) -> dict:
    """The attack as a run of its own: the training split at the task's mount point, nothing else,
    under an executor that hides the task's private paths, as the station's does."""
    executor = create_executor(ExecutorConfig(kind="local"), hide=hide)
    try:
        spec = RunSpec(code=code, mounts=[Mount(train_dir, target)], timeout_s=300, memory_mb=4096, label="recreate")
        result = executor.run(spec)
    finally:
        executor.close()
    assert result.status == "ok", (result.error, result.stderr[-3000:])
    return result.value


def assert_nothing_tells_the_draw(found: dict, key_file: Path) -> None:
    """The run saw no seed, size or generator in any path, and could not read the key."""
    assert found["key"] in ("FileNotFoundError", "PermissionError"), found["key"]
    assert key_file.read_text().strip() not in found["mounts"]
    for line in found["mounts"].splitlines():
        if "task_data" in line:
            assert not TELLTALE.search(line), line
    assert not any(TELLTALE.search(path) for path in found["listing"]), found["listing"]


# -- forecasting -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def forecast_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with shared_task_data(tmp_path_factory, "forecast") as root:
        yield root


def test_forecasting_old_draw_is_recreated_from_the_training_split(tmp_path: Path) -> None:
    old = ForecastDataset(tmp_path, size="small", seed=PUBLIC, unkeyed=True).ensure()
    code = attack_code(forecast_simulator, FORECAST_ATTACK, tmp_path / "none", seeds=PUBLIC + 1)
    found = run_attack(code, old.train_dir, "task_data/forecasting", [old.dir])
    assert found["seed"] == PUBLIC
    assert np.array_equal(found["val"], old.load("val")[0]) and np.array_equal(found["test"], old.load("test")[0])


def test_forecasting_keyed_draw_is_not_recreated(forecast_root: Path) -> None:
    task = create_task("forecasting", FORECAST)
    dataset = task.dataset.ensure()
    code = attack_code(forecast_simulator, FORECAST_ATTACK, secret.key_path(forecast_root), seeds=24)
    found = run_attack(code, task.data_dir(), task.data_target, task.private_paths())
    assert found["seed"] == -1
    for split in ("val", "test"):  # the best guess is other data: values in [0, 1] differ by far more than noise
        assert np.abs(found[split] - dataset.load(split)[0]).mean() > 0.1, split
    assert_nothing_tells_the_draw(found, secret.key_path(forecast_root))


# -- RNA -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rna_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with shared_task_data(tmp_path_factory, "rna") as root:
        yield root


def test_rna_old_draw_is_recreated_from_the_training_split(tmp_path: Path) -> None:
    old = RnaData(tmp_path, size="small", seed=PUBLIC, unkeyed=True).ensure()
    code = attack_code(rna_simulator, RNA_ATTACK, tmp_path / "none", seeds=PUBLIC + 1)
    found = run_attack(code, old.train_dir, "task_data/rna", [old.dir])
    assert found["seed"] == PUBLIC
    for split in ("val", "test"):
        assert np.array_equal(found[f"ncrna_{split}"], old.labels("ncRNA", split))
        assert np.allclose(found[f"mrl_{split}"], old.labels("MRL", split), atol=1e-6)


def test_rna_keyed_draw_is_not_recreated(rna_root: Path) -> None:
    task = create_task("rna_modelling", RNA)
    data = task.data.ensure()
    code = attack_code(rna_simulator, RNA_ATTACK, secret.key_path(rna_root), seeds=40)
    found = run_attack(code, task.data_dir(), task.data_target, task.private_paths())
    assert found["seed"] == -1
    for split in ("val", "test"):  # the external evaluation's test split is keyed as well
        accuracy = (found[f"ncrna_{split}"] == data.labels("ncRNA", split)).mean()
        truth = data.labels("MRL", split)
        r2 = 1 - ((found[f"mrl_{split}"] - truth) ** 2).sum() / ((truth - truth.mean()) ** 2).sum()
        assert accuracy < 0.35 and r2 < 0.2, (split, accuracy, r2)  # chance level: 13 classes; unrelated draws
    assert_nothing_tells_the_draw(found, secret.key_path(rna_root))


# -- Sokoban -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sokoban_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with shared_task_data(tmp_path_factory, "sokoban") as root:
        yield root


def sokoban_levels(root: Path, **extra) -> LevelSet:
    return LevelSet(root, grid=5, boxes=1, train=SOKOBAN["train_levels"], eval=SOKOBAN["eval_levels"], **extra)


def test_sokoban_old_draw_is_recreated_from_the_training_levels(tmp_path: Path) -> None:
    old = sokoban_levels(tmp_path, seed=PUBLIC, unkeyed=True).ensure()
    code = attack_code(level_generator, SOKOBAN_ATTACK, tmp_path / "none", seeds=1000, held_out=len(old.eval_levels()))
    found = run_attack(code, old.train_dir, "task_data/sokoban", [old.dir])
    assert found["seed"] == PUBLIC
    assert np.array_equal(found["held_out"], old.eval_levels())


def test_sokoban_keyed_draw_is_not_recreated(sokoban_root: Path) -> None:
    task = create_task("sokoban", SOKOBAN)
    levels = task.levels.ensure()
    held = levels.eval_levels()
    code = attack_code(level_generator, SOKOBAN_ATTACK, secret.key_path(sokoban_root), seeds=1000, held_out=len(held))
    found = run_attack(code, task.data_dir(), task.data_target, task.private_paths())
    assert found["seed"] == -1
    # small rooms repeat by chance: the re-drawn set holds a few of the held-out levels, never the set
    recovered = np.mean([level.tobytes() in {g.tobytes() for g in found["held_out"]} for level in held])
    assert recovered < 0.2, recovered
    assert_nothing_tells_the_draw(found, secret.key_path(sokoban_root))


# -- every station its own draw; one key, one draw ---------------------------------------------------------
def drawn_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.npy")) if p.is_file()}


BUILDERS = {
    "forecasting": lambda root: ForecastDataset(root, size="small", seed=0),
    "rna": lambda root: RnaData(root, size="small", seed=0),
    "sokoban": lambda root: sokoban_levels(root, seed=0),
}


@pytest.mark.parametrize("task", sorted(BUILDERS))
def test_every_station_draws_its_own_data_and_a_shared_key_the_same(task: str, tmp_path: Path) -> None:
    """Two data roots (two stations) draw different data from the same parameters; a root that is
    given the other's key (the documented way to share a dataset) draws it bit for bit; one root
    draws the same data again after its folder is deleted. No folder name says how it was drawn."""
    build = BUILDERS[task]
    one, two = build(tmp_path / "one").ensure(), build(tmp_path / "two").ensure()
    assert drawn_files(one.dir) != drawn_files(two.dir)
    assert one.dir.name != two.dir.name and one.dir.name.startswith("data-")
    secret.use_key(tmp_path / "shared", secret.key_path(tmp_path / "one"))
    shared = build(tmp_path / "shared").ensure()
    assert drawn_files(shared.dir) == drawn_files(one.dir) and shared.dir.name == one.dir.name
    first = drawn_files(one.dir)
    shutil.rmtree(one.dir)
    assert drawn_files(build(tmp_path / "one").ensure().dir) == first
    for root in ("one", "two", "shared"):
        names = [str(p.relative_to(tmp_path / root)) for p in (tmp_path / root).rglob("*")]
        assert not any(TELLTALE.search(name) for name in names if not name.startswith("secret")), names
        key = secret.key_path(tmp_path / root)
        assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700


def test_a_shared_key_never_replaces_another(tmp_path: Path) -> None:
    """Adopting a key where another is already kept is refused: the datasets drawn with the first
    would no longer match it. The same key again is fine; a damaged file is a clear error."""
    secret.station_secret(tmp_path / "a")
    secret.station_secret(tmp_path / "b")
    with pytest.raises(ValueError, match="already holds another key"):
        secret.use_key(tmp_path / "b", secret.key_path(tmp_path / "a"))
    assert secret.use_key(tmp_path / "a", secret.key_path(tmp_path / "a")) == secret.key_path(tmp_path / "a")
    (tmp_path / "bad.key").write_text("not a key\n")
    with pytest.raises(ValueError, match="is not a key this station made"):
        secret.use_key(tmp_path / "c", tmp_path / "bad.key")
    # the documented command: adopt a copy of the key, then say where it is kept and which it is
    shared = tmp_path / "copy.key"
    shutil.copyfile(secret.key_path(tmp_path / "a"), shared)
    told = subprocess.run(
        [sys.executable, "-m", "evaluators.secret", "--use", str(shared), str(tmp_path / "d")],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    ).stdout
    assert secret.read_key(secret.key_path(tmp_path / "d")) == secret.read_key(shared)
    assert str(secret.key_path(tmp_path / "d")) in told
    assert secret.fingerprint(secret.read_key(shared)) in told and shared.read_text().strip() not in told


def test_what_agents_read_names_neither_seed_nor_key(forecast_root: Path, rna_root: Path, sokoban_root: Path) -> None:
    tasks = {
        forecast_root: create_task("forecasting", {**FORECAST, "seed": 7}),
        rna_root: create_task("rna_modelling", {**RNA, "seed": 7}),
        sokoban_root: create_task("sokoban", {**SOKOBAN, "seed": 7}),
    }
    for root, task in tasks.items():
        key = secret.station_secret(root)
        shown = task.spec()
        for told in ("seed 7", "seed=7", "seed: 7", key.hex(), secret.fingerprint(key), task.data_dir().parent.name):
            assert told not in shown, (task.kind, told)
        assert secret.secret_dir(root) in task.private_paths()
