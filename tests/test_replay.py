"""Replay: re-executing a finished run's recorded inputs into a fresh directory rebuilds the same
world; a fork at tick 30 continues on its own; a diverging replay stops with a clear error."""
from __future__ import annotations

import copy
import hashlib
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from station.apps.world import Station
from station.core.config import parse_config
from station.core.engine import Engine
from station.core.store import Store, canonical_dump
from station.models.scripted import ScriptedModel
from station.models.scripted_grader import ScriptedGrader

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "social_demo.yaml"
TICKS = 60
FORK_AT = 30


def station(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "station.apps.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def dump(directory: Path) -> dict[str, list[list[Any]]]:
    store = Store(directory)
    try:
        return copy.deepcopy(canonical_dump(store))
    finally:
        store.close()


def rows(d: dict[str, list[list[Any]]], table: str, *, until_tick: int | None = None) -> list[list[Any]]:
    """A table's rows from a dump, optionally only those with tick <= until_tick."""
    cols, *body = d[table]
    if until_tick is None:
        return body
    at = cols.index("tick")
    return [r for r in body if r[at] <= until_tick]


def meta_tick(directory: Path) -> int:
    db = sqlite3.connect(f"file:{directory / 'station.db'}?mode=ro", uri=True)
    try:
        return json.loads(db.execute("SELECT value FROM meta WHERE key='tick'").fetchone()[0])
    finally:
        db.close()


def fingerprint(path: Path) -> tuple[str, int, int]:
    data = path.read_bytes()
    st = path.stat()
    return hashlib.sha256(data).hexdigest(), st.st_size, st.st_mtime_ns


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 60-tick demo run, made once for the module."""
    d = tmp_path_factory.mktemp("replay") / "source"
    done = station("run", str(DEMO), "--dir", str(d), "--until-tick", str(TICKS))
    assert done.returncode == 0, done.stderr
    assert f"finished tick {TICKS}" in done.stdout
    assert meta_tick(d) == TICKS + 1
    return d


def test_replaying_a_finished_run_rebuilds_an_identical_world(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "replayed"
    done = station("replay", str(source), str(out))
    assert done.returncode == 0, done.stderr
    assert f"replayed {source} up to tick {TICKS} into {out}" in done.stdout
    assert meta_tick(out) == TICKS + 1
    replayed, original = dump(out), dump(source)
    assert len(rows(original, "turns")) >= 280
    assert replayed == original


# -- the replay uses the recorded inputs, not the models ----------------------------------
def _config(seed: int) -> Any:
    data = yaml.safe_load(DEMO.read_text())
    data["agents"][0]["model"]["seed"] = seed
    return parse_config(data, f"demo with model seed {seed}")


def _without_model_seed(d: dict[str, list[list[Any]]]) -> dict[str, list[list[Any]]]:
    """The dump minus where the model's seed is written down: the stored config and each agent's model."""
    d = copy.deepcopy(d)
    d["meta"] = [r for r in d["meta"] if r[0] != "config"]
    at = d["agents"][0].index("data")
    for r in d["agents"][1:]:
        data = json.loads(r[at])
        data["model"].pop("seed")
        r[at] = json.dumps(data, sort_keys=True)
    return d


def test_replay_applies_the_recorded_replies_instead_of_asking_the_models(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, replayed, plain = tmp_path / "seed1", tmp_path / "replayed_seed2", tmp_path / "plain_seed2"
    st = Station.create(src, _config(1))
    assert Engine(st).run(until_tick=20) == "finished tick 20"
    st.close()

    # A plain run with seed 2 makes different choices: a different world.
    st = Station.create(plain, _config(2))
    Engine(st).run(until_tick=20)
    st.close()
    assert rows(dump(plain), "turns") != rows(dump(src), "turns")

    # Replaying seed 1's inputs into a station configured with seed 2 rebuilds seed 1's world.
    # It must not raise ReplayDiverged: a request fingerprint (context.request_hash) covers what
    # was sent to the model (the station's prompt), not the model's settings, and the prompts
    # are a function of the world, which the recorded replies rebuild step by step; the seed
    # only changes what a model *would* answer, and a replay never asks. To be sure of that,
    # any model call during the replay fails the test.
    def no_calls(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a replay asked a model")

    monkeypatch.setattr(ScriptedModel, "complete", no_calls)
    monkeypatch.setattr(ScriptedGrader, "complete", no_calls)
    source_store = Store(src)
    st = Station.create(replayed, _config(2))
    try:
        assert Engine(st, replay_source=source_store).run(until_tick=20) == "finished tick 20"
    finally:
        st.close()
        source_store.close()
    a, b = dump(src), dump(replayed)
    assert b != a  # the seed is written down (config and agents' model) ...
    assert _without_model_seed(b) == _without_model_seed(a)  # ... and that is the only difference
    assert rows(b, "turns") == rows(a, "turns") and rows(b, "inputs") == rows(a, "inputs")
    config_b = json.loads(next(r[1] for r in rows(b, "meta") if r[0] == "config"))
    assert config_b["agents"][0]["model"]["seed"] == 2


# -- fork ---------------------------------------------------------------------------------
def test_a_fork_at_tick_30_continues_on_its_own(source: Path, tmp_path: Path) -> None:
    before = fingerprint(source / "station.db")
    source_dump = dump(source)
    fork = tmp_path / "fork"
    done = station("replay", str(source), str(fork), "--until-tick", str(FORK_AT))
    assert done.returncode == 0, done.stderr
    assert f"finished tick {FORK_AT}" in done.stdout
    assert meta_tick(fork) == FORK_AT + 1
    forked = dump(fork)
    for table in ("turns", "events", "inputs", "test_attempts"):
        assert rows(forked, table, until_tick=FORK_AT) == rows(source_dump, table, until_tick=FORK_AT), table
    assert rows(forked, "turns") == rows(forked, "turns", until_tick=FORK_AT)  # nothing past the fork point
    assert rows(forked, "inputs") == rows(forked, "inputs", until_tick=FORK_AT)

    hint = re.search(r"`station (run [^`]*)` continues it", done.stdout)  # the command it prints, as printed
    assert hint and hint.group(1).split() == ["run", "--dir", str(fork)]
    cont = station(*hint.group(1).split(), "--ticks", "10")
    assert cont.returncode == 0, cont.stderr
    assert f"finished tick {FORK_AT + 10}" in cont.stdout
    assert meta_tick(fork) == FORK_AT + 11
    continued = dump(fork)
    # The fork asked its own (scripted) models for ticks 31..40 and recorded their replies.
    new_turns = [r for r in rows(continued, "turns") if r[1] > FORK_AT]
    assert {r[1] for r in new_turns} == set(range(FORK_AT + 1, FORK_AT + 11))
    new_inputs = [r for r in rows(continued, "inputs") if r[3] > FORK_AT]
    assert new_inputs and {r[3] for r in new_inputs} <= set(range(FORK_AT + 1, FORK_AT + 11))
    # Same models, same seed, same world: it made the same choices the source made.
    assert rows(continued, "turns", until_tick=FORK_AT + 10) == rows(source_dump, "turns", until_tick=FORK_AT + 10)

    # The source was only read.
    assert fingerprint(source / "station.db") == before
    assert dump(source) == source_dump
    assert meta_tick(source) == TICKS + 1


# -- errors -------------------------------------------------------------------------------
def test_a_diverging_replay_stops_with_a_clear_error(source: Path, tmp_path: Path) -> None:
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    src = sqlite3.connect(f"file:{source / 'station.db'}?mode=ro", uri=True)
    dst = sqlite3.connect(tampered / "station.db")
    src.backup(dst)
    src.close()
    key = dst.execute("SELECT key FROM inputs WHERE kind='reply' AND tick=25 ORDER BY seq LIMIT 1").fetchone()[0]
    with dst:
        changed = dst.execute("UPDATE inputs SET request_hash='0000000000000000' WHERE key=?", (key,)).rowcount
    dst.close()
    assert changed == 1

    out = tmp_path / "out"
    done = station("replay", str(tampered), str(out))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "replay diverged" in done.stderr
    assert key in done.stderr  # it names the input that answered a different request
    assert "Traceback" not in done.stderr
    assert meta_tick(out) == 25  # it stopped where the inputs stopped matching


def test_replay_refuses_an_existing_station(source: Path, tmp_path: Path) -> None:
    existing = tmp_path / "existing"
    assert station("init", str(DEMO), "--dir", str(existing)).returncode == 0
    before = fingerprint(existing / "station.db")
    done = station("replay", str(source), str(existing))
    assert done.returncode == 2
    assert "already holds a station" in done.stderr and "new directory" in done.stderr
    assert "Traceback" not in done.stderr
    assert fingerprint(existing / "station.db") == before
    assert meta_tick(existing) == 1

    # A directory with other things in it is refused too, and left alone.
    cluttered = tmp_path / "cluttered"
    cluttered.mkdir()
    (cluttered / "notes.txt").write_text("mine")
    done = station("replay", str(source), str(cluttered))
    assert done.returncode == 2 and "not empty" in done.stderr
    assert sorted(p.name for p in cluttered.iterdir()) == ["notes.txt"]
    assert not any(p.name.startswith(".cluttered") for p in tmp_path.iterdir())
