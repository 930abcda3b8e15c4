"""Behavioural study views (meant for open stations): over a window of ticks, each agent's
context tokens turn by turn, its actions per room, and who talks to whom through mail, the
forum and the Common Room. Windows keep every query bounded on long stations.

An agent here is a session: a guest and the agent it ascended as live one life (the same
`turns.session`), so they are one line, one row, one node, labelled by the latest name.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from html import escape
from typing import Any

from markupsafe import Markup

from rooms import capsule_views, common_views
from station.apps.web import plots
from station.apps.web.data import has_table

PALETTE = ["#2f5fa7", "#b0452c", "#2d8a4e", "#8a2a8f", "#c08a12", "#1f8a8a", "#6b4f2a", "#d0417e", "#5a6b7d", "#7a9a1f"]
MAX_LINES = 10  # lines drawn by default in the token timeline
MAX_CHOSEN = 20  # lines a reader may ask for
MAX_TURNS = 10_000  # turns a window may hold: a wider one is narrowed to its latest ticks
LISTED = 100  # agents offered to draw and rows of the actions table: the busiest of the window
SEGMENTS = 10  # the default lines cover every tenth of the window that had turns
RULE = (
    "By default: enough agents to have a line in every tenth of the window that had turns, then the "
    f"busiest others, up to {MAX_LINES} lines (ties go to the later and longer-lived)."
)


@dataclass(eq=False)  # compared by identity: one object per session
class Life:
    """One session's turns inside the window."""

    session: int
    turns: int = 0
    first: int = 0  # its first and last tick with a turn in the window
    last: int = 0
    points: list[tuple[int, int]] = field(default_factory=list)  # (tick, context tokens): read for drawn lives
    rooms: Counter = field(default_factory=Counter)  # successful actions per room
    segments: Counter = field(default_factory=Counter)  # turns per tenth of the window
    names: list[str] = field(default_factory=list)  # the oldest first, the latest last

    @property
    def name(self) -> str:
        return self.names[-1]

    @property
    def label(self) -> str:
        earlier = self.names[:-1]
        return self.name + (f" (was {', '.join(earlier)})" if earlier else "")

    def rank(self) -> tuple[int, int, int, int]:
        """Busier first; then the later, then the longer-lived."""
        return self.turns, self.last, self.last - self.first, self.session


def window(db: sqlite3.Connection, first: int | None, last: int | None, span: int = 500) -> tuple[int, int]:
    now = db.execute("SELECT COALESCE(MAX(tick), 1) FROM turns").fetchone()[0]
    last = min(last if last is not None else now, now)
    first = max(1, first if first is not None else last - span + 1)
    return min(first, last), last


def bounded(db: sqlite3.Connection, first: int, last: int) -> int:
    """The first tick of the window that holds at most MAX_TURNS turns, ending at `last` (a crowded
    station's window is narrowed to its latest ticks: a page reads a bounded number of turns)."""
    row = db.execute(
        "SELECT tick FROM turns WHERE tick BETWEEN ? AND ? ORDER BY tick DESC LIMIT 1 OFFSET ?",
        (first, last, MAX_TURNS),
    ).fetchone()
    return first if row is None else min(row[0] + 1, last)


