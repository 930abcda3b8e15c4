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
4. Leiden clustering (clustering.py) of that graph at resolutions 0.2, 0.3, ..., 0.8: by default
   as the paper's evaluator precomputes it (igraph flavour, 2 iterations, ``random_state=0``), or
   scib's own default (leidenalg, run to convergence) with ``clustering="leidenalg"``; ARI and NMI
   are taken from the clustering with the best NMI (the first one on ties), as scib's
   ``cluster_optimal_resolution`` that OpenProblems' ``clustering_overlap`` calls.

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
                         ``normalized_mutual_info_score``         (arithmetic) after its
                         (arithmetic) of the best-NMI Leiden      ``cluster_optimal_resolution``: the same
                         clustering (see 4.)                      Leiden call on the same graph
graph_connectivity       own: scipy ``connected_components``      identical to scib (uses the symmetric
                         (strong) of each cell type's subgraph of connectivities). Not scib-metrics'
                         the connectivities; largest component /  version, which takes the directed kNN
                         cells of the type, mean over types       *distance* graph with strong connection
                                                                  (stricter)
kbet                     own port of scib's ``kBET`` (embed       scib's neighbours and component handling
                         mode) and of R kBET's test; see kbet.py  (kbet.py). Differences: we test every
                         for every step. 50-NN graph, per type    cell instead of R's 100 random 10%
                         k0 = clip(mean batch size / 4, 10, 70),  samples (the expectation of R's estimate,
                         components, diffusion neighbours in      no sampling noise); diffusion sums in
                         argpartition order, chi^2 test of self   float32 blocks instead of sparse powers
                         + k0-1 neighbours; 1 - mean rejection    (an occasional other near-tie neighbour)
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

Extra metrics (extra_metrics.py), only when asked for (``extra``): ``hvg_overlap`` (needs
``layers['corrected_counts']``), ``isolated_label_f1`` (graph) and ``isolated_label_asw``
(embedding), as scib's ``hvg_overlap``, ``isolated_labels_f1`` and ``isolated_labels_asw``. They
are raw values outside the ten and outside the score.

Threads and noise: NumPy/BLAS/OpenMP threads are capped at ``n_jobs`` (threadpoolctl) while the
metrics run; jax (XLA) and numba keep their own thread pools. Warnings are silenced and anything
printed to ``sys.stdout`` is swallowed: the station reads stdout. Heavy imports (scanpy, jax via
scib-metrics, numba) happen inside the functions; the first call in a process pays for them and
for numba/jax compilation (about 10 s).

``timings`` (if given) receives seconds per step: ``imports``, ``postprocess`` (PCA of corrected
counts, neighbour graph), ``asw_batch``, ``asw_label``, ``ari_nmi`` (Leiden at all resolutions +
scores), ``graph_connectivity``, ``kbet``, ``lisi_neighbors`` (shortest-path 90-NN, shared by
iLISI and cLISI), ``ilisi``, ``clisi``, ``pcr``, ``cell_cycle_conservation``, each extra metric
asked for, and ``total``.

