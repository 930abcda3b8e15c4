"""The study page's interaction network as SVG: agents as dots coloured by lineage, each linked to
the agent's page; their acts towards each other (station.study's edges) as arrows coloured by kind.

A crowded window is drawn for its busiest agents only (MAX_NODES, said under the drawing); the layout
is networkx's spring layout with a fixed seed, so the same window draws the same picture.
"""

from __future__ import annotations

import math
from collections import Counter
from html import escape
from urllib.parse import quote

import networkx as nx
from markupsafe import Markup

from station.apps.web.plots import GREY, PALETTE
from station.study import EDGE_KINDS

MAX_NODES = 60  # agents drawn: more would be a hairball, and the layout's cost grows with them
KIND_COLOURS = dict(
    zip(EDGE_KINDS, ("#2f5fa7", "#b0452c", "#c27c0e", "#1b8a8a", "#8a2a8f", "#2d8a4e", "#d0417e", "#7a8899", "#6b4f2a"))
)
SIZE = 640
MARGIN = 40


def kind_pairs(graph: nx.MultiDiGraph) -> Counter:
    """(source, target, kind) -> acts."""
    return Counter((a, b, data.get("kind", "?")) for a, b, data in graph.edges(data=True) if a != b)


def busiest(graph: nx.MultiDiGraph, acts: Counter, limit: int = MAX_NODES) -> list[str]:
    """The `limit` agents with the most acts (done or received), ties by name."""
    weight: Counter = Counter()
    for (a, b, _), count in acts.items():
        weight[a] += count
        weight[b] += count
    return sorted(weight, key=lambda name: (-weight[name], str(name)))[:limit]


def lineage_colours(graph: nx.MultiDiGraph, nodes: list[str]) -> dict[str, str]:
    """The lineages with the most drawn agents, each with a palette colour; the others are grey."""
    counts = Counter(graph.nodes[n].get("lineage") for n in nodes if isinstance(graph.nodes[n].get("lineage"), str))
    leading = sorted(counts, key=lambda lineage: (-counts[lineage], lineage))[: len(PALETTE)]
    return {lineage: PALETTE[i] for i, lineage in enumerate(leading)}


def layout(nodes: list[str], acts: Counter) -> dict[str, tuple[float, float]]:
    """Pixel positions: a seeded spring layout of the drawn agents, scaled into the picture."""
    simple = nx.Graph()
    simple.add_nodes_from(nodes)
    simple.add_edges_from((a, b) for a, b, _ in acts if a in simple and b in simple)
    if len(nodes) == 1:
        return {nodes[0]: (SIZE / 2, SIZE / 2)}
    spots = nx.spring_layout(simple, seed=7, iterations=60)
    xs, ys = [p[0] for p in spots.values()], [p[1] for p in spots.values()]
    span = max(max(xs) - min(xs), max(ys) - min(ys)) or 1.0
    scale = (SIZE - 2 * MARGIN) / span
    return {n: (MARGIN + (x - min(xs)) * scale, MARGIN + (y - min(ys)) * scale) for n, (x, y) in spots.items()}


