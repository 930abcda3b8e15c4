"""The batch-integration task through the real sandbox, on the small simulated dataset: the
baselines score in a sensible order, hostile or broken submissions get clear errors (never a
crash of the station), the held-out labels cannot be read, and a scripted 40-tick station
runs on the task end to end.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_baseline, shared_result, shared_task_data

from evaluators.base import create_task
from evaluators.scrna.task import METRICS, normalise
from station.core.config import ExecutorConfig
from station.executors import create_executor

HEAD = "import numpy as np\n\n"  # no scanpy: importing it costs each run 3 CPU-s, and these need none
NUMPY_PCA = HEAD + (  # the No Integration baseline's PCA in numpy alone: no scanpy import (3 CPU-s) in the run
    "def eliminate_batch_effect_fn(adata):\n"
    "    x = adata.layers['normalized'].toarray()\n"
    "    u, s, _ = np.linalg.svd(x - x.mean(axis=0), full_matrices=False)\n"
    "    adata.obsm['X_emb'] = (u[:, :30] * s[:30]).astype(np.float32)\n"
    "    return adata\n")
# The task most tests score on: the small simulated data, seed 0, OpenProblems' bounds (the defaults, named
# here because test_redteam_scrna's honest control is the same task: the first baseline's run is shared)
PARAMS = {"size": "small", "seed": 0, "memory_mb": 8192, "normalisation": "openproblems"}
# The same task asked for the three extra metrics: its runs return the corrected counts too
EXTRAS = {"size": "small", "memory_mb": 8192, "extra_metrics": ["hvg_overlap", "isolated_label_f1", "isolated_label_asw"]}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with shared_task_data(tmp_path_factory, "scrna") as root:
        yield root


@pytest.fixture(scope="module")
def task(cache: Path):
    return create_task("batch_integration", PARAMS)


@pytest.fixture(scope="module")
def run(task):
    executor = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())

    def evaluate(code: str):
        result = executor.run(task.run_spec(code, mounts=[], label="test-scrna"))
        return result, (task.score(result) if result.status == "ok" else None)
    yield evaluate
    executor.close()


def local_combat_with_counts(tmp_path_factory: pytest.TempPathFactory):
    """The ComBat baseline run locally on the EXTRAS task (it returns the corrected counts too), once per
    test run: the extra metrics are scored on it, the baselines' test scores its ten, and the Ray test
    compares a Ray run's arrays with it (that test runs in the Ray group, maybe in the other test worker:
    shared_result)."""

    def run_it():  # on the shared data (the callers' `cache` fixture)
        paper = create_task("batch_integration", EXTRAS)
        code = next(b for b in paper.baselines() if b.title == "ComBat Baseline").code
        executor = create_executor(ExecutorConfig(kind="local"), hide=paper.private_paths())
        try:
            return executor.run(paper.run_spec(code, mounts=[], label="test-scrna-paper"))
        finally:
            executor.close()

    return shared_result(tmp_path_factory, "scrna ComBat run, local", EXTRAS, run_it)


def test_normalisation_clamps_and_treats_missing_as_zero() -> None:
    bounds = {m: (0.2, 0.8) for m in METRICS}
    raw = {m: 0.5 for m in METRICS} | {"ari": 0.9, "nmi": -1.0, "kbet": float("nan")}
    del raw["pcr"]
    normal = normalise(raw, bounds | {"clisi": (0.3, 0.3)})
    assert normal["asw_batch"] == pytest.approx(0.5)
    assert normal["ari"] == 1.0 and normal["nmi"] == 0.0 and normal["kbet"] == 0.0 and normal["pcr"] == 0.0
    assert normal["clisi"] == 1.0  # min == max


SPEC_TABLE = {  # spec research §3.2, scoring step 3
    "asw_batch": (0.53352897, 0.98400116), "asw_label": (0.41144148, 0.9896984), "ari": (-0.00013567, 1.0),
    "nmi": (0.0002826, 1.0), "graph_connectivity": (0.01696175, 1.0), "kbet": (0.01134695, 0.95113473),
    "ilisi": (0.0, 1.0), "clisi": (0.70869329, 1.0), "pcr": (0.0, 0.99999995),
    "cell_cycle_conservation": (0.00922029, 0.86094651),
}


def test_openproblems_bounds_are_the_spec_table_and_the_default() -> None:
    from evaluators.scrna.normalisation import choose_normalisation, openproblems_bounds

    assert openproblems_bounds() == SPEC_TABLE
    assert choose_normalisation(None) == "openproblems"  # the paper's, for simulated and real data alike
    assert create_task("batch_integration", {"size": "small"}).normalisation == "openproblems"
    assert choose_normalisation("controls") == "controls"
    with pytest.raises(ValueError, match="normalisation must be one of controls, openproblems"):
        choose_normalisation("paper")
    with pytest.raises(ValueError, match="extra_metrics"):
        create_task("batch_integration", {"size": "small", "extra_metrics": ["hvg"]})
    raw = {m: (low + high) / 2 for m, (low, high) in SPEC_TABLE.items()}
    assert list(normalise(raw, openproblems_bounds()).values()) == pytest.approx([0.5] * 10)


def test_openproblems_normalisation_and_extra_metrics(cache, tmp_path_factory) -> None:
    """The same ComBat run scored under both normalisations, with the three extra metrics shown raw."""
    combat = create_task("batch_integration", {"size": "small", "memory_mb": 8192, "normalisation": "controls"})
    paper = create_task("batch_integration", EXTRAS)
    result = local_combat_with_counts(tmp_path_factory)
    assert result.status == "ok", result.stderr[-2000:]
    verdict, plain = paper.score(result), combat.score(result)
    assert verdict.success and plain.success, verdict.details
    assert "Normalization: openproblems" in verdict.details and "Normalization: controls" in plain.details
    assert "Extra (raw, not in the score): HVG_overlap" in verdict.details
    for name in ("HVG_overlap", "Iso_label_F1", "Iso_label_ASW"):
        assert 0.0 < verdict.metrics[name] <= 1.0, (name, verdict.details)
        assert name not in plain.metrics
    ten = [verdict.metrics[label] for label in ("ASW_batch", "ASW_label", "ARI", "NMI", "Graph_conn", "kBET",
                                                "iLISI", "cLISI", "PCR", "Cell_cycle")]
    assert verdict.score == pytest.approx(sum(ten) / 10)  # the extras stay out of the score
    assert verdict.score != pytest.approx(plain.score)


def test_the_baselines_score_in_a_sensible_order(task, run, tmp_path_factory) -> None:
    scores = {}
    # the first (No Integration) is test_redteam_scrna's honest control too: run once per test run
    first = shared_baseline(tmp_path_factory, "batch_integration", PARAMS, lambda code: (task, *run(code)))
    for i, baseline in enumerate(task.baselines()):
        if i == 0:
            result, verdict = first
        elif baseline.title == "ComBat Baseline":  # its run on EXTRAS (the same code on the same cells, shared with
            # two other tests) returns the corrected counts too, which the ten metrics scored here do not read
            result = local_combat_with_counts(tmp_path_factory)
            verdict = task.score(result) if result.status == "ok" else None
        else:
            result, verdict = run(baseline.code)
        assert result.status == "ok", result.stderr[-2000:]
        assert verdict.success, verdict.details
        # the BBKNN-style baseline registers its graph in uns['neighbors'], so the graph it returns is scored
        assert "Neighbour graph: rebuilt from X_emb" not in verdict.details
        assert 0.0 <= verdict.score <= 1.0
        assert set(verdict.metrics) == {"ASW_batch", "ASW_label", "ARI", "NMI", "Graph_conn", "kBET", "iLISI",
                                        "cLISI", "PCR", "Cell_cycle"}
        assert "Raw:" in verdict.details
        scores[baseline.title] = verdict
    plain, combat = scores["No Integration Baseline"], scores["ComBat Baseline"]
    bbknn = scores["Batch-Balanced kNN Baseline"]
    assert combat.metrics["iLISI"] > plain.metrics["iLISI"]  # integration mixes batches better
    assert bbknn.metrics["iLISI"] > plain.metrics["iLISI"]
    assert combat.score > plain.score
    # the solution's own regressions are kept beside it, for the next process that scores
    assert any((task.dataset.private_dir / "train_solution-terms").glob("*.npz"))


def test_a_returned_graph_counts_only_when_registered_unless_the_task_keeps_every_graph(task) -> None:
    """OpenProblems' post-processing (the paper's): with an embedding and no uns['neighbors'], the
    neighbour graph is rebuilt from X_emb, whatever obsp holds. `graph_rule: as_returned` keeps it."""
    import scipy.sparse as sp

    from evaluators.scrna.dataset import graph_replaced

    solution = task.dataset.solution()
    n = solution.n_obs
    emb = np.random.default_rng(0).normal(size=(n, 10)).astype(np.float32)  # batches and types mixed
    order = np.argsort(solution.obs["cell_type"].astype(str).to_numpy(), kind="stable")
    chain = sp.csr_matrix((np.ones(n - 1), (order[:-1], order[1:])), shape=(n, n))
    ring = sp.csr_matrix(chain + chain.T)  # each cell type one path: fully connected, unlike the embedding's
    parts = {f"{name}_{p}": getattr(ring, p) for name in ("connectivities", "distances")
             for p in ("data", "indices", "indptr")}
    value = {"n_obs": n, "X_emb": emb, **parts}
    rebuilt, _ = task.dataset.score_arrays(value)
    registered, _ = task.dataset.score_arrays({**value, "uns_neighbors": True})
    kept, _ = task.dataset.score_arrays(value, graph_rule="as_returned")
    assert graph_replaced(value, "paper") and not graph_replaced({**value, "uns_neighbors": True}, "paper")
    assert registered["graph_connectivity"] == kept["graph_connectivity"] == pytest.approx(1.0)
    assert rebuilt["graph_connectivity"] < 0.9
    with pytest.raises(ValueError, match="graph_rule must be one of paper, as_returned"):
        create_task("batch_integration", {"size": "small", "graph_rule": "mine"})


def test_a_perfect_cell_type_embedding_scores_near_one_on_biology(task, run, cache) -> None:
    # The labels are private: the test (like the scorer) reads them, the sandboxed code cannot.
    code = perfect_embedding(task.dataset.solution().obs["cell_type"].astype(str).tolist())
    result, verdict = run(code)
    assert verdict.success
    for bio in ("ASW_label", "cLISI", "ARI", "NMI", "Graph_conn"):
        assert verdict.metrics[bio] > 0.9, (bio, verdict.details)


def perfect_embedding(labels: list[str]) -> str:
    return HEAD + f"LABELS = {labels!r}\n\n" + (
        "def eliminate_batch_effect_fn(adata):\n"
        "    kinds = sorted(set(LABELS))\n"
        "    onehot = np.eye(len(kinds))[[kinds.index(x) for x in LABELS]]\n"
        "    adata.obsm['X_emb'] = onehot + np.random.default_rng(0).normal(scale=1e-3, size=onehot.shape)\n"
        "    return adata\n")


def test_the_external_evaluation_scores_the_held_out_test_draw(task, cache) -> None:
    """`station external` runs a submission on the simulated data's held-out draw (other cells,
    their own batch effects), which no internal evaluation scores: labels memorised from the
    scored cells do not fit it, its own labels score near one on label ASW, ARI and NMI."""
    plan = task.external()
    (held_out,) = plan.runs
    assert "held-out test draw" in plan.protocol and task.dataset.split == "train"
    assert held_out.dataset.n_cells == 1000 != task.dataset.n_cells  # the small sizes: 1,000 test, 2,000 train cells
    executor = create_executor(ExecutorConfig(kind="local"), hide=held_out.private_paths())
    try:
        def evaluate(code: str):
            result = executor.run(held_out.run_spec(code, mounts=[], label="test-scrna-external"))
            return result, (held_out.score(result) if result.status == "ok" else None)

        memorised = task.dataset.solution().obs["cell_type"].astype(str).tolist()
        result, _ = evaluate(perfect_embedding(memorised))
        assert result.status == "error"  # 2,000 labels for 1,000 cells
        result, verdict = evaluate(perfect_embedding(held_out.dataset.solution().obs["cell_type"].astype(str).tolist()))
        assert verdict is not None and verdict.success, result.stderr[-2000:]
        # clusters and labels agree exactly (cLISI, a neighbourhood measure, depends on the draw's rare types)
        assert all(verdict.metrics[bio] > 0.9 for bio in ("ASW_label", "ARI", "NMI")), verdict.details
    finally:
        executor.close()
    with pytest.raises(ValueError, match="--seeds does not apply"):
        task.external(3)


def test_a_held_out_twin_that_builds_the_data_still_shows_runs_the_held_out_cells(tmp_path: Path) -> None:
    """`station external` may be the first to need a data root's dataset: the build it starts still
    puts the scored draw in `input/`, and the external run is shown the held-out draw."""
    import anndata as ad

    from evaluators.scrna.dataset import Dataset

    held_out = Dataset(tmp_path, size="small").held_out().ensure()
    shown = ad.read_h5ad(held_out.input_dir / "train_input.h5ad", backed="r")
    scored = ad.read_h5ad(tmp_path / held_out.dir.name / "input" / "train_input.h5ad", backed="r")
    assert (shown.n_obs, scored.n_obs, held_out.n_cells) == (1000, 2000, 1000)


@pytest.mark.parametrize("body, message", [
    ("    return adata.X\n", "must return an AnnData"),
    ("    return adata[::-1].copy()\n", "reordered"),
    ("    return adata[:10].copy()\n", "keep every cell"),
    ("    return adata\n", "neither obsm['X_emb']"),
    ("    adata.obsm['X_emb'] = np.full((adata.n_obs, 5), np.nan)\n    return adata\n", "NaN"),
    ("    adata.obsm['X_emb'] = np.zeros((adata.n_obs, 0))\n    return adata\n", "must be cells x dimensions"),
])
def test_contract_violations_are_clear_failures(run, body: str, message: str) -> None:
    result, verdict = run(HEAD + "def eliminate_batch_effect_fn(adata):\n" + body)
    assert result.status == "ok"  # the code ran; the contract failed
    assert not verdict.success and verdict.score is None
    assert message in verdict.details


def test_a_missing_function_and_test_mode(run) -> None:
    _, verdict = run(HEAD + "def integrate(adata):\n    return adata\n")
    assert not verdict.success and "must define eliminate_batch_effect_fn" in verdict.details
    result, verdict = run(HEAD + "def test():\n    print('probing', 1 + 1)\n")
    assert verdict.details == "Test mode - no scoring" and "=== Test Mode Detected ===" in result.stdout


def test_an_exception_inside_the_function_is_a_crash_the_debugger_may_fix(run) -> None:
    result, verdict = run(HEAD + "def eliminate_batch_effect_fn(adata):\n    return adata.obsmm['X']\n")
    assert result.status == "error" and result.crashed and verdict is None
    assert "Did you mean: 'obsm'" in (result.traceback or result.stderr)


def test_the_held_out_labels_cannot_be_read(task, run) -> None:
    private = task.dataset.private_dir / "train_solution.h5ad"
    assert private.exists()
    probe = (HEAD + "def eliminate_batch_effect_fn(adata):\n"
             f"    import anndata as ad\n    labels = ad.read_h5ad({str(private)!r})\n"
             "    adata.obsm['X_emb'] = np.zeros((adata.n_obs, 2))\n    return adata\n")
    result, _ = run(probe)
    assert result.status == "error"
    assert "No such file" in result.stderr + (result.traceback or "") or "FileNotFoundError" in (result.error or "")
    listing = run(HEAD + "import os\n\ndef test():\n    print(sorted(os.listdir('task_data/batch_integration')))\n")[0]
    assert "train_input.h5ad" in listing.stdout and "solution" not in listing.stdout


def test_a_scripted_station_researches_batch_integration(cache, tmp_path) -> None:
    """Nine ticks: the three baselines and the agents' first submissions (at tick 5) are scored;
    each tick that holds an evaluation waits for it, so every further one costs a scoring."""
    from helpers import research_station_evaluations

    rows = research_station_evaluations(tmp_path / "st", "scrna-station", {
        "tasks": [{"evaluator": "batch_integration", "params": {"size": "small", "memory_mb": 8192}}],
        "executor": {"max_parallel": 1}}, ticks=9)  # one scoring process: each pays the metrics' imports
    system = [r for r in rows if r["author"] == "System"]
    agents = [r for r in rows if r["author"] != "System"]
    assert [r["title"] for r in system] == ["No Integration Baseline", "ComBat Baseline",
                                            "Batch-Balanced kNN Baseline"]
    assert all(r["status"] == "finished" and 0 <= r["score"] <= 1 for r in system)
    assert len(agents) >= 3 and sum(r["status"] == "finished" for r in agents) >= 2
    assert {r["status"] for r in rows} <= {"finished", "failed", "queued"}


def test_a_baseline_scores_the_same_on_ray(cache, tmp_path_factory) -> None:
    """The same sandbox in a Ray task (a local Ray instance) returns the same arrays as a local run,
    so the station, which scores only those, gives the same verdict. The ComBat baseline on the task
    with the extra metrics: its embedding and its corrected counts are compared (the local run is
    the one test_openproblems_normalisation_and_extra_metrics scores)."""
    paper = create_task("batch_integration", EXTRAS)
    baseline = next(b for b in paper.baselines() if b.title == "ComBat Baseline")
    results = {"local": local_combat_with_counts(tmp_path_factory)}
    executor = create_executor(ExecutorConfig(kind="ray", ray_num_cpus=2), hide=paper.private_paths())
    try:
        results["ray"] = executor.run(paper.run_spec(baseline.code, mounts=[], label="test-scrna-ray"))
    finally:
        executor.close()
    for kind in ("local", "ray"):
        assert results[kind].status == "ok", results[kind].stderr[-2000:]
    local, ray = results["local"].value, results["ray"].value
    assert isinstance(local, dict) and "X_emb" in local and "contract_error" not in local, sorted(local)
    assert "corrected_counts" in local, sorted(local)
    assert sorted(ray) == sorted(local)
    for key in local:  # the same types, dtypes and values, to the bit
        assert type(ray[key]) is type(local[key]) and np.asarray(ray[key]).dtype == np.asarray(local[key]).dtype, key
        assert np.array_equal(np.asarray(ray[key]), np.asarray(local[key])), key


def test_a_users_h5ad_becomes_the_task_data(cache, tmp_path, run) -> None:
    """A CELLxGENE-style file (other column names, counts in a layer) is loaded, split and scored."""
    from evaluators.scrna.simulate import simulate

    full = simulate(n_cells=600, n_genes=300, n_types=5, seed=3)
    full.obs = full.obs.rename(columns={"batch": "donor_id", "cell_type": "author_cell_type"})
    path = tmp_path / "atlas.h5ad"
    full.write_h5ad(path)
    mine = create_task("batch_integration", {"h5ad": str(path), "batch_key": "donor_id",
                                             "label_key": "author_cell_type", "memory_mb": 8192})
    assert mine.dataset.ensure().ready()
    executor = create_executor(ExecutorConfig(kind="local"), hide=mine.private_paths())
    try:
        result = executor.run(mine.run_spec(NUMPY_PCA, mounts=[], label="test-h5ad"))
    finally:
        executor.close()
    assert result.status == "ok", result.stderr[-2000:]
    verdict = mine.score(result)
    # the details name the data without naming the user's file (runs must not learn where it is)
    assert verdict.success and "User-supplied dataset" in verdict.details and "atlas" not in verdict.details
    assert mine.normalisation == "openproblems" and "Normalization: openproblems" in verdict.details
    with pytest.raises(ValueError, match="no_such_column|column"):
        create_task("batch_integration", {"h5ad": str(path), "batch_key": "no_such_column"}).dataset.ensure()


def test_init_prepares_the_data_and_the_control_bounds_before_the_first_tick(cache: Path, tmp_path: Path) -> None:
    """Nothing an agent submits pays for the data, the bounds or the scorer's warm-up: `station init`
    builds the first two, saying so, and `station run` checks them again (quick once built) and
    runs the scorer once before its first tick."""
    import subprocess
    import sys

    import yaml

    from evaluators.scrna.dataset import Dataset

    config = tmp_path / "bi.yaml"
    config.write_text(yaml.safe_dump({"name": "bi", "agents": [{"count": 1, "kind": "guest", "model": {
        "provider": "scripted", "name": "scripted-newcomer"}}], "research": {"tasks": [{
            "evaluator": "batch_integration", "params": {"size": "small", "seed": 5, "normalisation": "controls"}}]}}))
    dataset = Dataset(cache, size="small", seed=5)
    cli = [sys.executable, "-m", "station.apps.cli"]
    made = subprocess.run([*cli, "init", str(config), "--dir", str(tmp_path / "st")], capture_output=True, text=True,
                          timeout=600)
    assert made.returncode == 0, made.stderr
    assert "preparing task 1: Simulated dataset (small): the data" in made.stdout
    assert "normalization bounds, control method: perfect_embedding" in made.stdout
    assert dataset.ready() and (dataset.private_dir / "bounds.json").exists()
    ran = subprocess.run([*cli, "run", "--dir", str(tmp_path / "st"), "--until-tick", "1"], capture_output=True,
                         text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr
    assert "preparing task 1: Simulated dataset (small): the data" in ran.stderr
    assert "control method" not in ran.stderr  # built once, by init
    # the process that scores pays the scorer's first-call compilation before the first tick, not init's
    assert "the scorer (its first run compiles the metrics)" in ran.stderr
    assert "the scorer" not in made.stdout


def test_a_task_that_cannot_be_prepared_is_a_clear_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    from evaluators.scrna.simulate import simulate

    full = simulate(n_cells=600, n_genes=300, n_types=5, seed=1)
    full.write_h5ad(tmp_path / "atlas.h5ad")
    config = tmp_path / "bi.yaml"
    config.write_text(yaml.safe_dump({"name": "bi", "agents": [{"count": 1, "kind": "guest", "model": {
        "provider": "scripted", "name": "scripted-newcomer"}}], "research": {"tasks": [{
            "evaluator": "batch_integration", "params": {"h5ad": str(tmp_path / "atlas.h5ad"), "batch_key": "donor"}}]}}))
    made = subprocess.run([sys.executable, "-m", "station.apps.cli", "init", str(config), "--dir", str(tmp_path / "st")],
                          capture_output=True, text=True, timeout=600)
    assert made.returncode != 0 and "research task 1 cannot be prepared" in made.stderr and "donor" in made.stderr
    assert "Traceback" not in made.stderr
