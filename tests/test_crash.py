"""Crash safety: `kill -9` a running station at 20 random moments; every restart resumes from the
last committed turn, with no duplicated or missing turns, ages and ticks continuing, and an
intact database.

The station runs as a real `station run` subprocess. Kills are placed by a seeded
`random.Random(1234)`: most of them wait until the station has committed a random number of
further units of work (an agent's turn or the end of a tick; the engine counts them in
meta 'units') and then sleep a random fraction of a unit, so they land inside the engine's
work whatever the speed of the machine; the others land during start-up (interpreter start,
opening the database, re-executing the interrupted unit).
"""
from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import yaml

from station.core.store import Store, canonical_dump

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "social_demo.yaml"
T = 40  # the target tick
KILLS = 20
MIN_MID_RUN = 15  # kills that must land while the station still had work


# -- helpers ------------------------------------------------------------------------------
def station(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "station.apps.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "station.apps.cli", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def small_config(tmp_path: Path) -> Path:
    """The demo, with lives short enough that deaths, ascensions and respawns happen by tick 40."""
    data = yaml.safe_load(DEMO.read_text())
    data["name"] = "crash"
    assert data["agents"][0]["count"] == 5 and data["agents"][0]["model"]["provider"] == "scripted"
    data["lifecycle"]["max_age"] = 12
    data["lifecycle"]["maturity_ticks"] = 5
    path = tmp_path / "crash.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def read_only(directory: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{directory / 'station.db'}?mode=ro", uri=True, timeout=30)


def meta(db: sqlite3.Connection, key: str) -> Any:
    row = db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
    return json.loads(row[0]) if row else None


TURN_COLUMNS = ("id, tick, session, agent, room, prompt, reply, thinking, actions, internal, "
                "context_tokens, tokens_spent")  # all but the wall-clock started_at / finished_at


def turn_rows(db: sqlite3.Connection) -> list[tuple]:
    return db.execute(f"SELECT {TURN_COLUMNS} FROM turns ORDER BY id").fetchall()


def input_rows(db: sqlite3.Connection) -> list[tuple]:
    """Recorded inputs without wall-clock columns (recorded_at, latency_s)."""
    return db.execute("SELECT seq, key, kind, tick, agent, payload, request_hash FROM inputs ORDER BY seq").fetchall()


def world(directory: Path) -> dict[str, list[list[Any]]]:
    store = Store(directory)
    try:
        return canonical_dump(store)
    finally:
        store.close()


def sessions_per_tick(db: sqlite3.Connection) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for tick, session in db.execute("SELECT tick, session FROM turns"):
        out.setdefault(tick, set()).add(session)
    return out


def duplicated_turns(db: sqlite3.Connection) -> list[tuple]:
    return db.execute("SELECT tick, session, COUNT(*) FROM turns GROUP BY tick, session HAVING COUNT(*) > 1"
                      ).fetchall()


