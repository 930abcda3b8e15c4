"""Several stations side by side: each summary metric per station, with its mean and a 95% confidence
interval across them (docs/study.md).

The interval is the mean plus or minus t * sd / sqrt(n), with t the 97.5% quantile of Student's t with
n - 1 degrees of freedom and sd the sample standard deviation: the stations are taken as n independent
draws (seeds, forks, configs) of one process. A station whose metric is missing is left out of its n.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from station.study import Study

STATS = ("n", "mean", "sd", "ci_low", "ci_high")
CONFIDENCE = 0.95


def unique_names(names: Iterable[str], reserved: Iterable[str] = ()) -> list[str]:
    """The names made safe as folder names and unique, in order ("seed", "seed" -> "seed", "seed-2"),
    none of them one of `reserved` (the files beside them)."""
    taken, out = set(reserved), []
    for name in names:
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".") or "station"
        label, n = base, 1
        while label in taken:
            n += 1
            label = f"{base}-{n}"
        taken.add(label)
        out.append(label)
    return out


def compare(studies: Sequence[Study], names: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per summary metric (in the first station's order, then any the others add): its value
    at each station (a column per station, named by `names` or the stations' unique names), then n,
    mean, sd, ci_low, ci_high and the metric's meaning."""
    labels = list(names) if names is not None else unique_names(s.name for s in studies)
    if len(labels) != len(studies) or len(set(labels)) != len(labels):
        raise ValueError("compare needs one distinct name per station")
    return compare_summaries({label: study.metrics()["summary"] for label, study in zip(labels, studies)})


def compare_summaries(summaries: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """compare() from the stations' summary tables (schema.SUMMARY), by station name."""
    import pandas as pd

    values: dict[str, pd.Series] = {}
    meanings: dict[str, str] = {}
    for label, summary in summaries.items():
        values[label] = pd.Series(summary["value"].to_numpy(dtype=float), index=summary["metric"].astype(str))
        for metric, meaning in zip(summary["metric"], summary["meaning"]):
            meanings.setdefault(str(metric), "" if pd.isna(meaning) else str(meaning))
    table = pd.DataFrame(values, index=pd.Index(list(meanings), name="metric"), dtype=float)
    stats = [_stats(row.dropna().tolist()) for _, row in table.iterrows()]
    for index, column in enumerate(STATS):
        table[column] = [s[index] for s in stats]
    table["n"] = table["n"].astype("int64")
    table["meaning"] = pd.array([meanings[m] for m in table.index], dtype="string")
    return table.reset_index()


def _stats(values: list[float]) -> tuple[float, float, float, float, float]:
    """(n, mean, sd, ci_low, ci_high) of finite values; sd and the interval are NaN below two values."""
    from scipy.stats import t

    finite = [v for v in values if math.isfinite(v)]
    n = len(finite)
    if n == 0:
        return 0, math.nan, math.nan, math.nan, math.nan
    mean = sum(finite) / n
    if n < 2:
        return n, mean, math.nan, math.nan, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in finite) / (n - 1))
    half = float(t.ppf((1 + CONFIDENCE) / 2, n - 1)) * sd / math.sqrt(n)
    return n, mean, sd, mean - half, mean + half
