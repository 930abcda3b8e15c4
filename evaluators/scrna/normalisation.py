"""How the ten raw metrics become the score (spec research §3.2, scoring step 3): each is mapped to
[0, 1] by a (min, max) pair, clamp((raw - min) / (max - min), 0, 1), a missing or NaN value counts
0 and min == max gives 1. The task parameter `normalisation` picks where the pairs come from:

- ``openproblems`` (the default, as in the paper): the fixed table of OpenProblems v2 control-method
  results that the paper used (data/scrna/openproblems_bounds.json), so that scores are on the
  paper's scale, for simulated and real data alike.
- ``controls``: the metrics of three control methods (no integration, a random embedding, a perfect
  cell-type embedding) on the same data, computed once per dataset (dataset.py) when the station
  prepares its tasks, before its first tick. Scores compare runs on one dataset, not with the paper's.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path

from .metrics import METRICS

NORMALISATIONS: tuple[str, ...] = ("controls", "openproblems")
BOUNDS_FILE = Path(__file__).resolve().parents[2] / "data" / "scrna" / "openproblems_bounds.json"


def choose_normalisation(requested: str | None) -> str:
    """`requested`, checked; when None, ``openproblems``."""
    if requested is None:
        return "openproblems"
    if requested not in NORMALISATIONS:
        raise ValueError(f"normalisation must be one of {', '.join(NORMALISATIONS)}; got {requested!r}")
    return requested


@functools.cache
def openproblems_bounds(path: Path = BOUNDS_FILE) -> dict[str, tuple[float, float]]:
    """The (min, max) of each metric from the shipped OpenProblems table."""
    stored = json.loads(path.read_text(encoding="utf-8"))["bounds"]
    missing = [m for m in METRICS if m not in stored]
    if missing:
        raise ValueError(f"{path} has no bounds for {', '.join(missing)}")
    return {m: (float(stored[m]["min"]), float(stored[m]["max"])) for m in METRICS}


def normalise(raw: Mapping[str, float | None], bounds: Mapping[str, tuple[float, float]]) -> dict[str, float]:
    """clamp((raw - min) / (max - min), 0, 1) for each of the ten metrics; a missing or NaN value is
    0; min == max gives 1."""
    out = {}
    for name in METRICS:
        value = raw.get(name)
        low, high = bounds[name]
        if value is None or not math.isfinite(value):
            out[name] = 0.0
        elif high == low:
            out[name] = 1.0
        else:
            out[name] = min(1.0, max(0.0, (value - low) / (high - low)))
    return out
