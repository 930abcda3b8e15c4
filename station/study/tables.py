"""A station's recorded world as the study's five tables (schema.TABLES), read from station.db.

The database is opened read-only, in one read transaction (one consistent snapshot, even while the
station runs). Rooms' records come through their read models (rooms/*_views.py); the engine's own
tables (agents, turns, events, spend) are read with SQL here. Every table is computed from the
records alone, so a replay or a fork of a station gives the same tables.

A window of ticks (first/last) gives the whole station's rows of its ticks, read at the cost of the
window: the rows of its ticks, and by id what they name from before it (a cited paper or evaluation,
a parent); an evaluation's comparisons come from the CANDIDATES latest deliveries before the window
and the best scores delivered before it, one aggregate query.

Edges (docs/study.md): one row per act, never an agent to itself (the same session).
- mail: a mail message's writer -> each other participant (the first message: its recipients; a
  reply: the recipients and the starter). Recipients are the mail's recipients as stored now (a
  forward adds some).
- reply: a forum or paper reply's writer -> the thread's starter.
- mention: a forum message's writer -> each agent it @mentions (rooms/mentions.py's rule), among the
  names that existed at its tick.
- common: a Common Room speaker -> each agent who read the message (the room records each reader),
  at the message's tick.
- review: the reviewer -> a submission's author, per review that accepted or rejected it.
- citation: a text (paper, forum/mail message, note, evaluation title and abstract) naming an
  evaluation or a paper of another agent that existed at the text's tick -> that record's author.
- built_on: an evaluation -> its parent's author (evaluations' `parent`), when a different agent.
- read: a reader -> the writer of a capsule message it read (its first read; a read marked before
  reads had ticks, capsule store v3, gets the message's own tick). A message delivered whole in a
  notice (a mail to its recipients, a forum post to those it mentions) is read then. One's own
  messages, the reviewer's and the marks a writer gets for its own writing are not reads.
- inheritance: an ancestor -> its heir (generation g -> g+1), at the heir's ascension tick.

An evaluation's parent is the first earlier evaluation of its task that its title or abstract names
and its author could see ("declared"); else the most similar code (cosine of the code tokens'
frequency vectors, at least SIMILAR; no IDF, so a parent never changes as later code arrives) among
the latest CANDIDATES evaluations of its task delivered before it was submitted that its author could
see ("detected"). Seeing follows rooms/research/visibility.py: a mature agent (or a supervisor, or a
station that does not isolate) sees every lineage, a young one its own lineage and the System baselines.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse

from rooms import capsule_views, common_views
from rooms.archive import views as archive_views
from rooms.mentions import mentioned_names
from rooms.research import views as research_views
from station.study import Progress, Study
from station.study.schema import TABLES

SYSTEM = "System"  # the author of the task baselines: not an agent
SIMILAR = 0.8  # a detected parent's code is at least this similar (cosine of TF-IDF vectors)
CANDIDATES = 2000  # a detected parent is among this many latest delivered evaluations of the task
TIE = 1e-5  # similarities this close are a tie
CHUNK = 500  # evaluations compared at once (bounds the dense similarity block's memory)
DENSE_TERMS = 256  # blocks using at most this many distinct terms are multiplied dense
ROOM_RECORD = {"mail": "mail", "public_memory": "forum", "archive": "paper", "private_memory": "note"}
TEXT_KIND = ROOM_RECORD  # a text's kind is its room's record prefix
WINDOWS = 20  # the default window makes about this many windows


class StudyError(ValueError):
    """The directory is not a readable station (the message says which file and what to do)."""


def read_study(
    path: Path,
    *,
    first: int | None = None,
    last: int | None = None,
    window: int | None = None,
    progress: Progress | None = None,
) -> Study:
    """The study's tables of the station in `path`, restricted to ticks `first`..`last` (default all)."""
    say: Progress = progress or (lambda step, done, total: None)
    path = Path(path)
    with _snapshot(path) as db:
        final = _last_tick(db)
        lo = 1 if first is None else first
        hi = final if last is None else last
        since = 0 if first is None else first  # the task baselines are recorded at tick 0
        if lo > hi:
            raise StudyError(f"first tick {lo} is after last tick {hi}: give first <= last")
        if window is not None and window < 1:
            raise StudyError(f"window {window}: give a window of at least 1 tick")
        steps = ["lives", "spend", "evaluations", "texts", *(f"edges: {k}" for k in _EDGE_READERS), "done"]
        step = lambda name: say(name, steps.index(name), len(steps) - 1)  # noqa: E731
        # a window reads the rows of its ticks, and what they name from before it, by id
        span: _Span = (None, None) if first is None and last is None else (since, hi)
        step("lives")
        people = _People(db)
        lives = _lives(db, people, lo, hi)
        step("spend")
        spend = _spend(db, lo, hi)
        step("evaluations")
        evaluations = _evaluations(db, people, span)
        step("texts")
        messages = _capsule_messages(db, span)
        texts = _texts(db, people, evaluations, messages, span)
        world = _World(db, people, evaluations, messages, texts, span)
        parts = []
        for kind, reader in _EDGE_READERS.items():
            step(f"edges: {kind}")
            parts.append(reader(world))
        step("done")
    edges = _edges(parts, people)
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
        texts=_typed("texts", _between(world.texts, "tick", since, hi)),
    )