def read_lives(db: sqlite3.Connection, first: int, last: int) -> dict[int, Life]:
    """Every session with turns in the window (at most MAX_TURNS turns: see `bounded`), in one pass
    over the window's rows (the (tick, session) index); only the parsed actions of each turn are
    taken out of its JSON."""
    lives: dict[int, Life] = {}
    width = last - first + 1
    for tick, session, parsed in db.execute(
        "SELECT tick, session, CASE WHEN json_valid(actions) THEN json_extract(actions, '$.parsed') END "
        "FROM turns WHERE tick BETWEEN ? AND ? ORDER BY tick",
        (first, last),
    ):
        life = lives.get(session)
        if life is None:
            life = lives[session] = Life(session, first=tick)
        life.turns += 1
        life.last = tick
        life.segments[(tick - first) * SEGMENTS // width] += 1
        for action in json.loads(parsed or "[]"):
            if isinstance(action, dict) and action.get("ok"):
                life.rooms[action.get("room") or "?"] += 1
    name_lives(db, lives)
    return lives


def read_points(db: sqlite3.Connection, drawn: list[Life], first: int, last: int) -> None:
    """The context tokens after each turn of the lives drawn (their own index: a few rows each)."""
    for life in drawn:
        life.points = [
            (tick, tokens)
            for tick, tokens in db.execute(
                "SELECT tick, COALESCE(context_tokens, 0) FROM turns WHERE session=? AND tick BETWEEN ? AND ? "
                "ORDER BY tick",
                (life.session, first, last),
            )
        ]


def session_names(db: sqlite3.Connection, sessions: list[int]) -> dict[int, list[str]]:
    """Each session's agent names from the agents table, the ascended (latest) one last."""
    names: dict[int, list[str]] = defaultdict(list)
    for start in range(0, len(sessions), 500):  # SQLite's limit on bound parameters
        part = sessions[start : start + 500]
        for session, name in db.execute(
            f"SELECT session, name FROM agents WHERE session IN ({','.join('?' * len(part))}) "
            "ORDER BY session, json_extract(data, '$.ascended_to') IS NULL, rowid",
            part,
        ):
            names[session].append(name)
    return names


def name_lives(db: sqlite3.Connection, lives: dict[int, Life]) -> None:
    known = session_names(db, list(lives))
    for session, life in lives.items():
        life.names = known.get(session) or []
        if not life.names:  # the agents table lacks the session: the names its turns were taken under
            life.names = [
                r[0]
                for r in db.execute(
                    "SELECT agent FROM turns WHERE session=? GROUP BY agent ORDER BY MIN(tick)", (session,)
                )
            ]


def default_choice(lives: dict[int, Life]) -> list[Life]:
    """Cover every tenth of the window that had turns (greedily, the life covering most of what
    is still uncovered), then fill up with the busiest."""
    chosen: list[Life] = []
    uncovered = {s for life in lives.values() for s in life.segments}
    while uncovered and len(chosen) < MAX_LINES:
        best = max(lives.values(), key=lambda life: (len(uncovered & life.segments.keys()), life.rank()))
        chosen.append(best)
        uncovered -= best.segments.keys()
    rest = sorted((life for life in lives.values() if life not in chosen), key=Life.rank, reverse=True)
    return chosen + rest[: MAX_LINES - len(chosen)]


def reader_choice(lives: dict[int, Life], names: list[str]) -> tuple[list[Life], list[str]]:
    """The lives the reader named (either name of a merged session) and the names not found."""
    by_name = {name: life for life in lives.values() for name in life.names}
    chosen: list[Life] = []
    unknown: list[str] = []
    for name in names:
        life = by_name.get(name)
        if life is None and name not in unknown:
            unknown.append(name)
        elif life is not None and life not in chosen:
            chosen.append(life)
    return chosen, unknown


def choose(lives: dict[int, Life], names: list[str] | None, first: int, last: int) -> tuple[list[Life], list[str]]:
    """The lives to draw and notes for the reader about the asked names."""
    if not names:
        return default_choice(lives), []
    chosen, unknown = reader_choice(lives, names)
    notes = []
    if unknown:
        shown = ", ".join(name[:60] for name in unknown[:10]) + (" …" if len(unknown) > 10 else "")
        notes.append(f"No agent with turns in ticks {first}–{last} is named: {shown} (ignored).")
    if len(chosen) > MAX_CHOSEN:
        notes.append(f"At most {MAX_CHOSEN} lines: the first {MAX_CHOSEN} agents asked for are drawn.")
        chosen = chosen[:MAX_CHOSEN]
    if not chosen:
        notes.append("None of the agents asked for had turns here: showing the default choice.")
        return default_choice(lives), notes
    return chosen, notes


def busiest(lives: dict[int, Life]) -> list[Life]:
    """The LISTED lives with the most turns in the window."""
    return sorted(lives.values(), key=lambda life: (-life.turns, life.label))[:LISTED]


def actions_rows(lives: dict[int, Life]) -> tuple[list[str], list[dict[str, Any]]]:
    """The rooms, and a row of successful actions per room for each of the busiest lives that acted."""
    acted = {life.session: life for life in lives.values() if life.rooms}
    rows = [{"label": life.label, "name": life.name, "counts": life.rooms} for life in busiest(acted)]
    rooms = sorted({room for row in rows for room in row["counts"]})
    return rooms, sorted(rows, key=lambda row: row["label"])


def talk_edges(db: sqlite3.Connection, first: int, last: int) -> Counter:
    """(speaker, listener) -> messages: mail to its recipients, forum replies to the thread's
    earlier writers, Common Room talk to those who spoke there in the same tick."""
    edges: Counter = Counter()
    if has_table(db, "capsule_messages"):
        for talk in capsule_views.talk_between(db, first, last):
            mail = talk.room == "mail"
            listeners = set(talk.recipients) | {talk.starter} if mail else set(talk.earlier_writers)
            for listener in listeners - {talk.author}:
                edges[(talk.author, listener)] += 1
    if has_table(db, "common_messages"):
        by_tick: dict[int, list[str]] = defaultdict(list)
        for tick, author in common_views.speakers(db, first, last):
            by_tick[tick].append(author)
        for speakers in by_tick.values():
            for speaker in speakers:
                for other in set(speakers) - {speaker}:
                    edges[(speaker, other)] += 1
    return edges


def merge_edges(db: sqlite3.Connection, edges: Counter, lives: dict[int, Life]) -> tuple[Counter, dict[str, str]]:
    """The edges between sessions (labels), and each label's agent name to link to. Names outside
    the window's lives (a thread's old starter) are looked up; others (System) stay as they are."""
    who = {name: life for life in lives.values() for name in life.names}
    strangers = sorted({name for pair in edges for name in pair} - who.keys())[:500]
    if strangers:
        sessions = dict(
            db.execute(f"SELECT name, session FROM agents WHERE name IN ({','.join('?' * len(strangers))})", strangers)
        )
        for session, names in session_names(db, sorted(set(sessions.values()))).items():
            for name in names:
                who[name] = Life(session, names=names)
    label = {name: life.label for name, life in who.items()}
    links = {life.label: life.name for life in who.values()}
    merged: Counter = Counter()
    for (a, b), count in edges.items():
        a, b = label.get(a, a), label.get(b, b)
        if a != b:  # a guest mailing its own ascended self is no talk
            merged[(a, b)] += count
    return merged, links


def token_plot(drawn: list[Life], first: int, last: int) -> Markup:
    if not drawn:
        return Markup("<p class='empty'>No turns in this window.</p>")
    series: dict[str, list[tuple[float, float]]] = {life.label: list(life.points) for life in drawn}
    return plots.line_plot(
        series,
        x_label="tick",
        y_label="context tokens",
        svg_id="token-plot",
        width=760,
        height=300,
        colours=PALETTE,
        x_range=(first, last),  # the whole window, so a line's place in it reads true
    )


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


def study(
    db: sqlite3.Connection, first: int | None, last: int | None, agents: list[str] | None = None
) -> dict[str, Any]:
    """The study page's context over ticks `first`–`last` (default: the last 500), drawing the
    agents named in `agents` (default: see RULE)."""
    first, last = window(db, first, last)
    asked, first = first, bounded(db, first, last)
    lives = read_lives(db, first, last)
    drawn, notes = choose(lives, agents, first, last)
    if first > asked:
        notes.insert(
            0,
            f"Ticks {asked}–{last} hold more than {MAX_TURNS:,} turns: the latest ticks, {first}–{last}, are shown "
            "(choose an earlier window to see the ones before).",
        )
    drawn.sort(key=lambda life: life.label)
    read_points(db, drawn, first, last)
    rooms, actions = actions_rows(lives)
    acted = sum(1 for life in lives.values() if life.rooms)
    edges, links = merge_edges(db, talk_edges(db, first, last), lives)
    listed = busiest(lives)
    choices = listed + [life for life in drawn if life not in listed]
    return {
        "first": first,
        "last": last,
        "tokens": token_plot(drawn, first, last),
        "lines": [{"label": life.label, "name": life.name, "points": life.points} for life in drawn],
        "rule": RULE,
        "notes": notes,
        "choices": [
            {"label": life.label, "name": life.name, "turns": life.turns, "checked": life in drawn} for life in choices
        ],
        "lives": len(lives),
        "acted": acted,
        "listed": len(listed),
        "chosen": [life.name for life in drawn] if agents else [],  # kept by the window form
        "rooms": rooms,
        "actions": actions,
        "graph": talk_graph(edges),
        "pairs": edges.most_common(20),
        "links": links,
    }
