"""kBET (Büttner et al. 2019) as OpenProblems v2 scores it: scib 1.1.7's ``kBET(type_="embed",
scaled=True)``, which prepares neighbourhoods in Python and hands them to the R package kBET.

What scib does, and we do the same way
--------------------------------------
1. A 50-nearest-neighbour graph of the embedding (``sc.pp.neighbors``, UMAP connectivities, float32).
2. Per cell type with more than 10 cells and two batches present (scib asks for 10; R's kBET
   returns NA for 10 or fewer, which scib records as NaN and leaves out of the mean): k0 =
   floor(mean cells per present batch / 4), clipped to [10, 70].
3. Connected components of the type's subgraph (strong connection). One component: all cells take
   part. Several: the cells in components of at least 3·k0 cells take part if they are at least 75%
   of the type, else the type's rejection rate is 1. The other cells stay in the test with no
   neighbours (scib passes NaN rows to R). A quirk of scib, reproduced on purpose so that scores
   compare with OpenProblems': the neighbour indices found among the taking-part cells are not
   mapped back to the whole type, so R reads them as positions in the whole type (other cells,
   often of another batch). On a type with a small split-off group this moves its rejection rate
   by a few points (the fibroblasts of the split-types case in tests/test_scrna_oracle.py: 0.097
   mapped back, 0.117 as scib; the score 0.7566 against 0.7525).
4. Diffusion neighbours of the taking-part cells on their subgraph: T the row-normalised
   connectivities, M = T + T² + T³ + ..., with powers added until every row of M has k0 + 1
   non-zero entries (itself included; at most T^25, else "not enough neighbours": rejection 1);
   the diagonal is zeroed and the k0 largest entries of each row taken with numpy's
   ``argpartition(M, -k0)[:, -k0:]`` - in argpartition's order, not sorted.
5. R kBET with that matrix (``heuristic=FALSE, adapt=FALSE``): the neighbourhood of a cell is its
   first k0 - 1 columns plus the cell itself, so one of the k0 diffusion neighbours - whichever
   argpartition put last - is dropped. Pearson's chi² of the batch counts of the neighbourhood
   against (batch frequencies of the whole type) x k0, df = batches - 1, rejected when p < 0.05;
   missing (NaN) neighbours count nowhere but still count in k0.
6. Score = 1 - mean over cell types of the rejection rate.

Deliberate differences (measured in tests/test_scrna_oracle.py)
----------------------------------------------------------------
- R kBET tests 100 random samples of 10% of a type's cells (at least 25) and averages their
  rejection rates; we test every cell once, which is the expectation of R's estimate, without its
  sampling noise (on the oracle test's 1,200 cells, R's score varies with its seed by a standard
  deviation of 0.001 to 0.004; ours is within 0.0004 of the mean of 20 seeds).
- Diffusion is computed in float32 like scib's, but in dense blocks of rows instead of scib's
  sparse matrix powers: the sums are rounded differently, so a near-tie in argpartition can
  occasionally pick another neighbour.
- Above 8192 cells scanpy would build the 50-NN graph with pynndescent (approximate); we always
  use the exact search (see metric_inputs.py for why).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .metric_inputs import Inputs, MetricSkipped

KBET_NEIGHBORS = 50  # scib's kBET recomputes a 50-NN graph of the embedding
KBET_ALPHA = 0.05
# scib tests every type of 10 cells or more; at exactly 10 (k0 = 10) the diffusion cannot find k0
# neighbours among the other 9 cells, so the type counts as 100% rejection, as in scib
MIN_CELLS = 10
MAX_POWERS = 25  # scib's diffusion stops after T^25
_SIZE_MAX = 2**31 - 1


class NotEnoughNeighbours(Exception):
    pass


def kbet(inputs: Inputs) -> float:
    """1 - the mean over cell types of kBET's rejection rate (scaled, as scib's ``scaled=True``)."""
    emb = inputs.need_emb()
    if len(np.unique(inputs.batch)) < 2:
        raise MetricSkipped("needs at least two batches")
    conn = knn_connectivities(emb, KBET_NEIGHBORS)
    rates = []
    for label in np.unique(inputs.labels):
        idx = np.flatnonzero(inputs.labels == label)
        rate = type_rejection_rate(conn[idx][:, idx].tocsr(), inputs.batch[idx])
        if rate is not None:
            rates.append(rate)
    if not rates:
        raise MetricSkipped("no cell type has 10 cells or more from two or more batches")
    return float(1.0 - np.mean(rates))


def knn_connectivities(emb: np.ndarray, k: int) -> Any:
    """scanpy's UMAP connectivities of the exact k-NN graph of `emb` (float32 CSR, as scanpy returns)."""
    import anndata as ad
    import pandas as pd
    import scanpy as sc
    import scipy.sparse as sp

    from .numba_cache import cache_umap_kernels

    cache_umap_kernels()
    work = ad.AnnData(obs=pd.DataFrame(index=pd.RangeIndex(len(emb)).astype(str)))
    work.obsm["X_emb"] = emb
    sc.pp.neighbors(work, n_neighbors=k, use_rep="X_emb", transformer="sklearn")
    return sp.csr_matrix(work.obsp["connectivities"])


