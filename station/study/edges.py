"""The edges table: one reader per edge kind (schema.EDGE_KINDS) over what was already read, and the
assembly of their rows, named by the sessions' latest names.

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
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass

import pandas as pd

from rooms import capsule_views, common_views
from rooms.archive import views as archive_views
from rooms.mentions import mentioned_names
from rooms.research import views as research_views
from station.study.evaluations import with_rows
from station.study.records import MAY_CITE, People, Span, has, table
from station.study.texts import capsule_records


@dataclass
class World:
    """What the edge readers share: the open database and what was already read from it."""

    db: sqlite3.Connection
    people: People
    evaluations: pd.DataFrame
    messages: pd.DataFrame  # every capsule message of the span (capsule_messages)
    texts: pd.DataFrame
    span: Span

    def evaluations_by_id(self, ids: set[int]) -> pd.DataFrame:
        """The evaluations of these ids (and others), by id: the span's and, for a window, those read."""
        return with_rows(self.db, self.people, self.evaluations, ids).set_index("id")

    def papers_by_number(self, numbers: set[int]) -> pd.DataFrame:
        """The published papers' (tick, author_session) by number: of these numbers, and maybe others."""
        if self.span == (None, None):
            msgs = self.messages
            return msgs[(msgs["room"] == "archive") & (msgs["k"] == 1)].set_index("number")
        rows = capsule_views.openings(self.db, "archive", sorted(numbers)) if numbers else []
        return table(rows, ["number", "tick", "author_session"], ints=["number", "tick"]).set_index("number")


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


def _mail_edges(world: World) -> pd.DataFrame:
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


def _reply_edges(world: World) -> pd.DataFrame:
    msgs = world.messages
    replies = msgs[msgs["room"].isin(["public_memory", "archive"]) & (msgs["k"] > 1) & msgs["author_session"].notna()]
    return _edge(
        "reply",
        tick=replies["tick"],
        source_session=replies["author_session"],
        target_session=replies["starter_session"],
        record=replies["record"],
    )


def _mention_edges(world: World) -> pd.DataFrame:
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
    frame = table(rows, ["tick", "source_session", "target_session", "record"], ints=["tick"])
    return _edge("mention", **{c: frame[c] for c in frame})


_AT_WORD = re.compile(r'@"?([^\W_]+)')


def _first_word(name: str) -> str:
    return re.split(r"[\s_]", name.lower(), maxsplit=1)[0]


def _common_edges(world: World) -> pd.DataFrame:
    heard = table(
        common_views.hearings(world.db, *world.span) if has(world.db, "common_messages", "common_reads") else [],
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


def _review_edges(world: World) -> pd.DataFrame:
    decided = table(
        archive_views.decisions(world.db, *world.span) if has(world.db, "paper_reviews", "paper_submissions") else [],
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


def _citation_edges(world: World) -> pd.DataFrame:
    """Texts naming an evaluation or paper that existed at their tick -> its author."""
    texts = world.texts[world.texts["kind"] != "common"]
    written = (texts["title"].fillna("") + "\n" + texts["text"]).to_numpy(dtype=object)
    citing = [
        (i, research_views.mentioned(text), archive_views.papers_named(text))
        for i, text in enumerate(written)
        if MAY_CITE.search(text)
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
    frame = table(
        rows,
        ["tick", "source_session", "target_session", "target", "record", "detail"],
        ints=["tick"],
        numbers=["target_session"],
    )
    frame["target"] = frame["target"].where(frame["target_session"].isna())  # a name only for System
    return _edge("citation", **{c: frame[c] for c in frame})


def _built_on_edges(world: World) -> pd.DataFrame:
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


def _read_edges(world: World) -> pd.DataFrame:
    reads = table(
        capsule_views.message_reads(world.db, *world.span) if has(world.db, "capsule_reads") else [],
        capsule_views.MessageRead._fields,
        ints=["session", "tick", "number", "k", "author_session"],
    )
    return _edge(
        "read",
        tick=reads["tick"],
        source_session=reads["session"],
        target_session=reads["author_session"],
        record=capsule_records(reads["room"], reads["scope"], reads["number"], reads["k"]),
    )


def _inheritance_edges(world: World) -> pd.DataFrame:
    first, last = world.span
    rows = world.db.execute(
        "SELECT tick, json_extract(payload, '$.ancestor'), agent, json_extract(payload, '$.generation') "
        "FROM events WHERE kind='agent_ascended' AND json_extract(payload, '$.ancestor') IS NOT NULL "
        "AND tick BETWEEN ? AND ? ORDER BY id",
        (-1 if first is None else first, 2**62 if last is None else last),
    ).fetchall()
    frame = table(rows, ["tick", "ancestor", "heir", "generation"], ints=["tick", "generation"])
    people = world.people
    return _edge(
        "inheritance",
        tick=frame["tick"],
        source_session=people.sessions(frame["ancestor"]),
        target_session=people.sessions(frame["heir"]),
        record=pd.NA,
        detail="generation " + (frame["generation"] - 1).astype(str) + " -> " + frame["generation"].astype(str),
    )


EDGE_READERS = {
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


def assemble_edges(parts: list[pd.DataFrame], people: People) -> pd.DataFrame:
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
