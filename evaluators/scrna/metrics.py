"""The ten batch-integration metrics of the OpenProblems v2 task, with its post-processing.

`compute_metrics(result, solution, cell_cycle_genes=...)` returns ``(values, problems)``: the RAW
value of each metric (no normalisation by control methods; that is the caller's business) and, for
each metric that could not be computed (value NaN) or was set by rule (cell cycle without genes),
a one-line reason. It never raises for a metric; it raises ``ValueError("cells reordered or
dropped")`` when the result's cells are not the solution's cells in the solution's order.

Post-processing (OpenProblems v2, `process_integration` / `transform`)
---------------------------------------------------------------------
1. ``batch`` and ``cell_type`` come from the solution (same order). The lengths must agree, and
   ``obs['observation_joinid']`` must be identical where both objects have it (where neither has
   it but the obs names are the same set in another order, that is refused as well).
2. A result with ``layers['corrected_counts']`` and no ``obsm['X_emb']`` gets
   ``X_emb = sc.pp.pca(corrected_counts, n_comps=50, svd_solver="arpack")`` (a "feature" output).
3. An embedding without a graph gets ``sc.pp.neighbors(use_rep="X_emb")`` (15 neighbours, UMAP
   connectivities). A submitted ``obsp['connectivities']`` (with ``obsp['distances']``) is used as
   the neighbour graph as it is (CSR, sorted indices, explicit zeros dropped). The kNN search is the
   exact (brute-force, scikit-learn) one: scanpy's default for more than 8192 cells is
   pynndescent, whose transformer returns a ``csr_array`` that scanpy 1.11 cannot read with scipy
   1.17 (``'csr_array' object has no attribute 'getnnz'``). Exact instead of approximate neighbours
   changes the graph only where pynndescent would have missed a neighbour.
4. Leiden clustering (scanpy, ``flavor="igraph"``, ``n_iterations=2``, ``random_state=0``) of that
   graph at resolutions 0.2, 0.3, ..., 0.8; ARI and NMI are taken from the clustering with the best
   NMI (the first one on ties), as scib's ``cluster_optimal_resolution`` that OpenProblems'
   ``clustering_overlap`` calls. (That call uses scanpy's default Leiden, the leidenalg flavour run
   to convergence; the igraph flavour with 2 iterations is scanpy's announced default and faster.)

The metrics (keys of ``values``)
--------------------------------
Embedding metrics need ``X_emb`` (or corrected counts) without NaN/inf: asw_batch, asw_label, kbet,
pcr, cell_cycle_conservation. Graph metrics need the submitted or computed graph: ari, nmi,
graph_connectivity, ilisi, clisi. A graph-only result gets NaN for the embedding metrics.

======================== ======================================== =============================================
metric                   implementation here                      compared with OpenProblems v2 (scib 1.1)
======================== ======================================== =============================================
asw_batch                per cell type (>1 batch, not every cell  identical definition: scib's
                         its own batch) sklearn                   ``silhouette_batch`` (sklearn, euclidean,
                         ``silhouette_samples`` on batch,         mean of per-type means). scib-metrics'
                         1-|s|, mean per type, mean over types    ``silhouette_batch`` gives the same number
                                                                  but re-jits jax per type (~35 s at 16k
                                                                  cells on 2 cores, against ~1 s here)
asw_label                ``scib_metrics.silhouette_label``        same as scib's ``silhouette`` up to float32
                         (jax, euclidean), (s+1)/2                rounding
ari / nmi                sklearn ``adjusted_rand_score`` /        same as scib's ``ari``/``nmi``
                         ``normalized_mutual_info_score``         (arithmetic). Leiden on our exact-kNN graph
                         (arithmetic) of the best-NMI Leiden      vs OpenProblems' pynndescent graph
                         clustering (see 4.)
graph_connectivity       own: scipy ``connected_components``      identical to scib (uses the symmetric
                         (strong) of each cell type's subgraph of connectivities). Not scib-metrics'
                         the connectivities; largest component /  version, which takes the directed kNN
                         cells of the type, mean over types       *distance* graph with strong connection
                                                                  (stricter)
kbet                     own port of scib's ``kBET`` (embed       scib: 50-NN graph of X_emb; per type k0 =
                         mode): 50-NN UMAP graph of X_emb; per    clip(mean batch size / 4, 10, 70); one
                         cell type k0 = min(70, max(10, mean      component or >= 75% of cells in components
                         batch size // 4)); diffusion neighbours  of >= 3 k0 cells, else 0; diffusion
                         (T + T^2 + T^3 ..., T the row-normalised neighbours; R kBET on a self + k0-1
                         subgraph, until every row has k0+1 non-  neighbourhood. Differences: R kBET tests 100
                         zeros, max 26 steps) as scib's           random 10% samples, we test every cell (same
                         ``diffusion_nn``; own chi^2 test (alpha  expectation); scib's ``argpartition`` keeps
                         0.05, df = batches-1) of each cell's     an arbitrary k0-1 of the k0 nearest, we keep
                         self + k0-1 nearest, as R kBET and       the nearest. scib-metrics' ``kbet_per_label``
                         ``scib_metrics.kbet`` (not called: it    is not used: its diffusion map (eigsh, 100
                         re-jits per shape, 12 s); acceptance     comps) + pynndescent take 70 s here (numba
                         rate averaged over types (types with     compilation, eigsh; 25 s once compiled) and
                         < 10 cells or one batch skipped)         it differs from scib (approximate diffusion
                                                                  distances instead of T + T^2 + T^3 ...)
ilisi / clisi            scib's *graph* LISI: the 90 nearest      same algorithm as scib's ``lisi_graph_py``
                         cells of each cell by shortest path on   (its C++ ``knn_graph`` takes the
                         the connectivities graph (edge length =  connectivities as edge lengths, so strongly
                         connectivity, as scib's C++ does; own    connected neighbours are "far"; reproduced on
                         numba Dijkstra), then                    purpose, since OpenProblems scores with it).
                         ``scib_metrics.lisi_knn`` (perplexity    scib-metrics' ``ilisi_knn``/``clisi_knn``
                         30) on those path lengths; cells with    would instead use 90 euclidean neighbours of
                         fewer than 90 reachable cells get LISI   the embedding (impossible for graph outputs).
                         1 (scib's rule); median; iLISI scaled    float32 in the jax Simpson index. scib leaves
                         (x-1)/(B-1), cLISI (L-x)/(L-1)           cells without any edge out; we count them 1
pcr                      own port of scib's ``pcr_comparison``:   identical to scib (arpack PCA, r^2 of each PC
                         PCA (scanpy, arpack, 50 comps; full      on the one-hot batch with intercept, weighted
                         when the data has <= 50 columns) of the  by PC variance). Before = solution's
                         solution's normalized data on            ``layers['normalized']`` on ``batch_hvg``
                         ``batch_hvg`` genes vs of X_emb; score   genes, as OpenProblems' pcr script.
                         (before-after)/before, 0 if negative     scib-metrics' ``pcr_comparison`` (full jax
                                                                  SVD of every component, float32) takes ~30 s
                                                                  at 16k cells on 2 cores against ~3 s here
cell_cycle_conservation  own port of scib's ``cell_cycle``: per   identical to scib; genes come from
                         batch, ``sc.tl.score_genes_cell_cycle``  ``cell_cycle_genes`` matched to
                         on the batch's normalized data (all      ``var['feature_name']`` instead of scib's
                         genes), PCR of [S, G2M] scores on its    packaged lists. 0.0 when no S or no G2M
                         PCA (50 comps) before and on X_emb       gene is present (OpenProblems' scib call
                         after; 1-|after-before|/before, 0 if     fails there; the task counts it as 0)
                         negative; mean over batches
======================== ======================================== =============================================

Threads and noise: NumPy/BLAS/OpenMP threads are capped at ``n_jobs`` (threadpoolctl) while the
metrics run; jax (XLA) and numba keep their own thread pools. Warnings are silenced and anything
printed to ``sys.stdout`` is swallowed: the station reads stdout. Heavy imports (scanpy, jax via
scib-metrics, numba) happen inside the functions; the first call in a process pays for them and
for numba/jax compilation (about 10 s).

``timings`` (if given) receives seconds per step: ``imports``, ``postprocess`` (PCA of corrected
counts, neighbour graph), ``asw_batch``, ``asw_label``, ``ari_nmi`` (Leiden at all resolutions +
scores), ``graph_connectivity``, ``kbet``, ``lisi_neighbors`` (shortest-path 90-NN, shared by
iLISI and cLISI), ``ilisi``, ``clisi``, ``pcr``, ``cell_cycle_conservation`` and ``total``.
"""
from __future__ import annotations

