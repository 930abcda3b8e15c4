"""The Research page's leaderboard with filters and sorting kept in the address, so that a view
can be shared and reloads the same: /research?task=1&lineage=Kepler&status=finished&sort=score.

Filters: task, author, lineage, tag, status, and a window of submission ticks (from, to). Sorts:
rank (as the Research Counter ranks: valid results first, best first), score, newest, oldest.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlencode

from rooms.research.store import ranking_order

from .data import has_table, rows

PER_PAGE = 100
SORTS = {
    "rank": "",  # ranking_order, computed per filter
    "score": "e.score IS NULL, e.score DESC, e.id",
    "newest": "e.id DESC",
    "oldest": "e.id",
}
STATUSES = ("queued", "finished", "failed", "timed_out", "scorer_failed", "system_failed")
MAX_TEXT = 200  # a filter value longer than any name is cut


@dataclass
class Filters:
    task: str = ""
    author: str = ""
    lineage: str = ""
    tag: str = ""
    status: str = ""
    first: int | None = None  # submitted at or after this tick
    last: int | None = None  # submitted at or before this tick
    sort: str = "rank"
    page: int = 1

    @classmethod
    def read(cls, query: dict[str, str]) -> Filters:
        """From an address's query; anything malformed is dropped, never an error page."""
        text = {k: str(query.get(k, ""))[:MAX_TEXT].strip() for k in ("task", "author", "lineage", "tag")}
        found = cls(task=text["task"], author=text["author"], lineage=text["lineage"], tag=text["tag"])
        found.status = query.get("status", "") if query.get("status", "") in STATUSES else ""
        found.sort = query.get("sort", "rank") if query.get("sort", "rank") in SORTS else "rank"
        found.first, found.last = _tick(query.get("from")), _tick(query.get("to"))
        found.page = _tick(query.get("page")) or 1
        return found

    def where(self) -> tuple[str, tuple]:
        clauses, params = ["1"], []
        for column in ("task", "author", "lineage", "status"):
            value = getattr(self, column)
            if value:
                clauses.append(f"e.{column}=?")
                params.append(value)
        if self.tag:
            clauses.append("e.id IN (SELECT evaluation FROM evaluation_tags WHERE tag=?)")
            params.append(self.tag.lower().replace("_", "-"))
        if self.first is not None:
            clauses.append("e.tick>=?")
            params.append(self.first)
        if self.last is not None:
            clauses.append("e.tick<=?")
            params.append(self.last)
        return " AND ".join(clauses), tuple(params)

    def query(self, **changes: Any) -> str:
        """This view's address query with `changes` (e.g. sort="score"); defaults are left out."""
        values = {f.name: getattr(self, f.name) for f in fields(self)} | changes
        if "page" not in changes:
            values["page"] = 1  # a new filter or sort starts on its first page
        names = {"first": "from", "last": "to"}
        kept = {
            names.get(k, k): v
            for k, v in values.items()
            if v not in ("", None) and not (k == "sort" and v == "rank") and not (k == "page" and v == 1)
        }
        return "?" + urlencode(kept) if kept else ""

    @property
    def active(self) -> bool:
        return any((self.task, self.author, self.lineage, self.tag, self.status, self.first, self.last))


def _tick(value: str | None) -> int | None:
    try:
        number = int(value or "")
    except ValueError:
        return None
    return number if 0 < number < 2**62 else None


def board(db: sqlite3.Connection, filters: Filters) -> dict[str, Any]:
    """One page of the filtered, sorted leaderboard, its total, and the choices the form offers."""
    if not has_table(db, "evaluations"):
        return {"entries": [], "total": 0, "pages": 1, "page": 1, "choices": {}}
    where, params = filters.where()
    total = db.execute(f"SELECT COUNT(*) FROM evaluations e WHERE {where}", params).fetchone()[0]
    pages = max(1, -(-total // PER_PAGE))
    page = min(filters.page, pages)
    order = SORTS[filters.sort] or ranking_order(lambda sql, p: db.execute(sql, p).fetchall(), where, params)
    entries = rows(
        db,
        "SELECT e.id, e.task, e.author, e.lineage, e.tick, e.title, e.tags, e.status, e.score, e.finished_tick "
        f"FROM evaluations e WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?",
        (*params, PER_PAGE, (page - 1) * PER_PAGE),
    )
    return {"entries": entries, "total": total, "pages": pages, "page": page, "choices": choices(db)}


def choices(db: sqlite3.Connection) -> dict[str, list[str]]:
    """The values each filter can take in this station (tags: the 200 most used)."""
    column = lambda sql: [r[0] for r in db.execute(sql)]  # noqa: E731
    return {
        "task": column("SELECT DISTINCT task FROM evaluations ORDER BY CAST(task AS INTEGER), task"),
        "author": column("SELECT DISTINCT author FROM evaluations ORDER BY author"),
        "lineage": column("SELECT DISTINCT lineage FROM evaluations WHERE lineage IS NOT NULL ORDER BY lineage"),
        "tag": column("SELECT tag FROM evaluation_tags GROUP BY tag ORDER BY COUNT(*) DESC, tag LIMIT 200"),
        "status": list(STATUSES),
    }


def points(db: sqlite3.Connection, filters: Filters) -> list[dict[str, Any]]:
    """Every scored evaluation the filters select, for the score plots (by delivery tick)."""
    if not has_table(db, "evaluations"):
        return []
    where, params = filters.where()
    return rows(
        db,
        "SELECT e.id, COALESCE(e.finished_tick, e.tick) AS tick, e.score, e.task, e.lineage, e.author, e.title "
        f"FROM evaluations e WHERE {where} AND e.score IS NOT NULL ORDER BY 2, e.id",
        params,
    )


def glance(found: list[dict[str, Any]], others: int = 300) -> list[dict[str, Any]]:
    """The points of a small overview plot: every one that raised its task's or its lineage's best
    (so the best-so-far lines are exact) and an even sample of the rest (the cloud's shape)."""
    best: dict[tuple[str, str | None], float] = {}
    kept, rest = [], []
    for p in found:  # in delivery order
        keys = [(p["task"], None), (p["task"], p["lineage"])]
        if any(p["score"] > best.get(k, float("-inf")) for k in keys):
            kept.append(p)
            for k in keys:
                best[k] = max(best.get(k, float("-inf")), p["score"])
        else:
            rest.append(p)
    step = max(1, -(-len(rest) // others))
    return sorted(kept + rest[::step], key=lambda p: (p["tick"], p["id"]))
