"""The offline scripted researcher's play on batch integration: it climbs from plain PCA through ComBat to a batch-balanced
kNN graph, varying their settings; now and then with a slip the debugger mends."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from ..base import SCRIPTED_TYPO_RATE

HERE = Path(__file__).parent


INTEGRATION_LADDER = [
    (
        "no_integration.py",
        "PCA of the normalized data ({pcs} components)",
        "pca, reference",
        "No correction: the principal components of the normalized expression, to see the batch effect.",
    ),
    (
        "combat.py",
        "ComBat, then PCA ({pcs} components)",
        "combat, linear-model",
        "Empirical-Bayes ComBat on the genes removes per-batch location and scale; then principal components.",
    ),
    (
        "bbknn_style.py",
        "Batch-balanced kNN, {k} neighbours per batch, {pcs} PCs",
        "bbknn, graph",
        "Every cell takes its nearest neighbours in each batch separately, so the graph mixes batches.",
    ),
]


def submission(seen: Any, rng: random.Random) -> dict[str, str]:
    level = min(seen.notes.get("bi_level", 0), len(INTEGRATION_LADDER) - 1)
    seen.notes["bi_level"] = level + 1
    name, title, tags, abstract = INTEGRATION_LADDER[level]
    pcs, k = rng.choice([20, 30, 40, 50]), rng.randint(3, 8)
    code = (HERE / "baselines" / name).read_text(encoding="utf-8")
    code = code.replace("n_comps=50", f"n_comps={pcs}").replace(
        "NEIGHBOURS_PER_BATCH = 4", f"NEIGHBOURS_PER_BATCH = {k}"
    )
    if rng.random() < SCRIPTED_TYPO_RATE:
        code = code.replace('adata.obsm["X_emb"]', 'adata.obsmm["X_emb"]', 1)  # a slip the debugger can mend
    return {"title": title.format(pcs=pcs, k=k), "tags": tags, "abstract": abstract, "content": code}
