"""Red team: one agent's run must not change what another's executes through compiled code in
research storage (issue 51, item 3).

Every run may write storage/shared. An honest helper.py lies there; a run plants compiled code
that Python prefers or falls back to: a `__pycache__/helper.cpython-311.pyc` compiled from other
source (an unchecked hash-based .pyc, which Python never compares with the source), a sourceless
`tool.pyc`, and an extension module `helper2.<EXT_SUFFIX>` built with the gcc the sandbox's /usr
holds, which Python's import order puts before helper2.py. A later run that imports them ran the
planted code while the source everyone reads stayed honest. Runs, and the Python processes they
start, now import only .py sources from storage (station/executors/harness_site/sitecustomize.py).

Needs the namespaces sandbox (root and unshare); elsewhere the module is skipped, saying why.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from rooms.research import storage as rs
from rooms.research.fingerprint import storage_hashes
from station.executors import LocalExecutor, Mount, RunSpec
from station.executors.disk import remove_tree

HONEST = 'def answer():\n    return "honest"\n'
PLANT = """
import os, py_compile, subprocess, sysconfig, tempfile
def main():
    shared = "storage/shared"
    planted = os.path.join(tempfile.mkdtemp(), "planted.py")
    with open(planted, "w") as f:
        f.write('def answer():\\n    return "planted"\\n')
    unchecked = py_compile.PycInvalidationMode.UNCHECKED_HASH
    py_compile.compile(planted, cfile=f"{shared}/__pycache__/helper.cpython-311.pyc", invalidation_mode=unchecked)
    with open(planted, "w") as f:
        f.write('RAN = "the sourceless tool ran"\\n')
    py_compile.compile(planted, cfile=f"{shared}/tool.pyc")
    source = os.path.join(tempfile.mkdtemp(), "helper2.c")
    with open(source, "w") as f:
        f.write(C_MODULE)
    target = f"{shared}/helper2" + sysconfig.get_config_var("EXT_SUFFIX")
    built = subprocess.run(["gcc", "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"], source, "-o", target],
                           capture_output=True, text=True) if shutil_which("gcc") else None
    return {"gcc": built is not None and built.returncode == 0, "why": built.stderr[-500:] if built else "no gcc"}
def shutil_which(name):
    import shutil
    return shutil.which(name)
C_MODULE = '''
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyUnicode_FromString("from C"); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "helper2", NULL, -1, methods};
PyMODINIT_FUNC PyInit_helper2(void) { return PyModule_Create(&module); }
'''
"""
IMPORTS = """
import sys
sys.path.insert(0, "storage/shared")
def main():
    import helper, helper2
    try:
        import tool
        sourceless = tool.RAN
    except ImportError as err:
        sourceless = f"ImportError: {err}"
    from storage.shared import helper as through_package  # the storage folders as namespace packages
    return {"helper": helper.answer(), "helper2": helper2.answer(), "tool": sourceless,
            "package": through_package.answer()}
"""
CHILD = (
    "import sys; sys.path.insert(0, 'storage/shared'); import helper, helper2; print(helper.answer(), helper2.answer())"
)


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("storage")
    shared = root / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(root, 0o755)
    os.chmod(shared, 0o777)
    for name in ("helper.py", "helper2.py"):
        (shared / name).write_text(HONEST)
        os.chmod(shared / name, 0o664)
    return shared


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> LocalExecutor:
    ex = LocalExecutor(scratch_base=tmp_path_factory.mktemp("scratch"))
    if ex.mode != "namespaces":
        pytest.skip(f"the sandbox runs in {ex.mode!r} mode here (needs root and unshare)")
    return ex


@pytest.fixture(scope="module")
def planted(executor: LocalExecutor, storage: Path) -> dict:
    """The planting run: another agent's, earlier."""
    result = executor.run(spec(PLANT, storage))
    assert result.status == "ok", result
    assert (storage / "__pycache__" / "helper.cpython-311.pyc").is_file() and (storage / "tool.pyc").is_file()
    return dict(result.value)


def spec(code: str, storage: Path, **kw) -> RunSpec:
    return RunSpec(code=textwrap.dedent(code), mounts=[Mount(storage, "storage/shared", True)], timeout_s=120, **kw)


def test_a_later_run_imports_the_honest_sources_only(executor: LocalExecutor, storage: Path, planted: dict) -> None:
    result = executor.run(spec(IMPORTS, storage))
    assert result.status == "ok", result
    assert result.value["helper"] == "honest"  # the old sandbox ran the planted __pycache__ bytecode
    assert result.value["package"] == "honest"
    assert result.value["tool"].startswith("ImportError: tool: storage holds only compiled code"), result.value
    assert "tool.pyc" in result.value["tool"]
    if planted["gcc"]:  # the sandbox's /usr has gcc: the planted extension module was built
        assert result.value["helper2"] == "honest"  # the old sandbox imported the .so before helper2.py


def test_python_processes_a_run_starts_import_the_honest_sources_only(
    executor: LocalExecutor, storage: Path, planted: dict
) -> None:
    command = f'{sys.executable} -c "{CHILD}"'
    result = executor.run(spec("", storage, mode="command", entry=command))
    assert result.status == "ok", result
    assert result.stdout.split() == ["honest", "honest"], result.stdout


def test_the_sandbox_can_build_an_extension_module(planted: dict) -> None:
    """Says whether the .so attack is real here: gcc inside the sandbox's /usr built one."""
    if not planted["gcc"]:
        pytest.skip(f"no working gcc in the sandbox here: {planted['why']}")
    assert planted["gcc"]