def round_window(ticks: int) -> int:
    """The round number (1, 2 or 5 times a power of ten) nearest to a twentieth of `ticks`, at least 1."""
    wanted = max(ticks / WINDOWS, 1.0)
    power = 10 ** math.floor(math.log10(wanted))
    return min((m * power for m in (1, 2, 5, 10)), key=lambda w: abs(math.log(w / wanted)))


# -- opening -----------------------------------------------------------------------------------
@contextmanager
def _snapshot(path: Path) -> Iterator[sqlite3.Connection]:
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


def _has(db: sqlite3.Connection, *tables: str) -> bool:
    """Whether the station has these tables (a station without some rooms has not theirs)."""
    found = db.execute(
        f"SELECT COUNT(*) FROM sqlite_master WHERE type='table' AND name IN ({','.join('?' * len(tables))})", tables
    ).fetchone()[0]
    return bool(found == len(tables))


def _last_tick(db: sqlite3.Connection) -> int:
    """The last tick that finished (the clock shows the tick in progress or the next one)."""
    row = db.execute("SELECT value FROM meta WHERE key='tick'").fetchone()
    return max(int(row[0]) - 1, 1) if row else 1


def _config(db: sqlite3.Connection) -> dict:
    row = db.execute("SELECT value FROM meta WHERE key='config'").fetchone()
    return json.loads(row[0]) if row else {}


# -- who is who ----------------------------------------------------------------------------------
class _People:
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


