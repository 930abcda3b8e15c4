"""A user-supplied (e.g. CELLxGENE) `.h5ad` file brought into the layout of the simulated data
(layout.py): raw counts, batch and cell-type labels, the batch-aware highly variable genes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .layout import HVG_FRACTION, assemble, batch_hvg_order

if TYPE_CHECKING:  # imported where a file is read (layout.py says why)
    import anndata as ad


def _is_counts(m) -> bool:
    data = m.data if sp.issparse(m) else np.asarray(m)
    data = np.asarray(data)
    if data.size == 0:
        return True
    if not np.issubdtype(data.dtype, np.number):
        return False
    return bool(np.isfinite(data).all() and (data >= 0).all() and (data == np.round(data)).all())


def load_h5ad(
    path: str | os.PathLike, batch_key: str = "batch", label_key: str = "cell_type", n_hvg: int = 2000
) -> ad.AnnData:
    """A user-supplied (e.g. CELLxGENE) `.h5ad` in the layout of `simulate`, on n_hvg batch-aware HVGs.

    Raw counts are taken from `layers['counts']`, else `X`, else `raw.X` - the first of them that
    holds non-negative integers. Gene names come from `var['feature_name']` when present, else the
    var names (which are kept as they are). `batch_key` and `label_key` become `batch` and
    `cell_type`; `observation_joinid` is kept when present and unique, else the obs names are used.
    There is no cell-cycle truth in real data, so `obs['cell_cycle_phase']` is absent (metrics that
    need it must skip it). The genes are restricted to the `n_hvg` best by `batch_hvg_order` (all
    genes if there are fewer), kept in their original order, and `var['batch_hvg']` flags the top
    75% of those, as in `simulate`.
    """
    import anndata as ad

    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    adata = ad.read_h5ad(path)
    _check_labels(adata, path, batch_key, label_key)
    counts, var = _raw_counts(adata, path)
    obs = _obs(adata, batch_key, label_key)
    n_keep = min(int(n_hvg), counts.shape[1])
    if n_keep < 1:
        raise ValueError(f"n_hvg must be positive, got {n_hvg}")
    order = batch_hvg_order(counts, obs["batch"].to_numpy(), n_keep)
    keep = np.sort(order[:n_keep])
    # Rank positions of the kept genes, restricted to them, keep the same order.
    position = np.empty(counts.shape[1], dtype=np.int64)
    position[order] = np.arange(counts.shape[1])
    sub_order = np.argsort(position[keep], kind="stable")
    return assemble(counts[:, keep], obs, var.iloc[keep], n_flag=int(round(HVG_FRACTION * n_keep)), order=sub_order)


def _check_labels(adata: ad.AnnData, path: Path, batch_key: str, label_key: str) -> None:
    """The batch and label columns exist, have no missing values, and there are two batches or more."""
    missing = [
        f"{role} {key!r}"
        for role, key in (("batch_key", batch_key), ("label_key", label_key))
        if key not in adata.obs.columns
    ]
    if missing:
        raise ValueError(
            f"{path}: obs has no column for {', '.join(missing)}; available obs columns: {list(adata.obs.columns)}"
        )
    for role, key in (("batch_key", batch_key), ("label_key", label_key)):
        n_missing = int(adata.obs[key].isna().sum())
        if n_missing:
            raise ValueError(f"{path}: obs[{key!r}] ({role}) has {n_missing} missing values")
    if adata.obs[batch_key].nunique() < 2:
        raise ValueError(f"{path}: obs[{batch_key!r}] has fewer than two batches; nothing to integrate")


def _raw_counts(adata: ad.AnnData, path: Path) -> tuple[sp.csr_matrix, pd.DataFrame]:
    """The first of layers['counts'], X and raw.X that holds non-negative integers, and its genes."""
    import anndata as ad

    candidates = []
    if "counts" in adata.layers:
        candidates.append(("layers['counts']", adata.layers["counts"], adata.var))
    if adata.X is not None:
        candidates.append(("X", adata.X, adata.var))
    if adata.raw is not None:
        candidates.append(("raw.X", adata.raw.X, adata.raw.var))
    chosen = next(((w, m, v) for w, m, v in candidates if _is_counts(m)), None)
    if chosen is None:
        tried = ", ".join(w for w, _, _ in candidates) or "nothing (no X, layers['counts'] or raw)"
        raise ValueError(
            f"{path}: no raw count matrix found: {tried} do not hold non-negative integers "
            "(log-normalized or scaled data cannot be used; supply raw counts)"
        )
    _, counts, var_src = chosen
    counts = sp.csr_matrix(counts, dtype=np.float32)
    if counts.shape[1] != len(var_src):
        raise ValueError(f"{path}: count matrix has {counts.shape[1]} genes but var has {len(var_src)}")

    names = (
        var_src["feature_name"].astype(str).to_numpy()
        if "feature_name" in var_src.columns
        else var_src.index.astype(str).to_numpy()
    )
    var_ids = pd.Index(var_src.index.astype(str))
    if not var_ids.is_unique:
        var_ids = pd.Index(ad.utils.make_index_unique(var_ids))
    var = pd.DataFrame({"feature_name": names}, index=var_ids)
    return counts, var


def _obs(adata: ad.AnnData, batch_key: str, label_key: str) -> pd.DataFrame:
    """`batch`, `cell_type` and `observation_joinid` (kept when present and unique, else the obs names)."""
    import anndata as ad

    if (
        "observation_joinid" in adata.obs
        and adata.obs["observation_joinid"].notna().all()
        and adata.obs["observation_joinid"].astype(str).is_unique
    ):
        joinid = adata.obs["observation_joinid"].astype(str).to_numpy()
    else:
        joinid = ad.utils.make_index_unique(pd.Index(adata.obs_names.astype(str))).to_numpy()
    obs = pd.DataFrame(
        {
            "batch": pd.Categorical(adata.obs[batch_key].astype(str).to_numpy()),
            "cell_type": pd.Categorical(adata.obs[label_key].astype(str).to_numpy()),
            "observation_joinid": joinid,
        },
        index=pd.Index(joinid, name=None),
    )
    return obs
