"""The offline scripted researcher's play on RNA modelling: it tunes the Vanilla MLP, then gives it a
convolution so that it sees motifs instead of single letters."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
DENSE = "h = nn.Dense(self.hidden)(x)  # (batch, length, hidden): the same weights at every position"
CONV = "h = nn.Conv(self.hidden, kernel_size=(9,))(x)  # (batch, length, hidden): motifs of up to 9 nt"


def submission(seen: Any, rng: random.Random) -> dict[str, str]:
    level = seen.notes["rna_level"] = seen.notes.get("rna_level", 0) + 1
    hidden, lr = rng.choice([128, 256, 512]), rng.choice([3e-4, 1e-3, 3e-3])
    code = (HERE / "baselines" / "vanilla_mlp.py").read_text(encoding="utf-8")
    code = code.replace(
        '{"learning_rate": 1e-3, "hidden_dim": 512, "dropout": 0.1}',
        f'{{"learning_rate": {lr}, "hidden_dim": {hidden}, "dropout": 0.1}}',
    )
    if level > 1:  # from the second try on: a 9-nt convolution in place of the per-position layer
        code = code.replace(DENSE, CONV)
        title, tags = f"Convolutional MLP, 9-nt filters ({hidden} units, lr {lr:g})", "cnn, motifs"
        abstract = "The Vanilla MLP's per-position layer becomes a 9-nt convolution, so it can detect motifs."
    else:
        title, tags = f"Vanilla MLP, {hidden} units, lr {lr:g}", "mlp, baseline-variant"
        abstract = "The baseline's per-position MLP with a different width and learning rate."
    return {"title": title, "tags": tags, "abstract": abstract, "content": code}
