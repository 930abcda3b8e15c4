"""The ten batch-integration metrics (evaluators/scrna/metrics.py) and the three extra ones, each
checked on small synthetic cases against a known answer or an independent computation written here
with numpy/scipy/sklearn (a second implementation, not a call of the function the metric uses).
The comparison with scib itself is tests/test_scrna_oracle.py."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from helpers import Later
from scipy.sparse.csgraph import dijkstra
from scipy.spatial.distance import cdist

from evaluators.scrna.metrics import METRICS, compute_metrics

sc, ad = Later("scanpy"), Later("anndata")

S_GENES = [f"S_{i}" for i in range(8)]
G2M_GENES = [f"G2M_{i}" for i in range(8)]
EMBEDDING_METRICS = ("asw_batch", "asw_label", "kbet", "pcr", "cell_cycle_conservation")
GRAPH_METRICS = ("ari", "nmi", "graph_connectivity", "ilisi", "clisi")


# -- data ------------------------------------------------------------------------------------------

def make_solution(seed: int = 0, n_types: int = 3, n_batches: int = 3, per: int = 40, n_genes: int = 80):
    """`per` cells of every type in every batch; counts with type, batch and cell-cycle effects."""
    rng = np.random.default_rng(seed)
    types = np.repeat(np.arange(n_types), n_batches * per)
    batches = np.tile(np.repeat(np.arange(n_batches), per), n_types)
    n = len(types)
    names = S_GENES + G2M_GENES + [f"gene_{i}" for i in range(n_genes - 16)]
    base = rng.normal(1.0, 0.5, n_genes)
    type_effect = rng.normal(0, 1.0, (n_types, n_genes)) * (rng.random((n_types, n_genes)) < 0.3)
    batch_effect = rng.normal(0, 0.8, (n_batches, n_genes))
    phase = rng.choice(3, size=n, p=[0.6, 0.2, 0.2])  # G1, S, G2M
    cycle = np.zeros((n, n_genes))
    cycle[phase == 1, :8] = 1.5
    cycle[phase == 2, 8:16] = 1.5
    log_mean = base + type_effect[types] + batch_effect[batches] + cycle
    counts = rng.poisson(np.exp(log_mean)).astype(np.float32)
    normalized = np.log1p(counts / np.maximum(counts.sum(1, keepdims=True), 1) * 1e4).astype(np.float32)
    obs = pd.DataFrame({"batch": pd.Categorical([f"batch_{b}" for b in batches]),
                        "cell_type": pd.Categorical([f"type_{t}" for t in types]),
                        "observation_joinid": [f"cell{i:04d}" for i in range(n)]},
                       index=[f"cell{i:04d}" for i in range(n)])
    var = pd.DataFrame({"feature_name": names, "batch_hvg": np.arange(n_genes) < 60}, index=names)
    return ad.AnnData(X=sp.csr_matrix(counts), obs=obs, var=var,
                      layers={"counts": sp.csr_matrix(counts), "normalized": sp.csr_matrix(normalized)})


def codes(solution, key: str) -> np.ndarray:
    return solution.obs[key].cat.codes.to_numpy()


def result_for(solution, emb=None, conn=None):
    result = ad.AnnData(obs=solution.obs[["observation_joinid"]].copy())
    if emb is not None:
        result.obsm["X_emb"] = np.asarray(emb, dtype=np.float32)
    if conn is not None:
        result.obsp["connectivities"] = sp.csr_matrix(conn)
        result.obsp["distances"] = sp.csr_matrix(conn)
    return result


def knn_graph(emb: np.ndarray, k: int = 15):
    """The UMAP connectivities of `emb` (an input of the metrics, built as a submission would)."""
    work = ad.AnnData(obs=pd.DataFrame(index=[str(i) for i in range(len(emb))]))
    work.obsm["X"] = emb.astype(np.float32)
    sc.pp.neighbors(work, n_neighbors=k, use_rep="X", transformer="sklearn")
    return work.obsp["connectivities"].tocsr()


def separated_types_embedding(solution, seed: int = 1) -> np.ndarray:
    """Cell types far apart (distance ~50), batches randomly mixed inside each type."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 1, (3, 10))
    centers = 50 * centers / np.linalg.norm(centers, axis=1, keepdims=True)
    return centers[codes(solution, "cell_type")] + rng.normal(0, 1, (solution.n_obs, 10))


