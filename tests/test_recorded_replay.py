"""A station recorded by older code (commit 94daad4, before the redesign of issue 19) replays, with the
current code, into the world the older code made: the redesign must not change behaviour.

The recording is data/recorded/demo-before-redesign.db.gz (see data/README.md): configs/demo.yaml, with
inactivity warnings off (the older code never delivered them: a bug the redesign fixed), run to the end of
tick 30, with research evaluations (circle packing), archive papers and reviews, Test
Chamber attempts, deaths and respawns. It must not be regenerated with newer code."""
from __future__ import annotations

import copy
import gzip
import json
import shutil
from pathlib import Path
from typing import Any

from station.apps import cli
from station.apps.world import Station
from station.core.config import parse_config
from station.core.store import Store, canonical_dump

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "data" / "recorded" / "demo-before-redesign.db.gz"
TICKS = 30

Dump = dict[str, list[list[Any]]]

# Input kinds whose `agent` column a replay leaves empty: a live run's evaluation worker records these
# results with the evaluation's author, a replay copies them from the source with no agent (the older
# code did the same: its own replay of this recording differs from it in exactly these rows).
AGENTLESS_WHEN_REPLAYED = {"eval_run", "eval_debug"}

# Columns added since the recording: its migrated rows hold NULL where a replay records the value.
ADDED_SINCE = {"capsule_reads": ["tick"]}  # the tick of a first read (capsule store v3, issue 53)


def dump(directory: Path) -> Dump:
    store = Store(directory)
    try:
        return copy.deepcopy(canonical_dump(store))
    finally:
        store.close()


def normalized(d: Dump) -> Dump:
    """The dump without schema versions, with `inputs` as a set: its row ids follow the wall-clock order in which parallel
    background evaluation results were recorded, so the id column goes and the rows are sorted by key.
    The stored config is read with today's schema, so that a key added since (with its default) is
    not a difference, while any changed value still is."""
    d = dict(d)
    # A recording made by older code carries older schema versions; the tables themselves (brought
    # to today's shape by the migrations) are what must match.
    d.pop("schema_versions", None)
    cols, *rows = d["meta"]
    key, value = cols.index("key"), cols.index("value")
    d["meta"] = [cols] + [
        [*r[:value], json.dumps(parse_config(json.loads(r[value]), "stored").model_dump(mode="json")), *r[value + 1 :]]
        if r[key] == "config" else r
        for r in rows
    ]
    cols, *rows = d["inputs"]
    kind, agent = cols.index("kind"), cols.index("agent")
    body = []
    for r in rows:
        r = list(r)
        if r[kind] in AGENTLESS_WHEN_REPLAYED:
            r[agent] = None
        body.append(r[1:])
    key = cols[1:].index("key")
    d["inputs"] = [cols[1:]] + sorted(body, key=lambda r: r[key])
    for table, added in ADDED_SINCE.items():
        cols, *rows = d[table]
        blank = [cols.index(c) for c in added]
        d[table] = [cols] + [[None if i in blank else v for i, v in enumerate(r)] for r in rows]
    return d


def differences(expected: Dump, actual: Dump, *, limit: int = 5) -> list[str]:
    """What differs, table by table: the first differing row of each (at most `limit` tables)."""
    out = []
    for table in sorted(set(expected) | set(actual)):
        a, b = expected.get(table), actual.get(table)
        if a == b:
            continue
        if a is None or b is None:
            out.append(f"table {table}: only in the {'replay' if a is None else 'recording'}")
            continue
        if a[0] != b[0]:
            out.append(f"table {table}: columns {a[0]} became {b[0]}")
            continue
        line = f"table {table}: {len(a) - 1} rows recorded, {len(b) - 1} replayed"
        for i, (x, y) in enumerate(zip(a[1:], b[1:])):
            if x != y:
                changed = [c for c, u, v in zip(a[0], x, y) if u != v]
                line += f"; first difference at row {i} (columns {changed}):\n  - {x!r:.600}\n  + {y!r:.600}"
                break
        else:
            extra = a[len(b)] if len(a) > len(b) else b[len(a)]
            line += f"; first unmatched row:\n    {extra!r:.600}"
        out.append(line)
    return out[:limit] + ([f"... and {len(out) - limit} more tables"] if len(out) > limit else [])


def unpack(target: Path) -> Path:
    """The recording, brought to today's schema as opening it with today's code does."""
    target.mkdir()
    with gzip.open(RECORDED) as src, open(target / "station.db", "wb") as dst:
        shutil.copyfileobj(src, dst)
    Station.open(target).close()
    return target


def test_a_station_recorded_before_the_redesign_replays_to_the_same_world(tmp_path: Path) -> None:
    source, out = unpack(tmp_path / "recorded"), tmp_path / "replayed"
    recorded = normalized(dump(source))
    assert all(len(recorded[t]) > 1 for t in ("evaluations", "paper_reviews", "test_attempts", "turns"))

    assert cli.main(["replay", str(source), str(out)]) == 0  # what `station replay SOURCE OUT` runs

    replayed = normalized(dump(out))
    diff = differences(recorded, replayed)
    assert not diff, "the current code replays the recorded station into a different world:\n" + "\n".join(diff)
