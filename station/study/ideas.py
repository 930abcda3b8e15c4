"""Idea flow: the build-on tree of evaluations (evaluations.parent) and how soon papers and
evaluations are first cited (edges of kind citation)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from station.study import Study

CITED = re.compile(r"\b(paper|evaluation)\W{0,2}(\d+)", re.IGNORECASE)  # what a citation's detail names


def idea_tree(study: Study) -> pd.DataFrame:
    """One row per evaluation: its root, depth, descendants and whether its parent is of another
    lineage. A parent outside the studied range is taken as the root (depth 1 below it)."""
    evaluations = study.evaluations.sort_values("id")
    ids = evaluations["id"].tolist()
    parent_of = {
        int(child): int(parent)
        for child, parent in zip(evaluations["id"], evaluations["parent"], strict=True)
        if not pd.isna(parent)
    }
    root: dict[int, int] = {}
    depth: dict[int, int] = {}
    for start in ids:
        chain = []
        node = start
        while node in parent_of and node not in depth and node not in chain:  # `chain`: a cycle stops the walk
            chain.append(node)
            node = parent_of[node]
        base_root, base_depth = (root[node], depth[node]) if node in depth else (node, 0)
        for step, member in enumerate(reversed(chain), start=1):
            root[member], depth[member] = base_root, base_depth + step
        root.setdefault(start, start)
        depth.setdefault(start, 0)
    descendants = dict.fromkeys(ids, 0)
    for child in sorted(parent_of, key=lambda node: (-depth[node], node)):  # deepest first: children before parents
        parent = parent_of[child]
        if parent in descendants:
            descendants[parent] += descendants[child] + 1
    cross = (
        evaluations["lineage"].notna()
        & evaluations["parent_lineage"].notna()
        & (evaluations["lineage"] != evaluations["parent_lineage"])
    )
    return pd.DataFrame(
        {
            "id": ids,
            "parent": evaluations["parent"].to_numpy(),
            "root": [root[node] for node in ids],
            "depth": [depth[node] for node in ids],
            "descendants": [descendants[node] for node in ids],
            "cross_lineage": cross.fillna(False).astype(bool).to_numpy(),
        }
    )


def papers(texts: pd.DataFrame) -> pd.DataFrame:
    """The published papers among the texts (paper/N; not the replies to them, paper/N#k)."""
    found = texts[(texts["kind"] == "paper") & texts["record"].str.fullmatch(r"paper/\d+").fillna(False).astype(bool)]
    return found.sort_values(["tick", "record"], kind="stable").drop_duplicates("record")


def citations(study: Study) -> pd.DataFrame:
    """Every paper and delivered evaluation, with its citations and the delay to the first one."""
    written = papers(study.texts)
    delivered = study.evaluations[study.evaluations["finished_tick"].notna()]
    published = pd.concat(
        [
            pd.DataFrame(
                {
                    "record": written["record"].to_numpy(),
                    "author": written["author"].to_numpy(),
                    "lineage": written["lineage"].to_numpy(),
                    "published_tick": written["tick"].to_numpy(),
                }
            ),
            pd.DataFrame(
                {
                    "record": ("evaluation/" + delivered["id"].astype(str)).to_numpy(),
                    "author": delivered["author"].to_numpy(),
                    "lineage": delivered["lineage"].to_numpy(),
                    "published_tick": delivered["finished_tick"].to_numpy(),
                }
            ),
        ],
        ignore_index=True,
    )
    cites = study.edges[study.edges["kind"] == "citation"]
    cited = cites.assign(cited=cites["detail"].map(_cited_record))
    first = cited.groupby("cited")["tick"].agg(["size", "min"])
    published["citations"] = published["record"].map(first["size"]).fillna(0).astype("int64")
    published["first_cited_tick"] = published["record"].map(first["min"]).astype("Int64")
    published["delay"] = published["first_cited_tick"] - published["published_tick"].astype("Int64")
    return published


def _cited_record(detail: Any) -> str | None:
    """The record a citation's detail names, as paper/N or evaluation/N."""
    found = CITED.search("" if detail is None or pd.isna(detail) else str(detail))
    return f"{found.group(1).lower()}/{int(found.group(2))}" if found else None


def summary(study: Study, tree: pd.DataFrame, cited: pd.DataFrame) -> list[tuple[str, float, str]]:
    """The idea-flow rows of the summary."""
    evaluations = study.evaluations
    new_bests = evaluations[evaluations["new_best"].fillna(False).astype(bool) & (evaluations["author"] != "System")]
    crossing = tree.set_index("id")["cross_lineage"]
    children = tree["parent"].dropna().astype("int64").value_counts()
    published = cited[cited["record"].str.startswith("paper/")]
    delays = cited["delay"].dropna()
    nan = float("nan")
    return [
        (
            "new_best_cross_lineage_share",
            float(new_bests["id"].map(crossing).mean()) if len(new_bests) else nan,
            "share of the agents' new bests whose parent is of another lineage",
        ),
        ("tree_max_depth", float(tree["depth"].max()) if len(tree) else nan, "longest build-on chain (steps)"),
        (
            "tree_mean_depth",
            float(tree["depth"].mean()) if len(tree) else nan,
            "mean steps from an evaluation to its root",
        ),
        (
            "tree_roots",
            float(((tree["parent"].isna()) & (tree["descendants"] > 0)).sum()),
            "evaluations built on none that others built on (trees of two or more)",
        ),
        (
            "tree_mean_children",
            float(children.mean()) if len(children) else nan,
            "mean evaluations built directly on a parent (breadth)",
        ),
        (
            "citation_median_delay",
            float(delays.median()) if len(delays) else nan,
            "median ticks from publication to first citation",
        ),
        (
            "papers_cited_share",
            float((published["citations"] > 0).mean()) if len(published) else nan,
            "share of papers cited at least once",
        ),
    ]
