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

`batch_hvg` flags the top 75% of the genes by scanpy's batch-aware `seurat_v3` ranking (layout.py).

Task files (`make_datasets`): the train split is `simulate(seed=seed)`, the test split an
independent draw, `simulate(seed=test_seed)`, with its own gene programmes and batch effects (the
cell-type names and the set of gene names are shared, but a name such as GENE_0001 stands for a
different gene in each draw). `split_for_task` cuts each into what a submission receives (counts,
normalized counts, batch) and the labelled solution.

Command line: ``python -m evaluators.scrna.simulate --out data/scrna/generated --size default``.

Where it lives: the world (genes, programmes, batch effects, composition) is drawn in world.py;
the layout, the HVG ranking and `split_for_task` are in layout.py, the loader for real files in
real_data.py. This module draws the cells and their counts, and writes the task files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .layout import HVG_FRACTION, assemble, split_for_task
from .real_data import load_h5ad  # noqa: F401 - dataset.py and the data README take it from here
from .world import G2M_GENES, S_GENES, CellType, World, cell_types_for, make_world

if TYPE_CHECKING:  # anndata is imported where it is used: 1.3 s a process that only names a function
    import anndata as ad

GENERATOR_VERSION = "1.1"  # 1.1: batch_hvg from scanpy's seurat_v3 (was an approximation)
PHASES = ("G1", "S", "G2M")

# Sizes for make_datasets: train and test cells, genes; both use 4 batches and 15 cell types.
SIZES: dict[str, dict[str, int]] = {
    "default": {"train_cells": 16000, "test_cells": 8000, "n_genes": 2000, "n_batches": 4, "n_types": 15},
    "small": {"train_cells": 2000, "test_cells": 1000, "n_genes": 500, "n_batches": 4, "n_types": 15},
}
FILES = ("train_input.h5ad", "train_solution.h5ad", "test_input.h5ad", "test_solution.h5ad")
TRANSITIONAL = 0.15  # share of the cells of a type with a sibling that are part-way towards it


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


def simulate(
    n_cells: int = 16000,
    n_genes: int = 2000,
    n_batches: int = 4,
    n_types: int = 15,
    seed: int = 0,
    cell_seed: int | None = None,
) -> ad.AnnData:
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
    world = make_world(np.random.default_rng([1, int(seed)]), n_genes, n_batches, types)
    rng = np.random.default_rng([2, int(cell_seed)])
    B, T, G = n_batches, len(types), n_genes
    cells = _draw_cells(rng, world, types, n_cells)
    X = _draw_counts(rng, world, cells)
    batch, ctype, phase, joinid = cells.batch, cells.ctype, cells.phase, cells.joinid

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
    adata = assemble(X, obs, var, n_flag=int(round(HVG_FRACTION * G)))
    adata.uns["simulation"] = {
        "generator_version": GENERATOR_VERSION,
        "seed": int(seed),
        "cell_seed": int(cell_seed),
        "n_cells": int(n_cells),
        "n_genes": int(G),
        "n_batches": int(B),
        "n_types": int(T),
    }
    return adata


@dataclass
class _Cells:
    """The cells' attributes, in the order of the cells."""

    batch: np.ndarray
    ctype: np.ndarray
    phase: np.ndarray  # 0 = G1, 1 = S, 2 = G2M
    intensity: np.ndarray  # cell-cycle intensity (0 for cells not cycling)
    latent: np.ndarray  # (cells, 2) within-type latent factors
    partner: np.ndarray  # the type a transitional cell moves towards (its own type otherwise)
    mix: np.ndarray  # how far it has moved (0 to 0.5)
    stress: np.ndarray
    log_lib: np.ndarray
    joinid: np.ndarray


def _draw_cells(rng: np.random.Generator, world: World, types: tuple[CellType, ...], n_cells: int) -> _Cells:
    """Cells per (batch, type), then per-cell attributes, in a random order."""
    B, T = world.composition.shape
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
    return _Cells(batch, ctype, phase, intensity, latent, partner, mix, stress, log_lib, joinid)