def network_svg(graph: nx.MultiDiGraph) -> tuple[Markup, str]:
    """The drawing and a line saying what it leaves out."""
    acts = kind_pairs(graph)
    if not acts:
        return Markup("<p class='empty'>No acts between agents of these kinds in this window.</p>"), ""
    nodes = busiest(graph, acts)
    drawn = set(nodes)
    spot = layout(nodes, acts)
    colours = lineage_colours(graph, nodes)
    heaviest = max(acts.values())
    parts = [
        f"<svg class='plot network' id='network' viewBox='0 0 {SIZE + 190} {SIZE}' role='img' "
        "aria-label='who acted towards whom'>",
        "<defs>",
        *(
            f"<marker id='arrow-{kind}' viewBox='0 0 10 10' refX='19' refY='5' markerWidth='7' markerHeight='7' markerUnits='userSpaceOnUse' "
            f"orient='auto-start-reverse'><path d='M0,0 L10,5 L0,10 z' fill='{colour}'/></marker>"
            for kind, colour in KIND_COLOURS.items()
        ),
        "</defs>",
    ]
    order = {kind: i for i, kind in enumerate(EDGE_KINDS)}
    for (a, b, kind), count in sorted(acts.items(), key=lambda item: (order.get(item[0][2], 99), item[0])):
        if a not in drawn or b not in drawn:
            continue
        (x1, y1), (x2, y2) = spot[a], spot[b]
        shift = 2.0 * (order.get(kind, 0) - 4)  # kinds between the same pair side by side, not on top
        length = math.hypot(x2 - x1, y2 - y1) or 1.0
        dx, dy = -(y2 - y1) / length * shift, (x2 - x1) / length * shift
        colour = KIND_COLOURS.get(kind, GREY)
        parts.append(
            f"<line class='net-edge kind-{escape(kind)}' data-kind='{escape(kind)}' x1='{x1 + dx:.1f}' "
            f"y1='{y1 + dy:.1f}' x2='{x2 + dx:.1f}' y2='{y2 + dy:.1f}' stroke='{colour}' "
            f"stroke-width='{0.8 + 3 * count / heaviest:.2f}' marker-end='url(#arrow-{escape(kind)})'>"
            f"<title>{escape(str(a))} → {escape(str(b))}: {count} {escape(kind)}</title></line>"
        )
    for name in nodes:
        x, y = spot[name]
        data = graph.nodes[name]
        lineage = data.get("lineage") if isinstance(data.get("lineage"), str) else None
        colour = colours.get(lineage, GREY) if lineage else GREY
        label = escape(str(name)) + (f" ({escape(lineage)})" if lineage else "")
        dot = (
            f"<circle class='net-node' cx='{x:.1f}' cy='{y:.1f}' r='6' fill='{colour}'><title>{label}</title></circle>"
            f"<text class='label' x='{x + 8:.1f}' y='{y + 4:.1f}'>{escape(_short(str(name)))}</text>"
        )
        linked = data.get("session") is not None and not _missing(data.get("session"))
        parts.append(f"<a href='/agents/{quote(str(name), safe='')}'>{dot}</a>" if linked else dot)
    parts.extend(_legend(sorted({kind for _, _, kind in acts}, key=lambda k: order.get(k, 99)), colours))
    parts.append("</svg>")
    left_out = len({n for pair in acts for n in pair[:2]}) - len(nodes)
    note = f"The {len(nodes)} busiest of {len(nodes) + left_out} agents are drawn." if left_out > 0 else ""
    return Markup("".join(parts)), note


def _legend(kinds: list[str], colours: dict[str, str]) -> list[str]:
    x, y = SIZE + 10, 20
    parts = ["<g class='legend'>"]
    for kind in kinds:
        parts.append(
            f"<line x1='{x}' y1='{y - 4}' x2='{x + 18}' y2='{y - 4}' stroke='{KIND_COLOURS.get(kind, GREY)}' "
            f"stroke-width='2.5'/><text x='{x + 24}' y='{y}'>{escape(kind)}</text>"
        )
        y += 15
    y += 10
    for lineage, colour in colours.items():
        parts.append(
            f"<circle cx='{x + 9}' cy='{y - 4}' r='5' fill='{colour}'/>"
            f"<text x='{x + 24}' y='{y}'><title>{escape(lineage)}</title>{escape(_short(lineage, 20))}</text>"
        )
        y += 15
    parts.append(f"<circle cx='{x + 9}' cy='{y - 4}' r='5' fill='{GREY}'/><text x='{x + 24}' y='{y}'>other</text>")
    parts.append("</g>")
    return parts


def _short(text: str, limit: int = 18) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _missing(value: object) -> bool:
    """pandas' missing values (pd.NA, NaN) without importing pandas here."""
    try:
        return bool(value != value) or str(value) == "<NA>"
    except TypeError:  # pd.NA refuses to be a bool
        return True
