"""The AnnData layout of the batch-integration data, simulated (simulate.py) or real (real_data.py):
the normalized counts, the batch-aware ranking behind `var['batch_hvg']`, putting a dataset
together in that layout, and cutting it into what a submission receives and the labelled solution.

`batch_hvg` flags the top 75% of the genes by scanpy's own `flavor="seurat_v3"` with
`batch_key="batch"` on the raw counts (loess fit of variance on mean per batch, from the
scikit-misc package): genes sorted by their median rank over the batches in which they are among
the top n, then by the number of such batches, as scanpy sorts them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

if TYPE_CHECKING:  # imported where an AnnData is made: importing anndata costs ~1.3 CPU-s
    import anndata as ad

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


LOESS_SPANS = (0.3, 0.5, 0.8)  # scanpy's default span, then wider


def batch_hvg_order(counts: sp.spmatrix, batch: np.ndarray, n_top: int) -> np.ndarray:
    """Gene indices, most variable first: the first `n_top` are exactly the genes scanpy's
    `highly_variable_genes(flavor="seurat_v3", n_top_genes=n_top, batch_key=...)` flags, in scanpy's
    order (median rank, then more batches first; ties in gene order); the other genes follow in
    gene order (seurat_v3 does not rank genes outside every batch's top n)."""
    import warnings

    import anndata as ad
    import scanpy as sc

    counts = sp.csr_matrix(counts, dtype=np.float32)
    n_top = int(min(max(n_top, 1), counts.shape[1]))
    work = ad.AnnData(
        X=counts,
        obs=pd.DataFrame({"batch": pd.Categorical(np.asarray(batch).astype(str))}, index=_names(counts.shape[0])),
        var=pd.DataFrame(index=_names(counts.shape[1])),
    )
    # seurat_v3 fits a loess of variance on mean per batch; on some draws that fit is singular
    # ("reciprocal condition number ..."). Scanpy's span first, then wider ones: only data scanpy
    # itself cannot rank are ranked with a smoother trend.
    for span in LOESS_SPANS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # scanpy's notes on the flavour; nothing the caller can act on
                table = sc.pp.highly_variable_genes(
                    work, flavor="seurat_v3", n_top_genes=n_top, batch_key="batch", span=span, inplace=False
                )
            break
        except ValueError as err:
            if "reciprocal condition number" not in str(err) or span == LOESS_SPANS[-1]:
                raise
    rank = table["highly_variable_rank"].to_numpy(dtype=np.float64)
    n_batches = table["highly_variable_nbatches"].to_numpy()
    ranked = np.isfinite(rank)
    genes = np.arange(counts.shape[1])
    order = np.lexsort((genes, -n_batches, np.where(ranked, rank, np.inf)))  # the last key sorts first
    flagged = np.flatnonzero(table["highly_variable"].to_numpy())
    if not np.array_equal(np.sort(order[:n_top]), flagged):  # scanpy changed its sort; fall back to its flags
        order = np.concatenate([flagged, np.setdiff1d(genes, flagged)])
    return order


def _names(n: int) -> pd.Index:
    return pd.Index([str(i) for i in range(n)])


def assemble(
    counts: sp.csr_matrix, obs: pd.DataFrame, var: pd.DataFrame, n_flag: int, order: np.ndarray | None = None
) -> ad.AnnData:
    """The dataset in the task's layout: counts as X and layers['counts'], layers['normalized'], and
    var['batch_hvg'] flagging the first `n_flag` genes of `order` (by default `batch_hvg_order`)."""
    import anndata as ad

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
    import anndata as ad

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
