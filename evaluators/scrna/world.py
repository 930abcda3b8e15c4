"""The simulated world of the batch-integration data, drawn from the world seed (the generative
model is described in simulate.py): gene names, baseline expression and dispersion, the cell-type
hierarchy and its programmes, the cell-state programmes (stress, cell cycle), the batch effects and
each batch's cell-type composition. It does not depend on the number of cells."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

S_GENES: tuple[str, ...] = tuple(f"S_GENE_{i:02d}" for i in range(1, 43))
G2M_GENES: tuple[str, ...] = tuple(f"G2M_GENE_{i:02d}" for i in range(1, 49))


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


@dataclass
class World:
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


def _size(n_genes: int, frac: float, least: int) -> int:
    """The size of a gene set: `frac` of the genes, at least `least`."""
    return max(least, int(round(frac * n_genes)))


def make_world(rng: np.random.Generator, n_genes: int, n_batches: int, types: tuple[CellType, ...]) -> World:
    """The world for `types` on `n_genes` genes and `n_batches` batches; its parts are drawn in a fixed order."""
    names, s_idx, g2m_idx, other, base, phi = _genes(rng, n_genes)
    type_lfc, latent_w, stress_lfc, s_lfc, g2m_lfc = _programmes(rng, n_genes, types, s_idx, g2m_idx, other)
    batch_lfc, batch_type_lfc, depth, depth_sd, dropout, dropout_mid, stress = _batch_effects(
        rng, n_genes, n_batches, len(types)
    )
    share, comp = _composition(rng, n_batches, types)
    return World(
        names,
        s_idx,
        g2m_idx,
        base,
        phi,
        type_lfc,
        latent_w,
        stress_lfc,
        s_lfc,
        g2m_lfc,
        batch_lfc,
        batch_type_lfc,
        depth,
        depth_sd,
        dropout,
        dropout_mid,
        stress,
        share,
        comp,
    )


def _genes(
    rng: np.random.Generator, G: int
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Gene names in a shuffled order (the cell-cycle genes among them), baseline log-means, overdispersion."""
    n_cc = len(S_GENES) + len(G2M_GENES)
    perm = rng.permutation(G)
    s_idx, g2m_idx = np.sort(perm[: len(S_GENES)]), np.sort(perm[len(S_GENES) : n_cc])
    other = np.sort(perm[n_cc:])

    names = [""] * G
    for i, g in enumerate(perm[: len(S_GENES)]):
        names[g] = S_GENES[i]
    for i, g in enumerate(perm[len(S_GENES) : n_cc]):
        names[g] = G2M_GENES[i]
    width = max(4, len(str(len(other))))
    for k, g in enumerate(other):
        names[g] = f"GENE_{k + 1:0{width}d}"

    base = rng.normal(0.0, 1.6, G)
    base[s_idx] = rng.normal(-0.3, 0.7, len(s_idx))
    base[g2m_idx] = rng.normal(-0.3, 0.7, len(g2m_idx))
    phi = np.exp(rng.normal(np.log(0.25), 0.5, G))
    return names, s_idx, g2m_idx, other, base, phi


def _programmes(
    rng: np.random.Generator,
    G: int,
    types: tuple[CellType, ...],
    s_idx: np.ndarray,
    g2m_idx: np.ndarray,
    other: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Log-fold changes of the cell types (lineage, branch, shared and marker programmes), the
    within-type latent loadings, the stress programme and the S and G2/M programmes. Kept whole:
    its draws from `rng` come in one fixed order, which the shipped data depends on."""
    T = len(types)

    def size(frac: float, least: int) -> int:
        return _size(G, frac, least)

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
    return type_lfc, latent_w, stress_lfc, s_lfc, g2m_lfc


def _batch_effects(rng: np.random.Generator, G: int, B: int, T: int) -> tuple[np.ndarray, ...]:
    """Per batch: gene and batch-by-type log-fold changes, library depth, zero inflation, stress level."""
    batch_lfc = rng.normal(0.0, 0.12, (B, G))
    for b in range(B):
        strong = _pick(rng, np.arange(G), _size(G, 0.06, 3))
        batch_lfc[b, strong] += rng.choice([-1.0, 1.0], len(strong)) * rng.uniform(0.7, 2.0, len(strong))
    batch_type_lfc = rng.normal(0.0, 0.04, (B, T, G))
    depth = G * np.exp(rng.permutation(np.linspace(np.log(0.45), np.log(2.2), B)) + rng.normal(0.0, 0.1, B))
    depth_sd = rng.uniform(0.3, 0.55, B)
    dropout = np.clip(rng.permutation(np.linspace(0.03, 0.35, B)) + rng.normal(0.0, 0.02, B), 0.0, 0.5)
    dropout_mid = np.log(rng.uniform(0.5, 2.0, B))
    stress = rng.permutation(np.linspace(0.1, 0.8, B))
    return batch_lfc, batch_type_lfc, depth, depth_sd, dropout, dropout_mid, stress


def _composition(rng: np.random.Generator, B: int, types: tuple[CellType, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each batch's share of the cells, and its cell-type proportions (zero for the types it lacks)."""
    T = len(types)
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
    return share, comp