import contextlib
import io
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

METRICS: tuple[str, ...] = ("asw_batch", "asw_label", "ari", "nmi", "graph_connectivity", "kbet",
                            "ilisi", "clisi", "pcr", "cell_cycle_conservation")
N_NEIGHBORS = 15  # sc.pp.neighbors default, used by OpenProblems' process_integration
N_PCS = 50
LEIDEN_RESOLUTIONS: tuple[float, ...] = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
LISI_NEIGHBORS = 90  # scib's k0 for graph LISI; perplexity k0 / 3
KBET_NEIGHBORS = 50  # scib's kBET recomputes a 50-NN graph of the embedding
KBET_ALPHA = 0.05
_SIZE_MAX = 2 ** 31 - 1


class MetricSkipped(Exception):
    """A metric that cannot be computed for this result; the message is the reason."""


class _NotEnoughNeighbours(Exception):
    pass


@dataclass
class _Inputs:
    solution: Any
    n: int
    batch: np.ndarray  # integer codes
    labels: np.ndarray  # integer codes
    emb: np.ndarray | None = None
    emb_problem: str = ""
    conn: Any = None  # scipy CSR, float64
    graph_problem: str = ""
    graph_source: str = ""
    cache: dict[str, Any] = field(default_factory=dict)

    def need_emb(self) -> np.ndarray:
        if self.emb is None:
            raise MetricSkipped(self.emb_problem or "needs an embedding (obsm['X_emb'] or corrected counts)")
        return self.emb

    def need_graph(self) -> Any:
        if self.conn is None:
            raise MetricSkipped(self.graph_problem or "needs a neighbour graph")
        return self.conn


