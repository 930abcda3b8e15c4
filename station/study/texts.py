"""The texts table (papers, forum and mail messages, notes, Common Room messages, evaluations' titles
and abstracts) and the capsule messages it and the edges are read from."""

from __future__ import annotations

import sqlite3

import pandas as pd

from rooms import capsule_views, common_views
from station.study.records import SYSTEM, People, Span, has, table

ROOM_RECORD = {"mail": "mail", "public_memory": "forum", "archive": "paper", "private_memory": "note"}
TEXT_KIND = ROOM_RECORD  # a text's kind is its room's record prefix


def capsule_messages(db: sqlite3.Connection, span: Span) -> pd.DataFrame:
    """Every capsule message (mail, forum, paper, note) of the span, with its record (capsule_records)."""
    rows = capsule_views.thread_messages(db, *span) if has(db, "capsules", "capsule_messages") else []
    msgs = table(
        rows,
        capsule_views.ThreadMessage._fields,
        ints=["number", "k", "tick"],
        numbers=["author_session", "starter_session"],
    )
    msgs["author_session"] = msgs["author_session"].astype("Int64")
    msgs["starter_session"] = msgs["starter_session"].astype("Int64")
    msgs["record"] = capsule_records(msgs["room"], msgs["scope"], msgs["number"], msgs["k"])
    return msgs


def capsule_records(rooms: pd.Series, scopes: pd.Series, numbers: pd.Series, ks: pd.Series) -> pd.Series:
    """mail/N#k, forum/N#k, note/SCOPE/N#k, paper/N (the paper itself), paper/N#k (a reply)."""
    prefix = rooms.map(ROOM_RECORD).fillna(rooms)
    prefix = prefix.where(rooms != "private_memory", "note/" + scopes)
    base = prefix + "/" + numbers.astype(str)
    paper_itself = (rooms == "archive") & (ks == 1)
    return base.where(paper_itself, base + "#" + ks.astype(str))


def read_texts(
    db: sqlite3.Connection, people: People, ev: pd.DataFrame, msgs: pd.DataFrame, span: Span
) -> pd.DataFrame:
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
    said = table(
        common_views.said_between(db, *span) if has(db, "common_messages") else [],
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
