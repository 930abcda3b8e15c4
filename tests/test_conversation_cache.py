"""The conversation cache is bounded: sessions leave it and are read back from the store, and the
world a station makes is the same whether its conversations stay in memory or not."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from station.apps.world import Station
from station.core.config import parse_config
from station.core.engine import Engine
from station.core.store import Store, canonical_dump

ROOT = Path(__file__).resolve().parents[1]


def run(directory: Path, *, cache_bytes: int | None) -> tuple[dict[str, Any], int]:
    data = yaml.safe_load((ROOT / "configs" / "open_station.yaml").read_text())
    data["agents"][0]["count"] = 6
    data.pop("research")  # no sandbox runs: two live runs must make the same world
    station = Station.create(directory, parse_config(data))
    most = 0
    try:
        if cache_bytes is not None:
            station.conversations.cache_bytes = cache_bytes
        engine = Engine(station)
        while station.ctx.tick <= 8:
            engine.step()
            most = max(most, len(station.conversations._committed))
    finally:
        station.close()
    store = Store(directory)
    try:
        return copy.deepcopy(canonical_dump(store)), most
    finally:
        store.close()


def test_a_station_whose_conversations_leave_memory_makes_the_same_world(tmp_path: Path) -> None:
    kept, kept_most = run(tmp_path / "kept", cache_bytes=None)
    evicted, evicted_most = run(tmp_path / "evicted", cache_bytes=1)
    assert kept_most == 6  # every active conversation stays when the cache is large
    assert evicted_most == 1  # a one-byte cache keeps only the conversation last used
    assert evicted == kept
