"""The Research page's leaderboard with filters and sorting kept in the address, so that a view
can be shared and reloads the same: /research?task=1&lineage=Kepler&status=finished&sort=score.

Filters: task, author, lineage, tag, status, and a window of submission ticks (from, to). Sorts:
rank (as the Research Counter ranks: valid results first, best first), score, newest, oldest.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlencode

from rooms.research import views
from station.apps.web.data import has_table
from station.apps.web.plots import TOP_LINEAGES

PER_PAGE = 100
SORTS = tuple(views.BOARD_SORTS)  # rank: as the Research Counter ranks (valid results first, best first)
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
        """The research read model's selection of the evaluations these filters show."""
        return views.board_where(
            task=self.task,
            author=self.author,
            lineage=self.lineage,
            status=self.status,
            tag=self.tag,
            first=self.first,
            last=self.last,
        )

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
    total = views.board_total(db, where, params)
    pages = max(1, -(-total // PER_PAGE))
    page = min(filters.page, pages)
    entries = views.board_page(db, where, params, filters.sort, PER_PAGE, (page - 1) * PER_PAGE)
    return {"entries": entries, "total": total, "pages": pages, "page": page, "choices": choices(db)}


CHOICES = (
    100  # authors and lineages the filters offer: those of the latest evaluations (any other is typed in the address)
)
RECENT = 2_000  # the latest evaluations they are taken from
TAGS = 200  # the most used tags the tag filter offers


def choices(db: sqlite3.Connection) -> dict[str, list[str]]:
    """The values each filter can take in this station (tags: the 200 most used; authors and lineages:
    the CHOICES who submitted last, a long station has tens of thousands)."""
    return {**views.board_choices(db, recent=RECENT, count=CHOICES, tags=TAGS), "status": list(STATUSES)}


def points(db: sqlite3.Connection, filters: Filters, dots: int = 2_000) -> list[dict[str, Any]]:
    """The scored evaluations the filters select that the score plots draw, by delivery tick: every
    one that raised its task's best or the best of one of the leading lineages (so the lines drawn are
    exact) and an even sample of `dots` of the others (the cloud's shape: a page of a long station
    would otherwise carry 100,000 dots). Kept until an evaluation is scored or delivered."""
    if not has_table(db, "evaluations"):
        return []
    where, params = filters.where()
    # what changes when a point may: a new evaluation, or one delivered (a later version re-scores it
    # at a later tick); each an index lookup, whatever the filters
    mark = views.delivery_mark(db)
    key = (db.execute("PRAGMA database_list").fetchone()[2], where, params, dots)  # the station's file first
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
    if cached is not None and cached[0] == mark:
        return cached[1]
    kept = _glance(views.scored_points(db, where, params), dots)
    details = views.authors_and_titles(db, [row[0] for row in kept])
    chosen = [
        {"id": i, "tick": tick, "score": score, "task": task, "lineage": lineage, **details.get(i, {})}
        for i, tick, score, task, lineage in kept
    ]
    with _CACHE_LOCK:
        _CACHE[key] = (mark, chosen)
        while len(_CACHE) > CACHED_VIEWS:
            _CACHE.pop(next(iter(_CACHE)))
    return chosen


CACHED_VIEWS = 32  # filtered views whose plot points are kept (the oldest go first)
_CACHE: dict[tuple, tuple[tuple, list[dict[str, Any]]]] = {}
_CACHE_LOCK = threading.Lock()


def glance(found: list[dict[str, Any]], others: int = 300) -> list[dict[str, Any]]:
    """The points (dicts with id, tick, score, task, lineage) a plot draws: see _glance."""
    by_id = {p["id"]: p for p in found}
    rows = [(p["id"], p["tick"], p["score"], p["task"], p["lineage"]) for p in found]
    return [by_id[row[0]] for row in _glance(rows, others)]


def _glance(found: list[Any], others: int) -> list[Any]:
    """(id, tick, score, task, lineage) rows in delivery order: every one that raised its task's best
    or the best of a leading lineage (plots.TOP_LINEAGES of each task by best score: the lineages the
    plot draws a line for), and an even sample of `others` of the rest (the cloud's shape)."""
    best_of: dict[tuple[str, str], float] = {}
    for _, _, score, task, lineage in found:
        if lineage and score > best_of.get((task, lineage), -math.inf):
            best_of[(task, lineage)] = score
    leading: set[tuple[str, str]] = set()
    for task in {task for task, _ in best_of}:
        ranked = sorted((k for k in best_of if k[0] == task), key=lambda k: (-best_of[k], k[1]))
        leading.update(ranked[:TOP_LINEAGES])
    best: dict[tuple[str, str | None], float] = {}
    kept, rest = [], []
    for row in found:
        _, _, score, task, lineage = row
        keys = [(task, None)] + ([(task, lineage)] if (task, lineage) in leading else [])
        if any(score > best.get(k, -math.inf) for k in keys):
            kept.append(row)
            for k in keys:
                best[k] = max(best.get(k, -math.inf), score)
        else:
            rest.append(row)
    step = max(1, -(-len(rest) // max(1, others)))
    return sorted(kept + rest[::step], key=lambda row: (row[1], row[0]))
