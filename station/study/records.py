"""What every reader of the study's tables shares: the station's database opened as one read-only
snapshot, its clock and configuration, who is who (names, sessions, lineages, what each could see),
the span of ticks read, and rows read into frames with numeric columns.

The database is opened read-only, in one read transaction (one consistent snapshot, even while the
station runs). Rooms' records come through their read models (rooms/*_views.py); the engine's own
tables (agents, turns, events, spend) are read with SQL.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

SYSTEM = "System"  # the author of the task baselines: not an agent

# a quick sieve before the patterns of a cited evaluation or paper (research_views.mentioned, archive_views.papers_named)
MAY_CITE = re.compile(r"eval|paper|archive", re.IGNORECASE)


class StudyError(ValueError):
    """The directory is not a readable station (the message says which file and what to do)."""


# -- opening -----------------------------------------------------------------------------------
@contextmanager
def snapshot(path: Path) -> Iterator[sqlite3.Connection]:
    """station.db opened read-only, inside one read transaction."""
    if not path.is_dir():
        raise StudyError(f"{path}: no such station directory: give the folder `station run --dir` made")
    db_path = path / "station.db"
    if not db_path.is_file():
        raise StudyError(f"{path}: holds no station.db: give the folder `station run --dir` made")
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    try:
        db.execute("BEGIN")
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"meta", "agents", "turns", "events", "spend"} <= names:
            raise StudyError(f"{db_path}: not a station database (no agents, turns or meta table)")
        yield db
    except sqlite3.DatabaseError as err:
        raise StudyError(f"{db_path}: not a readable station database ({err})") from err
    finally:
        db.close()


def has(db: sqlite3.Connection, *tables: str) -> bool:
    """Whether the station has these tables (a station without some rooms has not theirs)."""
    found = db.execute(
        f"SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name IN ({','.join('?' * len(tables))})", tables
    ).fetchone()[0]
    return bool(found == len(tables))


def last_tick(db: sqlite3.Connection) -> int:
    """The last tick that finished (the clock shows the tick in progress or the next one)."""
    row = db.execute("SELECT value FROM meta WHERE key='tick'").fetchone()
    return max(int(row[0]) - 1, 1) if row else 1


def _config(db: sqlite3.Connection) -> dict:
    row = db.execute("SELECT value FROM meta WHERE key='config'").fetchone()
    return json.loads(row[0]) if row else {}


# -- who is who ----------------------------------------------------------------------------------
class People:
    """Every name and session of the station: the session's latest name, lineage, ascension, birth."""

    def __init__(self, db: sqlite3.Connection) -> None:
        rows = pd.DataFrame(
            db.execute(
                "SELECT name, session, kind, lineage, model_name, json_extract(data, '$.birth_tick'), "
                "json_extract(data, '$.ascend_tick'), json_extract(data, '$.exit_tick'), "
                "json_extract(data, '$.exit_reason'), json_extract(data, '$.generation'), "
                "json_extract(data, '$.role') FROM agents ORDER BY session, kind='recursive', name"
            ).fetchall(),
            columns=["name", "session", "kind", "lineage", "model", "birth", "ascend", "exit", "cause", "gen", "role"],
        )
        self.names = rows
        self.session_of: dict[str, int] = dict(zip(rows["name"], rows["session"], strict=True))
        self._sessions = pd.Series(self.session_of, dtype="Int64")  # mapped through at once (a dict is copied)
        latest = rows.drop_duplicates("session", keep="last").set_index("session")  # the recursive row if any
        latest["birth"] = rows.groupby("session")["birth"].min()
        names: dict[int, list[str]] = {}
        for session, name in zip(rows["session"], rows["name"], strict=True):  # quicker than a groupby's join
            names.setdefault(session, []).append(name)
        latest["names"] = pd.Series({session: " > ".join(every) for session, every in names.items()})
        self.lives = latest
        self.latest: dict[int, str] = latest["name"].to_dict()
        # A name exists from its birth (a guest) or ascension (the agent it became).
        self.since = dict(zip(rows["name"], rows["ascend"].where(rows["kind"] == "recursive").fillna(rows["birth"])))
        maturity = _config(db).get("lifecycle", {}).get("maturity_ticks", 50)
        self.maturity: int | None = maturity

    def lineage_at(self, sessions: pd.Series, ticks: pd.Series) -> pd.Series:
        """Each session's lineage at the tick (missing before it ascended, or for no session)."""
        found = sessions.map(self.lives["lineage"])
        ascended = sessions.map(self.lives["ascend"])
        young = ascended.notna() & (ticks.astype("float64") < ascended.astype("float64"))
        return found.where(~young).astype("string")

    def sees_all(self, sessions: pd.Series, ticks: pd.Series) -> pd.Series:
        """Whether each session saw every lineage at the tick (visibility.py's rule; no session: yes)."""
        if self.maturity is None:
            return pd.Series(True, index=sessions.index)
        age = ticks.astype("float64") - sessions.map(self.lives["birth"]).astype("float64")
        supervisor = sessions.map(self.lives["role"]).eq("supervisor")
        return (sessions.isna() | (age >= self.maturity) | supervisor).astype(bool)

    def sessions(self, names: pd.Series) -> pd.Series:
        return names.map(self._sessions).astype("Int64")


# -- the ticks read ------------------------------------------------------------------------------
Span = tuple[int | None, int | None]  # the ticks read: (None, None) is every tick


# -- types ---------------------------------------------------------------------------------------
def table(
    rows: Sequence[tuple], columns: Sequence[str], *, ints: Sequence[str] = (), numbers: Sequence[str] = ()
) -> pd.DataFrame:
    """Rows read from the database as a frame whose numeric columns are numeric even when empty or all
    missing: `ints` never missing, `numbers` floats with NaN for missing."""
    frame = pd.DataFrame(rows, columns=list(columns))
    for column in ints:
        frame[column] = frame[column].astype("int64")
    for column in numbers:
        frame[column] = pd.to_numeric(frame[column]).astype("float64")
    return frame