def _draw_counts(rng: np.random.Generator, world: World, cells: _Cells) -> sp.csr_matrix:
    """The counts, in chunks of cells (the chunk size is fixed, so the draws do not depend on memory)."""
    batch, ctype, phase, intensity, latent = cells.batch, cells.ctype, cells.phase, cells.intensity, cells.latent
    partner, mix, stress, log_lib = cells.partner, cells.mix, cells.stress, cells.log_lib
    n_cells = len(batch)
    chunks = []
    for lo in range(0, n_cells, 2048):
        sl = slice(lo, min(lo + 2048, n_cells))
        b, t = batch[sl], ctype[sl]
        s_amp = intensity[sl] * np.where(phase[sl] == 1, 1.0, 0.3)
        g_amp = intensity[sl] * np.where(phase[sl] == 2, 1.0, 0.25)
        w = mix[sl, None]
        eta = (
            world.base
            + (1.0 - w) * world.type_lfc[t]
            + w * world.type_lfc[partner[sl]]
            + world.batch_lfc[b]
            + world.batch_type_lfc[b, t]
            + np.einsum("ck,ckg->cg", latent[sl], world.latent_w[t])
            + stress[sl, None] * world.stress_lfc
            + s_amp[:, None] * world.s_lfc
            + g_amp[:, None] * world.g2m_lfc
        )
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
    return X


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


def make_datasets(
    directory: str | os.PathLike,
    size: str = "default",
    seed: int = 0,
    test_seed: int | None = None,
    force: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict:
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
        old = _recorded(directory, manifest_path, params)
        if old is not None:
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
        splits[split] = _write_split(directory, split, n_cells, s, dims, say)
    files = {f: {"sha256": _sha256(directory / f), "bytes": (directory / f).stat().st_size} for f in FILES}
    manifest = {
        "generator": "evaluators.scrna.simulate",
        "generator_version": GENERATOR_VERSION,
        "parameters": params,
        "splits": splits,
        "files": files,
        "held_out": "test_solution.h5ad (and test_input.h5ad until the final evaluation)",
    }
    tmp = manifest_path.with_name("dataset.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, manifest_path)
    say(f"[scrna] done: {directory}")
    return manifest


def _recorded(directory: Path, manifest_path: Path, params: dict) -> dict | None:
    """The manifest in `directory` if it records `params` and every file still has its recorded sha256."""
    try:
        old = json.loads(manifest_path.read_text())
        fresh = (
            old.get("parameters") == params
            and old.get("generator_version") == GENERATOR_VERSION
            and all((directory / f).exists() and _sha256(directory / f) == old["files"][f]["sha256"] for f in FILES)
        )
    except (ValueError, KeyError, TypeError):
        fresh = False
    return old if fresh else None


def _write_split(
    directory: Path, split: str, n_cells: int, s: int, dims: dict[str, int], say: Callable[[str], None]
) -> dict:
    """Simulate one split with seed `s`, write its input and solution files, and describe it."""
    t0 = time.perf_counter()
    say(
        f"[scrna] simulating {split}: {n_cells} cells x {dims['n_genes']} genes, "
        f"{dims['n_batches']} batches, {dims['n_types']} cell types ..."
    )
    full = simulate(
        n_cells=n_cells, n_genes=dims["n_genes"], n_batches=dims["n_batches"], n_types=dims["n_types"], seed=s
    )
    task_input, solution = split_for_task(full, seed=s)
    t1 = time.perf_counter()
    say(f"[scrna]   simulated in {t1 - t0:.1f} s; writing {split}_input.h5ad and {split}_solution.h5ad ...")
    _write_h5ad(task_input, directory / f"{split}_input.h5ad")
    _write_h5ad(solution, directory / f"{split}_solution.h5ad")
    say(f"[scrna]   written in {time.perf_counter() - t1:.1f} s")
    return {
        "n_cells": int(full.n_obs),
        "n_genes": int(full.n_vars),
        "n_batches": int(full.obs["batch"].nunique()),
        "n_cell_types": int(full.obs["cell_type"].nunique()),
        "batch_hvg": int(full.var["batch_hvg"].sum()),
        "nonzero_fraction": round(full.X.nnz / (full.n_obs * full.n_vars), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evaluators.scrna.simulate", description="Generate the simulated batch-integration datasets."
    )
    parser.add_argument("--out", default="data/scrna/generated", help="output directory")
    parser.add_argument("--size", choices=sorted(SIZES), default="default")
    parser.add_argument("--seed", type=int, default=0, help="seed of the train split")
    parser.add_argument(
        "--test-seed", type=int, default=None, help="seed of the test split (default: derived from --seed)"
    )
    parser.add_argument("--force", action="store_true", help="regenerate even if up to date")
    args = parser.parse_args(argv)
    make_datasets(
        args.out,
        size=args.size,
        seed=args.seed,
        test_seed=args.test_seed,
        force=args.force,
        log=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
