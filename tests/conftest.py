"""Fixtures shared by several test modules."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from station.config import load_config
from station.engine import Engine
from station.world import Station

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def demo60(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo station (scripted agents, papers, research) run to the end of tick 60, once per session.
    Tests that change a station work on a copy (`copy_station`)."""
    directory = tmp_path_factory.mktemp("demo60") / "station"
    station = Station.create(directory, load_config(ROOT / "configs" / "demo.yaml"))
    try:
        Engine(station).run(until_tick=60)
    finally:
        station.close()
    return directory


def copy_station(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("run.lock"))
    return target
