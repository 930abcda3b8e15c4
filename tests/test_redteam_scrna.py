"""Red team: recovering the held-out cell types of the batch-integration task.

The simulator is public (it ships with the station), and so is what a run sees: the input file's
counts and cell ids, the details line, the task's parameters (seed 0 unless the operator chose
another). The attack re-draws the dataset with that seed, takes the cell type of every cell whose
id matches (or, failing that, of its most similar re-drawn cell), and submits a perfect cell-type
embedding built from those labels. With the draw keyed by the station's secret, the re-draw is
another dataset: the labels it yields say nothing about the real ones, and the forged embedding
scores no better than an honest baseline.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_baseline, shared_task_data
from test_scrna_task import HEAD, NUMPY_PCA, PARAMS

from evaluators.base import create_task
from station.core.config import ExecutorConfig
from station.executors import create_executor

# The same task as test_scrna_task's (small data, seed 0, OpenProblems' fixed bounds: no control methods'
# runs, which take minutes): the honest control is its first baseline's run (shared_baseline)
SIZE, SEED = PARAMS["size"], PARAMS["seed"]

@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with shared_task_data(tmp_path_factory, "scrna") as where:
        yield where


@pytest.fixture(scope="module")
def task(root: Path):
    made = create_task("batch_integration", PARAMS)
    made.dataset.ensure()
    return made


@pytest.fixture(scope="module")
def executor(task):
    made = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())
    yield made
    made.close()


@pytest.fixture(scope="module")
def run(task, executor):
    def evaluate(code: str):
        result = executor.run(task.run_spec(code, mounts=[], label="redteam-scrna"))
        assert result.status == "ok", result.stderr[-2000:]
        return task.score(result)

    return evaluate


@pytest.fixture(scope="module")
def honest(task, executor, tmp_path_factory):
    """The No Integration baseline's verdict, run once per test run (test_scrna_task scores it too)."""
    assert task.baselines()[0].title == "No Integration Baseline"

    def evaluate(code: str):
        result = executor.run(task.run_spec(code, mounts=[], label="redteam-scrna"))
        return task, result, (task.score(result) if result.status == "ok" else None)

    result, verdict = shared_baseline(tmp_path_factory, "batch_integration", PARAMS, evaluate)
    assert result.status == "ok", result.stderr[-2000:]
    return verdict


def redrawn_labels(input_file: Path, seed: int) -> list[str]:
    """The attack: the public simulator, run with the seed and the task's sizes, labels the cells of
    the run's own input, by cell id where the ids match, else by the most similar re-drawn cell."""
    import anndata as ad

    from evaluators.scrna.simulate import SIZES, simulate

    dims = SIZES[SIZE]
    full = simulate(n_cells=dims["train_cells"], n_genes=dims["n_genes"], n_batches=dims["n_batches"],
                    n_types=dims["n_types"], seed=seed)
    seen = ad.read_h5ad(input_file)
    by_id = dict(zip(full.obs["observation_joinid"], full.obs["cell_type"].astype(str)))
    redrawn_types = full.obs["cell_type"].astype(str).to_numpy()
    mine = _dense(seen[:, list(full.var_names)].layers["normalized"])
    theirs = _dense(full.layers["normalized"])
    labels = []
    for i, cell in enumerate(seen.obs["observation_joinid"]):
        if cell in by_id:
            labels.append(by_id[cell])
        else:  # no id matches: the re-drawn cell nearest in expression
            labels.append(str(redrawn_types[np.argmin(((theirs - mine[i]) ** 2).sum(axis=1))]))
    return labels


def _dense(matrix) -> np.ndarray:
    return np.asarray(matrix.toarray() if hasattr(matrix, "toarray") else matrix, dtype=np.float32)


def onehot_submission(labels: list[str]) -> str:
    return HEAD + f"LABELS = {labels!r}\n\n" + (
        "def eliminate_batch_effect_fn(adata):\n"
        "    kinds = sorted(set(LABELS))\n"
        "    onehot = np.eye(len(kinds))[[kinds.index(x) for x in LABELS]]\n"
        "    adata.obsm['X_emb'] = onehot + np.random.default_rng(0).normal(scale=1e-3, size=onehot.shape)\n"
        "    return adata\n")


def test_the_public_simulator_and_the_seed_do_not_give_back_the_held_out_cell_types(task, run, honest) -> None:
    from sklearn.metrics import adjusted_rand_score

    truth = task.dataset.solution().obs["cell_type"].astype(str).tolist()
    forged = redrawn_labels(task.dataset.input_dir / "train_input.h5ad", SEED)
    assert adjusted_rand_score(truth, forged) < 0.1, "the re-draw recovers the held-out cell types"

    cheat = run(onehot_submission(forged))
    for biology in ("ARI", "NMI", "ASW_label", "cLISI"):
        assert cheat.metrics[biology] <= honest.metrics[biology] + 0.05, (biology, cheat.details)
    assert cheat.score <= honest.score + 0.05, cheat.details


def test_the_details_and_the_statement_name_nothing_that_helps_re_draw(task, honest) -> None:
    for shown in (honest.details, task.spec()):
        assert "seed" not in shown.lower(), shown
    # the secret itself lives beside the data, readable by the station's user only
    from evaluators.scrna.secret import SECRET_FILE, secret_dir

    key = secret_dir(task.dataset.dir.parent) / SECRET_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert key.parent in task.private_paths()