def compute_metrics(result: Any, solution: Any, *, cell_cycle_genes: tuple[Sequence[str], Sequence[str]] | None = None,
                    n_jobs: int = 2, timings: dict[str, float] | None = None
                    ) -> tuple[dict[str, float], dict[str, str]]:
    """The ten raw metrics of `result` (a submission's AnnData) against `solution` (labelled data).

    Returns ``(values, problems)``: ``values`` maps each of `METRICS` to a float (NaN when not
    computable), ``problems`` maps a metric to a one-line reason (every NaN has one).
    `cell_cycle_genes` is ``(S-phase genes, G2/M genes)`` as names in ``solution.var['feature_name']``.
    Raises ``ValueError("cells reordered or dropped")`` if the cells do not match the solution's.
    """
    began = time.perf_counter()
    clock: dict[str, float] = timings if timings is not None else {}
    _check_cells(result, solution)
    values = {name: math.nan for name in METRICS}
    problems: dict[str, str] = {}

    with _quiet(n_jobs):
        step = time.perf_counter()
        _import_libraries()
        clock["imports"] = time.perf_counter() - step

        step = time.perf_counter()
        inputs = _prepare(result, solution)
        clock["postprocess"] = time.perf_counter() - step

        steps: list[tuple[str, tuple[str, ...], Callable[[], dict[str, float]]]] = [
            ("asw_batch", ("asw_batch",), lambda: {"asw_batch": _asw_batch(inputs)}),
            ("asw_label", ("asw_label",), lambda: {"asw_label": _asw_label(inputs)}),
            ("ari_nmi", ("ari", "nmi"), lambda: _ari_nmi(inputs)),
            ("graph_connectivity", ("graph_connectivity",),
             lambda: {"graph_connectivity": _graph_connectivity(inputs)}),
            ("kbet", ("kbet",), lambda: {"kbet": _kbet(inputs)}),
            ("lisi_neighbors", ("ilisi", "clisi"), lambda: _prefetch_lisi(inputs)),
            ("ilisi", ("ilisi",), lambda: {"ilisi": _ilisi(inputs)}),
            ("clisi", ("clisi",), lambda: {"clisi": _clisi(inputs)}),
            ("pcr", ("pcr",), lambda: {"pcr": _pcr(inputs)}),
            ("cell_cycle_conservation", ("cell_cycle_conservation",),
             lambda: {"cell_cycle_conservation": _cell_cycle(inputs, cell_cycle_genes, problems)}),
        ]
        for key, names, run in steps:
            step = time.perf_counter()
            try:
                for name, value in run().items():
                    values[name] = float(value)
            except MetricSkipped as exc:
                for name in names:
                    problems.setdefault(name, str(exc))
            except Exception as exc:  # one failing metric must not take the others down
                for name in names:
                    problems.setdefault(name, _one_line(exc))
            clock[key] = time.perf_counter() - step

    for name in METRICS:
        if not math.isfinite(values[name]):
            values[name] = math.nan
            problems.setdefault(name, "the computation gave a value that is not finite")
    clock["total"] = time.perf_counter() - began
    return values, problems


# -- preparation -----------------------------------------------------------------------------------

def _check_cells(result: Any, solution: Any) -> None:
    if result.n_obs != solution.n_obs:
        raise ValueError("cells reordered or dropped")
    key = "observation_joinid"
    if key in result.obs and key in solution.obs:
        if not np.array_equal(result.obs[key].astype(str).to_numpy(), solution.obs[key].astype(str).to_numpy()):
            raise ValueError("cells reordered or dropped")
        return
    mine, theirs = result.obs_names, solution.obs_names
    if not mine.equals(theirs) and mine.is_unique and theirs.is_unique and set(mine) == set(theirs):
        raise ValueError("cells reordered or dropped")


