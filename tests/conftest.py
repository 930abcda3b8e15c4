"""Fixtures shared by several test modules."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pickle
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

# Set before anything imports numpy (the station's modules below do): three test workers share two
# cores, so a worker's BLAS threads (OpenBLAS spins while it waits) only take CPU from the other
# workers. 10% less CPU for the scRNA and circle-packing tests. Subprocesses inherit it; sandboxed
# runs set their own from their num_cpus. A value already in the environment wins.
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

from evaluators.secret import use_key  # noqa: E402
from station.apps.world import Station  # noqa: E402
from station.core.config import load_config  # noqa: E402
from station.core.engine import Engine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEST_KEY = ROOT / "tests" / "data" / "simulation.key"  # the shared task data's key (shared_task_data)
T = TypeVar("T")


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This test run's temporary folder, which its parallel workers (pytest-xdist) share."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # above each worker's own


def fixed_key(folder: Path) -> Path:
    """`folder` as a data root that draws with the tests' fixed key (tests/data/simulation.key), as a
    user who was given a key would: the same data every run, so numbers measured on it stay comparable."""
    use_key(folder, TEST_KEY)
    return folder


@contextmanager
def shared_task_data(tmp_path_factory: pytest.TempPathFactory, task: str) -> Iterator[Path]:
    """STATION_<TASK>_DATA pointed at one data cache per test run, shared by every module and worker:
    a dataset (and its scoring bounds) is built once, under the cache's own file locks, not once
    per module. Tests of how a cache is made use a folder of their own. The simulated data are
    drawn with a fixed key (tests/data/simulation.key), as a user who shares a key would."""
    folder = fixed_key(run_folder(tmp_path_factory) / "task-data" / task.lower())
    patch = pytest.MonkeyPatch()
    patch.setenv(f"STATION_{task.upper()}_DATA", str(folder))
    try:
        yield folder
    finally:
        patch.undo()


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder filled by `build` once per test run, whichever worker asks first: the parallel
    workers (pytest-xdist) share their run's temporary folder, and the others wait for the build."""
    base = run_folder(tmp_path_factory)
    folder, done = base / f"shared-{name}", base / f"shared-{name}.built"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed half-way
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


def shared_world(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A station built once per test run (`build` creates it in the folder it is given)."""
    return built_once(tmp_path_factory, name, lambda folder: build(folder / "station")) / "station"


def shared_result(tmp_path_factory: pytest.TempPathFactory, what: str, params: dict, compute: Callable[[], T]) -> T:
    """`compute()` once per test run: for test modules that check one expensive evaluation from
    different sides (a task's own tests and its red team's honest control). `what` and `params`
    name the computation; modules that share it must pass the same ones."""
    key = hashlib.sha256(json.dumps([what, params], sort_keys=True).encode()).hexdigest()[:16]

    def build(folder: Path) -> None:
        (folder / "value.pickle").write_bytes(pickle.dumps(compute()))

    return pickle.loads((built_once(tmp_path_factory, f"result-{key}", build) / "value.pickle").read_bytes())


def shared_baseline(tmp_path_factory: pytest.TempPathFactory, kind: str, params: dict,
                    evaluate: Callable[[str], tuple[Any, Any, Any]]) -> tuple[Any, Any]:
    """(result, verdict) of task `kind`'s first baseline on `params`, run by `evaluate(code)` (which
    returns task, result, verdict) once per test run (`shared_result`)."""
    from evaluators.base import create_task

    def run() -> tuple[Any, Any]:
        _, result, verdict = evaluate(create_task(kind, params).baselines()[0].code)
        return result, verdict

    return shared_result(tmp_path_factory, f"{kind} baseline", params, run)


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


@pytest.fixture(scope="session")
def demo60_cited(tmp_path_factory: pytest.TempPathFactory, demo60: Path) -> tuple[Path, int, int]:
    """A copy of demo60 whose first Archive paper by an author with a second submission to a task
    ends with a results sentence citing that author's latest such submission, as a careful
    scripted author writes it: (station, paper number, cited evaluation). Whether the demo's own
    agents have cited one by tick 60 depends on their history; the viewer's citation and built-on
    links are tested on this one whatever it is. Read-only."""
    from station.core.store import Store

    def build(folder: Path) -> None:
        copy_station(demo60, folder / "station")
        store = Store(folder / "station")
        try:
            with store.transaction():
                row = store.one(
                    "SELECT c.id, c.number, e.id, e.score FROM capsules c JOIN evaluations e ON e.session=c.author_session "
                    "WHERE c.room='archive' AND c.deleted=0 AND e.score IS NOT NULL AND EXISTS (SELECT 1 FROM "
                    "evaluations p WHERE p.session=e.session AND p.task=e.task AND p.id<e.id) "
                    "ORDER BY c.number, e.id DESC LIMIT 1")
                assert row is not None, "no Archive paper of demo60 has an author with two submissions to a task"
                capsule, number, cited, score = row
                store.execute("UPDATE capsule_messages SET content=content || ? WHERE capsule=? AND k=1",
                              (f" Results: our best run (evaluation {cited}) scored {score:.4f}.", capsule))
        finally:
            store.close()
        (folder / "cited").write_text(f"{number} {cited}")

    folder = built_once(tmp_path_factory, "demo60-cited", build)
    number, cited = map(int, (folder / "cited").read_text().split())
    return folder / "station", number, cited


@pytest.fixture(scope="session")
def demo60_site(tmp_path_factory: pytest.TempPathFactory, demo60: Path) -> tuple[Path, int]:
    """demo60 exported by `station export` once per run (~8 CPU-s an export), and the pages it said it
    wrote. Read-only: a test that changes the site works on a copy."""
    import subprocess
    import sys

    def build(folder: Path) -> None:
        done = subprocess.run([sys.executable, "-m", "station.apps.cli", "export", str(demo60), "--out",
                               str(folder / "site")], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        pages = re.search(r"^exported (\d+) pages of ", done.stdout, re.MULTILINE)
        assert pages, done.stdout
        (folder / "pages").write_text(pages.group(1))

    folder = built_once(tmp_path_factory, "demo60-site", build)
    return folder / "site", int((folder / "pages").read_text())


@pytest.fixture(scope="module")
def sandbox_executor() -> Any:
    """A LocalExecutor in the full namespaces mode; the module's tests skip where it cannot run."""
    from station.executors import LocalExecutor

    ex = LocalExecutor()
    if ex.mode != "namespaces":
        pytest.skip(f"the sandbox runs in {ex.mode!r} mode here (needs root and unshare)")
    return ex


