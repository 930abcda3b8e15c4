"""Every metric of a study (schema.METRIC_TABLES), from its tables alone: same tables, same metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from station.study import diversity, ideas, lineages, network
from station.study.schema import METRIC_TABLES, Column

if TYPE_CHECKING:
    from station.study import Progress, Study

STEPS = ("network", "ideas", "diversity", "lineages")


def compute(study: Study, progress: Progress | None = None) -> dict[str, pd.DataFrame]:
    """The metric tables, each with exactly its schema's columns, order and dtypes."""
    report = progress or (lambda step, done, total: None)
    report(STEPS[0], 0, len(STEPS))
    windowed, centrality = network.windowed(study)
    whole = network.whole(study)
    report(STEPS[1], 1, len(STEPS))
    tree = ideas.idea_tree(study)
    cited = ideas.citations(study)
    report(STEPS[2], 2, len(STEPS))
    texts, directions, similarity = diversity.measure(study)
    report(STEPS[3], 3, len(STEPS))
    lineage_table = lineages.lineages(study)
    cost = lineages.cost(study)
    summary = [
        *_activity(study),
        *_network_rows(whole),
        *ideas.summary(study, tree, cited),
        ("mean_similarity", similarity, "mean TF-IDF cosine similarity over every pair of texts"),
        (
            "mean_diversity",
            float(texts["diversity"].mean()) if len(texts) else float("nan"),
            "mean over windows of 1 - mean similarity",
        ),
        ("directions", float(len(directions)), "research directions (clusters of texts)"),
        *lineages.summary(study, lineage_table),
    ]
    report("done", len(STEPS), len(STEPS))
    tables = {
        "network": windowed,
        "centrality": centrality,
        "idea_tree": tree,
        "citations": cited,
        "diversity": texts,
        "directions": directions,
        "lineages": lineage_table,
        "cost": cost,
        "summary": pd.DataFrame(summary, columns=["metric", "value", "meaning"]),
    }
    return {name: typed(tables[name], columns) for name, columns in METRIC_TABLES.items()}


def typed(table: pd.DataFrame, columns: list[Column]) -> pd.DataFrame:
    """The table with exactly these columns, in this order, of these dtypes (an empty table gets them too)."""
    names = [name for name, _, _ in columns]
    table = table.reindex(columns=names).reset_index(drop=True)
    return table.astype({name: dtype for name, dtype, _ in columns})


def _activity(study: Study) -> list[tuple[str, float, str]]:
    acts = study.edges[study.edges["source_session"].notna()]
    agent_ticks = float(study.lives["ticks_alive"].sum())
    return [
        ("acts", float(len(acts)), "acts of agents towards other agents (edge rows with an agent as source)"),
        (
            "acts_per_agent_per_100_ticks",
            100 * len(acts) / agent_ticks if agent_ticks else float("nan"),
            "acts per 100 ticks of an agent's life",
        ),
    ]


def _network_rows(whole: dict[str, Any]) -> list[tuple[str, float, str]]:
    meanings = {
        "nodes": "agents with an edge to or from another agent",
        "edges": "distinct directed pairs of agents with an edge",
        "density": "edges / (nodes * (nodes - 1)) over the whole range",
        "reciprocity": "share of edges whose reverse is also an edge",
        "mean_degree_centrality": "mean over agents of distinct neighbours (in + out) / (nodes - 1)",
        "communities": "Louvain communities of the undirected graph",
        "modularity": "modularity of those communities",
        "cross_lineage_share": "share of acts between two lineages (both ends with a lineage)",
    }
    return [(name, float(whole[name]), meaning) for name, meaning in meanings.items()]
