"""What a training run says about itself, made plain and small before the scorer reads it.

A trial's returned value (its epochs, seconds, hyperparameters, training curve, devices) is the
run's claim: shown beside the station's own measurement, never scored. The run may have written
it itself, skipping the harness, so it may hold arrays where numbers belong, long texts, deep
nesting. `claims` keeps plain JSON data only (numbers, text, lists, dicts with text keys), within
bounds, so that formatting it (json.dumps, f-strings, truth tests) can neither fail nor grow.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

MAX_CURVE_POINTS = 2000  # per learning curve in a figure: enough to draw, small in the payload
MAX_TEXT = 500  # characters of one text
MAX_KEYS = 64  # entries of one dict
MAX_DEPTH = 6
MAX_LIST = 100_000  # items of one list kept as they are; a longer one is thinned to MAX_CURVE_POINTS
MAX_VALUES = 200_000  # values kept in all; the rest are None


def claims(value: Any) -> dict[str, Any] | None:
    """The run's value as plain, bounded JSON data, or None when it is not a dict."""
    if not isinstance(value, dict):
        return None
    made = _plain(value, 0, [MAX_VALUES])
    return made if isinstance(made, dict) else None


def _plain(value: Any, depth: int, left: list[int]) -> Any:
    """`value` as plain data; `left[0]`: how many more values may be kept (None once it is spent)."""
    left[0] -= 1
    if left[0] < 0:
        return None
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    if hasattr(value, "ndim") and hasattr(value, "item"):  # a numpy array or scalar
        if value.ndim == 0:
            return _plain(value.item(), depth, left)
        value = [value[i] for i in _kept(len(value))]
    if depth >= MAX_DEPTH:
        return None
    if isinstance(value, dict):
        return {str(k)[:MAX_TEXT]: _plain(v, depth + 1, left) for k, v in list(value.items())[:MAX_KEYS]}
    if isinstance(value, (list, tuple)):
        return [_plain(value[i], depth + 1, left) for i in _kept(len(value))]
    return None


def _kept(count: int) -> list[int]:
    return list(range(count)) if count <= MAX_LIST else thin_indices(count, MAX_CURVE_POINTS)


def thin_indices(count: int, limit: int) -> list[int]:
    """At most `limit` indices into `count` items, evenly spread, the first and last kept."""
    if count <= limit:
        return list(range(count))
    return [round(i * (count - 1) / (limit - 1)) for i in range(limit)]
