"""The idea-flow tree of one evaluation: the build-on tree it belongs to, from station.study's
evaluations (their `parent`): what it built on back to the first evaluation of the chain (the root),
everything built on it since, and the rest of the root's tree.

Drawn as SVG, one row per step from the root; each node links to its evaluation's page, and a step
from one lineage's work to another's is drawn dashed and counted. A large tree is cut at MAX_NODES
(the chosen evaluation's own line first, then the nearest to the root), and the page says so.
"""

from __future__ import annotations

from collections import defaultdict
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from station.apps.web import study_cache
from station.apps.web.plots import GREY, PALETTE
from station.apps.web.study_cache import Answer
from station.study import Study, load
from station.study.ideas import idea_tree

MAX_NODES = 300  # evaluations drawn
CHAIN_SHOWN = 100  # of a longer chain of ancestors, the nearest drawn
STEP_X, STEP_Y, PAD = 34, 56, 30


class Trees:
    """Every evaluation's parent and children, and its place in its tree (station.study.ideas'
    idea_tree: root, depth, descendants), built once per study: a tree page then costs at most
    MAX_NODES + CHAIN_SHOWN steps, however large the tree."""

    def __init__(self, study: Study) -> None:
        self.rows: dict[int, dict[str, Any]] = {}
        self.children: dict[int, list[int]] = defaultdict(list)
        for row in study.evaluations.sort_values("id").itertuples(index=False):
            ident = int(row.id)
            parent = None if pd.isna(row.parent) else int(row.parent)
            self.rows[ident] = {
                "id": ident,
                "parent": parent,
                "author": row.author,
                "lineage": None if pd.isna(row.lineage) else row.lineage,
                "score": None if pd.isna(row.score) else float(row.score),
                "tick": int(row.tick),
                "new_best": bool(row.new_best) if not pd.isna(row.new_best) else False,
                "how": None if pd.isna(row.parent_how) else row.parent_how,
            }
            if parent is not None:
                self.children[parent].append(ident)
        placed = idea_tree(study)
        self.place = {
            int(i): (int(r), int(d), int(n))
            for i, r, d, n in zip(placed["id"], placed["root"], placed["depth"], placed["descendants"], strict=True)
        }

    def ancestors(self, ident: int, limit: int = CHAIN_SHOWN) -> list[int]:
        """The nearest `limit` of those `ident` built on, the farthest first."""
        chain: list[int] = []
        parent = self.rows[ident]["parent"]
        while parent is not None and parent in self.rows and len(chain) < limit:
            chain.append(parent)
            parent = self.rows[parent]["parent"]
        return chain[::-1]

    def descendants(self, ident: int, limit: int = MAX_NODES) -> list[int]:
        """At most `limit` of those built on `ident`, directly or not, nearest first."""
        found: list[int] = []
        frontier = [ident]
        while frontier and len(found) < limit:
            frontier = [child for node in frontier for child in self.children.get(node, ())]
            found.extend(frontier[: limit - len(found)])
        return found


def trees_of(directory: Path, db: Any, *, wait: bool) -> Answer:
    """The build-on trees of every evaluation of the station (a tree spans any ticks: the study of all
    of them; see study_cache for when it is computed)."""
    key = ("trees", str(directory))
    return study_cache.get(
        key, "the build-on trees", db, lambda: Trees(load(directory, tables=("evaluations",))), wait=wait
    )