def neighbourhood_size(batches: np.ndarray) -> int:
    """scib's k0: a quarter of the mean cells per present batch, clipped to [10, 70]."""
    _, counts = np.unique(batches, return_counts=True)
    k0 = int(min(70, max(10, math.floor(np.mean(counts) / 4))))
    if k0 * len(batches) >= _SIZE_MAX:
        k0 = _SIZE_MAX // len(batches)
    return k0


def type_rejection_rate(sub: Any, batches: np.ndarray) -> float | None:
    """kBET's rejection rate of one cell type (`sub`: its connectivities); None when it is left out."""
    from scipy.sparse.csgraph import connected_components

    n = len(batches)
    if n < MIN_CELLS or len(np.unique(batches)) < 2:
        return None
    k0 = neighbourhood_size(batches)
    n_comp, comp = connected_components(sub, connection="strong")
    if n_comp == 1:
        members = np.arange(n)
    else:
        sizes = np.bincount(comp)
        members = np.flatnonzero(sizes[comp] >= 3 * k0)
        if len(members) / n < 0.75:
            return 1.0  # scib: too many cells in small components, 100% rejection
        sub = sub[members][:, members].tocsr()
    try:
        chosen = diffusion_neighbours(sub, k0)
    except NotEnoughNeighbours:
        return 1.0  # scib: "Not enough neighbours", 100% rejection
    neighbours = np.full((n, k0 - 1), -1, dtype=np.int64)  # -1: scib's NaN row for a cell left out
    neighbours[members] = chosen[:, : k0 - 1]  # positions among `members`, read as positions in the type (scib)
    return rejection_rate(neighbours, batches, k0)


def rejection_rate(neighbours: np.ndarray, batches: np.ndarray, k0: int, alpha: float = KBET_ALPHA) -> float:
    """R kBET's chi² test of every cell: its neighbourhood is itself plus its row of `neighbours`
    (indices into `batches`, -1 for a missing one), the expected counts are the batch frequencies
    of all cells times k0; the share of cells whose p-value is below `alpha`."""
    from scipy.stats import chi2

    codes = np.unique(batches, return_inverse=True)[1].reshape(-1)
    n_batches = int(codes.max()) + 1
    expected = np.bincount(codes, minlength=n_batches) / len(codes) * k0
    observed = np.zeros((len(codes), n_batches))
    observed[np.arange(len(codes)), codes] = 1.0  # the cell itself
    valid = neighbours >= 0
    neighbour_codes = codes[np.where(valid, neighbours, 0)]
    for b in range(n_batches):
        observed[:, b] += np.count_nonzero(valid & (neighbour_codes == b), axis=1)
    statistic = np.sum((observed - expected) ** 2 / expected, axis=1)
    p_values = chi2.sf(statistic, n_batches - 1)
    return float(np.mean(p_values < alpha))


def diffusion_neighbours(conn: Any, k: int, chunk: int = 512) -> np.ndarray:
    """scib's ``diffusion_nn`` (point 4 of the module docstring): per row, the k columns of
    argpartition(M, -k)[-k:] in argpartition's order. Rows are done in blocks of `chunk` (two dense
    chunk x cells float32 blocks in memory); all rows use the same number of powers, as scib's."""
    import scipy.sparse as sp

    n = conn.shape[0]
    if n < k + 1:
        raise NotEnoughNeighbours()
    conn = sp.csr_matrix(conn, dtype=np.float32)
    degree = np.asarray(conn.sum(axis=1)).ravel()
    if (degree <= 0).any():
        raise NotEnoughNeighbours()
    trans = sp.csr_matrix(sp.diags(1 / degree) @ conn)

    def diffuse(rows: np.ndarray, powers: int | None) -> tuple[np.ndarray, int]:
        power = trans[rows].toarray()
        total = power.copy()
        done = 1
        while done < MAX_POWERS:
            enough = done >= 3 and np.count_nonzero(total, axis=1).min() >= k + 1
            if (powers is None and enough) or (powers is not None and done >= powers):
                break
            power = np.asarray(power @ trans, dtype=np.float32)
            total += power
            done += 1
        return total, done

    def top(rows: np.ndarray, total: np.ndarray) -> np.ndarray:
        total[np.arange(len(rows)), rows] = 0.0
        return np.argpartition(total, -k, axis=1)[:, -k:]

    out = np.empty((n, k), dtype=np.int64)
    used: list[tuple[np.ndarray, int]] = []
    for start in range(0, n, chunk):
        rows = np.arange(start, min(start + chunk, n))
        total, done = diffuse(rows, None)
        if np.count_nonzero(total, axis=1).min() < k + 1:
            raise NotEnoughNeighbours()
        out[rows] = top(rows, total)
        used.append((rows, done))
    powers = max(done for _, done in used)
    for rows, done in used:  # scib diffuses all cells equally long: redo blocks that stopped earlier
        if done < powers:
            out[rows] = top(rows, diffuse(rows, powers)[0])
    return out
