"""What a station's agents did together, as tables and graphs (docs/study.md).

    from station.study import load
    study = load("runs/demo")            # pandas DataFrames: study.lives, .edges, .evaluations, ...
    study.metrics()["network"]           # the metrics, one DataFrame each (schema.METRIC_TABLES)
    study.graph(kinds={"mail"})          # a networkx MultiDiGraph of the agents

Everything is computed from the recorded world (station.db, opened read-only), so a replay or a fork of
a station gives the same tables, and nothing is asked of a model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from station.study.compare import compare
from station.study.schema import EDGE_KINDS, METRIC_TABLES, TABLES

if TYPE_CHECKING:
    import networkx as nx
    import pandas as pd

Progress = Callable[[str, int, int], None]  # (step, done, total): long work reports itself here

__all__ = ["EDGE_KINDS", "METRIC_TABLES", "TABLES", "Study", "compare", "load"]


@dataclass(eq=False)
class Study:
    """One station's tables (schema.TABLES) and, computed on first use, its metrics."""

    path: Path
    name: str
    first_tick: int
    last_tick: int
    window: int  # ticks per window of the windowed metrics
    lives: pd.DataFrame
    spend: pd.DataFrame
    edges: pd.DataFrame
    evaluations: pd.DataFrame
    texts: pd.DataFrame
    _metrics: dict[str, pd.DataFrame] | None = field(default=None, repr=False)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {name: getattr(self, name) for name in TABLES}

    def metrics(self, progress: Progress | None = None) -> dict[str, pd.DataFrame]:
        """Every table of schema.METRIC_TABLES, computed once."""
        if self._metrics is None:
            from station.study.metrics import compute

            self._metrics = compute(self, progress)
        return self._metrics

    def graph(
        self, kinds: Iterable[str] | None = None, first: int | None = None, last: int | None = None
    ) -> nx.MultiDiGraph:
        """The agents and their edges (one per act) of these kinds from tick `first` to `last`."""
        from station.study.network import graph

        return graph(self, kinds, first, last)


def load(
    path: str | Path,
    *,
    first: int | None = None,
    last: int | None = None,
    window: int | None = None,
    progress: Progress | None = None,
    tables: Iterable[str] | None = None,
) -> Study:
    """Read a station directory's tables (from tick `first` to `last`, default all; `tables`: only
    these of schema.TABLES, with what they are made from, the others empty)."""
    from station.study.tables import read_study

    return read_study(Path(path), first=first, last=last, window=window, progress=progress, tables=tables)