def tree(trees: Trees, ident: int) -> dict[str, Any] | None:
    """The tree of `ident`'s root, root first: the chain down to `ident` and what was built on it
    first, then the rest nearest the root first, MAX_NODES in all; None for an unknown evaluation."""
    if ident not in trees.rows:
        return None
    root, depth, built_on_it = trees.place[ident]
    size = trees.place[root][2] + 1
    shown = trees.ancestors(ident) + [ident] + trees.descendants(ident)
    kept = set(shown)
    for node in trees.descendants(root, MAX_NODES + len(shown)):
        if len(shown) >= MAX_NODES:
            break
        if node not in kept and trees.rows[node]["parent"] in kept:
            shown.append(node)
            kept.add(node)
    nodes = []
    for node in sorted(shown):  # a parent is older than what was built on it: the root comes first
        row = dict(trees.rows[node])
        parent = row["parent"] if row["parent"] in kept else None
        parent_lineage = trees.rows[parent]["lineage"] if parent is not None else None
        row["shown_parent"] = parent
        row["cross"] = bool(parent_lineage and row["lineage"] and row["lineage"] != parent_lineage)
        row["chosen"] = node == ident
        nodes.append(row)
    return {
        "nodes": nodes,
        "root": root,
        "depth": depth,
        "chain_cut": max(0, depth - CHAIN_SHOWN),
        "descendants": built_on_it,
        "size": size,
        "cut": size - len(nodes),
        "cross": sum(1 for n in nodes if n["cross"]),
        "drawing": drawing(nodes),
    }


def drawing(nodes: list[dict[str, Any]]) -> Markup:
    """A layered tree: the root on top, each evaluation below what it built on."""
    children: dict[int | None, list[int]] = defaultdict(list)
    for n in nodes:
        children[n["shown_parent"]].append(n["id"])
    place: dict[int, tuple[float, float]] = {}
    column = 0

    def lay(node: int, depth: int) -> None:
        """Places `node`'s subtree: leaves left to right, a parent over the middle of its children
        (iteratively: a chain may be thousands deep)."""
        nonlocal column
        stack: list[tuple[int, int, bool]] = [(node, depth, False)]
        while stack:
            current, level, done = stack.pop()
            kids = children.get(current, [])
            if done or not kids:
                if kids:
                    xs = [place[k][0] for k in kids]
                    x = (min(xs) + max(xs)) / 2
                else:
                    x = PAD + column * STEP_X
                    column += 1
                place[current] = (x, PAD + level * STEP_Y)
                continue
            stack.append((current, level, True))
            stack.extend((kid, level + 1, False) for kid in reversed(kids))

    for root in children.get(None, []):
        lay(root, 0)
    width = max(PAD * 2 + column * STEP_X, 300)
    height = PAD * 2 + max(y for _, y in place.values()) + 20
    colours = _colours(nodes)
    parts = [
        f"<svg class='plot idea-tree' id='idea-tree' viewBox='0 0 {width:.0f} {height:.0f}' "
        f"width='{width:.0f}' height='{height:.0f}' role='img' aria-label='build-on tree'>"
    ]
    for n in nodes:
        if n["shown_parent"] is None:
            continue
        (x1, y1), (x2, y2) = place[n["shown_parent"]], place[n["id"]]
        css = "tree-step cross" if n["cross"] else "tree-step"
        why = "another lineage's work" if n["cross"] else "its lineage's work"
        parts.append(
            f"<line class='{css}' x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}'>"
            f"<title>#{n['id']} built on #{n['shown_parent']} ({why})</title></line>"
        )
    for n in nodes:
        x, y = place[n["id"]]
        colour = colours.get(n["lineage"], GREY)
        score = "n.a." if n["score"] is None else f"{n['score']:.6g}"
        text = f"#{n['id']} by {escape(str(n['author']))}" + (f" ({escape(n['lineage'])})" if n["lineage"] else "")
        css = "tree-node chosen" if n["chosen"] else "tree-node"
        parts.append(
            f"<a href='/research/{n['id']}'><circle class='{css}' cx='{x:.1f}' cy='{y:.1f}' r='{8 if n['chosen'] else 6}' "
            f"fill='{colour}'><title>{text}: {score}{', a new best' if n['new_best'] else ''}</title></circle>"
            f"<text class='label' x='{x:.1f}' y='{y - 11:.1f}' text-anchor='middle'>#{n['id']}</text></a>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def _colours(nodes: list[dict[str, Any]]) -> dict[str, str]:
    lineages: list[str] = []
    for n in nodes:
        if n["lineage"] and n["lineage"] not in lineages:
            lineages.append(n["lineage"])
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(lineages)}