Where it lives: the post-processing is in metric_inputs.py, the embedding metrics in
embedding_metrics.py and kbet.py, the graph metrics in graph_metrics.py and clustering.py, the
extra metrics in extra_metrics.py; this module runs them all. Tests comparing every metric with
scib itself: tests/test_scrna_oracle.py.
"""

from __future__ import annotations

import contextlib
import io
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .embedding_metrics import asw_batch, asw_label, cell_cycle, pcr
from .extra_metrics import EXTRA_METRICS, hvg_overlap, isolated_label_asw, isolated_label_f1
from .graph_metrics import ari_nmi, clisi, graph_connectivity, ilisi, prefetch_lisi
from .kbet import kbet
from .metric_inputs import MetricSkipped, check_cells, one_line, prepare

METRICS: tuple[str, ...] = (
    "asw_batch",
    "asw_label",
    "ari",
    "nmi",
    "graph_connectivity",
    "kbet",
    "ilisi",
    "clisi",
    "pcr",
    "cell_cycle_conservation",
)
# Changes whenever a metric's definition changes, so that stored control bounds are recomputed.
# 2: kBET as scib (neighbour order, components); 3: kBET tests 10-cell types; 4: Leiden as the paper
METRICS_VERSION = "4"
EXTRA_STEPS: dict[str, Callable[[Any], float]] = {
    "hvg_overlap": hvg_overlap,
    "isolated_label_f1": isolated_label_f1,
    "isolated_label_asw": isolated_label_asw,
}


def compute_metrics(
    result: Any,
    solution: Any,
    *,
    cell_cycle_genes: tuple[Sequence[str], Sequence[str]] | None = None,
    extra: Sequence[str] = (),
    n_jobs: int = 2,
    timings: dict[str, float] | None = None,
    clustering: str = "paper",
) -> tuple[dict[str, float], dict[str, str]]:
    """The ten raw metrics of `result` (a submission's AnnData) against `solution` (labelled data),
    and the extra metrics named in `extra` (of `EXTRA_METRICS`).

    Returns ``(values, problems)``: ``values`` maps each of `METRICS`, then each of `extra`, to a
    float (NaN when not computable), ``problems`` maps a metric to a one-line reason (every NaN has one).
    `cell_cycle_genes` is ``(S-phase genes, G2/M genes)`` as names in ``solution.var['feature_name']``.
    Raises ``ValueError("cells reordered or dropped")`` if the cells do not match the solution's.
    Kept whole: the metrics run in a fixed order around shared, timed preparation steps.
    """
    unknown = [name for name in extra if name not in EXTRA_METRICS]
    if unknown:
        raise ValueError(f"unknown extra metrics {unknown}; known: {', '.join(EXTRA_METRICS)}")
    began = time.perf_counter()
    clock: dict[str, float] = timings if timings is not None else {}
    check_cells(result, solution)
    wanted = (*METRICS, *dict.fromkeys(extra))
    values = {name: math.nan for name in wanted}
    problems: dict[str, str] = {}

    with _quiet(n_jobs):
        step = time.perf_counter()
        _import_libraries()
        clock["imports"] = time.perf_counter() - step

        step = time.perf_counter()
        inputs = prepare(result, solution)
        inputs.clustering = clustering
        clock["postprocess"] = time.perf_counter() - step

        steps: list[tuple[str, tuple[str, ...], Callable[[], dict[str, float]]]] = [
            ("asw_batch", ("asw_batch",), lambda: {"asw_batch": asw_batch(inputs)}),
            ("asw_label", ("asw_label",), lambda: {"asw_label": asw_label(inputs)}),
            ("ari_nmi", ("ari", "nmi"), lambda: ari_nmi(inputs)),
            ("graph_connectivity", ("graph_connectivity",), lambda: {"graph_connectivity": graph_connectivity(inputs)}),
            ("kbet", ("kbet",), lambda: {"kbet": kbet(inputs)}),
            ("lisi_neighbors", ("ilisi", "clisi"), lambda: prefetch_lisi(inputs)),
            ("ilisi", ("ilisi",), lambda: {"ilisi": ilisi(inputs)}),
            ("clisi", ("clisi",), lambda: {"clisi": clisi(inputs)}),
            ("pcr", ("pcr",), lambda: {"pcr": pcr(inputs)}),
            (
                "cell_cycle_conservation",
                ("cell_cycle_conservation",),
                lambda: {"cell_cycle_conservation": cell_cycle(inputs, cell_cycle_genes, problems)},
            ),
        ]
        steps += [(name, (name,), _extra_step(name, inputs)) for name in wanted[len(METRICS) :]]
        for key, names, run in steps:
            step = time.perf_counter()
            try:
                for name, value in run().items():
                    values[name] = float(value)
            except MetricSkipped as exc:
                for name in names:
                    problems.setdefault(name, str(exc))
            except Exception as exc:  # noqa: BLE001 - one failing metric must not take the others down
                for name in names:
                    problems.setdefault(name, one_line(exc))
            clock[key] = time.perf_counter() - step

    for name in wanted:
        if not math.isfinite(values[name]):
            values[name] = math.nan
            problems.setdefault(name, "the computation gave a value that is not finite")
    clock["total"] = time.perf_counter() - began
    return values, problems


# -- helpers ------------------------------------------------------------------------------------------


def _extra_step(name: str, inputs: Any) -> Callable[[], dict[str, float]]:
    return lambda: {name: EXTRA_STEPS[name](inputs)}


def _import_libraries() -> None:
    """Import the heavy libraries up front, so that their import time is not charged to a metric."""
    import importlib

    from .jax_cache import cache_jax_programs

    for module in ("anndata", "scanpy", "scib_metrics"):  # scib_metrics imports jax
        importlib.import_module(module)
    cache_jax_programs()


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
