"""The study's metrics (station/study/metrics.py and its families) on studies whose right values are
known by construction: hand-written tables, then a small hand-built station read through load()."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import networkx as nx
import pandas as pd
import pytest

from station.study import Study
from station.study.metrics import compute, typed
from station.study.network import measure
from station.study.schema import METRIC_TABLES, TABLES

# --- hand-written studies ---------------------------------------------------------------------------------


def study(*, first: int = 1, last: int = 10, window: int = 10, **tables: list[dict[str, Any]]) -> Study:
    """A Study from rows given as dicts (missing columns are missing values; lives' counters default)."""
    defaults = {
        "lives": {
            "turns": 0,
            "rooms_visited": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0,
            "kind": "recursive",
        },
        "spend": {"calls": 1, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0},
        "evaluations": {"task": "t", "status": "finished"},
        "texts": {"kind": "forum"},
        "edges": {},
    }
    frames = {}
    for name, columns in TABLES.items():
        rows = [{**defaults[name], **row} for row in tables.get(name, [])]
        frames[name] = typed(pd.DataFrame(rows), columns)
    return Study(path=Path("."), name="hand", first_tick=first, last_tick=last, window=window, **frames)


def life(
    session: int, agent: str, lineage: str | None = None, generation: int | None = None, **rest: Any
) -> dict[str, Any]:
    row = {
        "session": session,
        "agent": agent,
        "lineage": lineage,
        "generation": generation,
        "birth_tick": 1,
        "ticks_alive": 10,
    }
    return {**row, **rest}


LIVES = [life(1, "A", "L1", 1), life(2, "B", "L2", 1), life(3, "C", "L2", 2)]
SESSION = {"A": 1, "B": 2, "C": 3, "D": 4, "E": 5, "F": 6}


def edge(source: str, target: str, tick: int = 1, kind: str = "mail", **rest: Any) -> dict[str, Any]:
    lineage = {life["agent"]: life["lineage"] for life in LIVES}
    row = {
        "tick": tick,
        "kind": kind,
        "source": source,
        "target": target,
        "source_session": SESSION.get(source),
        "target_session": SESSION.get(target),
        "source_lineage": lineage.get(source),
        "target_lineage": lineage.get(target),
        "record": f"mail/{tick}#1",
    }
    return {**row, **rest}


def summary(metrics: dict[str, pd.DataFrame]) -> dict[str, float]:
    return dict(zip(metrics["summary"]["metric"], metrics["summary"]["value"], strict=True))


# --- network ----------------------------------------------------------------------------------------------


def test_a_mail_cycle_has_density_one_half_no_reciprocity_and_known_betweenness() -> None:
    cycle = study(lives=LIVES, edges=[edge("A", "B"), edge("B", "C"), edge("C", "A"), edge("C", "A", tick=2)])
    metrics = compute(cycle)
    row = metrics["network"].iloc[0]
    assert (row["nodes"], row["edges"], row["acts"]) == (3, 3, 4)
    assert row["density"] == 0.5 and row["reciprocity"] == 0
    # each agent lies on one of the two-step paths (C->A->B, A->B->C, B->C->A): 1 / ((3-1)(3-2))
    assert row["max_betweenness"] == 0.5
    assert list(metrics["centrality"]["betweenness"]) == [0.5, 0.5, 0.5]
    assert list(metrics["centrality"]["degree_centrality"]) == [1.0, 1.0, 1.0]
    # A (L1) <-> B, C (L2): A->B and both C->A cross; B->C does not
    assert row["cross_lineage_share"] == 3 / 4


def test_a_mutual_pair_has_reciprocity_one_and_the_reviewer_counts_only_among_acts() -> None:
    review = edge("Archive Review System", "A", kind="review", record="paper/1")
    metrics = compute(study(lives=LIVES, edges=[edge("A", "B"), edge("B", "A"), review]))
    row = metrics["network"].iloc[0]
    assert (row["nodes"], row["edges"], row["acts"], row["reciprocity"]) == (2, 2, 3, 1.0)
    assert "Archive Review System" not in set(metrics["centrality"]["agent"])


def test_two_disconnected_triangles_are_two_communities_of_modularity_one_half() -> None:
    triangles = [edge(a, b) for a, b in [("A", "B"), ("B", "C"), ("C", "A"), ("D", "E"), ("E", "F"), ("F", "D")]]
    metrics = compute(study(lives=LIVES, edges=triangles))
    row = metrics["network"].iloc[0]
    assert row["communities"] == 2
    assert row["modularity"] == pytest.approx(0.5)
    communities = metrics["centrality"].set_index("agent")["community"]
    assert communities["A"] == communities["B"] == communities["C"] != communities["D"] == communities["E"]


def test_igraph_betweenness_and_modularity_equal_networkx_on_a_small_graph() -> None:
    pairs = [(1, 2), (2, 3), (3, 1), (3, 4), (4, 5), (5, 6), (6, 4), (2, 5), (7, 1), (5, 7), (6, 8)]
    frame = pd.DataFrame({"source": [f"a{s}" for s, _ in pairs], "target": [f"a{t}" for _, t in pairs]})
    row, centrality = measure(frame)
    digraph = nx.DiGraph(list(zip(frame["source"], frame["target"], strict=True)))
    expected = nx.betweenness_centrality(digraph, normalized=True)
    assert dict(zip(centrality["agent"], centrality["betweenness"], strict=True)) == pytest.approx(expected)
    groups = centrality.groupby("community")["agent"].apply(set).tolist()
    assert row["modularity"] == pytest.approx(nx.community.modularity(digraph.to_undirected(), groups))


# --- every table ------------------------------------------------------------------------------------------


def test_an_empty_study_gives_every_table_with_its_columns_and_missing_values() -> None:
    metrics = compute(study(last=25, window=10))
    for name, columns in METRIC_TABLES.items():
        assert list(metrics[name].columns) == [column for column, _, _ in columns], name
        assert [str(dtype) for dtype in metrics[name].dtypes] == [dtype for _, dtype, _ in columns], name
    assert list(metrics["network"]["window_start"]) == [1, 11, 21]
    assert list(metrics["network"]["window_end"]) == [10, 20, 25]
    assert metrics["network"]["density"].isna().all() and (metrics["network"]["nodes"] == 0).all()
    values = summary(metrics)
    assert math.isnan(values["density"]) and math.isnan(values["cost_per_progress"]) and values["acts"] == 0
