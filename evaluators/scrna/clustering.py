"""Leiden clusterings of the result's neighbour graph, deterministic (seed ``random_state=0``), by
one of two rules (the task's `clustering` parameter, CLUSTERINGS):

- ``paper`` (the default): what the paper's evaluator precomputes and lets scib reuse, scanpy's
  ``sc.tl.leiden`` with the igraph flavour, 2 iterations, on the graph taken as undirected;
- ``leidenalg``: what scib's ``cluster_optimal_resolution`` runs when given nothing, scanpy's
  leidenalg flavour on the graph taken as directed, run until no move improves the partition.

Each resolution is clustered once per result and rule. ARI/NMI (resolutions 0.2 to 0.8) follow the
task's rule; the isolated-label F1 (scib's default 0.2 to 2.0), which the paper does not score,
always follows scib's own."""

from __future__ import annotations

import warnings

import numpy as np

from .metric_inputs import Inputs

ARI_NMI_RESOLUTIONS: tuple[float, ...] = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)  # OpenProblems' clustering_overlap
ISOLATED_F1_RESOLUTIONS: tuple[float, ...] = tuple(2 * (i + 1) / 10 for i in range(10))  # scib's get_resolutions
LEIDEN_SEED = 0  # scanpy's default random_state
CLUSTERINGS = ("paper", "leidenalg")


def leiden(inputs: Inputs, resolution: float, rule: str | None = None) -> np.ndarray:
    """Cluster codes of every cell at `resolution` by `rule` (CLUSTERINGS; by default the result's
    `inputs.clustering`), cached in `inputs.cache`."""
    import anndata as ad
    import pandas as pd
    import scanpy as sc

    rule = rule or inputs.clustering
    done: dict[tuple[str, float], np.ndarray] = inputs.cache.setdefault("leiden", {})
    if (rule, resolution) not in done:
        # scanpy announces that its default will change; we ask for today's default on purpose. (A
        # lasting filter, as scanpy's own warn-once: a catch_warnings block is undone by other threads.)
        warnings.filterwarnings(
            "ignore", message="In the future, the default backend for leiden", category=FutureWarning
        )
        conn = inputs.need_graph()
        work = ad.AnnData(obs=pd.DataFrame(index=pd.RangeIndex(inputs.n).astype(str)))
        if rule == "paper":
            flavour: dict[str, object] = {"flavor": "igraph", "n_iterations": 2, "directed": False}
        else:
            flavour = {"flavor": "leidenalg", "n_iterations": -1}
        sc.tl.leiden(
            work, resolution=resolution, adjacency=conn, random_state=LEIDEN_SEED, key_added="leiden", **flavour
        )
        done[rule, resolution] = work.obs["leiden"].cat.codes.to_numpy()
    return done[rule, resolution]
