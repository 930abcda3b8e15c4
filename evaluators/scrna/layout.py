"""The AnnData layout of the batch-integration data, simulated (simulate.py) or real (real_data.py):
the normalized counts, the batch-aware ranking behind `var['batch_hvg']`, putting a dataset
together in that layout, and cutting it into what a submission receives and the labelled solution.

`batch_hvg` flags the top 75% of the genes by a batch-aware, seurat_v3-style ranking (scanpy's
`flavor="seurat_v3"` needs scikit-misc, which is not a dependency, so it is re-implemented): in
each batch the log-variance of the counts is regressed on the log-mean by a binned median trend
(instead of loess), counts are standardised by the trend's standard deviation and clipped at
sqrt(cells in the batch), and genes are ranked by the variance of the standardised values. Across
batches genes are ordered by the number of batches in which they are in the top n, then by their
median rank - the same combination rule as scanpy's.
"""

from __future__ import annotations

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp

HVG_FRACTION = 0.75  # share of the genes flagged in var['batch_hvg']
TARGET_SUM = 1e4  # normalize_total target of layers['normalized']


def log_normalize(counts: sp.csr_matrix, target_sum: float = TARGET_SUM) -> sp.csr_matrix:
    """log1p(counts scaled to `target_sum` per cell), float32 CSR (cells without counts stay 0)."""
    counts = sp.csr_matrix(counts)
    totals = np.asarray(counts.sum(axis=1), dtype=np.float64).ravel()
    scale = np.divide(target_sum, totals, out=np.zeros_like(totals), where=totals > 0)
    out = sp.csr_matrix(sp.diags(scale) @ counts.astype(np.float64))
    out.data = np.log1p(out.data)
    out = out.astype(np.float32)
    out.sort_indices()
    return out


def _binned_trend(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Median of y in quantile bins of x, linearly interpolated back to every x."""
    n_bins = int(min(25, max(1, len(x) // 20)))
    order = np.argsort(x, kind="stable")
    parts = np.array_split(order, n_bins)
    centres = np.asarray([np.median(x[part]) for part in parts])
    values = np.asarray([np.median(y[part]) for part in parts])
    keep = np.concatenate([[True], np.diff(centres) > 0])
    return np.interp(x, centres[keep], values[keep])


def batch_hvg_order(counts: sp.spmatrix, batch: np.ndarray, n_top: int) -> np.ndarray:
    """Gene indices from most to least variable, batch-aware (seurat_v3-style; module docstring)."""
    counts = sp.csr_matrix(counts)
    G = counts.shape[1]
    batch = np.asarray(batch)
    ranks = []
    for b in pd.unique(batch):
        Xb = counts[batch == b]
        n = Xb.shape[0]
        if n < 2:
            continue
        mean = np.asarray(Xb.mean(axis=0), dtype=np.float64).ravel()
        sq = np.asarray(Xb.multiply(Xb).mean(axis=0), dtype=np.float64).ravel()
        var = (sq - mean**2) * n / (n - 1)
        ok = (mean > 0) & (var > 0)
        score = np.full(G, -np.inf)
        if ok.sum() >= 2:
            trend = _binned_trend(np.log10(mean[ok]), np.log10(var[ok]))
            sd = np.sqrt(10.0**trend)
            coo = Xb[:, ok].tocoo()
            clip = (mean[ok] + sd * np.sqrt(n))[coo.col]
            x = np.minimum(coo.data.astype(np.float64), clip)
            sx = np.bincount(coo.col, weights=x, minlength=ok.sum())
            sx2 = np.bincount(coo.col, weights=x * x, minlength=ok.sum())
            m = mean[ok]
            score[ok] = (n * m**2 + sx2 - 2 * m * sx) / ((n - 1) * sd**2)
        rank = np.empty(G)
        rank[np.lexsort((np.arange(G), -score))] = np.arange(G)
        ranks.append(rank)
    if not ranks:
        raise ValueError("batch_hvg_order needs a batch with at least two cells")
    stacked = np.array(ranks)
    n_batches_top = (stacked < n_top).sum(axis=0)
    median_rank = np.median(stacked, axis=0)
    return np.lexsort((np.arange(G), median_rank, -n_batches_top))


def assemble(
    counts: sp.csr_matrix, obs: pd.DataFrame, var: pd.DataFrame, n_flag: int, order: np.ndarray | None = None
) -> ad.AnnData:
    """The dataset in the task's layout: counts as X and layers['counts'], layers['normalized'], and
    var['batch_hvg'] flagging the first `n_flag` genes of `order` (by default `batch_hvg_order`)."""
    counts = sp.csr_matrix(counts, dtype=np.float32)
    counts.sort_indices()
    if order is None:
        order = batch_hvg_order(counts, obs["batch"].to_numpy(), n_flag)
    var = var.copy()
    flag = np.zeros(counts.shape[1], dtype=bool)
    flag[order[:n_flag]] = True
    var["batch_hvg"] = flag
    return ad.AnnData(
        X=counts.copy(), obs=obs, var=var, layers={"counts": counts.copy(), "normalized": log_normalize(counts)}
    )


def split_for_task(full: ad.AnnData, seed: int = 0) -> tuple[ad.AnnData, ad.AnnData]:
    """`(task_input, solution)`: what a submission receives, and the labelled truth.

    Both hold the same cells in the same order, which is a random permutation (from `seed`) of the
    cells of `full`, so that row order carries no label information. The input keeps counts,
    normalized counts, `obs[['batch', 'observation_joinid']]` and `var[['feature_name',
    'batch_hvg']]`; the solution also keeps `cell_type` and, where known, `cell_cycle_phase`.
    """
    need_obs = ["batch", "cell_type", "observation_joinid"]
    missing = [k for k in need_obs if k not in full.obs]
    missing += [k for k in ("feature_name", "batch_hvg") if k not in full.var]
    missing += [f"layers['{k}']" for k in ("counts", "normalized") if k not in full.layers]
    if missing:
        raise ValueError(f"split_for_task needs the layout of simulate()/load_h5ad(); missing: {missing}")
    perm = np.random.default_rng([3, int(seed)]).permutation(full.n_obs)
    index = pd.Index(full.obs["observation_joinid"].astype(str).to_numpy()[perm], name=None)
    var = full.var[["feature_name", "batch_hvg"]].copy()
    counts = full.layers["counts"][perm].tocsr()
    normalized = full.layers["normalized"][perm].tocsr()

    def make(obs_cols: list[str]) -> ad.AnnData:
        obs = full.obs[obs_cols].iloc[perm].copy()
        obs.index = index
        return ad.AnnData(
            X=counts.copy(), obs=obs, var=var.copy(), layers={"counts": counts.copy(), "normalized": normalized.copy()}
        )

    task_input = make(["batch", "observation_joinid"])
    solution = make(need_obs + (["cell_cycle_phase"] if "cell_cycle_phase" in full.obs else []))
    solution.uns.update({k: v for k, v in full.uns.items() if k == "simulation"})
    return task_input, solution
