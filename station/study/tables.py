"""A station's recorded world as the study's five tables (schema.TABLES), read from station.db: the
order of the reading (and its progress), the lives and spend tables, and each table's final columns.
Every table is computed from the records alone, so a replay or a fork of a station gives the same tables.

A window of ticks (first/last) gives the whole station's rows of its ticks, read at the cost of the
window: the rows of its ticks, and by id what they name from before it (a cited paper or evaluation,
a parent). The other tables are read by evaluations.py, texts.py and edges.py.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from station.study import Progress, Study
from station.study.edges import EDGE_READERS, World, assemble_edges
from station.study.evaluations import read_evaluations
from station.study.records import People, Span, StudyError, last_tick, snapshot, table
from station.study.schema import TABLES
from station.study.texts import capsule_messages, read_texts

__all__ = ["StudyError", "read_study", "round_window"]  # StudyError: callers catch it from here

WINDOWS = 20  # the default window makes about this many windows


def read_study(
    path: Path,
    *,
    first: int | None = None,
    last: int | None = None,
    window: int | None = None,
    progress: Progress | None = None,
    tables: Iterable[str] | None = None,
) -> Study:
    """The study's tables of the station in `path`, restricted to ticks `first`..`last` (default all).
    `tables`: read only these (the others are empty), with what they are made from (edges need the
    evaluations and texts, texts the evaluations)."""
    say: Progress = progress or (lambda step, done, total: None)
    path = Path(path)
    wanted = _wanted(tables)
    with snapshot(path) as db:
        final = last_tick(db)
        lo = 1 if first is None else first
        hi = final if last is None else last
        since = 0 if first is None else first  # the task baselines are recorded at tick 0
        if lo > hi:
            raise StudyError(f"first tick {lo} is after last tick {hi}: give first <= last")
        if window is not None and window < 1:
            raise StudyError(f"window {window}: give a window of at least 1 tick")
        edge_steps = [f"edges: {k}" for k in EDGE_READERS] if "edges" in wanted else []
        steps = [*(t for t in TABLES if t in wanted and t != "edges"), *edge_steps, "done"]
        step = lambda name: say(name, steps.index(name), len(steps) - 1)  # noqa: E731
        # a window reads the rows of its ticks, and what they name from before it, by id
        span: Span = (None, None) if first is None and last is None else (since, hi)
        people = People(db)
        lives, spend, edges, evaluations, texts = (pd.DataFrame(columns=[c for c, _, _ in TABLES[t]]) for t in TABLES)
        if "lives" in wanted:
            step("lives")
            lives = _lives(db, people, lo, hi)
        if "spend" in wanted:
            step("spend")
            spend = _spend(db, lo, hi)
        if "evaluations" in wanted:
            step("evaluations")
            evaluations = read_evaluations(db, people, span)
        if "texts" in wanted:
            step("texts")
            messages = capsule_messages(db, span)
            texts = read_texts(db, people, evaluations, messages, span)
        if "edges" in wanted:
            world = World(db, people, evaluations, messages, texts, span)
            parts = []
            for kind, reader in EDGE_READERS.items():
                step(f"edges: {kind}")
                parts.append(reader(world))
            edges = assemble_edges(parts, people)
        step("done")
    return Study(
        path=path,
        name=path.resolve().name,
        first_tick=lo,
        last_tick=hi,
        window=window or round_window(hi - lo + 1),
        lives=_typed("lives", lives),
        spend=_typed("spend", spend),
        edges=_typed("edges", _between(edges, "tick", since, hi)),
        evaluations=_typed("evaluations", _between(evaluations, "tick", since, hi)),
        texts=_typed("texts", _between(texts, "tick", since, hi)),
    )


def _wanted(tables: Iterable[str] | None) -> set[str]:
    """The tables to read, with those they are made from."""
    wanted = set(TABLES) if tables is None else set(tables)
    unknown = sorted(wanted - set(TABLES))
    if unknown:
        raise StudyError(f"no study table {', '.join(unknown)}: the tables are {', '.join(TABLES)}")
    if "edges" in wanted:
        wanted |= {"texts"}
    if "texts" in wanted:
        wanted |= {"evaluations"}
    return wanted


def round_window(ticks: int) -> int:
    """The round number (1, 2 or 5 times a power of ten) nearest to a twentieth of `ticks`, at least 1."""
    wanted = max(ticks / WINDOWS, 1.0)
    power = 10 ** math.floor(math.log10(wanted))
    return min((m * power for m in (1, 2, 5, 10)), key=lambda w: abs(math.log(w / wanted)))


# -- lives and spend -----------------------------------------------------------------------------
def _lives(db: sqlite3.Connection, people: People, lo: int, hi: int) -> pd.DataFrame:
    lives = people.lives.reset_index()
    alive = (lives["birth"] <= hi) & (lives["exit"].isna() | (lives["exit"] >= lo))
    lives = lives[alive].copy()
    turns = table(
        db.execute(
            "SELECT session, COUNT(*), COUNT(DISTINCT room), SUM(input_tokens), SUM(output_tokens), TOTAL(cost_usd) "
            "FROM turns WHERE tick BETWEEN ? AND ? GROUP BY session",
            (lo, hi),
        ).fetchall(),
        ["session", "turns", "rooms_visited", "input_tokens", "output_tokens", "cost_usd"],
        ints=["session", "turns", "rooms_visited"],
        numbers=["input_tokens", "output_tokens", "cost_usd"],
    ).set_index("session")
    ancestors = dict(
        db.execute(
            "SELECT agent, json_extract(payload, '$.ancestor') FROM events WHERE kind='agent_ascended'"
        ).fetchall()
    )
    ended = lives["exit"].notna() & (lives["exit"] <= hi)
    end = lives["exit"].where(ended)
    recursive = lives["kind"] == "recursive"
    out = pd.DataFrame(
        {
            "session": lives["session"],
            "agent": lives["name"],
            "names": lives["names"],
            "lineage": lives["lineage"].where(recursive),
            "generation": lives["gen"].where(recursive),
            "ancestor": lives["name"].map(ancestors),
            "model": lives["model"],
            "kind": lives["kind"],
            "birth_tick": lives["birth"],
            "ascend_tick": lives["ascend"].where(recursive),
            "end_tick": end,
            "end_cause": lives["cause"].where(ended),
            "ticks_alive": pd.to_numeric(end).fillna(hi).clip(upper=hi) - lives["birth"] + 1,
        }
    )
    for column in ("turns", "rooms_visited", "input_tokens", "output_tokens", "cost_usd"):
        out[column] = lives["session"].map(turns[column]).fillna(0)
    return out.sort_values("session")


# the callers that are no agent, from the small running totals (so spend's index finds their rows)
_NOT_AGENTS = "SELECT who FROM spend_totals WHERE who NOT IN (SELECT name FROM agents)"


def _spend(db: sqlite3.Connection, lo: int, hi: int) -> pd.DataFrame:
    """Calls, tokens and dollars per role and tick. The agents' are their turns' (recorded with the
    world, so a replay has them too); the other roles' (reviewer, grader, debugger, ...) are the calls
    this station's own run made (a replay asks no model: it has none). Calls outside any tick count only
    when every tick is read."""
    agents = db.execute(
        "SELECT 'agent', tick, COUNT(*), SUM(input_tokens), SUM(output_tokens), TOTAL(cost_usd) FROM turns "
        "WHERE tick BETWEEN ? AND ? GROUP BY tick ORDER BY tick",
        (lo, hi),
    ).fetchall()
    outside = " OR tick IS NULL" if lo <= 1 and hi >= last_tick(db) else ""
    others = db.execute(
        "SELECT who, tick, COUNT(*), SUM(input_tokens), SUM(output_tokens), TOTAL(cost_usd) FROM spend "
        f"WHERE (tick BETWEEN ? AND ?{outside}) AND who IN ({_NOT_AGENTS}) GROUP BY who, tick "
        "ORDER BY who, tick",
        (lo, hi),
    ).fetchall()
    columns = ["role", "tick", "calls", "input_tokens", "output_tokens", "cost_usd"]
    return pd.DataFrame(agents + others, columns=columns).fillna({"input_tokens": 0, "output_tokens": 0})


def _between(frame: pd.DataFrame, column: str, lo: int, hi: int) -> pd.DataFrame:
    return frame[(frame[column] >= lo) & (frame[column] <= hi)]


def _typed(table: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The table's columns (schema.TABLES) in order, with their dtypes; a required value missing is a bug."""
    out = pd.DataFrame(index=range(len(frame)))
    for column, dtype, _meaning in TABLES[table]:
        values = frame[column].reset_index(drop=True)
        if dtype == "int64" and values.isna().any():
            raise AssertionError(f"study table {table}: column {column} has missing values")
        if dtype == "Int64" and values.dtype == object:
            values = pd.to_numeric(values)
        out[column] = values.astype(dtype)
    return out
