"""Fixtures shared by several test modules."""
from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from station.apps.world import Station
from station.core.config import load_config
from station.core.engine import Engine

ROOT = Path(__file__).resolve().parents[1]


def shared_world(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A station built once per test run, whichever worker asks first: the parallel workers
    (pytest-xdist) share their run's temporary folder, and the others wait for the build."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above each worker's own
    directory, done = base / f"shared-{name}" / "station", base / f"shared-{name}.built"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(directory.parent, ignore_errors=True)  # a build that failed half-way
            build(directory)
            done.touch()
    return directory


@pytest.fixture(scope="session")
def demo60(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo station (scripted agents, papers, research) run to the end of tick 60, once per run.
    Tests that change a station work on a copy (`copy_station`)."""

    def build(directory: Path) -> None:
        station = Station.create(directory, load_config(ROOT / "configs" / "demo.yaml"))
        try:
            Engine(station).run(until_tick=60)
        finally:
            station.close()

    return shared_world(tmp_path_factory, "demo60", build)


def copy_station(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("run.lock"))
    return target


# Modules whose tests are slow on a 2-core machine: a real training or scoring, a whole station run,
# Ray, a browser, kill -9 loops, or the shared demo station. `pytest -m "not slow"` leaves them out
# (the quick loop while editing, README "Tests"); `make test` runs everything.
SLOW_MODULES = {
    "test_circle_packing", "test_cli", "test_crash", "test_demo", "test_eval_crash", "test_evaluation_faults",
    "test_evaluations", "test_folder_task", "test_forecasting_task", "test_front_door", "test_ray_executor",
    "test_ray_faults", "test_redteam_folder", "test_redteam_jax", "test_redteam_rna", "test_redteam_scrna",
    "test_redteam_sokoban", "test_remote_station", "test_request_processes", "test_rna_task", "test_scrna_metrics",
    "test_scrna_oracle", "test_scrna_task", "test_set_model", "test_sokoban_env", "test_sokoban_scoring",
    "test_sokoban_task", "test_web", "test_web_browser", "test_web_links", "test_web_security", "test_web_study",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
