"""The study's metrics (station/study/metrics.py and its families) on studies whose right values are
known by construction: hand-written tables, then a small hand-built station read through load()."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import networkx as nx
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from station.study import Study, load
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


def pair_frame(pairs: list[tuple[int, int]]) -> pd.DataFrame:
    return pd.DataFrame({"source": [f"a{s:03}" for s, _ in pairs], "target": [f"a{t:03}" for _, t in pairs]})


def test_the_igraph_measures_equal_networkx_on_a_small_graph() -> None:
    pairs = [(1, 2), (2, 3), (3, 1), (1, 3), (3, 4), (4, 5), (5, 6), (6, 4), (2, 5), (7, 1), (5, 7), (6, 8)]
    frame = pair_frame(pairs)
    row, centrality = measure(frame)
    digraph = nx.DiGraph(list(zip(frame["source"], frame["target"], strict=True)))
    by_agent = centrality.set_index("agent")
    assert by_agent["betweenness"].to_dict() == pytest.approx(nx.betweenness_centrality(digraph, normalized=True))
    assert by_agent["degree_centrality"].to_dict() == pytest.approx(nx.degree_centrality(digraph))
    assert (row["density"], row["reciprocity"]) == (pytest.approx(nx.density(digraph)), nx.reciprocity(digraph))
    groups = centrality.groupby("community")["agent"].apply(set).tolist()
    assert row["modularity"] == pytest.approx(nx.community.modularity(digraph.to_undirected(), groups))


def test_above_300_agents_betweenness_is_estimated_close_to_the_exact_value() -> None:
    ring = [(i, (i + 1) % 400) for i in range(400)]
    hub = [(400, i) for i in range(0, 400, 20)] + [(i, 400) for i in range(10, 400, 20)]
    frame = pair_frame(ring + hub)
    _, centrality = measure(frame)
    exact = nx.betweenness_centrality(nx.DiGraph(list(zip(frame["source"], frame["target"], strict=True))))
    estimate = centrality.set_index("agent")["betweenness"]
    assert estimate.idxmax() == max(exact, key=exact.__getitem__) == "a400"
    assert estimate.max() == pytest.approx(max(exact.values()), rel=0.1)
    assert estimate.max() != max(exact.values())  # estimated, not computed exactly


# --- every table ------------------------------------------------------------------------------------------


def test_an_empty_study_gives_every_table_with_its_columns_and_missing_values() -> None:
    steps: list[tuple[str, int, int]] = []
    metrics = compute(study(last=25, window=10), lambda step, done, total: steps.append((step, done, total)))
    assert [step for step, _, _ in steps] == ["network", "ideas", "diversity", "lineages", "done"]
    for name, columns in METRIC_TABLES.items():
        assert list(metrics[name].columns) == [column for column, _, _ in columns], name
        assert [str(dtype) for dtype in metrics[name].dtypes] == [dtype for _, dtype, _ in columns], name
    assert list(metrics["network"]["window_start"]) == [1, 11, 21]
    assert list(metrics["network"]["window_end"]) == [10, 20, 25]
    assert metrics["network"]["density"].isna().all() and (metrics["network"]["nodes"] == 0).all()
    values = summary(metrics)
    assert math.isnan(values["density"]) and math.isnan(values["cost_per_progress"]) and values["acts"] == 0
    unstarted = compute(study(first=1, last=0))  # a station that never ticked: no window at all
    assert all(len(unstarted[name]) == 0 for name in ("network", "centrality", "diversity", "cost"))


def test_the_graph_has_the_agents_with_their_lineage_and_one_edge_per_act() -> None:
    cycle = study(
        lives=LIVES, edges=[edge("A", "B"), edge("B", "C", tick=4), edge("A", "B", tick=7, detail="re: plan")]
    )
    whole = cycle.graph()
    assert whole.nodes["C"] == {"lineage": "L2", "session": 3, "generation": 2}
    assert whole.number_of_edges("A", "B") == 2
    assert sorted(data["tick"] for _, _, data in whole.edges(data=True)) == [1, 4, 7]
    assert cycle.graph(kinds={"mail"}, first=2, last=5).number_of_edges() == 1
    assert cycle.graph(kinds={"review"}).number_of_edges() == 0


# --- ideas ------------------------------------------------------------------------------------------------


def evaluation(id: int, author: str, parent: int | None, score: float, tick: int, new_best: bool) -> dict[str, Any]:
    lineage = {life["agent"]: life["lineage"] for life in LIVES}
    authors = {1: "A", 2: "B", 3: "C", 4: "A", 5: "B", 6: "System"}
    return {
        "id": id,
        "author": author,
        "session": SESSION.get(author),
        "lineage": lineage.get(author),
        "tick": tick,
        "finished_tick": tick,
        "score": score,
        "parent": parent,
        "parent_author": authors.get(parent or 0),
        "parent_lineage": lineage.get(authors.get(parent or 0, "")),
        "new_best": new_best,
    }


# a build-on tree 1 -> 2 -> {3 -> 5, 4} (A: L1; B, C: L2) and a baseline 6; new bests: 6, 2 (on L1's work), 3
EVALUATIONS = [
    evaluation(6, "System", None, 0.5, 1, True),
    evaluation(1, "A", None, 0.4, 2, False),
    evaluation(2, "B", 1, 2.0, 3, True),
    evaluation(3, "C", 2, 3.0, 8, True),
    evaluation(4, "A", 2, 1.5, 8, False),
    evaluation(5, "B", 3, 2.5, 9, False),
]


def test_the_build_on_tree_has_known_depth_breadth_and_one_cross_lineage_new_best_of_two() -> None:
    metrics = compute(study(lives=LIVES, evaluations=EVALUATIONS))
    tree = metrics["idea_tree"].set_index("id")
    assert list(tree.index) == [1, 2, 3, 4, 5, 6]
    assert list(tree["depth"]) == [0, 1, 2, 2, 3, 0]
    assert list(tree["root"]) == [1, 1, 1, 1, 1, 6]
    assert list(tree["descendants"]) == [4, 3, 1, 0, 0, 0]
    assert list(tree["cross_lineage"]) == [False, True, False, True, False, False]
    values = summary(metrics)
    assert values["new_best_cross_lineage_share"] == 0.5  # 2 built on L1's 1, 3 on its own lineage's 2; 6 is System
    assert (values["tree_max_depth"], values["tree_mean_depth"]) == (3, pytest.approx(8 / 6))
    assert (values["tree_roots"], values["tree_mean_children"]) == (1, pytest.approx(4 / 3))


def test_a_citation_chain_has_known_delays() -> None:
    papers = [
        {"record": "paper/1", "kind": "paper", "tick": 2, "author": "A", "lineage": "L1", "text": "one"},
        {"record": "paper/2", "kind": "paper", "tick": 5, "author": "B", "lineage": "L2", "text": "two"},
        {"record": "paper/3", "kind": "paper", "tick": 6, "author": "C", "lineage": "L2", "text": "three"},
    ]
    cites = [
        edge("B", "A", tick=5, kind="citation", record="paper/2", detail="paper/1"),
        edge("C", "B", tick=9, kind="citation", record="evaluation/7", detail="paper/2"),
        edge("C", "A", tick=9, kind="citation", record="evaluation/7", detail="paper/1"),
    ]
    metrics = compute(study(lives=LIVES, texts=papers, edges=cites))
    cited = metrics["citations"].set_index("record")
    assert list(cited["citations"]) == [2, 1, 0]
    assert cited["first_cited_tick"].fillna(-1).tolist() == [5, 9, -1]
    assert cited["delay"].fillna(-1).tolist() == [3, 4, -1]
    values = summary(metrics)
    assert (values["citation_median_delay"], values["papers_cited_share"]) == (3.5, pytest.approx(2 / 3))


# --- lineages and cost ------------------------------------------------------------------------------------

FAMILY = [
    life(1, "A", "L1", 1, birth_tick=1, ticks_alive=10, cost_usd=1.0),
    life(2, "B", "L2", 1, birth_tick=1, ticks_alive=4, end_tick=4, cost_usd=0.5),
    life(3, "C", "L2", 2, birth_tick=5, ticks_alive=6, ancestor="B", cost_usd=0.25),
]


def test_two_lineages_have_known_heirs_lifetimes_scores_and_offspring_inequality() -> None:
    texts = [{"record": "paper/1", "kind": "paper", "tick": 2, "author": "A", "lineage": "L1", "text": "x"}]
    metrics = compute(study(lives=FAMILY, evaluations=EVALUATIONS, texts=texts))
    table = metrics["lineages"].set_index("lineage")
    assert list(table.index) == ["L1", "L2"]
    assert list(table["generations"]) == [1, 2] and list(table["heirs"]) == [0, 1]
    assert list(table["share_of_lives"]) == pytest.approx([1 / 3, 2 / 3])
    assert list(table["mean_ticks_alive"]) == [10, 5]
    assert list(table["evaluations"]) == [2, 3] and list(table["best_score"]) == [1.5, 3.0]
    assert list(table["mean_score"]) == pytest.approx([0.95, 2.5])
    assert list(table["new_bests"]) == [0, 2] and list(table["papers"]) == [1, 0]
    assert list(table["cost_usd"]) == [1.0, 0.75]
    values = summary(metrics)
    assert values["heirs_gini"] == 0.5  # heirs 0 and 1: |0 - 1| * 2 / (2 * 2^2 * 0.5)
    assert values["lineage_mean_span"] == 10  # L1 ticks 1..10, L2 1..10
    assert math.isnan(values["selection"])  # two lineages: no correlation


def test_selection_is_the_rank_correlation_of_best_score_and_heirs() -> None:
    lives = [life(i, f"X{i}", f"L{i % 3}", 1 + i // 3) for i in range(6)] + [life(6, "X6", "L2", 3)]
    scores = [{"id": i, "author": f"X{i}", "lineage": f"L{i}", "tick": 1, "score": float(i)} for i in range(3)]
    metrics = compute(study(lives=lives, evaluations=scores))
    assert list(metrics["lineages"]["heirs"]) == [1, 1, 2]
    assert summary(metrics)["selection"] == pytest.approx(math.sqrt(3) / 2)  # ranks (1.5, 1.5, 3) and (1, 2, 3)


def test_cost_per_progress_divides_the_dollars_of_a_window_by_the_rise_of_the_best_score() -> None:
    spend = [
        {"role": "agent", "tick": tick, "cost_usd": 0.5, "input_tokens": 10, "output_tokens": 1}
        for tick in range(1, 11)
    ]
    metrics = compute(study(lives=LIVES, evaluations=EVALUATIONS, spend=spend, window=5))
    cost = metrics["cost"]
    assert list(cost["cost_usd"]) == [2.5, 2.5] and list(cost["tokens"]) == [55, 55]
    assert list(cost["best_score"]) == [2.0, 3.0]
    assert math.isnan(cost["progress"][0]) and cost["progress"][1] == 1.0  # no best before tick 1
    assert math.isnan(cost["cost_per_progress"][0]) and cost["cost_per_progress"][1] == 2.5
    assert summary(metrics)["cost_per_progress"] == 2.0  # 5 dollars for 0.5 -> 3.0


# --- diversity --------------------------------------------------------------------------------------------


def text(record: str, tick: int, words: str, author: str = "A") -> dict[str, Any]:
    return {"record": record, "tick": tick, "author": author, "text": words}


def test_identical_texts_have_similarity_one_and_disjoint_vocabularies_zero() -> None:
    texts = [text("forum/1#1", 1, "lattice packing bound"), text("forum/1#2", 2, "lattice packing bound")]
    texts += [
        text("forum/2#1", 6, "lattice packing"),
        text("forum/2#2", 7, "ruler marks"),
        text("forum/2#3", 8, "sparse"),
    ]
    metrics = compute(study(texts=texts, window=5))
    diversity = metrics["diversity"]
    assert list(diversity["texts"]) == [2, 3]
    assert list(diversity["mean_similarity"]) == pytest.approx([1.0, 0.0])
    assert list(diversity["diversity"]) == pytest.approx([0.0, 1.0])


def test_two_obvious_topics_are_two_directions_named_by_their_words() -> None:
    protein = ["protein folding amino chain", "amino acid protein folding", "protein chain folding energy"]
    galaxy = ["galaxy telescope star light", "star galaxy telescope survey", "telescope light galaxy star"]
    texts = [text(f"forum/{i}#1", 1 + i, words, author=f"X{i % 2}") for i, words in enumerate(protein + galaxy)]
    texts.append(text("forum/9#1", 20, "galaxy star telescope light", author="X5"))
    metrics = compute(study(texts=texts, last=20, window=10))
    directions = metrics["directions"]
    assert list(directions["texts"]) == [4, 3]
    assert set(directions["terms"][0].split(", ")[:3]) == {"galaxy", "star", "telescope"}
    assert set(directions["terms"][1].split(", ")[:2]) == {"protein", "folding"}
    assert list(directions["first_tick"]) == [4, 1] and list(directions["last_tick"]) == [20, 3]
    assert list(metrics["diversity"]["directions"]) == [2, 1]
    assert summary(metrics)["directions"] == 2


def test_the_same_tables_give_the_same_metrics_bit_for_bit() -> None:
    def whole() -> Study:
        cycle = [edge("A", "B"), edge("B", "C"), edge("C", "A"), edge("B", "A", tick=6), edge("C", "B", tick=9)]
        texts = [text(f"forum/{i}#1", i, f"topic{i % 3} words{i % 4} shared") for i in range(1, 11)]
        return study(lives=FAMILY, edges=cycle, evaluations=EVALUATIONS, texts=texts, window=3)

    first, second = compute(whole()), compute(whole())
    for name in METRIC_TABLES:
        assert_frame_equal(first[name], second[name], check_exact=True)
    assert len(first["network"]) == 4 and first["directions"]["texts"].sum() == 10


# --- a hand-built station, read through load() ------------------------------------------------------------


@pytest.fixture(scope="module")
def society(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from study_station import build_society

    return build_society(tmp_path_factory.mktemp("study") / "society")


def test_the_society_mail_cycle_read_from_its_station(society: Path) -> None:
    metrics = load(society, last=7, window=7).metrics()
    row = metrics["network"].iloc[0]
    assert (row["nodes"], row["edges"], row["acts"]) == (3, 3, 3)
    assert (row["density"], row["reciprocity"], row["max_betweenness"]) == (0.5, 0.0, 0.5)
    assert row["cross_lineage_share"] == 1.0  # Ada, Bo and Cy are three lineages
    mail = load(society).graph(kinds={"mail"})
    assert sorted(mail.edges()) == [("Ada I", "Bo I"), ("Bo I", "Ada I"), ("Bo I", "Cy I"), ("Cy I", "Ada I")]
    assert mail.nodes["Ada II"] == {"lineage": "Ada", "session": 4, "generation": 2}
    written = io.BytesIO()
    nx.write_graphml(load(society).graph(), written)  # every kind, the inheritance's missing record too
    assert nx.read_graphml(io.BytesIO(written.getvalue())).number_of_edges() == 25


def test_the_society_idea_flow_lineages_and_cost_read_from_its_station(society: Path) -> None:
    metrics = load(society, window=20).metrics()
    first = metrics["network"].iloc[0]  # ticks 1-20: Ada<->Bo, Bo<->Cy, Cy->Ada among agents; 3 reviews
    assert (first["nodes"], first["edges"], first["acts"]) == (3, 5, 16)
    assert (first["density"], first["reciprocity"]) == (pytest.approx(5 / 6), pytest.approx(4 / 5))
    cited = metrics["citations"].set_index("record")
    assert list(cited.index[:2]) == ["paper/1", "paper/2"]  # a reply to a paper is no paper
    assert [cited["delay"][record] for record in ("paper/1", "paper/2", "evaluation/2")] == [8, 7, 2]
    values = summary(metrics)
    assert values["papers_cited_share"] == 1.0
    assert values["new_best_cross_lineage_share"] == 0.5  # 4 built on Ada's 2 (Bo's new best), 2 on nothing
    assert (values["tree_max_depth"], values["tree_roots"]) == (2, 1)  # 2 -> 4 -> 5 and 2 -> 6
    lineages = metrics["lineages"].set_index("lineage")
    assert list(lineages["heirs"]) == [1, 0, 0] and list(lineages["papers"]) == [
        1,
        1,
        0,
    ]  # Cy's submission was rejected
    assert values["heirs_gini"] == pytest.approx(2 / 3)
    cost = metrics["cost"]
    assert cost["progress"][1] == 0.5 and cost["cost_per_progress"][1] == pytest.approx(0.3)
    assert values["cost_per_progress"] == pytest.approx(0.93 / 1.5)  # every dollar for the rise 1.0 -> 2.5
