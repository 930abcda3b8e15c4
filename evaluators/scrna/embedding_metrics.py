"""The embedding metrics: ASW batch and label, PCR and cell-cycle conservation (their definitions,
and how they compare with OpenProblems' scib, are in metrics.py's docstring; kBET is in kbet.py)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from .metric_inputs import N_PCS, Inputs, MetricSkipped, solution_term


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
    hvg = np.asarray(var["batch_hvg"], dtype=bool) if "batch_hvg" in var else None
    if hvg is not None and not hvg.any():
        raise MetricSkipped("var['batch_hvg'] flags no gene")
    onehot = np.eye(inputs.batch.max() + 1)[inputs.batch]
    onehot = onehot[:, onehot.sum(axis=0) > 0]
    if onehot.shape[1] < 2:
        raise MetricSkipped("needs at least two batches")

    def unintegrated() -> float:
        data = normalized if hvg is None else normalized[:, np.flatnonzero(hvg)]
        return _pc_regression(data.toarray() if sp.issparse(data) else np.asarray(data), onehot)

    before = solution_term(inputs.solution, ("pcr",), unintegrated)
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

    def unintegrated(idx: np.ndarray) -> tuple[np.ndarray, float]:
        """A batch's cell-cycle scores, and their PC regression on its unintegrated data."""
        part = normalized[idx]
        sub = ad.AnnData(
            X=sp.csr_matrix(part) if sp.issparse(part) else np.asarray(part),
            obs=pd.DataFrame(index=pd.RangeIndex(len(idx)).astype(str)),
            var=pd.DataFrame(index=names),
        )
        sc.tl.score_genes_cell_cycle(sub, s_genes=s_genes, g2m_genes=g2m_genes)
        covariates = sub.obs[["S_score", "G2M_score"]].to_numpy(dtype=np.float64)
        return covariates, _pc_regression(sub.X, covariates)

    scores = []
    for batch in pd.unique(inputs.batch):
        idx = np.flatnonzero(inputs.batch == batch)
        key = ("cell_cycle", int(batch), tuple(s_genes), tuple(g2m_genes))
        covariates, before = solution_term(inputs.solution, key, functools.partial(unintegrated, idx))
        after = _pc_regression(emb[idx], covariates)
        score = 1.0 - abs(after - before) / before
        scores.append(max(0.0, score))
    return float(np.mean(scores))