def separated_batches_embedding(solution, seed: int = 2) -> np.ndarray:
    """Batches far apart (distance ~100), types apart (~20) inside each batch."""
    rng = np.random.default_rng(seed)
    batch_centers = 100 * np.eye(10)[:3]
    type_centers = 20 * np.eye(10)[3:6]
    return (batch_centers[codes(solution, "batch")] + type_centers[codes(solution, "cell_type")]
            + rng.normal(0, 1, (solution.n_obs, 10)))


# -- independent computations ----------------------------------------------------------------------

def silhouette_reference(x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    d = cdist(x.astype(np.float64), x.astype(np.float64))
    out = np.zeros(len(x))
    for i in range(len(x)):
        same = labels == labels[i]
        if same.sum() == 1:
            continue
        a = d[i, same].sum() / (same.sum() - 1)
        b = min(d[i, labels == other].mean() for other in np.unique(labels) if other != labels[i])
        out[i] = (b - a) / max(a, b)
    return out


def graph_lisi_reference(conn, labels: np.ndarray, k: int = 90) -> float:
    """Median LISI as scib's graph LISI: k nearest cells by shortest path (edge length =
    connectivity), Gaussian weights calibrated to perplexity k/3 by bisection, inverse Simpson."""
    lengths = dijkstra(sp.csr_matrix(conn), directed=True)
    target = math.log(math.floor(k / 3))
    values = []
    for i in range(len(labels)):
        row = lengths[i].copy()
        row[i] = np.inf
        nearest = np.argsort(row, kind="stable")[:k]
        dist = row[nearest]
        if not np.isfinite(dist).all():
            values.append(1.0)
            continue
        beta, low, high = 1.0, -np.inf, np.inf
        for _ in range(50):
            p = np.exp(-dist * beta)
            entropy = math.log(p.sum()) + beta * np.sum(dist * p) / p.sum()
            if abs(entropy - target) < 1e-5:
                break
            if entropy > target:
                low, beta = beta, (beta * 2 if high == np.inf else (beta + high) / 2)
            else:
                high, beta = beta, (beta / 2 if low == -np.inf else (beta + low) / 2)
        p = np.exp(-dist * beta)
        p /= p.sum()
        share = np.bincount(labels[nearest], weights=p, minlength=labels.max() + 1)
        values.append(1.0 / np.sum(share ** 2))
    return float(np.median(values))


def pc_regression_reference(x: np.ndarray, covariates: np.ndarray, n_comps: int = 50) -> float:
    """Variance-weighted R^2 of the top principal components (numpy SVD) on the covariates
    (sklearn linear regression with intercept), negative R^2 counted as 0."""
    from sklearn.linear_model import LinearRegression

    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=0)
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    n_comps = min(n_comps, min(x.shape))
    pcs = u[:, :n_comps] * s[:n_comps]
    variance = s[:n_comps] ** 2 / (len(x) - 1)
    r2 = [max(0.0, LinearRegression().fit(covariates, pcs[:, j]).score(covariates, pcs[:, j])) for j in range(n_comps)]
    return float(np.dot(r2, variance) / variance.sum())


def one_hot(values: np.ndarray) -> np.ndarray:
    return np.eye(values.max() + 1)[values]


# -- scenarios (computed once) -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def solution():
    return make_solution()


@pytest.fixture(scope="module")
def mixed(solution):
    emb = separated_types_embedding(solution)
    conn = knn_graph(emb)
    timings: dict[str, float] = {}
    values, problems = compute_metrics(result_for(solution, emb, conn), solution,
                                       cell_cycle_genes=(S_GENES, G2M_GENES), timings=timings)
    return emb, conn, values, problems, timings


