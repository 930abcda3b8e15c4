"""The three OpenProblems v2 metrics that the paper left out of the score (HVG overlap for its high
variance; the isolated-label metrics as not applicable to its dataset). A task computes them only
when asked (parameter `extra_metrics`), reports them raw and never counts them in the score. Each
follows the scib 1.1.7 function that OpenProblems calls:

- ``hvg_overlap`` (scib ``hvg_overlap``; needs corrected counts, i.e. a feature output): per batch,
  the solution's normalized data and the corrected counts each lose the genes expressed (> 0) in
  no cell of the batch; the normalized data's top min(500, half of its genes) ``cell_ranger`` HVGs
  are compared with as many of the corrected counts'; overlap / the smaller list; mean over batches.
- ``isolated_label_asw`` (scib ``isolated_labels_asw``; needs an embedding): the isolated cell types
  are those present in the fewest batches (none when that is every batch); for each, the mean
  silhouette (euclidean, against all cell types) of its cells, scaled (s + 1) / 2; mean over them.
- ``isolated_label_f1`` (scib ``isolated_labels_f1`` on the neighbour graph): for each isolated cell
  type, the best F1 of "in this Leiden cluster" against "of this type" over all clusters, at the
  resolution (0.2, 0.4, ..., 2.0) where that best is highest; mean over the isolated types.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .clustering import ISOLATED_F1_RESOLUTIONS, leiden
from .metric_inputs import Inputs, MetricSkipped

EXTRA_METRICS: tuple[str, ...] = ("hvg_overlap", "isolated_label_f1", "isolated_label_asw")
HVG_PER_BATCH = 500  # scib's n_hvg


def isolated_labels(inputs: Inputs) -> np.ndarray:
    """The label codes present in the fewest batches (scib's ``get_isolated_labels``, no threshold)."""
    n_batches = len(np.unique(inputs.batch))
    present = {int(label): len(np.unique(inputs.batch[inputs.labels == label])) for label in np.unique(inputs.labels)}
    fewest = min(present.values())
    if fewest == n_batches:
        raise MetricSkipped("no isolated cell type: every cell type is present in every batch")
    return np.array([label for label, count in present.items() if count <= fewest])


def isolated_label_asw(inputs: Inputs) -> float:
    from sklearn.metrics import silhouette_samples

    emb = inputs.need_emb()
    if len(np.unique(inputs.labels)) < 2:
        raise MetricSkipped("needs at least two cell types")
    isolated = isolated_labels(inputs)
    silhouette = silhouette_samples(emb, inputs.labels)
    return float(np.mean([(silhouette[inputs.labels == label].mean() + 1) / 2 for label in isolated]))


def isolated_label_f1(inputs: Inputs) -> float:
    inputs.need_graph()
    isolated = isolated_labels(inputs)
    scores = []
    for label in isolated:
        truth = inputs.labels == label
        scores.append(
            max([0.0] + [best_cluster_f1(leiden(inputs, r, "leidenalg"), truth) for r in ISOLATED_F1_RESOLUTIONS])
        )
    return float(np.mean(scores))


def best_cluster_f1(clusters: np.ndarray, truth: np.ndarray) -> float:
    """The highest F1 = 2 TP / (cluster size + type size) of any cluster against the cells of `truth`."""
    sizes = np.bincount(clusters)
    hits = np.bincount(clusters[truth], minlength=len(sizes))
    return float(np.max(2 * hits / (sizes + truth.sum())))


def hvg_overlap(inputs: Inputs) -> float:
    import scipy.sparse as sp

    corrected = inputs.need_corrected()
    solution = inputs.solution
    if tuple(corrected.shape) != tuple(solution.shape):
        raise MetricSkipped(
            f"corrected_counts has shape {tuple(corrected.shape)}; expected {tuple(solution.shape)} "
            "(every cell, the input's genes)"
        )
    if "normalized" not in solution.layers:
        raise MetricSkipped("the solution has no layers['normalized']")
    before, after = solution.layers["normalized"], corrected
    if not sp.issparse(after):
        after = np.asarray(after)
    overlaps = []
    for batch in np.unique(inputs.batch):
        rows = np.flatnonzero(inputs.batch == batch)
        genes_before = _cell_ranger_genes(before[rows], None)
        genes_after = _cell_ranger_genes(after[rows], len(genes_before))
        overlaps.append(len(genes_before & genes_after) / min(len(genes_before), len(genes_after)))
    return float(np.mean(overlaps))


def _cell_ranger_genes(matrix: Any, n_top: int | None) -> set[int]:
    """Gene positions of scanpy's ``cell_ranger`` HVGs among the genes expressed (> 0) in some cell;
    `n_top` of them, or min(HVG_PER_BATCH, half the expressed genes) when None."""
    import warnings

    import anndata as ad
    import scanpy as sc

    expressed, _ = sc.pp.filter_genes(matrix, min_cells=1, inplace=False)
    genes = np.flatnonzero(expressed)
    if n_top is None:
        n_top = min(HVG_PER_BATCH, int(0.5 * len(genes)))
    work = ad.AnnData(X=matrix[:, genes])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scanpy's notes on the flavour; nothing the caller can act on
        table = sc.pp.highly_variable_genes(work, flavor="cell_ranger", n_top_genes=n_top, inplace=False)
    return set(genes[table["highly_variable"].to_numpy()].tolist())