# -- the test -----------------------------------------------------------------------------
def test_kill_9_at_20_random_moments_resumes_from_the_last_committed_turn(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    a, b = tmp_path / "A", tmp_path / "B"

    # Reference: one uninterrupted run, timed (start-up, and the engine's time per unit).
    began = time.monotonic()
    proc = start("run", str(config), "--dir", str(a), "--until-tick", str(T))
    startup = None
    while proc.poll() is None and startup is None:
        if (a / "station.db").exists():
            with closing(read_only(a)) as db:
                if (meta(db, "units") or 0) > 0:
                    startup = time.monotonic() - began
        time.sleep(0.001)
    assert proc.wait(timeout=120) == 0
    total = time.monotonic() - began
    startup = startup or total
    ref = read_only(a)
    units_total = meta(ref, "units")
    per_unit = max((total - startup) / units_total, 0.0005)
    ref_turns, ref_inputs = turn_rows(ref), input_rows(ref)
    assert meta(ref, "tick") == T + 1
    departures = dict(ref.execute("SELECT json_extract(payload, '$.reason'), COUNT(*) FROM events "
                                  "WHERE kind='agent_departed' GROUP BY 1").fetchall())
    assert departures.get("reaching the life limit", 0) > 0, departures  # deaths of old age
    assert ref.execute("SELECT COUNT(*) FROM events WHERE kind='agent_ascended'").fetchone()[0] > 0
    assert ref.execute("SELECT COUNT(*) FROM events WHERE kind='agent_spawned' "
                       "AND json_extract(payload, '$.replaces') IS NOT NULL").fetchone()[0] > 0  # respawns

    # Crashed run: 20 kill -9s, each checked on the spot.
    init = station("init", str(config), "--dir", str(b))
    assert init.returncode == 0, init.stderr
    rng = random.Random(1234)
    # Every fifth kill lands during start-up; the others at random points spread over the first
    # 90% of the run's units of work, each a random fraction of a unit after that point.
    early_kills = {i for i in range(KILLS) if i % 5 == 4}
    targets = iter(sorted(rng.sample(range(1, int(0.9 * units_total)), KILLS - len(early_kills))))
    prev = {"tick": 1, "turns": 0, "units": 0}
    log: list[dict[str, Any]] = []
    for i in range(KILLS):
        early = i in early_kills
        if early:
            delay = rng.uniform(0.1, 0.9) * startup
        else:
            target = max(next(targets), prev["units"] + 1)
            delay = rng.uniform(0.0, 1.0) * per_unit
        proc = start("run", "--dir", str(b), "--until-tick", str(T))
        try:
            if not early:
                deadline = time.monotonic() + 60
                # the units a run counts depend a little on timing (replies already in are taken in one
                # unit), so reaching the same share of the ticks counts as reaching the target too
                target_tick = 1 + T * target // units_total
                with closing(read_only(b)) as poll:
                    while proc.poll() is None and (meta(poll, "units") or 0) < target and (meta(poll, "tick") or 1) < target_tick:
                        assert time.monotonic() < deadline, f"kill {i}: no progress towards unit {target}"
                        time.sleep(0.0005)
                time.sleep(delay)
            else:
                # A start-up kill lands at the latest when the new run commits its first unit: start-up
                # timed on a busy machine may be longer than a whole resumed run on a quiet one.
                until = time.monotonic() + delay
                with closing(read_only(b)) as poll:
                    while (proc.poll() is None and time.monotonic() < until
                           and (meta(poll, "units") or 0) <= prev["units"]):
                        time.sleep(0.0005)
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            code = proc.wait(timeout=60)
        assert code in (-signal.SIGKILL, 0), f"kill {i}: the station failed on its own (exit {code})"
        db = read_only(b)
        try:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", f"kill {i}"
            now = {"tick": meta(db, "tick"), "turns": db.execute("SELECT COUNT(*) FROM turns").fetchone()[0],
                   "units": meta(db, "units")}
            assert all(now[k] >= prev[k] for k in now), f"kill {i} went back in time: {prev} -> {now}"
            assert duplicated_turns(db) == [], f"kill {i}"
            # Whatever was committed is exactly the start of the uninterrupted run: no turn is
            # missing, duplicated or different, and the recorded replies are the same ones.
            turns = turn_rows(db)
            assert turns == ref_turns[:len(turns)], f"kill {i}: turns differ from the reference"
            inputs = input_rows(db)
            assert inputs == ref_inputs[:len(inputs)], f"kill {i}: recorded inputs differ from the reference"
            replied = {tuple(map(int, k.split("/")[1:3])) for (k,) in
                       db.execute("SELECT key FROM inputs WHERE kind='reply'")}
            in_flight = bool(replied - set(db.execute("SELECT tick, session FROM turns")))
        finally:
            db.close()
        log.append({**now, "killed": code == -signal.SIGKILL, "early": early, "reply_not_applied": in_flight,
                    "mid_run": now["tick"] <= T, "progressed": now["units"] > prev["units"]})
        prev = now

    mid_run = sum(e["mid_run"] for e in log)
    working = sum(e["mid_run"] and e["progressed"] and e["killed"] for e in log)
    print(f"\n{mid_run}/{KILLS} kills landed mid-run ({working} while the engine was committing work, "
          f"{sum(e['reply_not_applied'] for e in log)} between storing a reply and committing its turn); "
          f"ticks after each kill: {[e['tick'] for e in log]}")
    assert mid_run >= MIN_MID_RUN, log
    assert working >= MIN_MID_RUN - 5, log  # most kills interrupt real work, not just start-up

    # Finish the crashed station, then compare it with the reference.
    done = station("run", "--dir", str(b), "--until-tick", str(T))
    assert done.returncode == 0, done.stderr
    assert f"finished tick {T}" in done.stdout
    crashed = read_only(b)
    assert crashed.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert meta(crashed, "tick") == T + 1
    assert duplicated_turns(crashed) == []
    ref_sessions, got_sessions = sessions_per_tick(ref), sessions_per_tick(crashed)
    for tick in range(1, T + 1):
        assert got_sessions.get(tick) == ref_sessions.get(tick), f"tick {tick}"
        assert got_sessions.get(tick), f"no turns at tick {tick}"
    assert set(got_sessions) == set(range(1, T + 1))
    assert turn_rows(crashed) == ref_turns
    crashed.close()
    ref.close()
    assert world(b) == world(a)
    # Ages and lineages as the operator sees them.
    ages = [json.loads(station("status", str(d), "--json").stdout)["agents"] for d in (a, b)]
    assert ages[0] == ages[1]


def test_two_uninterrupted_runs_of_one_config_have_equal_canonical_dumps(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    dumps = []
    for name in ("one", "two"):
        done = station("run", str(config), "--dir", str(tmp_path / name), "--until-tick", "3")
        assert done.returncode == 0, done.stderr
        store = Store(tmp_path / name)
        dumps.append(canonical_dump(store))
        store.close()
    assert dumps[0] == dumps[1]