def _codes(values: Any) -> np.ndarray:
    import pandas as pd
    return np.asarray(pd.Categorical(np.asarray(values).astype(str)).codes, dtype=np.int64)


def _prepare(result: Any, solution: Any) -> _Inputs:
    import anndata as ad
    import pandas as pd
    import scanpy as sc
    import scipy.sparse as sp

    n = solution.n_obs
    inputs = _Inputs(solution=solution, n=n, batch=_codes(solution.obs["batch"]),
                     labels=_codes(solution.obs["cell_type"]))

    emb = None
    if "X_emb" in result.obsm:
        emb = result.obsm["X_emb"]
        emb = emb.toarray() if sp.issparse(emb) else np.asarray(emb)
        source = "obsm['X_emb']"
    elif "corrected_counts" in result.layers:
        source = "the PCA of layers['corrected_counts']"
        try:
            counts = result.layers["corrected_counts"]
            if counts.shape != (n, counts.shape[1]) or counts.shape[1] < 2:
                raise ValueError(f"corrected_counts has shape {counts.shape}")
            if sp.issparse(counts):
                counts = counts.astype(np.float32) if not np.issubdtype(counts.dtype, np.floating) else counts
                finite = bool(np.isfinite(counts.data).all())
                if counts.shape[0] * counts.shape[1] <= 50_000_000:  # dense arpack: same PCA, 3x faster
                    counts = counts.toarray()
            else:
                counts = np.asarray(counts, dtype=np.float32)
                finite = bool(np.isfinite(counts).all())
            if not finite:
                raise ValueError("corrected_counts contains NaN or infinite values")
            emb = sc.pp.pca(counts, n_comps=min(N_PCS, min(counts.shape) - 1), svd_solver="arpack",
                            return_info=False)
        except Exception as exc:
            inputs.emb_problem = f"PCA of corrected_counts failed: {_one_line(exc)}"
            emb = None
    else:
        source = ""
        inputs.emb_problem = "the result has no embedding (obsm['X_emb'] or layers['corrected_counts'])"

    if emb is not None:
        if emb.ndim != 2 or emb.shape[0] != n or emb.shape[1] < 1:
            inputs.emb_problem = f"{source} has shape {emb.shape}; expected ({n}, dimensions)"
        elif not np.issubdtype(emb.dtype, np.number):
            inputs.emb_problem = f"{source} is not numeric ({emb.dtype})"
        else:
            emb = np.ascontiguousarray(emb, dtype=np.float32 if emb.dtype != np.float64 else np.float64)
            if not np.isfinite(emb).all():
                inputs.emb_problem = f"{source} contains NaN or infinite values"
            else:
                inputs.emb = emb

    if "connectivities" in result.obsp:
        inputs.graph_source = "obsp['connectivities']"
        try:
            conn = result.obsp["connectivities"]
            conn = sp.csr_matrix(conn if sp.issparse(conn) else np.asarray(conn), dtype=np.float64)
            if conn.shape != (n, n):
                raise ValueError(f"obsp['connectivities'] has shape {conn.shape}; expected ({n}, {n})")
            conn.sum_duplicates()
            if not np.isfinite(conn.data).all():
                raise ValueError("obsp['connectivities'] contains NaN or infinite values")
            if (conn.data < 0).any():
                raise ValueError("obsp['connectivities'] has negative weights")
            conn.eliminate_zeros()
            conn.sort_indices()
            inputs.conn = conn
        except Exception as exc:
            inputs.graph_problem = _one_line(exc)
    elif inputs.emb is not None:
        inputs.graph_source = f"{N_NEIGHBORS}-NN graph of X_emb"
        try:
            work = ad.AnnData(obs=pd.DataFrame(index=pd.RangeIndex(n).astype(str)))
            work.obsm["X_emb"] = inputs.emb
            sc.pp.neighbors(work, n_neighbors=N_NEIGHBORS, use_rep="X_emb", transformer="sklearn")
            conn = sp.csr_matrix(work.obsp["connectivities"], dtype=np.float64)
            conn.eliminate_zeros()
            conn.sort_indices()
            inputs.conn = conn
        except Exception as exc:
            inputs.graph_problem = f"building the neighbour graph from X_emb failed: {_one_line(exc)}"
    else:
        inputs.graph_problem = ("no neighbour graph: the result has no obsp['connectivities'] and no usable "
                                f"embedding ({inputs.emb_problem})")
    return inputs


# -- embedding metrics -------------------------------------------------------------------------------

def _asw_label(inputs: _Inputs) -> float:
    from scib_metrics import silhouette_label

    emb = inputs.need_emb()
    if len(np.unique(inputs.labels)) < 2:
        raise MetricSkipped("needs at least two cell types")
    return float(silhouette_label(emb, inputs.labels, rescale=True))