@pytest.fixture(scope="module")
def separated(solution):
    emb = separated_batches_embedding(solution)
    values, problems = compute_metrics(result_for(solution, emb), solution, cell_cycle_genes=(S_GENES, G2M_GENES))
    return emb, values, problems


# -- tests ---------------------------------------------------------------------------------------------

def test_all_keys_and_timings(mixed):
    _, _, values, problems, timings = mixed
    assert tuple(values) == METRICS
    assert all(math.isfinite(v) for v in values.values()), problems
    assert problems == {}
    for step in ("postprocess", "asw_batch", "asw_label", "ari_nmi", "kbet", "ilisi", "clisi", "pcr",
                 "cell_cycle_conservation", "total"):
        assert timings[step] >= 0


def test_asw_label_matches_reference_and_is_high_for_separated_types(mixed, solution):
    emb, _, values, _, _ = mixed
    expected = (silhouette_reference(emb, codes(solution, "cell_type")).mean() + 1) / 2
    assert values["asw_label"] == pytest.approx(expected, abs=1e-4)
    assert values["asw_label"] > 0.95


def test_asw_batch_matches_reference(mixed, separated, solution):
    types, batches = codes(solution, "cell_type"), codes(solution, "batch")
    for emb, values in ((mixed[0], mixed[2]), (separated[0], separated[1])):
        per_type = [np.mean(1 - np.abs(silhouette_reference(emb[types == t], batches[types == t])))
                    for t in np.unique(types)]
        assert values["asw_batch"] == pytest.approx(np.mean(per_type), abs=1e-6)
    assert mixed[2]["asw_batch"] > 0.9  # random batch labels inside a type: silhouette ~ 0
    assert separated[1]["asw_batch"] < 0.1  # batches far apart: silhouette ~ 1


def test_separated_types_cluster_perfectly(mixed):
    values = mixed[2]
    assert values["ari"] == pytest.approx(1.0)
    assert values["nmi"] == pytest.approx(1.0)
    assert values["graph_connectivity"] == 1.0
    assert values["clisi"] == pytest.approx(1.0)


def test_lisi_matches_graph_lisi_reference(mixed, solution):
    _, conn, values, _, _ = mixed
    batches, types = codes(solution, "batch"), codes(solution, "cell_type")
    ilisi = (graph_lisi_reference(conn, batches) - 1) / (3 - 1)
    clisi = (3 - graph_lisi_reference(conn, types)) / (3 - 1)
    assert values["ilisi"] == pytest.approx(ilisi, abs=2e-3)
    assert values["clisi"] == pytest.approx(clisi, abs=2e-3)
    assert values["ilisi"] > 0.7  # well mixed batches


def test_separated_batches(separated):
    _, values, _ = separated
    assert values["ilisi"] == pytest.approx(0.0, abs=1e-6)
    assert values["kbet"] == 0.0
    assert values["pcr"] == 0.0  # batch explains more variance than before: clipped at 0


def test_kbet_high_when_batches_are_mixed(mixed):
    assert mixed[2]["kbet"] > 0.8


