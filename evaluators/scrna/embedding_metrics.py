"""The embedding metrics: ASW batch and label, kBET, PCR and cell-cycle conservation (their
definitions, and how they compare with OpenProblems' scib, are in metrics.py's docstring)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .metric_inputs import N_PCS, Inputs, MetricSkipped

KBET_NEIGHBORS = 50  # scib's kBET recomputes a 50-NN graph of the embedding
KBET_ALPHA = 0.05
_SIZE_MAX = 2**31 - 1


class _NotEnoughNeighbours(Exception):
    pass


def asw_label(inputs: Inputs) -> float:
    from scib_metrics import silhouette_label

    emb = inputs.need_emb()
    if len(np.unique(inputs.labels)) < 2:
        raise MetricSkipped("needs at least two cell types")
    return float(silhouette_label(emb, inputs.labels, rescale=True))


def asw_batch(inputs: Inputs) -> float:
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


def kbet(inputs: Inputs) -> float:
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


def _solution_normalized(inputs: Inputs) -> Any:
    solution = inputs.solution
    if "normalized" not in solution.layers:
        raise MetricSkipped("the solution has no layers['normalized']")
    return solution.layers["normalized"]


def pcr(inputs: Inputs) -> float:
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


def cell_cycle(inputs: Inputs, genes: tuple[Sequence[str], Sequence[str]] | None, problems: dict[str, str]) -> float:
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
    names = solution.var["feature_name"] if "feature_name" in solution.var else solution.var_names
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
        sub = ad.AnnData(
            X=sp.csr_matrix(part) if sp.issparse(part) else np.asarray(part),
            obs=pd.DataFrame(index=pd.RangeIndex(len(idx)).astype(str)),
            var=pd.DataFrame(index=names),
        )
        sc.tl.score_genes_cell_cycle(sub, s_genes=s_genes, g2m_genes=g2m_genes)
        covariates = sub.obs[["S_score", "G2M_score"]].to_numpy(dtype=np.float64)
        before = _pc_regression(sub.X, covariates)
        after = _pc_regression(emb[idx], covariates)
        score = 1.0 - abs(after - before) / before
        scores.append(max(0.0, score))
    return float(np.mean(scores))
