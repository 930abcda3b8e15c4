"""The forecasting scorer's mode: the station cuts each scored window out of the frames, runs the
exported network on its inputs (one window per call) and sends back only the summed absolute
errors per forecast step, per scored split.

Runs in the scoring sandbox (scoring.py), which executes none of the submission's Python: the
targets are safe beside the inputs there, since the exported function sees one window's inputs
per call and nothing else. Sums instead of predictions keep the result a few hundred bytes
whatever the data's size, so every window and every neuron of the real ZAPBench arrays is scored.

    scoring_data/frames.npy  (frames, neurons) float32, each window's 4 inputs and 32 targets in a row
    scoring_data/starts.npy  (windows,) the first frame of each window
    scoring_data/group.npy   (windows,) which scored split each window belongs to (0: val, 1: test)

Outputs: `abs_error` (groups, HORIZON) float64, the sum over windows and neurons of |prediction −
target| per step; `windows` (groups,) how many windows each sum holds; `nonfinite` how many
predicted values were NaN or infinite (their windows' errors are not summed).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .windows import CONTEXT, HORIZON, gather

CHUNK_BYTES = 64 << 20  # one chunk's targets and errors


def score_windows(exported: Any, settings: dict[str, Any], data: str) -> Callable[[list[Any]], dict[str, Any]]:
    import jax
    import numpy as np

    frames = np.load(os.path.join(data, "frames.npy"), mmap_mode="r")
    starts = np.load(os.path.join(data, "starts.npy"))
    groups = np.load(os.path.join(data, "group.npy"))
    n_groups = int(settings["groups"])
    chunk = max(1, min(len(starts), int(settings.get("chunk") or CHUNK_BYTES // (HORIZON * frames.shape[1] * 8))))

    def one(leaves, window):
        return jax.tree_util.tree_leaves(exported.call(*leaves, window))[0]

    every = jax.jit(lambda leaves, windows: jax.lax.map(lambda window: one(leaves, window), windows))

    def score(leaves: list[Any]) -> dict[str, Any]:
        sums = np.zeros((n_groups, HORIZON))
        counts = np.zeros(n_groups, dtype=np.int64)
        nonfinite = 0
        for first in range(0, len(starts), chunk):
            x, y = gather(frames, starts[first : first + chunk], CONTEXT, HORIZON)
            n = len(x)
            if n < chunk:  # padded, so that one compiled call serves every chunk
                x = np.concatenate([x, np.zeros((chunk - n, *x.shape[1:]), x.dtype)])
            predicted = np.asarray(every(leaves, x))[:n]
            finite = np.isfinite(predicted).all(axis=(1, 2))
            nonfinite += int(predicted.size - np.isfinite(predicted).sum())
            error = np.abs(np.subtract(predicted, y, dtype=np.float64)).sum(axis=2)  # (n, HORIZON)
            group = groups[first : first + n]
            np.add.at(sums, group[finite], error[finite])
            counts += np.bincount(group[finite], minlength=n_groups)
        return {"abs_error": sums, "windows": counts, "nonfinite": np.array(nonfinite, dtype=np.int64)}

    return score