def test_graph_connectivity_of_a_split_graph(solution):
    """A hand-made graph: types 0 and 1 each split into components of 2/3 and 1/3 of their cells,
    type 2 one chain. Expected (2/3 + 2/3 + 1) / 3. A graph-only result: embedding metrics NaN."""
    types = codes(solution, "cell_type")
    rows, cols = [], []
    for t in range(3):
        members = np.flatnonzero(types == t)
        parts = [members] if t == 2 else [members[: 2 * len(members) // 3], members[2 * len(members) // 3:]]
        for part in parts:
            rows += list(part[:-1])
            cols += list(part[1:])
    a = sp.coo_matrix((np.full(len(rows), 0.5), (rows, cols)), shape=(solution.n_obs,) * 2).tocsr()
    conn = a + a.T
    values, problems = compute_metrics(result_for(solution, conn=conn), solution,
                                       cell_cycle_genes=(S_GENES, G2M_GENES))
    assert values["graph_connectivity"] == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)
    for name in EMBEDDING_METRICS:
        assert math.isnan(values[name]) and "embedding" in problems[name]
    for name in GRAPH_METRICS:
        assert math.isfinite(values[name]) and name not in problems


def test_graph_only_result_from_knn(mixed, solution):
    _, conn, full_values, _, _ = mixed
    values, problems = compute_metrics(result_for(solution, conn=conn), solution)
    assert set(problems) == set(EMBEDDING_METRICS)
    for name in GRAPH_METRICS:  # the same graph as the embedding+graph result: the same values
        assert values[name] == pytest.approx(full_values[name])


def test_pcr_known_answers_and_reference(solution):
    normalized = solution.layers["normalized"].toarray()
    hvg = normalized[:, solution.var["batch_hvg"].to_numpy()]
    batches = codes(solution, "batch")
    unchanged, _ = compute_metrics(result_for(solution, hvg), solution)
    assert unchanged["pcr"] == pytest.approx(0.0, abs=1e-6)
    corrected = hvg.copy()
    for b in np.unique(batches):
        corrected[batches == b] -= corrected[batches == b].mean(axis=0)
    removed, _ = compute_metrics(result_for(solution, corrected), solution)
    assert removed["pcr"] == pytest.approx(1.0, abs=1e-6)
    half = hvg - 0.5 * (hvg - corrected)  # half of the batch means removed
    partial, _ = compute_metrics(result_for(solution, half), solution)
    before = pc_regression_reference(hvg, one_hot(batches))
    after = pc_regression_reference(half, one_hot(batches))
    assert partial["pcr"] == pytest.approx((before - after) / before, abs=1e-3)
    assert 0.05 < partial["pcr"] < 0.95


def test_cell_cycle_conservation(solution):
    normalized = solution.layers["normalized"].toarray()
    genes = (S_GENES, G2M_GENES)
    same, problems = compute_metrics(result_for(solution, normalized), solution, cell_cycle_genes=genes)
    assert same["cell_cycle_conservation"] == pytest.approx(1.0, abs=1e-4), problems

    # an embedding without the cell-cycle genes, compared with an independent computation
    emb = normalized[:, 16:]
    values, _ = compute_metrics(result_for(solution, emb), solution, cell_cycle_genes=genes)
    batches = codes(solution, "batch")
    scores = []
    for b in np.unique(batches):
        part = ad.AnnData(X=normalized[batches == b], var=pd.DataFrame(index=solution.var["feature_name"]))
        sc.tl.score_genes_cell_cycle(part, s_genes=S_GENES, g2m_genes=G2M_GENES)
        covariates = part.obs[["S_score", "G2M_score"]].to_numpy()
        before = pc_regression_reference(normalized[batches == b], covariates)
        after = pc_regression_reference(emb[batches == b], covariates)
        scores.append(max(0.0, 1 - abs(after - before) / before))
    assert values["cell_cycle_conservation"] == pytest.approx(np.mean(scores), abs=1e-3)
    assert values["cell_cycle_conservation"] < 0.9

    for missing in (None, (["NOPE"], ["NADA"])):
        zero, problems = compute_metrics(result_for(solution, normalized), solution, cell_cycle_genes=missing)
        assert zero["cell_cycle_conservation"] == 0.0
        assert "0.0" in problems["cell_cycle_conservation"]


def test_a_solution_scores_each_result_as_a_fresh_copy_of_it_would(solution):
    """What the metrics keep per solution (its own regressions and cell-cycle scores, computed at
    the first scoring) holds nothing of the result that filled it: a second result scores exactly
    as it does against a solution object that never scored anything."""
    genes = (S_GENES, G2M_GENES)
    normalized = solution.layers["normalized"].toarray()
    first, _ = compute_metrics(result_for(solution, separated_types_embedding(solution)), solution,
                               cell_cycle_genes=genes)
    second = result_for(solution, normalized[:, 16:])
    kept, _ = compute_metrics(second, solution, cell_cycle_genes=genes)
    fresh, _ = compute_metrics(second, solution.copy(), cell_cycle_genes=genes)
    assert kept == fresh
    for name in ("pcr", "cell_cycle_conservation"):
        assert math.isfinite(kept[name]) and kept[name] != first[name], name


def test_a_solutions_terms_are_kept_on_disk_for_the_next_scoring_process(tmp_path):
    """What the metrics keep per solution is stored beside a dataset's solution too: a new solution
    object on the same file (the next scoring process) reads it instead of computing it again;
    another file (or metrics version) computes its own; a damaged entry is computed again."""
    from evaluators.scrna.metric_inputs import keep_terms_on_disk, solution_term

    class Solution:  # any object a dataset read
        pass

    computed = []

    def compute(value):
        return lambda: computed.append(value) or value

    covariates = np.arange(6.0).reshape(3, 2)
    first = Solution()
    keep_terms_on_disk(first, tmp_path, "file A")
    assert solution_term(first, ("pcr",), compute(0.25)) == 0.25
    assert solution_term(first, ("cell_cycle", 0), compute((covariates, 0.5)))[1] == 0.5
    later = Solution()
    keep_terms_on_disk(later, tmp_path, "file A")
    assert solution_term(later, ("pcr",), compute(0.9)) == 0.25
    pair = solution_term(later, ("cell_cycle", 0), compute((covariates, 0.9)))
    assert isinstance(pair, tuple) and np.array_equal(pair[0], covariates) and pair[1] == 0.5
    assert len(computed) == 2  # the later solution computed nothing
    other = Solution()
    keep_terms_on_disk(other, tmp_path, "file B")
    assert solution_term(other, ("pcr",), compute(0.75)) == 0.75
    for stored in tmp_path.glob("*.npz"):
        stored.write_bytes(b"damaged")
    damaged = Solution()
    keep_terms_on_disk(damaged, tmp_path, "file A")
    assert solution_term(damaged, ("pcr",), compute(0.3)) == 0.3 and len(computed) == 4


def test_corrected_counts_become_an_embedding(solution):
    result = ad.AnnData(obs=solution.obs[["observation_joinid"]].copy(), var=solution.var[[]].copy())
    result.layers["corrected_counts"] = solution.layers["normalized"].copy()
    values, problems = compute_metrics(result, solution, cell_cycle_genes=(S_GENES, G2M_GENES))
    assert problems == {} and all(math.isfinite(v) for v in values.values())


def test_nan_embedding_gives_nan_with_reasons(solution, capsys):
    emb = separated_types_embedding(solution)
    emb[5, 2] = np.nan
    values, problems = compute_metrics(result_for(solution, emb), solution, cell_cycle_genes=(S_GENES, G2M_GENES))
    assert set(problems) == set(METRICS)
    assert all(math.isnan(v) for v in values.values())
    assert all("NaN" in why for why in problems.values())
    assert capsys.readouterr().out == ""


def test_reordered_or_dropped_cells_raise(solution):
    emb = separated_types_embedding(solution)
    shuffled = result_for(solution, emb)
    order = np.random.default_rng(0).permutation(solution.n_obs)
    shuffled.obs["observation_joinid"] = shuffled.obs["observation_joinid"].to_numpy()[order]
    with pytest.raises(ValueError, match="cells reordered or dropped"):
        compute_metrics(shuffled, solution)
    dropped = result_for(solution, emb)[:-1].copy()
    with pytest.raises(ValueError, match="cells reordered or dropped"):
        compute_metrics(dropped, solution)
    renamed = ad.AnnData(obs=pd.DataFrame(index=solution.obs_names[order]))  # no joinid, names permuted
    renamed.obsm["X_emb"] = emb.astype(np.float32)
    with pytest.raises(ValueError, match="cells reordered or dropped"):
        compute_metrics(renamed, solution)


def test_a_failing_metric_does_not_stop_the_others(solution):
    emb = separated_types_embedding(solution)
    broken = solution.copy()
    del broken.layers["normalized"]  # pcr and cell cycle need it
    values, problems = compute_metrics(result_for(solution, emb), broken, cell_cycle_genes=(S_GENES, G2M_GENES))
    assert math.isnan(values["pcr"]) and math.isnan(values["cell_cycle_conservation"])
    assert "normalized" in problems["pcr"]
    assert set(problems) == {"pcr", "cell_cycle_conservation"}


# -- Leiden, kBET internals and the extra metrics ---------------------------------------------------


@pytest.mark.filterwarnings("ignore:In the future, the default backend for leiden:FutureWarning")
@pytest.mark.parametrize("rule", ["paper", "leidenalg"])
def test_ari_nmi_take_the_best_nmi_leiden_clustering_of_the_rule_and_are_deterministic(solution, rule):
    """`paper` (the default): scanpy's igraph Leiden, 2 iterations, undirected, as the paper's
    evaluator precomputes it; `leidenalg`: scanpy's default `sc.tl.leiden` (run to convergence)."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    rng = np.random.default_rng(5)
    emb = separated_types_embedding(solution) + rng.normal(0, 25, (solution.n_obs, 10))  # types overlap
    conn = knn_graph(emb)
    types = codes(solution, "cell_type")
    work = ad.AnnData(obs=pd.DataFrame(index=[str(i) for i in range(solution.n_obs)]))
    flavour = {"flavor": "igraph", "n_iterations": 2, "directed": False} if rule == "paper" else {}
    best = (0.0, 0.0)
    for resolution in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
        sc.tl.leiden(work, resolution=resolution, adjacency=conn, key_added="c", **flavour)
        nmi = normalized_mutual_info_score(types, work.obs["c"])
        if nmi > best[0]:
            best = (nmi, adjusted_rand_score(types, work.obs["c"]))
    options = {} if rule == "paper" else {"clustering": rule}
    first, _ = compute_metrics(result_for(solution, conn=conn), solution, **options)
    again, _ = compute_metrics(result_for(solution, conn=conn), solution, **options)
    assert (first["nmi"], first["ari"]) == pytest.approx(best, abs=1e-12)
    assert (again["nmi"], again["ari"]) == (first["nmi"], first["ari"])
    assert 0.05 < first["ari"] < 0.99  # not a trivial clustering


def test_kbet_test_counts_missing_neighbours_in_k0():
    """R kBET's chi^2 test by hand: two batches of 10 cells, k0 = 10 (the cell and 9 neighbours).
    Neighbourhoods split 5:5 are all accepted; 9 neighbours of the cell's own batch give 10:0
    against 5:5 (chi^2 = 10), rejected; no neighbours at all (scib's NaN rows) give 1:0 against
    5:5 (chi^2 = 8.2, p = 0.004), rejected; and so is half of each."""
    from evaluators.scrna.kbet import rejection_rate

    batches = np.repeat([0, 1], 10)
    cells = np.arange(20)
    own = [np.setdiff1d(cells[batches == batches[i]], [i]) for i in cells]
    other = [cells[batches != batches[i]] for i in cells]
    balanced = np.array([np.r_[own[i][:4], other[i][:5]] for i in cells])
    one_sided = np.array([own[i] for i in cells])
    missing = np.full((20, 9), -1)
    assert rejection_rate(balanced, batches, 10) == 0.0
    assert rejection_rate(one_sided, batches, 10) == 1.0
    assert rejection_rate(missing, batches, 10) == 1.0
    assert rejection_rate(np.where(cells[:, None] < 10, balanced, missing), batches, 10) == 0.5


def test_a_cell_type_of_exactly_ten_cells_counts_as_full_rejection_and_one_of_nine_is_left_out():
    """scib tests types of 10 cells or more; with k0 = 10 a 10-cell type has too few neighbours for
    the diffusion, which scib scores as 100% rejection (the paper's rule, issue 32 item 3)."""
    from evaluators.scrna.kbet import knn_connectivities, type_rejection_rate

    rng = np.random.default_rng(0)
    for n, expected in ((10, 1.0), (9, None)):
        emb = rng.normal(size=(n, 5)).astype(np.float32)
        batches = np.arange(n) % 2
        assert type_rejection_rate(knn_connectivities(emb, n - 1), batches) == expected


def test_diffusion_neighbours_match_a_dense_float64_computation():
    """The k cells with the largest T + T^2 + ... (T the row-normalised graph, powers added until every
    row has k + 1 non-zeros, at least 3), the cell itself excluded: compared as sets per row."""
    from evaluators.scrna.kbet import diffusion_neighbours

    rng = np.random.default_rng(3)
    n, k = 60, 12
    chain = sp.diags([rng.uniform(0.2, 1.0, n - 1)], [1], shape=(n, n))  # a path: diffusion must spread
    graph = sp.csr_matrix(chain + chain.T)
    found = diffusion_neighbours(graph, k, chunk=16)
    dense = graph.toarray()
    trans = dense / dense.sum(axis=1, keepdims=True)
    power, total, steps = trans.copy(), trans.copy(), 1
    while steps < 3 or (total > 0).sum(axis=1).min() < k + 1:
        power = power @ trans
        total += power
        steps += 1
    np.fill_diagonal(total, 0)
    assert steps > 3  # the path needs more than three steps to reach k + 1 cells
    for row in range(n):
        assert set(found[row]) == set(np.argsort(-total[row], kind="stable")[:k]), row


def test_isolated_label_metrics_and_their_reasons(solution):
    types, batches = codes(solution, "cell_type"), codes(solution, "batch")
    emb = separated_types_embedding(solution)
    everywhere, problems = compute_metrics(result_for(solution, emb, knn_graph(emb)), solution,
                                           extra=("isolated_label_f1", "isolated_label_asw"))
    assert math.isnan(everywhere["isolated_label_f1"]) and "every batch" in problems["isolated_label_f1"]

    keep = (types != 2) | (batches == 0)  # type 2 only in batch 0: the isolated type
    part = solution[keep].copy()
    emb = emb[keep]
    values, problems = compute_metrics(result_for(part, emb, knn_graph(emb)), part,
                                       extra=("isolated_label_f1", "isolated_label_asw"))
    sil = silhouette_reference(emb, codes(part, "cell_type"))
    assert values["isolated_label_asw"] == pytest.approx((sil[codes(part, "cell_type") == 2].mean() + 1) / 2, abs=1e-5)
    assert values["isolated_label_f1"] == pytest.approx(1.0)  # far-apart types: one cluster is exactly type 2
    assert tuple(values)[-2:] == ("isolated_label_f1", "isolated_label_asw")


def test_hvg_overlap_needs_corrected_counts_and_reads_them(solution):
    normalized = solution.layers["normalized"].toarray()
    emb = separated_types_embedding(solution)
    without, problems = compute_metrics(result_for(solution, emb), solution, extra=("hvg_overlap",))
    assert math.isnan(without["hvg_overlap"]) and "corrected_counts" in problems["hvg_overlap"]
    result = result_for(solution, emb)
    result = ad.AnnData(obs=result.obs, obsm=result.obsm, var=solution.var[[]].copy(),
                        layers={"corrected_counts": normalized})
    same, _ = compute_metrics(result, solution, extra=("hvg_overlap",))
    assert same["hvg_overlap"] == pytest.approx(1.0)
    result.layers["corrected_counts"] = normalized[:, np.random.default_rng(1).permutation(solution.n_vars)]
    shuffled, _ = compute_metrics(result, solution, extra=("hvg_overlap",))
    assert shuffled["hvg_overlap"] < 0.7
    with pytest.raises(ValueError, match="unknown extra metrics"):
        compute_metrics(result, solution, extra=("hvg",))
