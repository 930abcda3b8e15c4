"""The windows of the windowed metrics: `window` ticks each from the study's first tick; the last may be shorter."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from station.study import Study


def bounds(study: Study) -> list[tuple[int, int]]:
    """(first tick, last tick) of each window, in order; none when the study covers no tick."""
    width = max(1, study.window)
    starts = range(study.first_tick, study.last_tick + 1, width)
    return [(start, min(start + width - 1, study.last_tick)) for start in starts]


def starts(study: Study, ticks: pd.Series) -> np.ndarray:
    """The first tick of the window each tick falls in."""
    width = max(1, study.window)
    values = ticks.to_numpy(dtype="int64")
    return study.first_tick + (values - study.first_tick) // width * width