# -- lives and spend -----------------------------------------------------------------------------
def _lives(db: sqlite3.Connection, people: _People, lo: int, hi: int) -> pd.DataFrame:
    lives = people.lives.reset_index()
    alive = (lives["birth"] <= hi) & (lives["exit"].isna() | (lives["exit"] >= lo))
    lives = lives[alive].copy()
    turns = _table(
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
    outside = " OR tick IS NULL" if lo <= 1 and hi >= _last_tick(db) else ""
    others = db.execute(
        "SELECT who, tick, COUNT(*), SUM(input_tokens), SUM(output_tokens), TOTAL(cost_usd) FROM spend "
        f"WHERE (tick BETWEEN ? AND ?{outside}) AND who IN ({_NOT_AGENTS}) GROUP BY who, tick "
        "ORDER BY who, tick",
        (lo, hi),
    ).fetchall()
    columns = ["role", "tick", "calls", "input_tokens", "output_tokens", "cost_usd"]
    return pd.DataFrame(agents + others, columns=columns).fillna({"input_tokens": 0, "output_tokens": 0})


# -- evaluations ---------------------------------------------------------------------------------
_Span = tuple[int | None, int | None]  # the ticks read: (None, None) is every tick


def _evaluations(db: sqlite3.Connection, people: _People, span: _Span) -> pd.DataFrame:
    """The evaluations submitted in the span, each compared with every earlier one: a window reads the
    earlier ones it needs (the ones its rows name, the candidates of a detected parent, the best scores
    delivered before it)."""
    whole = span == (None, None)
    ev = _evaluation_frame(research_views.evaluation_rows(db, *span) if _has(db, "evaluations") else [], people)
    named = _named(ev)
    known = ev if whole else _with_rows(db, people, ev, {n for names in named.values() for n in names})
    ev["parent"], ev["parent_how"] = _declared(ev, named, known.set_index("id")), pd.NA
    ev.loc[ev["parent"].notna(), "parent_how"] = "declared"
    seen = ev if whole else _candidates(db, people, ev)
    detected = _detected(ev, seen)
    missing = ev["parent"].isna() & detected.notna()
    ev.loc[missing, "parent"] = detected[missing]
    ev.loc[missing, "parent_how"] = "detected"
    ev["parent"] = ev["parent"].astype("Int64")
    by_id = known if whole else pd.concat([known, seen], ignore_index=True).drop_duplicates("id")
    by_id = by_id.set_index("id")
    ev["parent_author"] = ev["parent"].map(by_id["author"])
    ev["parent_lineage"] = ev["parent"].map(by_id["lineage"])
    ev["parent_session"] = ev["parent"].map(by_id["session"]).astype("Int64")
    scored = _scored(ev) if whole else _scored_around(db, people, ev, span)
    ev["best_visible"] = _best_visible(ev, scored)
    ev["improvement"] = ev["score"] - ev["best_visible"]
    ev["new_best"] = _new_best(ev, scored)
    return ev


def _evaluation_frame(rows: Sequence[tuple], people: _People) -> pd.DataFrame:
    """Evaluation rows (EvaluationRow's fields) with the author's latest name and what it could see."""
    ev = _table(
        rows, research_views.EvaluationRow._fields, ints=["id", "tick"], numbers=["session", "finished_tick", "score"]
    )
    ev["session"] = ev["session"].astype("Int64")
    ev["author"] = ev["session"].map(people.latest).fillna(ev["author"])
    ev["sees_all"] = people.sees_all(ev["session"], ev["tick"])
    return ev


def _with_rows(db: sqlite3.Connection, people: _People, ev: pd.DataFrame, ids: set[int]) -> pd.DataFrame:
    """`ev` and the rows of these ids it lacks, read by id."""
    missing = ids - set(ev["id"])
    if not missing:
        return ev
    return pd.concat([ev, _evaluation_frame(research_views.evaluation_rows_of(db, missing), people)], ignore_index=True)


def _named(ev: pd.DataFrame) -> dict[int, list[int]]:
    """The evaluation ids each agent's evaluation names in its title or abstract, by its row."""
    written = ev["title"] + "\n" + ev["abstract"]
    return {
        index: research_views.mentioned(text)
        for index, text, author in zip(ev.index, written, ev["author"], strict=True)
        if author != SYSTEM and _MAY_CITE.search(text)
    }


def _declared(ev: pd.DataFrame, named: dict[int, list[int]], by_id: pd.DataFrame) -> pd.Series:
    """The first earlier evaluation of the same task its title or abstract names and its author could see."""
    found = pd.Series(pd.NA, index=ev.index, dtype="Int64")
    for row in ev.loc[list(named)].itertuples():
        for other in named[row.Index]:
            if other >= row.id or other not in by_id.index or by_id.at[other, "task"] != row.task:
                continue
            other_lineage, other_author = by_id.at[other, "lineage"], by_id.at[other, "author"]
            if row.sees_all or other_author == SYSTEM or (pd.notna(row.lineage) and other_lineage == row.lineage):
                found[row.Index] = other
                break
    return found


def _candidates(db: sqlite3.Connection, people: _People, ev: pd.DataFrame) -> pd.DataFrame:
    """What a window's detected parents are chosen among: per task, the CANDIDATES latest evaluations
    delivered before its first asking submission, and every one delivered from then to its last."""
    asking = ev[(ev["author"] != SYSTEM) & ev["parent"].isna()]
    rows: list[tuple] = []
    for task, group in asking.groupby("task", sort=True):
        first, last = int(group["tick"].min()), int(group["tick"].max())
        rows += research_views.delivered_rows(db, str(task), first, last, CANDIDATES)
    return _evaluation_frame(rows, people)


def _detected(ev: pd.DataFrame, seen: pd.DataFrame) -> pd.Series:
    """Each evaluation's most similar earlier visible code of its task, when at least SIMILAR, among the
    delivered evaluations of `seen` (every one delivered from the CANDIDATES latest before it on)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    found = pd.Series(pd.NA, index=ev.index, dtype="Int64")
    wanting = ev[(ev["author"] != SYSTEM) & ev["parent"].isna()]
    delivered = seen[seen["finished_tick"].notna()]
    for task, asking in wanting.groupby("task", sort=True):
        candidates = delivered[delivered["task"] == task].sort_values(["finished_tick", "id"])
        if candidates.empty:
            continue
        asking = asking.sort_values(["tick", "id"])
        codes = pd.concat([asking, candidates], ignore_index=True).drop_duplicates("id")
        # term frequencies only: a pair's similarity is theirs alone, the same whichever rows are read
        vectors = TfidfVectorizer(token_pattern=r"[A-Za-z_]\w*|\d+|[^\w\s]", dtype=np.float32, use_idf=False)
        every = vectors.fit_transform(codes["code"])
        where = pd.Series(np.arange(len(codes)), index=codes["id"])
        lineage = pd.Series(pd.factorize(codes["lineage"])[0], index=codes["id"])  # -1: none
        a, s = _Side(asking, every, where, lineage), _Side(candidates, every, where, lineage)
        # how many evaluations were delivered before each one was submitted
        ends = np.searchsorted(candidates["finished_tick"].to_numpy(dtype=np.int64), asking["tick"].to_numpy(), "left")
        start = 0
        while start < len(asking):
            stop = start + 1
            while stop < len(asking) and stop - start < CHUNK and ends[stop] - ends[start] <= 4 * CANDIDATES:
                stop += 1
            lo, hi = max(int(ends[start]) - CANDIDATES, 0), int(ends[stop - 1])
            if hi > lo:
                rows, cols = slice(start, stop), slice(lo, hi)
                ranks, mine = np.arange(lo, hi)[None, :], ends[rows, None]
                visible = (s.lineage[None, cols] == a.lineage[rows, None]) & (a.lineage[rows, None] >= 0)
                visible |= s.system[None, cols] | a.sees_all[rows, None]
                allowed = visible & (ranks < mine) & (ranks >= mine - CANDIDATES)
                block = _cosines(a.vectors[rows], s.vectors[cols])
                block[~allowed] = -1.0
                own = s.session[None, cols] == a.session[rows, None]  # near ties: its own, then the latest
                ranked = block + np.float32(TIE) * own.astype(np.float32)
                best = hi - lo - 1 - np.argmax(ranked[:, ::-1], axis=1)
                score = block[np.arange(stop - start), best]
                hit = score >= SIMILAR
                found[asking.index[rows][hit]] = s.ids[cols][best][hit]
            start = stop
    return found


class _Side:
    """One side of the similarity blocks (the asking or the seen evaluations) as aligned arrays."""

    def __init__(self, frame: pd.DataFrame, every: sparse.csr_matrix, where: pd.Series, lineage: pd.Series) -> None:
        self.vectors = every[where[frame["id"]].to_numpy()]
        self.lineage = lineage[frame["id"]].to_numpy()
        self.session = frame["session"].to_numpy(dtype="float64", na_value=np.nan)
        self.system = (frame["author"] == SYSTEM).to_numpy()
        self.sees_all = frame["sees_all"].to_numpy(dtype=bool)
        self.ids = frame["id"].to_numpy()


def _cosines(rows: sparse.csr_matrix, columns: sparse.csr_matrix) -> np.ndarray:
    """rows x columns dot products (the vectors are normalised) as a dense block: by BLAS on the few
    terms they use when those are few (templated code), else sparse."""
    terms = np.union1d(rows.indices, columns.indices)
    if len(terms) <= DENSE_TERMS:
        return np.asarray(rows[:, terms].toarray() @ columns[:, terms].toarray().T, dtype=np.float32)
    return np.asarray((rows @ columns.T).toarray(), dtype=np.float32)


_SCORED = ["id", "task", "author", "session", "lineage", "finished_tick", "score"]


def _scored(ev: pd.DataFrame) -> pd.DataFrame:
    """The delivered scores (id, task, author, session, lineage, finished_tick, score)."""
    return ev.loc[ev["score"].notna() & ev["finished_tick"].notna(), _SCORED]


def _scored_around(db: sqlite3.Connection, people: _People, ev: pd.DataFrame, span: _Span) -> pd.DataFrame:
    """The scores a window's evaluations are compared with: the best delivered before the window per
    task, lineage and author (as one row each, delivered just before it), and every score delivered
    from the window's start until its last evaluation was delivered."""
    if ev.empty:  # none to compare (a station may have no evaluations at all)
        return _scored(ev)
    first = int(span[0] or 0)
    last = max(int(span[1] or 0), int(ev["finished_tick"].max()) if ev["finished_tick"].notna().any() else 0)
    before = pd.DataFrame(
        research_views.best_scores_before(db, first), columns=["task", "lineage", "session", "author", "score"]
    ).assign(id=-1, finished_tick=float(first - 1))
    during = pd.DataFrame(research_views.scored_rows(db, first, last), columns=_SCORED)
    scored = pd.concat([part for part in (before[_SCORED], during) if len(part)] or [during], ignore_index=True)
    scored["session"] = pd.to_numeric(scored["session"]).astype("Int64")
    scored["author"] = scored["session"].map(people.latest).fillna(scored["author"])
    scored["finished_tick"] = scored["finished_tick"].astype("float64")
    scored["score"] = scored["score"].astype("float64")
    return scored


def _best_visible(ev: pd.DataFrame, scored: pd.DataFrame) -> pd.Series:
    """The best score of its task delivered before it was submitted that its author could see."""
    scored = scored.sort_values(["finished_tick", "id"])
    asking = ev[["id", "task", "tick", "lineage"]].assign(tick=ev["tick"].astype("float64")).sort_values("tick")

    def best_before(subset: pd.DataFrame, by: list[str]) -> pd.Series:
        best = subset.assign(best=subset.groupby(by)["score"].cummax(), at=subset["finished_tick"].astype("float64"))
        best = best.dropna(subset=by)[[*by, "at", "best"]].sort_values("at", kind="stable")
        merged = pd.merge_asof(
            asking.dropna(subset=by), best, left_on="tick", right_on="at", by=by, allow_exact_matches=False
        )
        return ev["id"].map(merged.set_index("id")["best"])

    every = best_before(scored, ["task"])
    system = best_before(scored[scored["author"] == SYSTEM], ["task"])
    own = best_before(scored, ["task", "lineage"])
    limited = pd.concat([system, own], axis=1).max(axis=1)
    return every.where(ev["sees_all"] | (ev["author"] == SYSTEM), limited).astype("float64")


def _new_best(ev: pd.DataFrame, scored: pd.DataFrame) -> pd.Series:
    """Whether its score beat every score of its task delivered before it (earlier tick, or same tick and id)."""
    scored = scored.sort_values(["task", "finished_tick", "id"])
    before = scored.groupby("task")["score"].cummax().groupby(scored["task"]).shift()
    new = (scored["score"] > before) | before.isna()
    return ev["id"].isin(scored.loc[new, "id"])


# -- texts ---------------------------------------------------------------------------------------
def _capsule_messages(db: sqlite3.Connection, span: _Span) -> pd.DataFrame:
    rows = capsule_views.thread_messages(db, *span) if _has(db, "capsules", "capsule_messages") else []
    msgs = _table(
        rows,
        capsule_views.ThreadMessage._fields,
        ints=["number", "k", "tick"],
        numbers=["author_session", "starter_session"],
    )
    msgs["author_session"] = msgs["author_session"].astype("Int64")
    msgs["starter_session"] = msgs["starter_session"].astype("Int64")
    msgs["record"] = _capsule_records(msgs["room"], msgs["scope"], msgs["number"], msgs["k"])
    return msgs


def _capsule_records(rooms: pd.Series, scopes: pd.Series, numbers: pd.Series, ks: pd.Series) -> pd.Series:
    """mail/N#k, forum/N#k, note/SCOPE/N#k, paper/N (the paper itself), paper/N#k (a reply)."""
    prefix = rooms.map(ROOM_RECORD).fillna(rooms)
    prefix = prefix.where(rooms != "private_memory", "note/" + scopes)
    base = prefix + "/" + numbers.astype(str)
    paper_itself = (rooms == "archive") & (ks == 1)
    return base.where(paper_itself, base + "#" + ks.astype(str))


def _texts(db: sqlite3.Connection, people: _People, ev: pd.DataFrame, msgs: pd.DataFrame, span: _Span) -> pd.DataFrame:
    msgs = msgs[msgs["author_session"].notna() & msgs["room"].isin(TEXT_KIND.keys())]
    first = msgs["k"] == 1
    capsule_texts = pd.DataFrame(
        {
            "record": msgs["record"],
            "kind": msgs["room"].map(TEXT_KIND),
            "tick": msgs["tick"],
            "session": msgs["author_session"],
            "title": msgs["title"],
            # a paper or forum thread's abstract belongs to its first message's text
            "text": msgs["content"].where(
                ~first | msgs["abstract"].isna(), msgs["abstract"] + "\n\n" + msgs["content"]
            ),
        }
    )
    said = _table(
        common_views.said_between(db, *span) if _has(db, "common_messages") else [],
        common_views.Said._fields,
        ints=["id", "tick"],
    )
    common = pd.DataFrame(
        {
            "record": "common/" + said["id"].astype(str),
            "kind": "common",
            "tick": said["tick"],
            "session": people.sessions(said["author"]),
            "title": pd.NA,
            "text": said["content"],
        }
    )
    researched = ev[ev["author"] != SYSTEM]
    evaluations = pd.DataFrame(
        {
            "record": "evaluation/" + researched["id"].astype(str),
            "kind": "evaluation",
            "tick": researched["tick"],
            "session": researched["session"],
            "title": researched["title"],
            "text": researched["abstract"],
        }
    )
    texts = pd.concat([capsule_texts, common, evaluations], ignore_index=True)
    texts["session"] = texts["session"].astype("Int64")
    texts["author"] = texts["session"].map(people.latest)
    if len(said):
        speakers = pd.concat([pd.Series(dtype=object, index=capsule_texts.index), said["author"]], ignore_index=True)
        texts["author"] = texts["author"].fillna(speakers.reindex(texts.index))
    texts["lineage"] = people.lineage_at(texts["session"], texts["tick"])
    return texts.sort_values("tick", kind="stable").reset_index(drop=True)


# -- edges ---------------------------------------------------------------------------------------
@dataclass
class _World:
    """What the edge readers share: the open database and what was already read from it."""

    db: sqlite3.Connection
    people: _People
    evaluations: pd.DataFrame
    messages: pd.DataFrame  # every capsule message of the span (_capsule_messages)
    texts: pd.DataFrame
    span: _Span

    def evaluations_by_id(self, ids: set[int]) -> pd.DataFrame:
        """The evaluations of these ids (and others), by id: the span's and, for a window, those read."""
        return _with_rows(self.db, self.people, self.evaluations, ids).set_index("id")

    def papers_by_number(self, numbers: set[int]) -> pd.DataFrame:
        """The published papers' (tick, author_session) by number: of these numbers, and maybe others."""
        if self.span == (None, None):
            msgs = self.messages
            return msgs[(msgs["room"] == "archive") & (msgs["k"] == 1)].set_index("number")
        rows = capsule_views.openings(self.db, "archive", sorted(numbers)) if numbers else []
        return _table(rows, ["number", "tick", "author_session"], ints=["number", "tick"]).set_index("number")


def _edge(kind: str, **columns: object) -> pd.DataFrame:
    """Edge rows of one kind: tick, source_session, target_session, record, detail; source and target
    names only where a side is no agent (the reviewer, System)."""
    frame = pd.DataFrame(columns)
    frame["kind"] = kind
    for column in ("source", "target", "record", "detail", "kind"):  # one dtype each: concat stays quick
        frame[column] = frame[column].astype("string") if column in frame else pd.Series(pd.NA, frame.index, "string")
    for column in ("source_session", "target_session"):
        frame[column] = frame[column].astype("Int64")
    return frame


def _mail_edges(world: _World) -> pd.DataFrame:
    mail = world.messages[(world.messages["room"] == "mail") & world.messages["author_session"].notna()]
    recipients = {text: json.loads(text) for text in mail["recipients"].unique()}
    to = [
        recipients[r] + ([starter] if k > 1 else [])
        for r, k, starter in zip(mail["recipients"], mail["k"], mail["starter"], strict=True)
    ]
    rows = mail.assign(to=to).explode("to").dropna(subset=["to"])
    target = world.people.sessions(rows["to"])
    # a reply goes to the starter by session too (the starter may have ascended since under a new name)
    target = target.where(rows["to"] != rows["starter"], rows["starter_session"])
    return _edge(
        "mail", tick=rows["tick"], source_session=rows["author_session"], target_session=target, record=rows["record"]
    ).drop_duplicates(ignore_index=True)


def _reply_edges(world: _World) -> pd.DataFrame:
    msgs = world.messages
    replies = msgs[msgs["room"].isin(["public_memory", "archive"]) & (msgs["k"] > 1) & msgs["author_session"].notna()]
    return _edge(
        "reply",
        tick=replies["tick"],
        source_session=replies["author_session"],
        target_session=replies["starter_session"],
        record=replies["record"],
    )


def _mention_edges(world: _World) -> pd.DataFrame:
    msgs = world.messages
    forum = msgs[(msgs["room"] == "public_memory") & msgs["content"].str.contains("@", regex=False)]
    names = world.people.names
    by_word: dict[str, list[str]] = {}
    for name in names["name"]:
        by_word.setdefault(_first_word(name), []).append(name)
    since = world.people.since
    rows = []
    for tick, session, author, content, record in zip(
        forum["tick"], forum["author_session"], forum["author"], forum["content"], forum["record"], strict=True
    ):
        words = {_first_word(w) for w in _AT_WORD.findall(content)}
        candidates = [n for w in words for n in by_word.get(w, []) if n != author and since.get(n, tick) <= tick]
        for name in mentioned_names(content, candidates):
            rows.append((tick, session, world.people.session_of[name], record))
    frame = _table(rows, ["tick", "source_session", "target_session", "record"], ints=["tick"])
    return _edge("mention", **{c: frame[c] for c in frame})


_AT_WORD = re.compile(r'@"?([^\W_]+)')


def _first_word(name: str) -> str:
    return re.split(r"[\s_]", name.lower(), maxsplit=1)[0]


def _common_edges(world: _World) -> pd.DataFrame:
    heard = _table(
        common_views.hearings(world.db, *world.span) if _has(world.db, "common_messages", "common_reads") else [],
        common_views.Heard._fields,
        ints=["message", "tick"],
    )
    return _edge(
        "common",
        tick=heard["tick"],
        source_session=world.people.sessions(heard["author"]),
        target_session=world.people.sessions(heard["reader"]),
        record="common/" + heard["message"].astype(str),
    )


def _review_edges(world: _World) -> pd.DataFrame:
    decided = _table(
        archive_views.decisions(world.db, *world.span) if _has(world.db, "paper_reviews", "paper_submissions") else [],
        archive_views.Decision._fields,
        ints=["submission", "tick", "session"],
        numbers=["paper"],
    )
    paper = decided["paper"].astype("Int64")
    record = ("paper/" + paper.astype("string")).fillna("submission/" + decided["submission"].astype(str))
    return _edge(
        "review",
        tick=decided["tick"],
        source=archive_views.REVIEWER_NAME,
        source_session=pd.Series(pd.NA, index=decided.index),
        target_session=decided["session"],
        record=record,
        detail=decided["decision"],
    )


def _citation_edges(world: _World) -> pd.DataFrame:
    """Texts naming an evaluation or paper that existed at their tick -> its author."""
    texts = world.texts[world.texts["kind"] != "common"]
    written = (texts["title"].fillna("") + "\n" + texts["text"]).to_numpy(dtype=object)
    citing = [
        (i, research_views.mentioned(text), archive_views.papers_named(text))
        for i, text in enumerate(written)
        if _MAY_CITE.search(text)
    ]
    ev = world.evaluations_by_id({n for _i, named, _papers in citing for n in named})
    papers = world.papers_by_number({n for _i, _named, named in citing for n in named})
    rows = []
    for i, evaluations_named, papers_named in citing:
        tick, session, record = texts["tick"].iat[i], texts["session"].iat[i], texts["record"].iat[i]
        for named in evaluations_named:
            if named in ev.index and ev.at[named, "tick"] <= tick:
                rows.append(
                    (tick, session, ev.at[named, "session"], ev.at[named, "author"], record, f"evaluation/{named}")
                )
        for named in papers_named:
            if named in papers.index and papers.at[named, "tick"] <= tick:
                rows.append((tick, session, papers.at[named, "author_session"], pd.NA, record, f"paper/{named}"))
    frame = _table(
        rows,
        ["tick", "source_session", "target_session", "target", "record", "detail"],
        ints=["tick"],
        numbers=["target_session"],
    )
    frame["target"] = frame["target"].where(frame["target_session"].isna())  # a name only for System
    return _edge("citation", **{c: frame[c] for c in frame})


_MAY_CITE = re.compile(r"eval|paper|archive", re.IGNORECASE)  # a quick sieve before the two patterns


def _built_on_edges(world: _World) -> pd.DataFrame:
    ev = world.evaluations
    built = ev[ev["parent"].notna() & (ev["author"] != ev["parent_author"])]
    parent_session = built["parent_session"]
    return _edge(
        "built_on",
        tick=built["tick"],
        source_session=built["session"],
        target_session=parent_session,
        target=built["parent_author"].where(parent_session.isna()),
        record="evaluation/" + built["id"].astype(str),
        detail="evaluation/" + built["parent"].astype(str) + " (" + built["parent_how"] + ")",
    )


def _read_edges(world: _World) -> pd.DataFrame:
    reads = _table(
        capsule_views.message_reads(world.db, *world.span) if _has(world.db, "capsule_reads") else [],
        capsule_views.MessageRead._fields,
        ints=["session", "tick", "number", "k", "author_session"],
    )
    return _edge(
        "read",
        tick=reads["tick"],
        source_session=reads["session"],
        target_session=reads["author_session"],
        record=_capsule_records(reads["room"], reads["scope"], reads["number"], reads["k"]),
    )


def _inheritance_edges(world: _World) -> pd.DataFrame:
    first, last = world.span
    rows = world.db.execute(
        "SELECT tick, json_extract(payload, '$.ancestor'), agent, json_extract(payload, '$.generation') "
        "FROM events WHERE kind='agent_ascended' AND json_extract(payload, '$.ancestor') IS NOT NULL "
        "AND tick BETWEEN ? AND ? ORDER BY id",
        (-1 if first is None else first, 2**62 if last is None else last),
    ).fetchall()
    frame = _table(rows, ["tick", "ancestor", "heir", "generation"], ints=["tick", "generation"])
    people = world.people
    return _edge(
        "inheritance",
        tick=frame["tick"],
        source_session=people.sessions(frame["ancestor"]),
        target_session=people.sessions(frame["heir"]),
        record=pd.NA,
        detail="generation " + (frame["generation"] - 1).astype(str) + " -> " + frame["generation"].astype(str),
    )


_EDGE_READERS = {
    "mail": _mail_edges,
    "reply": _reply_edges,
    "mention": _mention_edges,
    "common": _common_edges,
    "review": _review_edges,
    "citation": _citation_edges,
    "built_on": _built_on_edges,
    "read": _read_edges,
    "inheritance": _inheritance_edges,
}


def _edges(parts: list[pd.DataFrame], people: _People) -> pd.DataFrame:
    """The edge rows of every kind, named by the sessions' latest names, without self-edges, by tick."""
    edges = pd.concat(parts, ignore_index=True)
    edges = edges[
        edges["source_session"].isna()
        | edges["target_session"].isna()
        | (edges["source_session"] != edges["target_session"])
    ]
    edges = edges[
        (edges["source_session"].notna() | edges["source"].notna())
        & (edges["target_session"].notna() | edges["target"].notna())
    ]
    for side in ("source", "target"):
        sessions = edges[f"{side}_session"]
        edges[side] = sessions.map(people.latest).fillna(edges[side])
        edges[f"{side}_lineage"] = people.lineage_at(sessions, edges["tick"])
    return edges.sort_values("tick", kind="stable").reset_index(drop=True)


# -- types ---------------------------------------------------------------------------------------
def _table(
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
