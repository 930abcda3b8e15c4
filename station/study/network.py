"""The interaction network: a networkx graph of the agents, and its measures per window of ticks.

The measures look at agents only: edges from or to the reviewer ("Archive Review System") and the
task baselines ("System") are left out (a review then only counts among the acts). Each window's
graph is the simple directed graph of distinct (source, target) pairs: many mails from A to B are one
edge. Reciprocity, degrees, betweenness (Brandes 2001; estimated above PIVOTS agents) and Louvain
communities (Blondel et al. 2008) come from igraph, whose C code takes milliseconds where networkx's
Python takes seconds on a 1,000-agent window; tests hold them to networkx's definitions. Louvain
runs on the undirected graph with a fixed seed, so the same tables give the same communities.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np
import pandas as pd

from station.study import windows

if TYPE_CHECKING:  # igraph is imported where a graph is measured: ~0.5 CPU-s for whoever only imports this
    import igraph as ig

    from station.study import Study

NON_AGENTS = frozenset({"Archive Review System", "System"})
SEED = 53  # Louvain's random node order and the betweenness pivots
PIVOTS = 300  # above this many agents in a graph, betweenness is estimated from this many sources


def graph(study: Study, kinds: Iterable[str] | None, first: int | None, last: int | None) -> nx.MultiDiGraph:
    """Nodes: the agents alive in the range and every end of its edges (lineage, session, generation
    when known); edges: one per act of these kinds (kind, tick, record, detail)."""
    edges = select(study.edges, kinds, first, last)
    lo = study.first_tick if first is None else first
    hi = study.last_tick if last is None else last
    lives = study.lives
    alive = lives[(lives["birth_tick"] <= hi) & ~(lives["end_tick"].fillna(hi) < lo)]
    out = nx.MultiDiGraph()
    for life in alive.sort_values("session").itertuples(index=False):
        out.add_node(life.agent, **_known(lineage=life.lineage, session=life.session, generation=life.generation))
    for row in edges.itertuples(index=False):
        out.add_edge(
            row.source,
            row.target,
            kind=row.kind,
            tick=int(row.tick),
            record=_text(row.record),
            detail=_text(row.detail),
        )
    return out


def select(edges: pd.DataFrame, kinds: Iterable[str] | None, first: int | None, last: int | None) -> pd.DataFrame:
    """The edge rows of these kinds (all when None) from tick `first` to `last` (inclusive)."""
    keep = pd.Series(True, index=edges.index)
    if kinds is not None:
        keep &= edges["kind"].isin(list(kinds))
    if first is not None:
        keep &= edges["tick"] >= first
    if last is not None:
        keep &= edges["tick"] <= last
    return edges[keep]


def agent_edges(edges: pd.DataFrame) -> pd.DataFrame:
    """The rows between two agents (neither the reviewer nor System)."""
    return edges[~edges["source"].isin(NON_AGENTS) & ~edges["target"].isin(NON_AGENTS)]


def crossing(edges: pd.DataFrame) -> pd.Series:
    """For each act whose both ends have a lineage: whether the two lineages differ (others dropped)."""
    both = edges[edges["source_lineage"].notna() & edges["target_lineage"].notna()]
    return (both["source_lineage"] != both["target_lineage"]).astype(bool)


def cross_lineage_share(edges: pd.DataFrame) -> float:
    """Share of acts across two lineages among acts whose both ends have one (NaN: no such act)."""
    found = crossing(edges)
    return float(found.mean()) if len(found) else float("nan")


def measure(pairs: pd.DataFrame, *, with_betweenness: bool = True) -> tuple[dict[str, Any], pd.DataFrame]:
    """The measures of one simple directed graph given as distinct (source, target) rows: the
    network row's values and one centrality row per agent (agent, in/out degree, degree centrality,
    betweenness, community), agents in name order. Betweenness is left missing on request (the
    whole range of a big station: 40,000 lives, 500,000 pairs)."""
    import igraph as ig

    named = [pairs[end].to_numpy(dtype=object) for end in ("source", "target")]
    agents = np.union1d(*named).tolist()  # sorted
    n, m = len(agents), len(pairs)
    nan = float("nan")
    row: dict[str, Any] = {
        "nodes": n,
        "edges": m,
        "density": m / (n * (n - 1)) if n > 1 else nan,
        "reciprocity": nan,
        "mean_degree_centrality": nan,
        "max_betweenness": nan,
        "communities": 0,
        "modularity": nan,
    }
    if n == 0:
        return row, pd.DataFrame(
            columns=["agent", "in_degree", "out_degree", "degree_centrality", "betweenness", "community"]
        )
    index = pd.Index(agents)
    ends = np.column_stack([index.get_indexer(values) for values in named])
    directed = ig.Graph(n=n, edges=ends.tolist(), directed=True)
    degrees = np.asarray(directed.indegree()) + np.asarray(directed.outdegree())
    membership, modularity = _louvain(directed)
    centrality = pd.DataFrame(
        {
            "agent": agents,
            "in_degree": directed.indegree(),
            "out_degree": directed.outdegree(),
            "degree_centrality": degrees / (n - 1),  # n > 1: an edge joins two agents
            "betweenness": betweenness(directed) if with_betweenness else nan,
            "community": membership,
        }
    )
    row["reciprocity"] = directed.reciprocity() if m else nan
    row["mean_degree_centrality"] = float(centrality["degree_centrality"].mean())
    row["max_betweenness"] = float(centrality["betweenness"].max())
    row["communities"] = int(max(membership) + 1)
    row["modularity"] = modularity
    return row, centrality


def betweenness(directed: ig.Graph) -> np.ndarray:
    """Normalised directed betweenness, as networkx's betweenness_centrality(normalized=True):
    exact up to PIVOTS agents; above, estimated from the shortest paths of PIVOTS source agents drawn
    with a fixed seed, scaled by n / PIVOTS (Brandes & Pich 2007, networkx's `k`)."""
    n = directed.vcount()
    if n <= 2:
        return np.zeros(n)
    scale = 1.0 / ((n - 1) * (n - 2))
    if n <= PIVOTS:
        return np.asarray(directed.betweenness(directed=True), dtype=float) * scale
    sources = sorted(random.Random(SEED).sample(range(n), PIVOTS))
    found = directed.betweenness(directed=True, sources=sources, targets=None)
    return np.asarray(found, dtype=float) * scale * n / PIVOTS


def _louvain(directed: ig.Graph) -> tuple[list[int], float]:
    """Louvain on the undirected simple graph (seeded); communities numbered by size, largest 0
    (ties: the one holding the earliest agent first), and the partition's modularity (Newman 2006)."""
    import igraph as ig

    undirected = directed.as_undirected(mode="collapse")
    ig.set_random_number_generator(random.Random(SEED))  # igraph's generator is global: set it back after
    try:
        found = undirected.community_multilevel()
    finally:
        ig.set_random_number_generator(random)
    groups = sorted(found, key=lambda members: (-len(members), min(members)))
    membership = [0] * directed.vcount()
    for number, members in enumerate(groups):
        for vertex in members:
            membership[vertex] = number
    modularity = undirected.modularity(membership) if undirected.ecount() else float("nan")
    return membership, float(modularity)


def windowed(study: Study) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The network table (a row per window) and the centrality table (a row per agent and window)."""
    edges = study.edges
    starts = windows.starts(study, edges["tick"]) if len(edges) else np.zeros(0, dtype="int64")
    edges = edges.assign(window_start=starts)
    acts = edges.groupby("window_start").size()
    between = agent_edges(edges)
    pairs = between[["window_start", "source", "target"]].drop_duplicates()
    by_window = dict(tuple(pairs.groupby("window_start")))
    crossed = crossing(between).groupby(between["window_start"]).mean()
    lineage = _lineage_of(study)
    rows, centralities = [], []
    for start, end in windows.bounds(study):
        row, centrality = measure(by_window.get(start, pairs.iloc[0:0]))
        row.update(
            window_start=start,
            window_end=end,
            acts=int(acts.get(start, 0)),
            cross_lineage_share=float(crossed.get(start, float("nan"))),
        )
        rows.append(row)
        centrality.insert(0, "window_start", start)
        centrality.insert(2, "lineage", centrality["agent"].map(lineage))
        centralities.append(centrality)
    network = pd.DataFrame(rows)
    filled = [table for table in centralities if len(table)]
    centrality = pd.concat(filled, ignore_index=True) if filled else pd.DataFrame()
    return network, centrality


def whole(study: Study) -> dict[str, Any]:
    """The network measures over the whole range at once (for the summary)."""
    between = agent_edges(study.edges)
    row, _ = measure(between[["source", "target"]].drop_duplicates(), with_betweenness=False)
    row["acts"] = len(study.edges)
    row["cross_lineage_share"] = cross_lineage_share(between)
    return row


def _lineage_of(study: Study) -> pd.Series:
    lives = study.lives.dropna(subset=["lineage"])
    return pd.Series(lives["lineage"].to_numpy(), index=lives["agent"].to_numpy())


def _known(**values: Any) -> dict[str, Any]:
    """The attributes that are not missing, as plain Python values (GraphML refuses None)."""
    known = {}
    for key, value in values.items():
        if value is not None and not pd.isna(value):
            known[key] = value.item() if hasattr(value, "item") else value
    return known


def _text(value: Any) -> str:
    return "" if value is None or pd.isna(value) else str(value)