def test_a_run_cannot_read_the_secret(task, root) -> None:
    from evaluators.scrna.secret import SECRET_FILE, secret_dir

    key = secret_dir(root) / SECRET_FILE
    executor = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())
    try:
        probe = HEAD + f"def test():\n    print(open({str(key)!r}).read())\n"
        result = executor.run(task.run_spec(probe, mounts=[], label="redteam-scrna-secret"))
    finally:
        executor.close()
    assert key.read_text().strip() not in result.stdout
    assert "FileNotFoundError" in result.stderr + (result.traceback or "") + (result.error or "")


def test_every_station_draws_its_own_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two data roots (two stations' caches) draw different cells from the same parameters; one root
    keeps drawing the same ones (the secret is made once, then read)."""
    import anndata as ad

    from evaluators.scrna.dataset import Dataset

    ids = []
    for name in ("one", "two", "one"):
        dataset = Dataset(tmp_path / name, size=SIZE, seed=SEED).ensure()
        ids.append(list(ad.read_h5ad(dataset.input_dir / "train_input.h5ad").obs["observation_joinid"]))
    assert ids[0] == ids[2] and set(ids[0]).isdisjoint(ids[1])


def test_a_users_file_is_named_nowhere_a_run_can_see(tmp_path: Path, root: Path) -> None:
    """With real data, the run sees only the prepared input: neither the task's text, nor the details,
    nor the mounted folder's name tell where the user's file is (with its labels)."""
    from evaluators.scrna.simulate import simulate

    source = tmp_path / "secret_atlas_v7.h5ad"
    simulate(n_cells=400, n_genes=300, n_types=5, seed=5).write_h5ad(source)
    mine = create_task("batch_integration", {"h5ad": str(source), "memory_mb": 8192})
    executor = create_executor(ExecutorConfig(kind="local"), hide=mine.private_paths())
    try:
        scored = executor.run(mine.run_spec(NUMPY_PCA, mounts=[], label="redteam-scrna-h5ad"))
        probe = HEAD + ("import os\n\ndef test():\n    print(os.path.realpath('task_data/batch_integration'))\n"
                        "    try:\n        print(open('/proc/self/mountinfo').read())\n"  # closed to the run where Landlock is
                        "    except OSError as err:\n        print(type(err).__name__)\n")
        looked = executor.run(mine.run_spec(probe, mounts=[], label="redteam-scrna-h5ad"))
    finally:
        executor.close()
    assert scored.status == "ok" and looked.status == "ok", scored.stderr[-2000:] + looked.stderr[-2000:]
    verdict = mine.score(scored)
    assert verdict.success
    assert "task_data/batch_integration" in looked.stdout  # the probe saw its input
    for text in (mine.spec(), verdict.details, looked.stdout):
        assert "secret_atlas" not in text and str(tmp_path) not in text, text[:3000]


def scorer_caches() -> dict[Path, bytes]:
    """The machine code the station's scorer loads from disk: numba's caches (evaluators/scrna/numba_cache.py)
    and JAX's (evaluators/scrna/jax_cache.py)."""
    import umap

    from evaluators.scrna import graph_metrics
    from evaluators.scrna.dataset import data_root

    folders = [Path(umap.__file__).parent / "__pycache__", Path(graph_metrics.__file__).parent / "__pycache__",
               Path.home() / ".cache" / "numba"]
    numba = {p: p.read_bytes() for folder in folders if folder.is_dir() for p in folder.rglob("*.nb[ic]")}
    return numba | {p: p.read_bytes() for p in (data_root() / "jax-compiled").rglob("*") if p.is_file()}


def test_a_run_cannot_plant_machine_code_in_the_scorers_caches(task, honest) -> None:
    """The scorer loads umap's kernels and ours from numba's cache, and its JAX programs from JAX's: a run
    that could write there would run its code in the station. It tries every cache file and folder the
    station's scorer uses, then integrates honestly; every file stays as it was, none of its files
    appears, and the score is the honest one. (Scorings in the other test worker may add their own
    cache entries meanwhile: the station's, not the run's.)"""
    before = scorer_caches()
    assert any("smooth_knn_dist" in p.name for p in before)  # the scorer ran (the `honest` run) and cached
    assert any(p.parent.name == "jax-compiled" for p in before)
    targets = sorted({str(p) for p in before} | {str(p.parent / "umap_.smooth_knn_dist-1.py311.nbi") for p in before}
                     | {str(p.parent / "jit_planted-cache") for p in before})
    attack = next(b.code for b in task.baselines() if b.title == "No Integration Baseline") + f'''

for _target in {targets!r}:
    try:
        with open(_target, "wb") as _f:
            _f.write(b"planted")
        print("WROTE", _target)
    except OSError as _err:
        print("REFUSED", type(_err).__name__, _target)
'''
    executor = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())
    try:
        result = executor.run(task.run_spec(attack, mounts=[], label="redteam-scrna-numba"))
    finally:
        executor.close()
    assert result.status == "ok", result.stderr[-2000:]
    assert "WROTE" not in result.stdout and result.stdout.count("REFUSED") == len(targets), result.stdout
    after = scorer_caches()
    assert [p for p in before if after.get(p) != before[p]] == []
    assert [t for t in targets if Path(t) not in before and Path(t).exists()] == []
    verdict = task.score(result)
    assert verdict.success and verdict.score == pytest.approx(honest.score)
