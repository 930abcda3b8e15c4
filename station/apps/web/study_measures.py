"""The study page's measures (station.study) over the page's window of ticks: the metrics per window
as small plots, a table of them whose counts link to the records counted, the window's totals, and
the interaction network (study_network) filtered by kind.

The study is read for the window only (`load(dir, first=, last=)`) and kept per (window, the station's
change mark) by study_cache, which computes a large station's in the background.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pandas as pd
from markupsafe import Markup

from station.apps.web import plots, study_cache, study_network
from station.apps.web.study_cache import Answer, Failed
from station.study import EDGE_KINDS, Study, load, windows

MAX_WINDOWS = 100  # windows a page may ask for: a smaller `window` is widened

# (metric table, column, title) of each small plot; the "acts" plot is drawn from the edges by kind
PANELS = [
    ("network", "density", "network density"),
    ("network", "reciprocity", "reciprocity"),
    ("network", "modularity", "modularity"),
    ("network", "cross_lineage_share", "cross-lineage share of acts"),
    ("acts", "", "acts per kind"),
    ("diversity", "diversity", "text diversity (1 − similarity)"),
    ("diversity", "directions", "research directions"),
    ("cost", "best_score", "best score"),
    ("cost", "cost_usd", "cost (USD)"),
]


def study_of(directory: Path, db: Any, first: int, last: int, window: int | None, *, wait: bool) -> Answer:
    """The study of ticks `first`–`last` with its metrics (see study_cache for when it is computed)."""
    if window is not None:
        window = max(window, -(-(last - first + 1) // MAX_WINDOWS))

    def compute() -> Study:
        found = load(directory, first=first, last=last, window=window)
        found.metrics()
        return found

    key = ("study", str(directory), first, last, window)
    return study_cache.get(key, f"the study of ticks {first}–{last}", db, compute, wait=wait)


def tables_of(directory: Path, db: Any, first: int, last: int, *, wait: bool) -> Answer:
    """A study whose tables cover ticks `first`–`last`: one kept (a list opened from the page reuses
    the page's study), else the study of exactly those ticks."""

    def covers(key: Any, study: Study) -> bool:
        return key[:2] == ("study", str(directory)) and study.first_tick <= first and last <= study.last_tick

    kept = study_cache.find(covers, db)
    if kept is not None:
        return Answer(kept, None, True, None)
    return study_of(directory, db, first, last, None, wait=wait)


def acts_per_kind(study: Study) -> dict[str, list[tuple[float, float]]]:
    """kind -> (window start, acts) over every window of the study (0 where a kind had none)."""
    edges = study.edges
    if edges.empty:
        return {}
    counts = edges.groupby([windows.starts(study, edges["tick"]), edges["kind"].to_numpy()]).size()
    present = set(edges["kind"])
    return {
        kind: [(float(start), float(counts.get((start, kind), 0))) for start, _ in windows.bounds(study)]
        for kind in EDGE_KINDS
        if kind in present
    }


def metric_plots(study: Study) -> Markup:
    """The small multiples: one plot per measure, x the window's first tick."""
    metrics = study.metrics()
    figures = []
    for table, column, title in PANELS:
        if table == "acts":
            series = acts_per_kind(study)
            colours: Any = study_network.KIND_COLOURS
        else:
            frame = metrics[table]
            series = {column: _points(frame, "window_start", column)} if column in frame else {}
            colours = None
        plot = plots.line_plot(
            series,
            x_label="first tick of the window",
            y_label=title,
            svg_id=f"metric-{column or table}",
            width=400,
            height=230,
            colours=colours,
            css_class="plot metric-plot",
            x_range=(study.first_tick, study.last_tick),
        )
        figures.append(f"<figure class='metric'><figcaption>{title}</figcaption>{plot}</figure>")
    return Markup("<div class='metric-plots' id='metric-plots'>" + "".join(figures) + "</div>")


def _points(frame: pd.DataFrame, x: str, y: str) -> list[tuple[float, float]]:
    values = frame[[x, y]].astype("float64").dropna()
    return list(zip(values[x].tolist(), values[y].tolist()))


def link(path: str, **query: Any) -> str:
    """An address of the viewer with the query's set values (order kept, so each view has one address)."""
    kept = {k: v for k, v in query.items() if v not in (None, "")}
    return path + ("?" + urlencode(kept, doseq=True) if kept else "")


def window_rows(study: Study) -> list[dict[str, Any]]:
    """A row per window: its measures, and where the records its counts count are listed."""
    metrics = study.metrics()
    network = metrics["network"].set_index("window_start")
    diversity = metrics["diversity"].set_index("window_start")
    cost = metrics["cost"].set_index("window_start")
    rows = []
    for start, end in windows.bounds(study):
        net = network.loc[start] if start in network.index else None
        div = diversity.loc[start] if start in diversity.index else None
        spent = cost.loc[start] if start in cost.index else None
        rows.append(
            {
                "first": start,
                "last": end,
                "page": link("/study/measures", first=start, last=end),
                "acts": int(net["acts"]) if net is not None else 0,
                "acts_href": link("/study/edges", first=start, last=end),
                "nodes": int(net["nodes"]) if net is not None else 0,
                "density": _number(net, "density"),
                "reciprocity": _number(net, "reciprocity"),
                "modularity": _number(net, "modularity"),
                "cross_lineage": _number(net, "cross_lineage_share"),
                "texts": int(div["texts"]) if div is not None else 0,
                "texts_href": link("/study/texts", first=start, last=end),
                "diversity": _number(div, "diversity"),
                "directions": _number(div, "directions"),
                "cost": _number(spent, "cost_usd"),
            }
        )
    return rows


def _number(row: pd.Series | None, column: str) -> float | None:
    if row is None or column not in row or pd.isna(row[column]):
        return None
    return float(row[column])


def totals(study: Study) -> list[dict[str, Any]]:
    """The window's counts, each with the address of the list of the records it counts."""
    first, last = study.first_tick, study.last_tick
    edges, texts, evaluations = study.edges, study.texts, study.evaluations
    rows = [
        {"what": "agents alive", "count": len(study.lives), "href": link("/study/lives", first=first, last=last)},
        {"what": "acts between agents", "count": len(edges), "href": link("/study/edges", first=first, last=last)},
    ]
    by_kind = edges["kind"].value_counts()
    for kind in EDGE_KINDS:
        if by_kind.get(kind, 0):
            rows.append(
                {
                    "what": f"· {kind}",
                    "count": int(by_kind[kind]),
                    "href": link("/study/edges", kind=kind, first=first, last=last),
                }
            )
    rows.append({"what": "texts written", "count": len(texts), "href": link("/study/texts", first=first, last=last)})
    for kind, count in texts["kind"].value_counts().sort_index().items():
        rows.append(
            {"what": f"· {kind}", "count": int(count), "href": link("/study/texts", kind=kind, first=first, last=last)}
        )
    rows.append(
        {
            "what": "evaluations submitted",
            "count": len(evaluations),
            "href": link("/research", **{"from": first, "to": last}),
        }
    )
    return rows


def measures(
    directory: Path, db: Any, first: int, last: int, window: int | None, kinds: list[str], *, wait: bool
) -> dict[str, Any]:
    """The study page's measures over ticks `first`–`last`, or what stands in for them: why not yet."""
    answer = study_of(directory, db, first, last, window, wait=wait)
    chosen = [kind for kind in EDGE_KINDS if kind in kinds] or list(EDGE_KINDS)
    state = {"asked_window": window, "kinds": EDGE_KINDS, "chosen_kinds": chosen, "computing": answer.computing}
    if answer.value is None:
        return {**state, "measured": False, "window": window or ""}
    if isinstance(answer.value, Failed):
        return {**state, "measured": False, "window": window or "", "study_error": answer.value.error}
    study: Study = answer.value
    svg, note = study_network.network_svg(study.graph(kinds=chosen, first=study.first_tick, last=study.last_tick))
    return {
        **state,
        "measured": True,
        "as_of": None if answer.fresh else answer.tick,
        "window": study.window,
        "metric_plots": metric_plots(study),
        "windows": window_rows(study),
        "totals": totals(study),
        "network": svg,
        "network_note": note,
    }
