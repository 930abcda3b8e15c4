"""The graph metrics: ARI and NMI of the best Leiden clustering, graph connectivity, and iLISI and
cLISI on shortest paths of the neighbour graph (their definitions, and how they compare with
OpenProblems' scib, are in metrics.py's docstring)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .clustering import ARI_NMI_RESOLUTIONS, leiden
from .metric_inputs import Inputs, MetricSkipped

LISI_NEIGHBORS = 90  # scib's k0 for graph LISI; perplexity k0 / 3


def graph_connectivity(inputs: Inputs) -> float:
    from scipy.sparse.csgraph import connected_components

    conn = inputs.need_graph()
    fractions = []
    for label in np.unique(inputs.labels):
        idx = np.flatnonzero(inputs.labels == label)
        _, comp = connected_components(conn[idx][:, idx], connection="strong")
        fractions.append(np.bincount(comp).max() / len(idx))
    return float(np.mean(fractions))


def ari_nmi(inputs: Inputs) -> dict[str, float]:
    """NMI and ARI of the Leiden clustering with the best NMI over ARI_NMI_RESOLUTIONS (the first
    on ties; a clustering must beat NMI 0, as in scib's ``cluster_optimal_resolution``)."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    inputs.need_graph()
    best_nmi, best_clusters = 0.0, None
    for resolution in ARI_NMI_RESOLUTIONS:
        clusters = leiden(inputs, resolution)
        nmi = normalized_mutual_info_score(inputs.labels, clusters, average_method="arithmetic")
        if nmi > best_nmi:
            best_nmi, best_clusters = nmi, clusters
    if best_clusters is None:  # no clustering shares any information with the labels
        return {"nmi": 0.0, "ari": 0.0}
    return {"nmi": float(best_nmi), "ari": float(adjusted_rand_score(inputs.labels, best_clusters))}


def _shortest_path_knn_py(indptr, indices, weights, k, rows):  # noqa: C901, PLR0915 - numba compiles it whole
    """For each source in `rows`: its `k` nearest other nodes by shortest-path length (Dijkstra,
    stopped after k settled nodes); -1 / inf where fewer are reachable.

    Stays whole: numba compiles it as one loop with the binary heap written inline, so that it
    allocates nothing per source; helper functions would each need compiling and a call per step."""
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
            from .numba_cache import njit_cached

            function = njit_cached(_shortest_path_knn_py, nogil=True)
        except ImportError:  # pragma: no cover - numba comes with scanpy (umap, pynndescent)
            function = _shortest_path_knn_py
        _COMPILED["knn"] = function
    return function(
        conn.indptr.astype(np.int64),
        conn.indices.astype(np.int64),
        conn.data.astype(np.float64),
        int(k),
        np.arange(conn.shape[0], dtype=np.int64),
    )


def _lisi_neighbors(inputs: Inputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def prefetch_lisi(inputs: Inputs) -> dict[str, float]:
    _lisi_neighbors(inputs)
    return {}


def _median_lisi(inputs: Inputs, codes: np.ndarray) -> float:
    from scib_metrics import lisi_knn
    from scib_metrics.nearest_neighbors import NeighborsResults

    idx, dist, short = _lisi_neighbors(inputs)
    perplexity = math.floor(idx.shape[1] / 3)
    lisi = np.asarray(
        lisi_knn(NeighborsResults(indices=idx, distances=dist), codes, perplexity=perplexity), dtype=np.float64
    )
    lisi[short] = 1.0
    return float(np.nanmedian(lisi))


def ilisi(inputs: Inputs) -> float:
    n_batches = len(np.unique(inputs.batch))
    if n_batches < 2:
        raise MetricSkipped("needs at least two batches")
    return (_median_lisi(inputs, inputs.batch) - 1.0) / (n_batches - 1)


def clisi(inputs: Inputs) -> float:
    n_labels = len(np.unique(inputs.labels))
    if n_labels < 2:
        raise MetricSkipped("needs at least two cell types")
    return (n_labels - _median_lisi(inputs, inputs.labels)) / (n_labels - 1)
