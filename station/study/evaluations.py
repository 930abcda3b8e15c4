"""The evaluations table: every evaluation with the one it built on (declared or detected), the best
score its author could see when it submitted, and whether it set a new best of its task.

An evaluation's parent is the first earlier evaluation of its task that its title or abstract names
and its author could see ("declared"); else the most similar code (cosine of the code tokens'
frequency vectors, at least SIMILAR; no IDF, so a parent never changes as later code arrives) among
the latest CANDIDATES evaluations of its task delivered before it was submitted that its author could
see ("detected"). Seeing follows rooms/research/visibility.py: a mature agent (or a supervisor, or a
station that does not isolate) sees every lineage, a young one its own lineage and the System baselines.

A window of ticks reads its own evaluations, the earlier ones they name by id, the CANDIDATES latest
deliveries before it and the best scores delivered before it (one aggregate query).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import sparse

from rooms.research import views as research_views
from station.study.records import MAY_CITE, SYSTEM, People, Span, has, table

SIMILAR = 0.8  # a detected parent's code is at least this similar (cosine of code-token frequency vectors)
CANDIDATES = 2000  # a detected parent is among this many latest delivered evaluations of the task
TIE = 1e-5  # similarities this close are a tie
CHUNK = 500  # evaluations compared at once (bounds the dense similarity block's memory)
DENSE_TERMS = 256  # blocks using at most this many distinct terms are multiplied dense


def read_evaluations(db: sqlite3.Connection, people: People, span: Span) -> pd.DataFrame:
    """The evaluations submitted in the span, each compared with every earlier one: a window reads the
    earlier ones it needs (the ones its rows name, the candidates of a detected parent, the best scores
    delivered before it)."""
    whole = span == (None, None)
    ev = _evaluation_frame(research_views.evaluation_rows(db, *span) if has(db, "evaluations") else [], people)
    named = _named(ev)
    known = ev if whole else with_rows(db, people, ev, {n for names in named.values() for n in names})
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


def _evaluation_frame(rows: Sequence[tuple], people: People) -> pd.DataFrame:
    """Evaluation rows (EvaluationRow's fields) with the author's latest name and what it could see."""
    ev = table(
        rows, research_views.EvaluationRow._fields, ints=["id", "tick"], numbers=["session", "finished_tick", "score"]
    )
    ev["session"] = ev["session"].astype("Int64")
    ev["author"] = ev["session"].map(people.latest).fillna(ev["author"])
    ev["sees_all"] = people.sees_all(ev["session"], ev["tick"])
    return ev


def with_rows(db: sqlite3.Connection, people: People, ev: pd.DataFrame, ids: set[int]) -> pd.DataFrame:
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
        if author != SYSTEM and MAY_CITE.search(text)
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


def _candidates(db: sqlite3.Connection, people: People, ev: pd.DataFrame) -> pd.DataFrame:
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


def _scored_around(db: sqlite3.Connection, people: People, ev: pd.DataFrame, span: Span) -> pd.DataFrame:
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