def _asw_batch(inputs: _Inputs) -> float:
    from sklearn.metrics import silhouette_samples

    emb = inputs.need_emb()
    per_type = []
    for label in np.unique(inputs.labels):
        idx = np.flatnonzero(inputs.labels == label)
        batches = inputs.batch[idx]
        n_batches = len(np.unique(batches))
        if n_batches == 1 or n_batches == len(idx):
            continue
        sil = silhouette_samples(emb[idx], batches, metric="euclidean")
        per_type.append(float(np.mean(1.0 - np.abs(sil))))
    if not per_type:
        raise MetricSkipped("no cell type has cells from two or more batches")
    return float(np.mean(per_type))


def _kbet(inputs: _Inputs) -> float:
    import anndata as ad
    import pandas as pd
    import scanpy as sc
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    emb = inputs.need_emb()
    if len(np.unique(inputs.batch)) < 2:
        raise MetricSkipped("needs at least two batches")
    work = ad.AnnData(obs=pd.DataFrame(index=pd.RangeIndex(inputs.n).astype(str)))
    work.obsm["X_emb"] = emb
    sc.pp.neighbors(work, n_neighbors=KBET_NEIGHBORS, use_rep="X_emb", transformer="sklearn")
    conn = sp.csr_matrix(work.obsp["connectivities"], dtype=np.float64)

    scores = []
    for label in np.unique(inputs.labels):
        idx = np.flatnonzero(inputs.labels == label)
        batches = inputs.batch[idx]
        present, counts = np.unique(batches, return_counts=True)
        if len(idx) < 10 or len(present) == 1:
            continue  # scib: NaN, left out of the mean
        k0 = int(min(70, max(10, math.floor(np.mean(counts) / 4))))
        if k0 * len(idx) >= _SIZE_MAX:
            k0 = int(_SIZE_MAX // len(idx))
        sub = conn[idx][:, idx].tocsr()
        n_comp, comp = connected_components(sub, connection="strong")
        if n_comp == 1:
            keep = np.arange(len(idx))
        else:
            sizes = np.bincount(comp)
            keep = np.flatnonzero(sizes[comp] >= 3 * k0)
            if len(keep) / len(idx) < 0.75:
                scores.append(0.0)  # scib: too many small components, 100% rejection
                continue
            sub = sub[keep][:, keep].tocsr()
        try:
            nearest = _diffusion_neighbours(sub, k0)
        except _NotEnoughNeighbours:
            scores.append(0.0)  # scib: "Not enough neighbours", 100% rejection
            continue
        # R kBET's neighbourhood of a cell: the cell itself and its k0 - 1 nearest neighbours
        hood = np.hstack([np.arange(len(keep))[:, None], nearest[:, : k0 - 1]])
        scores.append(_kbet_acceptance(hood, batches[keep]))
    if not scores:
        raise MetricSkipped("no cell type has at least 10 cells from two or more batches")
    return float(np.mean(scores))


def _kbet_acceptance(hood: np.ndarray, batches: np.ndarray, alpha: float = KBET_ALPHA) -> float:
    """kBET's test for every cell: Pearson's chi^2 of the batch counts in its neighbourhood (rows of
    `hood`, indices into `batches`) against the batch frequencies of all cells (df = batches - 1);
    the share of cells whose p-value is at least `alpha`. (The same as `scib_metrics.kbet`, which
    re-compiles its jax functions for every new shape: 12 s of compilation for 15 cell types.)"""
    from scipy.stats import chi2

    codes = np.unique(batches, return_inverse=True)[1].reshape(-1)
    n_batches = int(codes.max()) + 1
    expected = np.bincount(codes, minlength=n_batches) / len(codes) * hood.shape[1]
    neighbour_codes = codes[hood]
    observed = np.zeros((hood.shape[0], n_batches))
    for b in range(n_batches):
        observed[:, b] = np.count_nonzero(neighbour_codes == b, axis=1)
    statistic = np.sum((observed - expected) ** 2 / expected, axis=1)
    p_values = chi2.sf(statistic, n_batches - 1)
    return float(np.mean(p_values >= alpha))


def _diffusion_neighbours(conn: Any, k: int, max_powers: int = 25, chunk: int = 512) -> np.ndarray:
    """scib's `diffusion_nn`: for each cell, the k cells with the largest T + T^2 + ... + T^s (T the
    row-normalised connectivities, the cell itself excluded), sorted by that value; s >= 3 is the
    first number of powers after which every row has at least k + 1 non-zero entries (at most 25).
    Rows are processed in chunks of `chunk` cells (two dense chunk x cells blocks in memory)."""
    import scipy.sparse as sp

    n = conn.shape[0]
    if n < k + 1:
        raise _NotEnoughNeighbours()
    degree = np.asarray(conn.sum(axis=1)).ravel()
    if (degree <= 0).any():
        raise _NotEnoughNeighbours()
    trans = sp.csr_matrix(sp.diags(1.0 / degree) @ conn)

    def block(rows: np.ndarray, powers: int | None) -> tuple[np.ndarray, int]:
        power = trans[rows].toarray()
        total = power.copy()
        done = 1
        while done < max_powers:
            if powers is None:
                if done >= 3 and np.count_nonzero(total, axis=1).min() >= k + 1:
                    break
            elif done >= powers:
                break
            power = np.asarray(power @ trans)
            total += power
            done += 1
        return total, done

    def nearest(rows: np.ndarray, total: np.ndarray) -> np.ndarray:
        total[np.arange(len(rows)), rows] = 0.0
        top = np.argpartition(-total, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(total, top, axis=1), axis=1, kind="stable")
        return np.take_along_axis(top, order, axis=1)

    out = np.empty((n, k), dtype=np.int64)
    used: list[tuple[np.ndarray, int]] = []
    for start in range(0, n, chunk):
        rows = np.arange(start, min(start + chunk, n))
        total, done = block(rows, None)
        if np.count_nonzero(total, axis=1).min() < k + 1:
            raise _NotEnoughNeighbours()
        out[rows] = nearest(rows, total)
        used.append((rows, done))
    powers = max(done for _, done in used)
    for rows, done in used:  # scib diffuses all cells equally long: redo chunks that stopped earlier
        if done < powers:
            out[rows] = nearest(rows, block(rows, powers)[0])
    return out


def _pc_regression(data: Any, covariates: np.ndarray, n_comps: int = N_PCS) -> float:
    """scib's `pc_regression`: PCA of `data` (scanpy; arpack, or full when n_comps reaches the
    smaller dimension), R^2 of each PC regressed (with intercept) on `covariates`, negative R^2 set
    to 0, averaged with the PCs' variances as weights."""
    import scanpy as sc
    import scipy.sparse as sp

    matrix = data.toarray() if sp.issparse(data) else np.asarray(data)
    matrix = np.asarray(matrix, dtype=np.float32 if matrix.dtype != np.float64 else np.float64)
    smaller = min(matrix.shape)
    n_comps = min(n_comps, smaller)
    solver = "full" if n_comps == smaller else "arpack"
    pcs, _, _, variance = sc.pp.pca(matrix, n_comps=n_comps, svd_solver=solver, return_info=True, random_state=0)
    pcs = np.asarray(pcs, dtype=np.float64)
    variance = np.asarray(variance, dtype=np.float64)
    design = np.column_stack([np.ones(len(pcs)), np.asarray(covariates, dtype=np.float64)])
    coef, *_ = np.linalg.lstsq(design, pcs, rcond=None)
    rss = np.sum((pcs - design @ coef) ** 2, axis=0)
    tss = np.sum((pcs - pcs.mean(axis=0)) ** 2, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = np.where(tss > 0, 1.0 - rss / tss, 0.0)
    r2 = np.maximum(r2, 0.0)
    return float(np.sum(r2 * variance) / np.sum(variance))


def _solution_normalized(inputs: _Inputs) -> Any:
    solution = inputs.solution
    if "normalized" not in solution.layers:
        raise MetricSkipped("the solution has no layers['normalized']")
    return solution.layers["normalized"]


def _pcr(inputs: _Inputs) -> float:
    import scipy.sparse as sp

    emb = inputs.need_emb()
    normalized = _solution_normalized(inputs)
    var = inputs.solution.var
    if "batch_hvg" in var:
        hvg = np.asarray(var["batch_hvg"], dtype=bool)
        if not hvg.any():
            raise MetricSkipped("var['batch_hvg'] flags no gene")
        normalized = normalized[:, np.flatnonzero(hvg)]
    before_data = normalized.toarray() if sp.issparse(normalized) else np.asarray(normalized)
    onehot = np.eye(inputs.batch.max() + 1)[inputs.batch]
    onehot = onehot[:, onehot.sum(axis=0) > 0]
    if onehot.shape[1] < 2:
        raise MetricSkipped("needs at least two batches")
    before = _pc_regression(before_data, onehot)
    del before_data
    after = _pc_regression(emb, onehot)
    if not before > 0:
        raise MetricSkipped("batch explains no variance of the unintegrated data")
    return max(0.0, (before - after) / before)


def _cell_cycle(inputs: _Inputs, genes: tuple[Sequence[str], Sequence[str]] | None, problems: dict[str, str]) -> float:
    import anndata as ad
    import pandas as pd
    import scanpy as sc
    import scipy.sparse as sp

    emb = inputs.need_emb()
    name = "cell_cycle_conservation"
    if genes is None:
        problems[name] = "no cell-cycle gene lists given; scored 0.0 as OpenProblems does"
        return 0.0
    solution = inputs.solution
    normalized = _solution_normalized(inputs)
    names = (solution.var["feature_name"] if "feature_name" in solution.var else solution.var_names)
    names = pd.Index(np.asarray(names).astype(str))
    if not names.is_unique:
        names = pd.Index(ad.utils.make_index_unique(names))
    present = set(names)
    s_genes = [g for g in genes[0] if g in present]
    g2m_genes = [g for g in genes[1] if g in present]
    if not s_genes or not g2m_genes:
        problems[name] = "no S-phase or no G2/M gene found in var['feature_name']; scored 0.0 as OpenProblems does"
        return 0.0
    scores = []
    for batch in pd.unique(inputs.batch):
        idx = np.flatnonzero(inputs.batch == batch)
        part = normalized[idx]
        sub = ad.AnnData(X=sp.csr_matrix(part) if sp.issparse(part) else np.asarray(part),
                         obs=pd.DataFrame(index=pd.RangeIndex(len(idx)).astype(str)),
                         var=pd.DataFrame(index=names))
        sc.tl.score_genes_cell_cycle(sub, s_genes=s_genes, g2m_genes=g2m_genes)
        covariates = sub.obs[["S_score", "G2M_score"]].to_numpy(dtype=np.float64)
        before = _pc_regression(sub.X, covariates)
        after = _pc_regression(emb[idx], covariates)
        score = 1.0 - abs(after - before) / before
        scores.append(max(0.0, score))
    return float(np.mean(scores))


# -- graph metrics ----------------------------------------------------------------------------------

def _graph_connectivity(inputs: _Inputs) -> float:
    from scipy.sparse.csgraph import connected_components

    conn = inputs.need_graph()
    fractions = []
    for label in np.unique(inputs.labels):
        idx = np.flatnonzero(inputs.labels == label)
        _, comp = connected_components(conn[idx][:, idx], connection="strong")
        fractions.append(np.bincount(comp).max() / len(idx))
    return float(np.mean(fractions))


def _ari_nmi(inputs: _Inputs) -> dict[str, float]:
    import anndata as ad
    import pandas as pd
    import scanpy as sc
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    conn = inputs.need_graph()
    work = ad.AnnData(obs=pd.DataFrame(index=pd.RangeIndex(inputs.n).astype(str)))
    best_nmi, best_clusters = -math.inf, None
    for resolution in LEIDEN_RESOLUTIONS:
        sc.tl.leiden(work, resolution=resolution, adjacency=conn, flavor="igraph", n_iterations=2,
                     directed=False, random_state=0, key_added="leiden")
        clusters = work.obs["leiden"].to_numpy()
        nmi = normalized_mutual_info_score(inputs.labels, clusters, average_method="arithmetic")
        if nmi > best_nmi:
            best_nmi, best_clusters = nmi, clusters
    return {"nmi": float(best_nmi), "ari": float(adjusted_rand_score(inputs.labels, best_clusters))}


def _shortest_path_knn_py(indptr, indices, weights, k, rows):  # compiled with numba when available
    """For each source in `rows`: its `k` nearest other nodes by shortest-path length (Dijkstra,
    stopped after k settled nodes); -1 / inf where fewer are reachable."""
    n = indptr.shape[0] - 1
    m = rows.shape[0]
    out_idx = np.full((m, k), -1, np.int64)
    out_dist = np.full((m, k), np.inf, np.float64)
    dist = np.full(n, np.inf, np.float64)
    done = np.zeros(n, np.bool_)
    touched = np.empty(n, np.int64)
    heap_key = np.empty(indices.shape[0] + 1, np.float64)
    heap_val = np.empty(indices.shape[0] + 1, np.int64)
    for r in range(m):
        source = rows[r]
        n_touched = 0
        dist[source] = 0.0
        touched[n_touched] = source
        n_touched += 1
        heap_key[0] = 0.0
        heap_val[0] = source
        size = 1
        found = 0
        while size > 0 and found < k:
            d = heap_key[0]
            u = heap_val[0]
            size -= 1
            if size > 0:  # move the last entry to the root and sift it down
                last_key = heap_key[size]
                last_val = heap_val[size]
                i = 0
                while True:
                    child = 2 * i + 1
                    if child >= size:
                        break
                    if child + 1 < size and heap_key[child + 1] < heap_key[child]:
                        child += 1
                    if heap_key[child] < last_key:
                        heap_key[i] = heap_key[child]
                        heap_val[i] = heap_val[child]
                        i = child
                    else:
                        break
                heap_key[i] = last_key
                heap_val[i] = last_val
            if done[u] or d > dist[u]:
                continue  # a stale heap entry
            done[u] = True
            if u != source:
                out_idx[r, found] = u
                out_dist[r, found] = d
                found += 1
            for p in range(indptr[u], indptr[u + 1]):
                v = indices[p]
                nd = d + weights[p]
                if nd < dist[v]:
                    if dist[v] == np.inf:
                        touched[n_touched] = v
                        n_touched += 1
                    dist[v] = nd
                    i = size  # push (lazy: older entries of v stay, and are skipped when popped)
                    size += 1
                    while i > 0:
                        parent = (i - 1) // 2
                        if heap_key[parent] > nd:
                            heap_key[i] = heap_key[parent]
                            heap_val[i] = heap_val[parent]
                            i = parent
                        else:
                            break
                    heap_key[i] = nd
                    heap_val[i] = v
        for j in range(n_touched):
            dist[touched[j]] = np.inf
            done[touched[j]] = False
    return out_idx, out_dist


_COMPILED: dict[str, Callable[..., Any]] = {}


def _shortest_path_knn(conn: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    function = _COMPILED.get("knn")
    if function is None:
        try:
            import numba
            function = numba.njit(cache=False, nogil=True)(_shortest_path_knn_py)
        except ImportError:  # pragma: no cover - numba comes with scanpy (umap, pynndescent)
            function = _shortest_path_knn_py
        _COMPILED["knn"] = function
    return function(conn.indptr.astype(np.int64), conn.indices.astype(np.int64), conn.data.astype(np.float64),
                    int(k), np.arange(conn.shape[0], dtype=np.int64))


def _lisi_neighbors(inputs: _Inputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The LISI_NEIGHBORS nearest cells of each cell by shortest path on the connectivities graph."""
    cached = inputs.cache.get("lisi")
    if cached is not None:
        return cached
    conn = inputs.need_graph()
    k = min(LISI_NEIGHBORS, inputs.n - 1)
    if k < 3:
        raise MetricSkipped("too few cells for LISI")
    idx, dist = _shortest_path_knn(conn, k)
    short = (idx < 0).any(axis=1)  # scib: fewer than k reachable cells -> Simpson index 1 (LISI 1)
    rows = np.broadcast_to(np.arange(inputs.n)[:, None], idx.shape)
    idx = np.where(idx < 0, rows, idx)  # padding points at the cell itself, which the Simpson index masks
    dist = np.where(np.isfinite(dist), dist, 0.0)
    inputs.cache["lisi"] = (idx, dist.astype(np.float32), short)
    return inputs.cache["lisi"]


def _prefetch_lisi(inputs: _Inputs) -> dict[str, float]:
    _lisi_neighbors(inputs)
    return {}


def _median_lisi(inputs: _Inputs, codes: np.ndarray) -> float:
    from scib_metrics import lisi_knn
    from scib_metrics.nearest_neighbors import NeighborsResults

    idx, dist, short = _lisi_neighbors(inputs)
    perplexity = math.floor(idx.shape[1] / 3)
    lisi = np.asarray(lisi_knn(NeighborsResults(indices=idx, distances=dist), codes, perplexity=perplexity),
                      dtype=np.float64)
    lisi[short] = 1.0
    return float(np.nanmedian(lisi))


def _ilisi(inputs: _Inputs) -> float:
    n_batches = len(np.unique(inputs.batch))
    if n_batches < 2:
        raise MetricSkipped("needs at least two batches")
    return (_median_lisi(inputs, inputs.batch) - 1.0) / (n_batches - 1)


def _clisi(inputs: _Inputs) -> float:
    n_labels = len(np.unique(inputs.labels))
    if n_labels < 2:
        raise MetricSkipped("needs at least two cell types")
    return (n_labels - _median_lisi(inputs, inputs.labels)) / (n_labels - 1)


# -- helpers ------------------------------------------------------------------------------------------

def _import_libraries() -> None:
    """Import the heavy libraries up front, so that their import time is not charged to a metric."""
    import importlib

    for module in ("anndata", "scanpy", "scib_metrics"):  # scib_metrics imports jax
        importlib.import_module(module)


@contextlib.contextmanager
def _quiet(n_jobs: int) -> Iterator[None]:
    """No warnings, nothing on stdout, BLAS/OpenMP threads capped at n_jobs."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        try:
            from threadpoolctl import threadpool_limits
            stack.enter_context(threadpool_limits(limits=max(1, int(n_jobs))))
        except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
            pass
        yield


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= 300 else text[:297] + "..."
