"""Forecasting windows: which frames may form one (context + horizon) window, how to cut them out,
and the per-step error. Shared by the trusted scorer and the training harness inside a run, so it
imports numpy only (inside a run the `evaluators` package is not importable).

A window is CONTEXT input frames followed by HORIZON target frames, all consecutive and all of one
experimental condition: a change of label between two frames, or an end of the array (a split
boundary), may not fall inside it.
"""

from __future__ import annotations

import numpy as np

CONTEXT = 4
HORIZON = 32
HORIZONS_REPORTED = (1, 4, 8, 16, 32)


def window_starts(labels: np.ndarray, context: int = CONTEXT, horizon: int = HORIZON) -> np.ndarray:
    """Every start s whose frames s .. s+context+horizon-1 carry one label, in increasing order."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"condition labels must be one-dimensional, got shape {labels.shape}")
    if context < 1 or horizon < 1:
        raise ValueError(f"context and horizon must be positive, got {context} and {horizon}")
    length = context + horizon
    n = labels.shape[0]
    if n < length:
        return np.zeros(0, dtype=np.int64)
    # changes[i] = number of label changes among frames 0..i; a window holds no change exactly
    # when the count at its last frame equals the count at its first.
    changes = np.concatenate([[0], np.cumsum(labels[1:] != labels[:-1])])
    first = np.arange(n - length + 1)
    return first[changes[first + length - 1] == changes[first]].astype(np.int64)


def gather(
    data: np.ndarray, starts: np.ndarray, context: int = CONTEXT, horizon: int = HORIZON
) -> tuple[np.ndarray, np.ndarray]:
    """The windows at `starts` of a (frames, neurons) array: x (B, context, N), y (B, horizon, N),
    float32. Reads only the rows it needs, so `data` may be a memory-mapped array."""
    if data.ndim != 2:
        raise ValueError(f"data must be (frames, neurons), got shape {data.shape}")
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    length = context + horizon
    if starts.size and (starts.min() < 0 or starts.max() > data.shape[0] - length):
        raise ValueError(f"window starts must lie in 0..{data.shape[0] - length} for {data.shape[0]} frames")
    rows = (starts[:, None] + np.arange(length)).reshape(-1)
    block = np.asarray(data[rows], dtype=np.float32).reshape(len(starts), length, data.shape[1])
    return block[:, :context], block[:, context:]


def mae_by_horizon(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Mean absolute error per forecast step of (B, horizon, N) arrays: shape (horizon,), float64."""
    pred, target = np.asarray(pred), np.asarray(target)
    if pred.shape != target.shape or pred.ndim != 3:
        raise ValueError(
            f"pred and target must both be (windows, horizon, neurons); got {pred.shape} and {target.shape}"
        )
    error = np.subtract(pred, target, dtype=np.float64)  # one float64 array, no float32 round-off
    np.abs(error, out=error)
    return error.mean(axis=(0, 2))
