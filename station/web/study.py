"""Behavioural study views (meant for open stations): over a window of ticks, each agent's
context tokens turn by turn, its actions per room, and who talks to whom through mail, the
forum and the Common Room. Windows keep every query bounded on long stations.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter, defaultdict
from html import escape
from typing import Any

from markupsafe import Markup

from .data import has_table

PALETTE = ["#2f5fa7", "#b0452c", "#2d8a4e", "#8a2a8f", "#c08a12", "#1f8a8a", "#6b4f2a", "#d0417e", "#5a6b7d", "#7a9a1f"]
MAX_LINES = 10  # agents drawn in the token timeline (the busiest of the window)


def window(db: sqlite3.Connection, first: int | None, last: int | None, span: int = 500) -> tuple[int, int]:
    now = db.execute("SELECT COALESCE(MAX(tick), 1) FROM turns").fetchone()[0]
    last = min(last if last is not None else now, now)
    first = max(1, first if first is not None else last - span + 1)
    return min(first, last), last


def token_series(db: sqlite3.Connection, first: int, last: int) -> dict[str, list[tuple[int, int]]]:
    series: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for tick, agent, tokens in db.execute(
        "SELECT tick, agent, COALESCE(context_tokens, 0) FROM turns WHERE tick BETWEEN ? AND ? ORDER BY tick",
        (first, last),
    ):
        series[agent].append((tick, tokens))
    busiest = sorted(series, key=lambda a: -len(series[a]))[:MAX_LINES]
    return {a: series[a] for a in sorted(busiest)}


def actions_per_room(db: sqlite3.Connection, first: int, last: int) -> tuple[list[str], dict[str, Counter]]:
    table: dict[str, Counter] = defaultdict(Counter)
    for agent, actions in db.execute("SELECT agent, actions FROM turns WHERE tick BETWEEN ? AND ?", (first, last)):
        for action in json.loads(actions).get("parsed", []):
            if action.get("ok"):
                table[agent][action.get("room") or "?"] += 1
    rooms = sorted({room for counts in table.values() for room in counts})
    return rooms, dict(sorted(table.items()))


def talk_edges(db: sqlite3.Connection, first: int, last: int) -> Counter:
    """(speaker, listener) -> messages: mail to its recipients, forum replies to the thread's
    earlier writers, Common Room talk to those who spoke there in the same tick."""
    edges: Counter = Counter()
    if has_table(db, "capsule_messages"):
        for room, author, recipients, starter, writers in db.execute(
            "SELECT c.room, m.author, c.recipients, c.author, "
            "(SELECT json_group_array(DISTINCT p.author) FROM capsule_messages p WHERE p.capsule=c.id AND p.k<m.k) "
            "FROM capsule_messages m JOIN capsules c ON c.id=m.capsule "
            "WHERE c.room IN ('mail', 'public_memory') AND m.tick BETWEEN ? AND ?",
            (first, last),
        ):
            listeners = set(json.loads(recipients)) | {starter} if room == "mail" else set(json.loads(writers))
            for listener in listeners - {author}:
                edges[(author, listener)] += 1
    if has_table(db, "common_messages"):
        by_tick: dict[int, list[str]] = defaultdict(list)
        for tick, author in db.execute(
            "SELECT tick, author FROM common_messages WHERE tick BETWEEN ? AND ?", (first, last)
        ):
            by_tick[tick].append(author)
        for speakers in by_tick.values():
            for speaker in speakers:
                for other in set(speakers) - {speaker}:
                    edges[(speaker, other)] += 1
    return edges


def token_plot(
    series: dict[str, list[tuple[int, int]]], first: int, last: int, width: int = 760, height: int = 280
) -> Markup:
    if not series:
        return Markup("<p class='empty'>No turns in this window.</p>")
    left, right, top, bottom = 60, width - 150, 16, height - 30
    top_tokens = max(t for points in series.values() for _, t in points) or 1
    x = lambda tick: left + (tick - first) / max(1, last - first) * (right - left)  # noqa: E731
    y = lambda tokens: bottom - tokens / top_tokens * (bottom - top)  # noqa: E731
    parts = [
        f"<svg class='plot' id='token-plot' viewBox='0 0 {width} {height}' role='img' "
        f"aria-label='context tokens per turn'>",
        f"<line x1='{left}' y1='{bottom}' x2='{right}' y2='{bottom}' class='axis'/>",
        f"<line x1='{left}' y1='{top}' x2='{left}' y2='{bottom}' class='axis'/>",
        f"<text x='4' y='{top + 8}' class='label'>{top_tokens:,}</text>",
        f"<text x='{left}' y='{height - 8}' class='label'>tick {first}</text>",
        f"<text x='{right - 50}' y='{height - 8}' class='label'>tick {last}</text>",
    ]
    for n, (agent, points) in enumerate(series.items()):
        colour = PALETTE[n % len(PALETTE)]
        path = " ".join(f"{'M' if i == 0 else 'L'}{x(t):.1f},{y(v):.1f}" for i, (t, v) in enumerate(points))
        parts.append(
            f"<path d='{path}' fill='none' stroke='{colour}' stroke-width='1.5'><title>{escape(agent)}</title></path>"
        )
        parts.append(
            f"<text x='{right + 8}' y='{top + 14 * n + 8}' class='label' fill='{colour}' "
            f"style='fill:{colour}'>{escape(agent)}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def talk_graph(edges: Counter, size: int = 520) -> Markup:
    if not edges:
        return Markup("<p class='empty'>Nobody talked to anybody in this window.</p>")
    names = sorted({name for pair in edges for name in pair})[:40]
    centre, radius = size / 2, size / 2 - 90
    spot = {
        name: (
            centre + radius * math.cos(2 * math.pi * i / len(names)),
            centre + radius * math.sin(2 * math.pi * i / len(names)),
        )
        for i, name in enumerate(names)
    }
    heaviest = max(edges.values())
    parts = [
        f"<svg class='plot' id='talk-graph' viewBox='0 0 {size} {size}' role='img' aria-label='who talks to whom'>"
    ]
    for (a, b), count in edges.most_common():
        if a in spot and b in spot:
            (x1, y1), (x2, y2) = spot[a], spot[b]
            parts.append(
                f"<line x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' class='edge' "
                f"stroke-width='{0.5 + 4 * count / heaviest:.2f}'><title>{escape(a)} → {escape(b)}: "
                f"{count}</title></line>"
            )
    for name, (cx, cy) in spot.items():
        parts.append(
            f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='5' class='node'/>"
            f"<text x='{cx + 8:.1f}' y='{cy + 4:.1f}' class='label'>{escape(name)}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def study(db: sqlite3.Connection, first: int | None, last: int | None) -> dict[str, Any]:
    first, last = window(db, first, last)
    rooms, actions = actions_per_room(db, first, last)
    edges = talk_edges(db, first, last)
    return {
        "first": first,
        "last": last,
        "tokens": token_plot(token_series(db, first, last), first, last),
        "rooms": rooms,
        "actions": actions,
        "graph": talk_graph(edges),
        "pairs": edges.most_common(20),
    }
