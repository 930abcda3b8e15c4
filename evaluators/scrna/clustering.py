"""Leiden clusterings of the result's neighbour graph, as scib's ``cluster_optimal_resolution`` makes
them for OpenProblems v2: scanpy's default ``sc.tl.leiden`` (the leidenalg flavour on the graph
taken as directed, weighted, run until no move improves the partition: ``n_iterations=-1``, seed
``random_state=0``, so deterministic). Each resolution is clustered once per result and shared by
ARI/NMI (resolutions 0.2 to 0.8) and the isolated-label F1 (scib's default 0.2 to 2.0)."""

from __future__ import annotations

import warnings

import numpy as np

from .metric_inputs import Inputs

ARI_NMI_RESOLUTIONS: tuple[float, ...] = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)  # OpenProblems' clustering_overlap
ISOLATED_F1_RESOLUTIONS: tuple[float, ...] = tuple(2 * (i + 1) / 10 for i in range(10))  # scib's get_resolutions
LEIDEN_SEED = 0  # scanpy's default random_state


def leiden(inputs: Inputs, resolution: float) -> np.ndarray:
    """Cluster codes of every cell at `resolution` (cached in `inputs.cache`)."""
    import anndata as ad
    import pandas as pd
    import scanpy as sc

    done: dict[float, np.ndarray] = inputs.cache.setdefault("leiden", {})
    if resolution not in done:
        # scanpy announces that its default will change; we ask for today's default on purpose. (A
        # lasting filter, as scanpy's own warn-once: a catch_warnings block is undone by other threads.)
        warnings.filterwarnings(
            "ignore", message="In the future, the default backend for leiden", category=FutureWarning
        )
        conn = inputs.need_graph()
        work = ad.AnnData(obs=pd.DataFrame(index=pd.RangeIndex(inputs.n).astype(str)))
        sc.tl.leiden(
            work,
            resolution=resolution,
            adjacency=conn,
            flavor="leidenalg",
            n_iterations=-1,
            random_state=LEIDEN_SEED,
            key_added="leiden",
        )
        done[resolution] = work.obs["leiden"].cat.codes.to_numpy()
    return done[resolution]
