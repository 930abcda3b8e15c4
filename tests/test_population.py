"""A station of a few hundred agents: every agent acts once a tick, and replaying the recorded
inputs into a fresh directory rebuilds the same world without asking any model."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from station.apps.world import Station
from station.core.config import StationConfig, parse_config
from station.core.engine import Engine
from station.core.store import Store, canonical_dump
from station.models.scripted import ScriptedModel
from station.models.scripted_grader import ScriptedGrader

ROOT = Path(__file__).resolve().parents[1]
POPULATION = 300
TICKS = 3  # codex reading (multi-step exchanges), the entry test (graded), ascension into lineages


def open_station(population: int) -> StationConfig:
    data = yaml.safe_load((ROOT / "configs" / "open_station.yaml").read_text())
    data["agents"][0]["count"] = population
    data["turns"] = "concurrent"  # how a population runs: all of a tick's replies asked at once
    return parse_config(data, f"open station with {population} agents")


def dump(directory: Path) -> dict[str, list[list[Any]]]:
    store = Store(directory)
    try:
        return copy.deepcopy(canonical_dump(store))
    finally:
        store.close()


def test_a_few_hundred_agents_act_every_tick_and_replay_to_the_same_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, replayed = tmp_path / "source", tmp_path / "replayed"
    station = Station.create(source, open_station(POPULATION))
    try:
        assert Engine(station).run(until_tick=TICKS) == f"finished tick {TICKS}"
        per_tick = station.store.all("SELECT tick, COUNT(*), COUNT(DISTINCT session) FROM turns GROUP BY tick")
        lineages = station.store.scalar("SELECT COUNT(DISTINCT lineage) FROM agents WHERE lineage IS NOT NULL")
        graded = station.store.scalar("SELECT COUNT(*) FROM inputs WHERE kind != 'reply'")
    finally:
        station.close()
    # Every agent took exactly one turn in every tick: nobody skipped, nobody twice.
    assert [tuple(r) for r in per_tick] == [(t, POPULATION, POPULATION) for t in range(1, TICKS + 1)]
    assert lineages > 1 and graded > 0  # they got through the test and ascended: more than walks to replay

    # The replay takes every reply and verdict from the source's records: any model call fails it.
    def no_calls(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a replay asked a model")

    monkeypatch.setattr(ScriptedModel, "complete", no_calls)
    monkeypatch.setattr(ScriptedGrader, "complete", no_calls)
    source_store = Store(source)
    station = Station.create(replayed, open_station(POPULATION))
    try:
        assert Engine(station, replay_source=source_store).run(until_tick=TICKS) == f"finished tick {TICKS}"
    finally:
        station.close()
        source_store.close()
    assert dump(replayed) == dump(source)
