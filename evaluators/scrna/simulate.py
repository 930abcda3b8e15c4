"""Seeded simulator of multi-batch single-cell RNA-seq counts, and a loader for real `.h5ad` files.

The batch-integration task (after the OpenProblems benchmark, whose headline dataset is a human
heart atlas of about 20k cells x 2000 highly variable genes from 4 batches and 19 cell types) needs
data where integration matters: without it, cells group by batch as well as by type. Nothing is
downloaded here. The data are drawn from a generative model, reproducibly from a seed.

Generative model
----------------
Everything is a gamma-Poisson (negative-binomial) draw around a cell-by-gene mean::

    eta[c, g]  = base[g] + type[t, g] + batch[b, g] + batch_x_type[b, t, g]
                 + latent[c] . W[t, :, g] + stress[c] * S[g] + cycle[c, g]
    mean[c, g] = L[c] * softmax_g(eta[c, :])               (L[c] = library size of cell c)
    lambda     ~ Gamma(shape = 1 / phi[g], scale = mean * phi[g])
    count      ~ Poisson(lambda), then set to 0 with the batch's zero-inflation probability

* Genes. Baseline log-means `base[g]` are normal (so means are log-normal); each gene has its own
  overdispersion `phi[g]` (log-normal around 0.25). Gene order is shuffled, so no block of
  adjacent genes belongs to one programme.
* Cell types form a hierarchy: lineage (myocyte, stromal, endothelial, immune, neural), branch
  (e.g. mural or fibroblast within stromal) and type. Every type of a lineage shares the lineage
  programme (up- and down-regulated genes), every type of a branch shares the branch programme,
  a few programmes are shared across lineages (a contractile one by cardiomyocytes and mural
  cells, an antigen-presentation one by myeloid cells and blood-vessel endothelium), and each type
  has its own marker genes on top, plus a small type-specific shift on every gene. All effects are
  log-fold changes on subsets of genes. Within a type, two latent factors with type-specific
  loadings give continuous variation (states, gradients), and 15% of the cells of a type that
  has a sibling in its branch are transitional: their type effect is a mix, up to half-way, of
  their own and the sibling's, so neighbouring types touch as they do in real atlases.
* Abundances are very unequal. The common types follow fixed relative weights, jittered per
  batch, and the largest type makes up about a quarter of the cells. Some types are rare, each
  below 1% of the cells in every batch and therefore overall: three of them from 15 types
  upwards, two from 10 to 14 types, one from 5 to 9.
* Batch effects are technical and come in five kinds: a multiplicative effect per gene and batch
  (log-normal, small for most genes, strong - a 2x to 7x change - for about 6% of the genes of
  each batch) with a small batch-by-type interaction; a library-size distribution per batch
  (sequencing depths differ by up to about 5x between batches); a zero-inflation rate per batch,
  stronger for lowly expressed entries; a dissociation-stress programme whose strength differs by
  batch; and an unequal cell-type composition per batch, in which some types are missing from
  some batches (a common type is in at least two batches when there are three or more, a rare
  type is missing from at most one batch).
* Cell cycle is biology, not batch: in each type a fraction of the cells (10% to 40%, set per type,
  the same in every batch) cycles. A cycling cell is in S phase or G2/M with equal probability.
  S cells up-regulate the S-phase genes (`S_GENES`, 42 genes) and G2M cells the G2/M genes
  (`G2M_GENES`, 48 genes), each by a per-gene log-fold change scaled by a per-cell intensity, with
  a weaker spill-over onto the other set. The truth is in `obs['cell_cycle_phase']` (G1, S, G2M).

Two random streams are used: one (from `seed`) draws the "world" (genes, programmes, batch
effects, composition), the other (from `cell_seed`, by default `seed`) draws the cells. The world
does not depend on `n_cells`.

Layout (as for the real data, see `load_h5ad`)
----------------------------------------------
`X` and `layers['counts']`: raw integer counts, float32 CSR. `layers['normalized']`: log1p of the
counts scaled to 10,000 per cell, float32 CSR. `obs`: `batch` ("batch_1", ...), `cell_type`,
`observation_joinid` (unique random strings, also the obs names) and `cell_cycle_phase`. `var`:
`feature_name` (equal to the var names: "GENE_0001", ..., except the cell-cycle genes, which are
named "S_GENE_01", ..., "G2M_GENE_01", ...) and `batch_hvg`.

`batch_hvg` flags the top 75% of the genes by a batch-aware, seurat_v3-style ranking (scanpy's
`flavor="seurat_v3"` needs scikit-misc, which is not a dependency, so it is re-implemented): in
each batch the log-variance of the counts is regressed on the log-mean by a binned median trend
(instead of loess), counts are standardised by the trend's standard deviation and clipped at
sqrt(cells in the batch), and genes are ranked by the variance of the standardised values. Across
batches genes are ordered by the number of batches in which they are in the top n, then by their
median rank - the same combination rule as scanpy's.

Task files (`make_datasets`): the train split is `simulate(seed=seed)`, the test split an
independent draw, `simulate(seed=test_seed)`, with its own gene programmes and batch effects (the
cell-type names and the set of gene names are shared, but a name such as GENE_0001 stands for a
different gene in each draw). `split_for_task` cuts each into what a submission receives (counts,
normalized counts, batch) and the labelled solution.

Command line: ``python -m evaluators.scrna.simulate --out data/scrna/generated --size default``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import anndata as ad
import numpy as np
import pandas as pd
import scipy.sparse as sp

GENERATOR_VERSION = "1.0"

S_GENES: tuple[str, ...] = tuple(f"S_GENE_{i:02d}" for i in range(1, 43))
G2M_GENES: tuple[str, ...] = tuple(f"G2M_GENE_{i:02d}" for i in range(1, 49))

HVG_FRACTION = 0.75  # share of the genes flagged in var['batch_hvg']
TARGET_SUM = 1e4  # normalize_total target of layers['normalized']
PHASES = ("G1", "S", "G2M")

# Sizes for make_datasets: train and test cells, genes; both use 4 batches and 15 cell types.
SIZES: dict[str, dict[str, int]] = {
    "default": {"train_cells": 16000, "test_cells": 8000, "n_genes": 2000, "n_batches": 4, "n_types": 15},
    "small": {"train_cells": 2000, "test_cells": 1000, "n_genes": 500, "n_batches": 4, "n_types": 15},
}
FILES = ("train_input.h5ad", "train_solution.h5ad", "test_input.h5ad", "test_solution.h5ad")


@dataclass(frozen=True)
class CellType:
    name: str
    lineage: str
    branch: str
    weight: float  # common types: relative abundance; rare types: target share of all cells
    cycling: float  # fraction of cycling cells
    rna: float  # relative RNA content (scales the library size)


# Common types, most abundant first; the first n_types - n_rare are used.
COMMON_TYPES: tuple[CellType, ...] = (
    CellType("cardiomyocyte_ventricular", "myocyte", "working_myocyte", 22.0, 0.10, 1.6),
    CellType("fibroblast", "stromal", "fibroblast", 18.0, 0.15, 1.0),
    CellType("endothelial_capillary", "endothelial", "blood_vessel", 15.0, 0.15, 0.9),
    CellType("macrophage", "immune", "myeloid", 9.0, 0.25, 0.8),
    CellType("pericyte", "stromal", "mural", 8.0, 0.12, 0.9),
    CellType("cardiomyocyte_atrial", "myocyte", "working_myocyte", 7.0, 0.10, 1.5),
    CellType("smooth_muscle", "stromal", "mural", 5.0, 0.15, 1.0),
    CellType("endothelial_venous", "endothelial", "blood_vessel", 4.0, 0.12, 0.9),
    CellType("T_cell", "immune", "lymphoid", 3.5, 0.30, 0.6),
    CellType("fibroblast_activated", "stromal", "fibroblast", 3.0, 0.40, 1.1),
    CellType("monocyte", "immune", "myeloid", 2.5, 0.20, 0.7),
    CellType("endothelial_arterial", "endothelial", "blood_vessel", 2.0, 0.12, 0.9),
    CellType("endocardial", "endothelial", "endocardium", 1.5, 0.12, 0.9),
    CellType("B_cell", "immune", "lymphoid", 1.2, 0.35, 0.6),
    CellType("mesothelial", "stromal", "mesothelium", 1.0, 0.15, 1.0),
    CellType("adipocyte", "stromal", "adipose", 0.9, 0.10, 1.2),
    CellType("dendritic_cell", "immune", "myeloid", 0.8, 0.25, 0.7),
    CellType("neuronal", "neural", "neuron", 0.7, 0.10, 0.9),
)
# Rare types: `weight` is the share of all cells in a batch where present (jittered, capped at 0.9%).
RARE_TYPES: tuple[CellType, ...] = (
    CellType("NK_cell", "immune", "lymphoid", 0.0060, 0.30, 0.6),
    CellType("lymphatic_endothelial", "endothelial", "lymphatic", 0.0045, 0.20, 0.8),
    CellType("mast_cell", "immune", "granulocyte", 0.0035, 0.15, 0.7),
)
RARE_CAP = 0.009
TRANSITIONAL = 0.15  # share of the cells of a type with a sibling that are part-way towards it
# Programmes shared across lineages, by the branches that express them.
SHARED_PROGRAMS: dict[str, frozenset[str]] = {
    "contractile": frozenset({"working_myocyte", "mural"}),
    "antigen_presentation": frozenset({"myeloid", "blood_vessel", "lymphoid"}),
}
MAX_TYPES = len(COMMON_TYPES) + len(RARE_TYPES)


def _n_rare(n_types: int) -> int:
    return min(len(RARE_TYPES), n_types // 5)


def cell_types_for(n_types: int) -> tuple[CellType, ...]:
    """The cell types `simulate(n_types=...)` uses: the most abundant common types, then the rare ones."""
    if not 2 <= n_types <= MAX_TYPES:
        raise ValueError(f"n_types must be between 2 and {MAX_TYPES}, got {n_types}")
    r = _n_rare(n_types)
    return COMMON_TYPES[: n_types - r] + RARE_TYPES[:r]


# ----------------------------------------------------------------------------------------------
# The world: genes, programmes, batch effects, composition
# ----------------------------------------------------------------------------------------------


@dataclass
class _World:
    gene_names: list[str]
    s_idx: np.ndarray
    g2m_idx: np.ndarray
    base: np.ndarray  # (G,)
    phi: np.ndarray  # (G,)
    type_lfc: np.ndarray  # (T, G)
    latent_w: np.ndarray  # (T, 2, G)
    stress_lfc: np.ndarray  # (G,)
    s_lfc: np.ndarray  # (G,) non-zero on S genes
    g2m_lfc: np.ndarray  # (G,) non-zero on G2M genes
    batch_lfc: np.ndarray  # (B, G)
    batch_type_lfc: np.ndarray  # (B, T, G)
    depth: np.ndarray  # (B,) median library size
    depth_sd: np.ndarray  # (B,) sd of log library size
    dropout: np.ndarray  # (B,) maximal zero-inflation probability
    dropout_mid: np.ndarray  # (B,) log-mean at which zero inflation is half its maximum
    stress: np.ndarray  # (B,) mean stress level
    batch_share: np.ndarray  # (B,)
    composition: np.ndarray  # (B, T), rows sum to 1, zeros for absent types


def _pick(rng: np.random.Generator, pool: np.ndarray, k: int) -> np.ndarray:
    return rng.choice(pool, size=min(k, len(pool)), replace=False)


def _make_world(rng: np.random.Generator, n_genes: int, n_batches: int,
                types: tuple[CellType, ...]) -> _World:
    G, B, T = n_genes, n_batches, len(types)
    n_cc = len(S_GENES) + len(G2M_GENES)
    perm = rng.permutation(G)
    s_idx, g2m_idx = np.sort(perm[: len(S_GENES)]), np.sort(perm[len(S_GENES): n_cc])
    other = np.sort(perm[n_cc:])

    names = [""] * G
    for i, g in enumerate(perm[: len(S_GENES)]):
        names[g] = S_GENES[i]
    for i, g in enumerate(perm[len(S_GENES): n_cc]):
        names[g] = G2M_GENES[i]
    width = max(4, len(str(len(other))))
    for k, g in enumerate(other):
        names[g] = f"GENE_{k + 1:0{width}d}"

    base = rng.normal(0.0, 1.6, G)
    base[s_idx] = rng.normal(-0.3, 0.7, len(s_idx))
    base[g2m_idx] = rng.normal(-0.3, 0.7, len(g2m_idx))
    phi = np.exp(rng.normal(np.log(0.25), 0.5, G))

    def size(frac: float, least: int) -> int:
        return max(least, int(round(frac * G)))

    def up(k: int, loc: float, scale: float) -> tuple[np.ndarray, np.ndarray]:
        genes = _pick(rng, other, k)
        return genes, np.clip(rng.normal(loc, scale, len(genes)), 0.4, None)

    type_lfc = rng.normal(0.0, 0.04, (T, G))  # small type-specific shift on every gene
    type_lfc[:, s_idx] = 0.0
    type_lfc[:, g2m_idx] = 0.0
    lineages = sorted({t.lineage for t in types})
    branches = sorted({t.branch for t in types})
    for lin in lineages:  # lineage programmes
        g_up, l_up = up(size(0.035, 20), 1.8, 0.5)
        g_dn, l_dn = up(size(0.010, 6), 1.2, 0.4)
        for ti, t in enumerate(types):
            if t.lineage == lin:
                type_lfc[ti, g_up] += l_up
                type_lfc[ti, g_dn] -= l_dn
    for br in branches:  # branch programmes
        g_up, l_up = up(size(0.020, 12), 1.3, 0.4)
        for ti, t in enumerate(types):
            if t.branch == br:
                type_lfc[ti, g_up] += l_up
    for prog in sorted(SHARED_PROGRAMS):  # programmes shared across lineages
        g_up, l_up = up(size(0.015, 8), 1.0, 0.3)
        for ti, t in enumerate(types):
            if t.branch in SHARED_PROGRAMS[prog]:
                type_lfc[ti, g_up] += l_up
    for ti in range(T):  # type markers
        g_up, l_up = up(size(0.012, 12), 1.8, 0.5)
        g_dn, l_dn = up(size(0.004, 3), 1.0, 0.3)
        type_lfc[ti, g_up] += l_up
        type_lfc[ti, g_dn] -= l_dn

    latent_w = np.zeros((T, 2, G))
    for ti in range(T):
        for f in range(2):
            genes = _pick(rng, other, size(0.08, 25))
            latent_w[ti, f, genes] = rng.normal(0.0, 0.5, len(genes))

    stress_lfc = np.zeros(G)
    genes, lfc = up(size(0.012, 10), 1.3, 0.3)
    stress_lfc[genes] = lfc

    s_lfc, g2m_lfc = np.zeros(G), np.zeros(G)
    s_lfc[s_idx] = np.clip(rng.normal(1.6, 0.4, len(s_idx)), 0.5, None)
    g2m_lfc[g2m_idx] = np.clip(rng.normal(1.8, 0.4, len(g2m_idx)), 0.5, None)

    # Batch effects.
    batch_lfc = rng.normal(0.0, 0.12, (B, G))
    for b in range(B):
        strong = _pick(rng, np.arange(G), size(0.06, 3))
        batch_lfc[b, strong] += rng.choice([-1.0, 1.0], len(strong)) * rng.uniform(0.7, 2.0, len(strong))
    batch_type_lfc = rng.normal(0.0, 0.04, (B, T, G))
    depth = G * np.exp(rng.permutation(np.linspace(np.log(0.45), np.log(2.2), B)) + rng.normal(0.0, 0.1, B))
    depth_sd = rng.uniform(0.3, 0.55, B)
    dropout = np.clip(rng.permutation(np.linspace(0.03, 0.35, B)) + rng.normal(0.0, 0.02, B), 0.0, 0.5)
    dropout_mid = np.log(rng.uniform(0.5, 2.0, B))
    stress = rng.permutation(np.linspace(0.1, 0.8, B))

    # Composition: batch sizes, presence of types in batches, per-batch type proportions.
    share = rng.dirichlet(np.full(B, 6.0))
    share = np.maximum(share, 0.5 / B)
    share /= share.sum()
    rare = np.array([t in RARE_TYPES for t in types])
    present = np.ones((B, T), dtype=bool)
    if B >= 2:
        eligible = [ti for ti in range(T) if ti >= 3]  # the three most abundant types are everywhere
        for ti in eligible:  # rare types miss at most one batch, others may miss several
            min_present = max(1, B - 1) if rare[ti] else (2 if B >= 3 else 1)
            present[:, ti] = rng.random(B) >= 0.2
            while present[:, ti].sum() < min_present:
                present[rng.integers(B), ti] = True
        if present.all() and eligible:
            present[rng.integers(B), eligible[rng.integers(len(eligible))]] = False
    comp = np.zeros((B, T))
    weights = np.array([t.weight for t in types])
    for b in range(B):
        r = np.where(rare & present[b], np.minimum(weights * np.exp(rng.normal(0.0, 0.3, T)), RARE_CAP), 0.0)
        c = np.where(~rare & present[b], weights * np.exp(rng.normal(0.0, 0.5, T)), 0.0)
        comp[b] = r + c / c.sum() * (1.0 - r.sum())

    return _World(names, s_idx, g2m_idx, base, phi, type_lfc, latent_w, stress_lfc, s_lfc, g2m_lfc,
                  batch_lfc, batch_type_lfc, depth, depth_sd, dropout, dropout_mid, stress, share, comp)


def _largest_remainder(total: int, p: np.ndarray) -> np.ndarray:
    """Integer counts summing to `total`, proportional to `p` (Hamilton's method, deterministic)."""
    exact = total * p.ravel() / p.sum()
    n = np.floor(exact).astype(np.int64)
    order = np.lexsort((np.arange(exact.size), -(exact - n)))
    n[order[: total - n.sum()]] += 1
    return n.reshape(p.shape)


def _joinids(rng: np.random.Generator, n: int) -> np.ndarray:
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789"))
    while True:
        codes = alphabet[rng.integers(0, len(alphabet), (n, 12))]
        ids = np.array(["".join(row) for row in codes], dtype=object)
        if len(set(ids)) == n:
            return ids


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------


def simulate(n_cells: int = 16000, n_genes: int = 2000, n_batches: int = 4, n_types: int = 15,
             seed: int = 0, cell_seed: int | None = None) -> ad.AnnData:
    """The full labelled dataset (see the module docstring for the model and the layout).

    `seed` draws the world (genes, programmes, batch effects, composition) and, unless `cell_seed`
    is given, the cells; the same arguments give the same data, bit for bit.
    """
    n_cc = len(S_GENES) + len(G2M_GENES)
    if n_genes < 3 * n_cc:
        raise ValueError(f"n_genes must be at least {3 * n_cc}, got {n_genes}")
    if n_batches < 2:
        raise ValueError(f"n_batches must be at least 2, got {n_batches}")
    if n_cells < 10 * n_batches:
        raise ValueError(f"n_cells must be at least {10 * n_batches}, got {n_cells}")
    for name, value in (("seed", seed), ("cell_seed", cell_seed)):
        if value is not None and (not isinstance(value, (int, np.integer)) or value < 0):
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    types = cell_types_for(n_types)
    cell_seed = seed if cell_seed is None else cell_seed
    world = _make_world(np.random.default_rng([1, int(seed)]), n_genes, n_batches, types)
    rng = np.random.default_rng([2, int(cell_seed)])
    B, T, G = n_batches, len(types), n_genes

    # Cells per (batch, type), then per-cell attributes, in a random order.
    n_bt = _largest_remainder(n_cells, world.batch_share[:, None] * world.composition)
    batch = np.repeat(np.repeat(np.arange(B), T), n_bt.ravel())
    ctype = np.repeat(np.tile(np.arange(T), B), n_bt.ravel())
    order = rng.permutation(n_cells)
    batch, ctype = batch[order], ctype[order]

    rna = np.array([t.rna for t in types])
    log_lib = np.log(world.depth[batch] * rna[ctype]) + rng.normal(0.0, 1.0, n_cells) * world.depth_sd[batch]
    cycling = rng.random(n_cells) < np.array([t.cycling for t in types])[ctype]
    in_s = rng.random(n_cells) < 0.5
    phase = np.where(cycling, np.where(in_s, 1, 2), 0)
    intensity = rng.uniform(0.7, 1.3, n_cells) * cycling
    latent = rng.normal(0.0, 1.0, (n_cells, 2))
    # Transitional cells: some cells of a type lie part-way towards a sibling type of its branch.
    partner, mix = ctype.copy(), np.zeros(n_cells)
    for ti, t in enumerate(types):
        siblings = [tj for tj, u in enumerate(types) if tj != ti and u.branch == t.branch]
        cells = np.flatnonzero(ctype == ti)
        if not siblings or not len(cells):
            continue
        moving = cells[rng.random(len(cells)) < TRANSITIONAL]
        partner[moving] = np.asarray(siblings)[rng.integers(0, len(siblings), len(moving))]
        mix[moving] = rng.uniform(0.0, 0.5, len(moving))
    stress = world.stress[batch] * rng.gamma(2.0, 0.5, n_cells)
    joinid = _joinids(rng, n_cells)

    # Counts, in chunks of cells (the chunk size is fixed, so the draws do not depend on memory).
    chunks = []
    for lo in range(0, n_cells, 2048):
        sl = slice(lo, min(lo + 2048, n_cells))
        b, t = batch[sl], ctype[sl]
        s_amp = intensity[sl] * np.where(phase[sl] == 1, 1.0, 0.3)
        g_amp = intensity[sl] * np.where(phase[sl] == 2, 1.0, 0.25)
        w = mix[sl, None]
        eta = (world.base + (1.0 - w) * world.type_lfc[t] + w * world.type_lfc[partner[sl]]
               + world.batch_lfc[b] + world.batch_type_lfc[b, t]
               + np.einsum("ck,ckg->cg", latent[sl], world.latent_w[t])
               + stress[sl, None] * world.stress_lfc
               + s_amp[:, None] * world.s_lfc + g_amp[:, None] * world.g2m_lfc)
        eta -= eta.max(axis=1, keepdims=True)
        p = np.exp(eta)
        mean = p * (np.exp(log_lib[sl]) / p.sum(axis=1))[:, None]
        lam = rng.gamma(1.0 / world.phi, mean * world.phi)
        counts = rng.poisson(lam)
        zi = world.dropout[b, None] / (1.0 + np.exp(1.5 * (np.log(mean) - world.dropout_mid[b, None])))
        counts[rng.random(counts.shape) < zi] = 0
        chunks.append(sp.csr_matrix(counts.astype(np.float32)))
    X = sp.vstack(chunks, format="csr")
    X.sort_indices()

    obs = pd.DataFrame(
        {
            "batch": pd.Categorical.from_codes(batch, [f"batch_{i + 1}" for i in range(B)]),
            "cell_type": pd.Categorical.from_codes(ctype, [t.name for t in types]).remove_unused_categories(),
            "observation_joinid": joinid,
            "cell_cycle_phase": pd.Categorical.from_codes(phase, list(PHASES)),
        },
        index=pd.Index(joinid, name=None),
    )
    var = pd.DataFrame({"feature_name": world.gene_names}, index=pd.Index(world.gene_names))
    adata = _assemble(X, obs, var, n_flag=int(round(HVG_FRACTION * G)))
    adata.uns["simulation"] = {
        "generator_version": GENERATOR_VERSION, "seed": int(seed), "cell_seed": int(cell_seed),
        "n_cells": int(n_cells), "n_genes": int(G), "n_batches": int(B), "n_types": int(T),
    }
    return adata


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
        return ad.AnnData(X=counts.copy(), obs=obs, var=var.copy(),
                          layers={"counts": counts.copy(), "normalized": normalized.copy()})

    task_input = make(["batch", "observation_joinid"])
    solution = make(need_obs + (["cell_cycle_phase"] if "cell_cycle_phase" in full.obs else []))
    solution.uns.update({k: v for k, v in full.uns.items() if k == "simulation"})
    return task_input, solution


# ----------------------------------------------------------------------------------------------
# Layout helpers: normalization and batch-aware HVG ranking
# ----------------------------------------------------------------------------------------------


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
    centres, values = [], []
    for part in np.array_split(order, n_bins):
        centres.append(np.median(x[part]))
        values.append(np.median(y[part]))
    centres, values = np.asarray(centres), np.asarray(values)
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
        var = (sq - mean ** 2) * n / (n - 1)
        ok = (mean > 0) & (var > 0)
        score = np.full(G, -np.inf)
        if ok.sum() >= 2:
            trend = _binned_trend(np.log10(mean[ok]), np.log10(var[ok]))
            sd = np.sqrt(10.0 ** trend)
            coo = Xb[:, ok].tocoo()
            clip = (mean[ok] + sd * np.sqrt(n))[coo.col]
            x = np.minimum(coo.data.astype(np.float64), clip)
            sx = np.bincount(coo.col, weights=x, minlength=ok.sum())
            sx2 = np.bincount(coo.col, weights=x * x, minlength=ok.sum())
            m = mean[ok]
            score[ok] = (n * m ** 2 + sx2 - 2 * m * sx) / ((n - 1) * sd ** 2)
        rank = np.empty(G)
        rank[np.lexsort((np.arange(G), -score))] = np.arange(G)
        ranks.append(rank)
    if not ranks:
        raise ValueError("batch_hvg_order needs a batch with at least two cells")
    ranks = np.array(ranks)
    n_batches_top = (ranks < n_top).sum(axis=0)
    median_rank = np.median(ranks, axis=0)
    return np.lexsort((np.arange(G), median_rank, -n_batches_top))


def _assemble(counts: sp.csr_matrix, obs: pd.DataFrame, var: pd.DataFrame, n_flag: int,
              order: np.ndarray | None = None) -> ad.AnnData:
    counts = sp.csr_matrix(counts, dtype=np.float32)
    counts.sort_indices()
    if order is None:
        order = batch_hvg_order(counts, obs["batch"].to_numpy(), n_flag)
    var = var.copy()
    flag = np.zeros(counts.shape[1], dtype=bool)
    flag[order[:n_flag]] = True
    var["batch_hvg"] = flag
    return ad.AnnData(X=counts.copy(), obs=obs, var=var,
                      layers={"counts": counts.copy(), "normalized": log_normalize(counts)})


# ----------------------------------------------------------------------------------------------
# Real data
# ----------------------------------------------------------------------------------------------


def _is_counts(m) -> bool:
    data = m.data if sp.issparse(m) else np.asarray(m)
    data = np.asarray(data)
    if data.size == 0:
        return True
    if not np.issubdtype(data.dtype, np.number):
        return False
    return bool(np.isfinite(data).all() and (data >= 0).all() and (data == np.round(data)).all())


def load_h5ad(path: str | os.PathLike, batch_key: str = "batch", label_key: str = "cell_type",
              n_hvg: int = 2000) -> ad.AnnData:
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
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    adata = ad.read_h5ad(path)
    missing = [f"{role} {key!r}" for role, key in (("batch_key", batch_key), ("label_key", label_key))
               if key not in adata.obs.columns]
    if missing:
        raise ValueError(f"{path}: obs has no column for {', '.join(missing)}; "
                         f"available obs columns: {list(adata.obs.columns)}")
    for role, key in (("batch_key", batch_key), ("label_key", label_key)):
        n_missing = int(adata.obs[key].isna().sum())
        if n_missing:
            raise ValueError(f"{path}: obs[{key!r}] ({role}) has {n_missing} missing values")
    if adata.obs[batch_key].nunique() < 2:
        raise ValueError(f"{path}: obs[{batch_key!r}] has fewer than two batches; nothing to integrate")

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
        raise ValueError(f"{path}: no raw count matrix found: {tried} do not hold non-negative integers "
                         "(log-normalized or scaled data cannot be used; supply raw counts)")
    _, counts, var_src = chosen
    counts = sp.csr_matrix(counts, dtype=np.float32)
    if counts.shape[1] != len(var_src):
        raise ValueError(f"{path}: count matrix has {counts.shape[1]} genes but var has {len(var_src)}")

    names = (var_src["feature_name"].astype(str).to_numpy() if "feature_name" in var_src.columns
             else var_src.index.astype(str).to_numpy())
    var_ids = pd.Index(var_src.index.astype(str))
    if not var_ids.is_unique:
        var_ids = pd.Index(ad.utils.make_index_unique(var_ids))
    var = pd.DataFrame({"feature_name": names}, index=var_ids)

    if "observation_joinid" in adata.obs and adata.obs["observation_joinid"].notna().all() \
            and adata.obs["observation_joinid"].astype(str).is_unique:
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
    n_keep = min(int(n_hvg), counts.shape[1])
    if n_keep < 1:
        raise ValueError(f"n_hvg must be positive, got {n_hvg}")
    order = batch_hvg_order(counts, obs["batch"].to_numpy(), n_keep)
    keep = np.sort(order[:n_keep])
    # Rank positions of the kept genes, restricted to them, keep the same order.
    position = np.empty(counts.shape[1], dtype=np.int64)
    position[order] = np.arange(counts.shape[1])
    sub_order = np.argsort(position[keep], kind="stable")
    return _assemble(counts[:, keep], obs, var.iloc[keep], n_flag=int(round(HVG_FRACTION * n_keep)),
                     order=sub_order)


# ----------------------------------------------------------------------------------------------
# Task files
# ----------------------------------------------------------------------------------------------


def default_test_seed(seed: int) -> int:
    """The test split's seed when none is given: derived from `seed`, distinct from any small seed."""
    return int(np.random.SeedSequence([int(seed), 0x7E57]).generate_state(1, np.uint64)[0] >> 1)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_h5ad(adata: ad.AnnData, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    adata.write_h5ad(tmp, compression="gzip")
    os.replace(tmp, path)


def make_datasets(directory: str | os.PathLike, size: str = "default", seed: int = 0,
                  test_seed: int | None = None, force: bool = False,
                  log: Callable[[str], None] | None = None) -> dict:
    """Write the task files into `directory` and return the manifest (also `dataset.json`).

    Files: train_input.h5ad, train_solution.h5ad (simulate with `seed`), test_input.h5ad,
    test_solution.h5ad (an independent draw with `test_seed`, by default derived from `seed`), and
    dataset.json (parameters, generator version, per-file sha256 and size). The same parameters
    give byte-identical files. When dataset.json already records the same parameters and every file
    is present with its recorded sha256, nothing is written (unless `force`).
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    say = log or (lambda _msg: None)
    directory = Path(directory)
    dims = SIZES[size]
    test_seed = default_test_seed(seed) if test_seed is None else int(test_seed)
    params = {"size": size, "seed": int(seed), "test_seed": test_seed, **dims}
    manifest_path = directory / "dataset.json"
    if not force and manifest_path.exists():
        try:
            old = json.loads(manifest_path.read_text())
            fresh = (old.get("parameters") == params and old.get("generator_version") == GENERATOR_VERSION
                     and all((directory / f).exists() and _sha256(directory / f) == old["files"][f]["sha256"]
                             for f in FILES))
        except (ValueError, KeyError, TypeError):
            fresh = False
        if fresh:
            say(f"[scrna] {directory}: up to date ({size}, seed {seed}); nothing to do")
            return old
    directory.mkdir(parents=True, exist_ok=True)
    ignore = directory / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# generated by evaluators.scrna.simulate; regenerate, do not commit\n*\n")
    manifest_path.unlink(missing_ok=True)

    splits = {}
    plan = (("train", dims["train_cells"], int(seed)), ("test", dims["test_cells"], test_seed))
    for split, n_cells, s in plan:
        t0 = time.perf_counter()
        say(f"[scrna] simulating {split}: {n_cells} cells x {dims['n_genes']} genes, "
            f"{dims['n_batches']} batches, {dims['n_types']} cell types ...")
        full = simulate(n_cells=n_cells, n_genes=dims["n_genes"], n_batches=dims["n_batches"],
                        n_types=dims["n_types"], seed=s)
        task_input, solution = split_for_task(full, seed=s)
        t1 = time.perf_counter()
        say(f"[scrna]   simulated in {t1 - t0:.1f} s; "
            f"writing {split}_input.h5ad and {split}_solution.h5ad ...")
        _write_h5ad(task_input, directory / f"{split}_input.h5ad")
        _write_h5ad(solution, directory / f"{split}_solution.h5ad")
        say(f"[scrna]   written in {time.perf_counter() - t1:.1f} s")
        splits[split] = {
            "n_cells": int(full.n_obs), "n_genes": int(full.n_vars),
            "n_batches": int(full.obs["batch"].nunique()),
            "n_cell_types": int(full.obs["cell_type"].nunique()),
            "batch_hvg": int(full.var["batch_hvg"].sum()),
            "nonzero_fraction": round(full.X.nnz / (full.n_obs * full.n_vars), 4),
        }
    files = {f: {"sha256": _sha256(directory / f), "bytes": (directory / f).stat().st_size} for f in FILES}
    manifest = {
        "generator": "evaluators.scrna.simulate", "generator_version": GENERATOR_VERSION,
        "parameters": params, "splits": splits, "files": files,
        "held_out": "test_solution.h5ad (and test_input.h5ad until the final evaluation)",
    }
    tmp = manifest_path.with_name("dataset.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, manifest_path)
    say(f"[scrna] done: {directory}")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluators.scrna.simulate",
                                     description="Generate the simulated batch-integration datasets.")
    parser.add_argument("--out", default="data/scrna/generated", help="output directory")
    parser.add_argument("--size", choices=sorted(SIZES), default="default")
    parser.add_argument("--seed", type=int, default=0, help="seed of the train split")
    parser.add_argument("--test-seed", type=int, default=None,
                        help="seed of the test split (default: derived from --seed)")
    parser.add_argument("--force", action="store_true", help="regenerate even if up to date")
    args = parser.parse_args(argv)
    make_datasets(args.out, size=args.size, seed=args.seed, test_seed=args.test_seed, force=args.force,
                  log=lambda msg: print(msg, file=sys.stderr, flush=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