def test_honest_packages_in_storage_still_import(executor: LocalExecutor, storage: Path) -> None:
    package = storage / "honestpkg"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("from .part import VALUE\n")
    (package / "part.py").write_text("VALUE = 41 + 1\n")
    code = (
        "import sys\nsys.path.insert(0, 'storage/shared')\nimport honestpkg\ndef main():\n    return honestpkg.VALUE\n"
    )
    result = executor.run(spec(code, storage))
    assert result.status == "ok" and result.value == 42, result


# -- `station external` runs a submission against the storage it was scored with ------------------
EXTERNAL_CODE = "import sys\nsys.path.insert(0, 'storage/shared')\nfrom helper import construct_packing\n"


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, float]:
    """A demo station whose evaluation imports helper.py from storage/shared, scored honestly (the tick waits for it: wait_ticks 2)."""
    from helpers import ROOT, read, station_cli

    from rooms.research.store import insert_evaluation
    from station.apps.world import Station

    folder = tmp_path_factory.mktemp("external")
    done = station_cli("init", str(ROOT / "configs" / "demo.yaml"), "--dir", "st", cwd=folder)
    assert done.returncode == 0, done.stderr
    shared = folder / "st" / "files" / "research" / "storage" / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    (shared / "helper.py").write_text((ROOT / "evaluators" / "programs" / "circle_grid.py").read_text())
    station = Station.open(folder / "st")
    try:
        with station.store.transaction():
            number = insert_evaluation(
                station.store,
                task="1",
                author="System",
                session=None,
                lineage=None,
                tick=1,
                title="Grid from storage",
                tags=["grid"],
                abstract="Imports helper.",
                code=EXTERNAL_CODE,
            )
    finally:
        station.close()
    done = station_cli("run", "--dir", "st", "--ticks", "2", cwd=folder)
    assert done.returncode == 0, done.stderr
    ((status, score),) = read(folder / "st", f"SELECT status, score FROM evaluations WHERE id={number}")
    assert status == "finished" and score > 0, status
    return folder, number, score


def test_an_external_run_refuses_storage_changed_since_the_scoring(scored: tuple[Path, int, float]) -> None:
    from helpers import station_cli

    folder, number, internal = scored
    helper = folder / "st" / "files" / "research" / "storage" / "shared" / "helper.py"
    honest = helper.read_text()
    helper.write_text(honest.replace("(1 - 1e-12)", "(1 - 1e-12) / 2"))  # planted after the scoring
    try:
        refused = station_cli("external", "st", "--evaluation", str(number), "--json", cwd=folder)
        assert refused.returncode != 0 and refused.stdout == "", refused.stdout  # the old command ran it
        assert f"the storage evaluation #{number} was scored with has changed since" in refused.stderr
        assert (
            "1 file differ (storage/shared/helper.py)" in refused.stderr and "--allow-changed-storage" in refused.stderr
        )
        forced = station_cli(
            "external", "st", "--evaluation", str(number), "--json", "--allow-changed-storage", cwd=folder
        )
        (shown,) = json.loads(forced.stdout)
        assert shown["changed_storage"] and "RUN AGAINST CHANGED STORAGE" in shown["protocol"]
        assert shown["mean"] == pytest.approx(internal / 2)  # it did run the changed code: flagged, not hidden
        kept = read_protocols(folder / "st")
        assert "RUN AGAINST CHANGED STORAGE" in kept[-1] and "storage/shared/helper.py" in kept[-1]
    finally:
        helper.write_text(honest)
    again = station_cli("external", "st", "--evaluation", str(number), "--json", cwd=folder)  # as scored: it runs
    (shown,) = json.loads(again.stdout)
    assert again.returncode == 0 and shown["mean"] == internal and not shown["changed_storage"]


def read_protocols(directory: Path) -> list[str]:
    from helpers import read

    return [row[0] for row in read(directory, "SELECT protocol FROM external_evaluations ORDER BY id")]


def test_what_a_run_leaves_in_storage_cannot_stop_or_steer_the_storage_fingerprint(tmp_path: Path) -> None:
    """The station hashes storage after every evaluation (for `station external`), walking folders
    runs write. A 3000-deep folder tree used to raise RecursionError out of os.walk, outside the
    worker's error handling, for every later evaluation; a link to / or a FIFO must not be followed
    or waited on. Now: the deep tree is marked incomplete, the link named, the FIFO skipped, and the
    honest file hashed."""
    files = tmp_path / "files"
    root = rs.storage_root(files)
    rs.ensure_layout(root)
    shared = root / "shared"
    (shared / "helper.py").write_text("VALUE = 1\n")
    (shared / "escape").symlink_to("/")
    os.mkfifo(shared / "pipe")
    fd = os.open(shared, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):  # relative to a descriptor: the path would pass PATH_MAX
        os.mkdir("d", dir_fd=fd)
        down = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = down
    os.close(fd)
    try:
        found = storage_hashes(files, None)
    finally:  # pytest's own clean-up of old temporary folders recurses: it would fail on this tree
        remove_tree(shared / "d")
    assert found["storage/shared/helper.py"].startswith("sha256:")
    assert found["storage/shared/escape"] == "link:/"
    assert not any(path.startswith("storage/shared/escape/") for path in found)
    assert "storage/shared/pipe" not in found
    assert found["storage/shared/..."].startswith("incomplete")