def run_folder_task(folder: Path, code: str) -> dict[str, Any]:
    """`code` evaluated on the task folder `folder` as `station evaluate` does, in a fresh local sandbox."""
    from evaluators.base import create_task
    from rooms.research.standalone import evaluate
    from station.executors import LocalExecutor

    task = create_task("folder", {"path": str(folder)})
    executor = LocalExecutor(hide=task.private_paths())
    try:
        return evaluate(task, code, executor)
    finally:
        executor.close()


def copy_station(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("run.lock"))
    return target


# Modules whose tests are slow on a 2-core machine (a real training or scoring, a whole station run,
# Ray, a browser, kill -9 loops, or the shared demo station), about the heaviest first: 70 to 130 s for the
# first few, 10 s for the last, run alone. `pytest -m "not slow"` leaves them out (the quick loop while
# editing, README "Tests"); `make test` runs everything on three workers, which take whole modules in
# this order, so the longest start first and no long one is left for the end. test_demo comes first:
# it builds the shared demo60 station, which test_cli and the test_web modules would otherwise wait for.
SLOW_MODULES = (
    "test_demo", "test_forecasting_task", "test_scrna_task", "test_redteam_sokoban", "test_request_processes",
    "test_cli", "test_sokoban_task", "test_redteam_jax", "test_rna_task", "test_front_door",
    "test_scrna_oracle", "test_redteam_scrna", "test_redteam_export", "test_remote_station", "test_folder_task", "test_web_browser", "test_web_study_browser",
    "test_redteam_rna", "test_redteam_files", "test_evaluation_faults", "test_crash", "test_eval_crash",
    "test_scrna_metrics",
    "test_web_security", "test_evaluations", "test_sokoban_scoring", "test_sokoban_env", "test_set_model",
    "test_redteam_folder", "test_redteam_recreate", "test_external", "test_evolve_play", "test_circle_packing", "test_web", "test_web_links",
    "test_web_study", "test_math_pack", "test_ray_executor", "test_ray_faults", "test_two_stage_ray_cluster",
)
# A test that starts Ray (a local instance or a head) says so in its name: its module, function or
# parameter id has the word "ray". Those tests form one group, which one worker runs first: two Ray
# instances at once on two cores can miss each other's health checks.
RAY_GROUP = "ray"
RAY_IN_NAME = re.compile(r"(?<![^\W_])ray(?![^\W_])")
ORDER = {name: rank for rank, name in enumerate((RAY_GROUP, *SLOW_MODULES))}


def group_of(nodeid: str) -> str:
    """The work unit a parallel worker takes whole: the Ray group, or the test's module."""
    module = nodeid.split("::", 1)[0]
    return RAY_GROUP if RAY_IN_NAME.search(nodeid.rsplit("/", 1)[-1]) else module


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
    # the workers take units in this order (pytest_xdist_make_scheduler): the longest start first
    items.sort(key=lambda item: ORDER.get(Path(group_of(item.nodeid)).stem, len(ORDER)))  # stable


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Whole modules per worker, the Ray group as one unit, in collection order (-n 3 in make test)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModulesAndRay(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # keep the heaviest-first order above
    return ModulesAndRay(config, log)
