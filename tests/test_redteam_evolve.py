"""Red team: an OpenEvolve or ShinkaEvolve program attacks the evaluator that scores it (issue 51).

The evaluator loads the program itself. When the two shared a process, a program that changed only
its EVOLVE block read the evaluator's answer through `sys.modules` (a perfect score), or swapped
the `__code__` of the evaluator's validation function for "always valid" (a score above the honest
maximum). The program now runs apart, as the run's companion: the evaluator gets a stand-in module
whose functions call into the program's own process, with plain data crossing between them.

Real sandboxed runs, real folders (tests/data/evolve_redteam), and the evaluators called directly
here as the formats' own frameworks call them, for the honest scores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_folder_task

from evaluators.base import create_task
from rooms.research.standalone import evaluate
from station.executors import LocalExecutor

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ROOT / "tests" / "data" / "evolve_redteam"
COMPAT = ROOT / "evaluators" / "folder" / "compat"
MODULE_STATE = FOLDERS / "openevolve_module_state"
VALIDATOR = FOLDERS / "shinka_validator"


def in_block(folder: Path, initial: str, block: str) -> str:
    """The folder's initial program with only its EVOLVE block replaced by `block`."""
    code = (folder / initial).read_text()
    head, rest = code.split("# EVOLVE-BLOCK-START\n")
    _, tail = rest.split("# EVOLVE-BLOCK-END\n")
    return f"{head}# EVOLVE-BLOCK-START\n{block}\n# EVOLVE-BLOCK-END\n{tail}"


def oracle(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The folder's evaluator imported here, as its framework imports it."""
    monkeypatch.syspath_prepend(str(COMPAT))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    spec = importlib.util.spec_from_file_location(f"oracle_{path.parent.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


READ_THE_ANSWER = '''
import sys


def guess():
    """Whatever module holds the evaluator's hidden numbers: its answer, handed back as the guess."""
    for module in list(sys.modules.values()):
        hidden = getattr(module, "_HIDDEN", None)
        if isinstance(hidden, list) and len(hidden) == 8:
            return list(hidden)
    return [0.5] * 8
'''


def test_an_openevolve_program_cannot_read_its_evaluator_s_module_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to read `_HIDDEN` from the evaluator's module and score 1.0 (honest: 0.6396)."""
    honest = run_folder_task(MODULE_STATE, (MODULE_STATE / "initial_program.py").read_text())
    program = tmp_path / "initial.py"
    program.write_text((MODULE_STATE / "initial_program.py").read_text())
    expected = oracle(MODULE_STATE / "evaluator.py", monkeypatch).evaluate(str(program))["combined_score"]
    assert honest["status"] == "ok" and honest["score"] == expected, honest
    attacked = run_folder_task(MODULE_STATE, in_block(MODULE_STATE, "initial_program.py", READ_THE_ANSWER))
    assert attacked["status"] == "ok", attacked
    assert attacked["score"] == honest["score"], attacked  # the guess fell back to the honest one


ALWAYS_VALID = '''
def weights():
    """Rewrite the evaluator's validate_fn wherever it is found, then hand back more than is valid."""
    import sys

    def always_valid(result):
        return True, None

    for module in list(sys.modules.values()):
        check = getattr(module, "validate_fn", None)
        if callable(check) and hasattr(check, "__code__"):
            check.__code__ = always_valid.__code__
    return [1.0, 1.0, 0.99]
'''


def test_a_shinka_program_cannot_rewrite_its_evaluator_s_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to make validate_fn "always valid" and score 2.99 where 1 is the honest maximum."""
    honest = run_folder_task(VALIDATOR, (VALIDATOR / "initial.py").read_text())
    program = tmp_path / "initial.py"
    program.write_text((VALIDATOR / "initial.py").read_text())
    metrics, correct, _ = oracle(VALIDATOR / "evaluate.py", monkeypatch).main(str(program), str(tmp_path / "out"))
    assert correct and honest["status"] == "ok" and honest["score"] == metrics["combined_score"], honest
    attacked = run_folder_task(VALIDATOR, in_block(VALIDATOR, "initial.py", ALWAYS_VALID))
    assert attacked["score"] is None or attacked["score"] <= 1.0, attacked
    assert attacked["status"] == "invalid" and "more than 1" in attacked["details"], attacked


# -- what crosses, and how: one evaluator that tries every way of loading and calling the program ----------
PROBE_EVALUATOR = """
import contextlib, ctypes, importlib, importlib.machinery, importlib.util, io, multiprocessing, os, random, runpy, signal
import subprocess, sys, tempfile, threading

import numpy as np


def _load(path):
    spec = importlib.util.spec_from_file_location("program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _try(call):
    try:
        return repr(call())
    except BaseException as err:
        return f"{type(err).__name__}: {err}"


def _draws():
    return [random.random(), float(np.random.rand())]


def _timed_out(signum, frame):
    raise TimeoutError("took too long")


def evaluate(program_path):
    m = _load(program_path)
    facts = m.facts()
    seen = {"combined_score": 0.5, "evaluator_uid": os.getuid(), **{f"program_{k}": v for k, v in facts.items()}}
    seen["evaluator_dumpable"] = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
    seen["generator"] = _try(m.numbers_lazily)
    seen["object_in"] = _try(lambda: m.echo(object()))
    try:
        m.fails()
    except ValueError as err:  # the program's ValueError, as a ValueError with its arguments
        seen["value_error"] = repr(err.args)
    seen["own_error"] = _try(m.fails_own)
    sent = {"a": [1, 2.5, float("inf"), -0.0], "t": (None, True, b"x", "é"), 3: np.arange(4, dtype=np.int32)}
    back = m.echo(sent)
    seen["echo_same"] = float(back["a"] == sent["a"] and back["t"] == sent["t"] and back[3].dtype == np.int32
                              and back[3].tolist() == [0, 1, 2, 3] and back["nan"] != back["nan"])
    random.seed(3); np.random.seed(3)
    theirs, after = m.draw(), _draws()
    random.seed(3); np.random.seed(3)
    seen["random_carried"] = float(list(theirs) == _draws() and after == _draws())
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        m.shout()
    seen["prints_caught"] = float("PROGRAM-PRINTS" in printed.getvalue())
    signal.signal(signal.SIGALRM, _timed_out)
    signal.alarm(1)
    seen["timeout"] = _try(m.sleep_long)
    signal.alarm(0)
    seen["sleeper_killed"] = float(m.sleeper_gone())
    waiting = threading.Thread(target=m.sleep_long, daemon=True)  # a thread's call left running, as on a timeout
    waiting.start()
    waiting.join(1)
    seen["beside_a_running_call"] = m.facts()["uid"]
    ran = subprocess.run([sys.executable, program_path, "x"], capture_output=True, text=True, timeout=60)
    seen["as_main"] = f"{ran.returncode} {ran.stdout.strip()!r}"
    seen["main_timeout"] = _try(lambda: subprocess.run([sys.executable, program_path, "sleep"], timeout=1))
    seen["main_sleeper_killed"] = float(m.sleeper_gone("main-sleeper"))
    script = os.path.join(tempfile.mkdtemp(), "child.py")  # as upstream evaluators run a program with a timeout
    with open(script, "w") as f:
        f.write(f"import importlib.util\\nspec = importlib.util.spec_from_file_location('p', {program_path!r})\\n"
                "m = importlib.util.module_from_spec(spec)\\nspec.loader.exec_module(m)\\nprint(m.facts()['uid'])\\n")
    ran = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=60)
    seen["child_uid"] = int(ran.stdout.split()[-1])
    seen["run_path_uid"] = runpy.run_path(program_path)["facts"]()["uid"]
    seen["loader_uid"] = importlib.machinery.SourceFileLoader("p2", program_path).load_module().facts()["uid"]
    sys.path.insert(0, os.path.dirname(program_path))
    seen["import_uid"] = importlib.import_module(os.path.basename(program_path)[:-3]).facts()["uid"]
    seen["text_read"] = float("def facts" in open(program_path).read())
    child = multiprocessing.get_context("fork")
    queue = child.Queue()
    forked = child.Process(target=_facts_into, args=(m, queue))
    forked.start()
    seen["forked_uid"], seen["parent_still_calls"] = queue.get(timeout=60)["uid"], m.facts()["uid"]
    forked.join()
    for _ in range(100):  # loads dropped at once: their workers end with them
        _load(program_path).facts()
    seen["after_100_loads"] = _load(program_path).facts()["uid"]
    return seen


def _facts_into(m, queue):
    queue.put(m.facts())
"""

PROBE_PROGRAM = """
import os, random, sys, time

import numpy as np


def facts():
    try:
        open("task/evaluator.py").read()
        task = 1.0
    except OSError:
        task = 0.0
    return {"uid": os.getuid(), "task_file": task, "apart_env": float("STATION_APART_PROGRAM" in os.environ),
            "evaluator_module": float(any("evaluator" in name for name in sys.modules)),
            "others_read": others_read()}


def others_read():
    # what of another process it reads: its memory, environment, or the task folder through its root
    read = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for part in ("mem", "environ", "root/task/evaluator.py", "cwd/task/evaluator.py"):
            try:
                with open(f"/proc/{pid}/{part}", "rb") as f:
                    if part == "mem":
                        f.seek(0x400000)
                    f.read(16)
                read += os.stat(f"/proc/{pid}").st_uid != os.getuid() or part.endswith(".py")
            except OSError:
                pass
    return read


def numbers_lazily():
    return (i for i in range(3))


def echo(value):
    return {**value, "nan": float("nan")} if isinstance(value, dict) else value


def fails():
    raise ValueError("bad input", 7)


def fails_own():
    class OwnError(Exception):
        pass
    raise OwnError("mine")


def draw():
    return random.random(), np.random.rand()


def shout():
    print("PROGRAM-PRINTS")


def sleep_long(name="sleeper"):
    with open(os.path.join(os.environ["STATION_CHANNEL"], name), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)


def sleeper_gone(name="sleeper"):
    with open(os.path.join(os.environ["STATION_CHANNEL"], name)) as f:
        pid = int(f.read())
    for _ in range(200):
        if not os.path.exists(f"/proc/{pid}"):
            return True
        time.sleep(0.025)
    return False


if __name__ == "__main__":
    if sys.argv[1:] == ["sleep"]:
        sleep_long("main-sleeper")
    print("MAIN", sys.argv[1:])
    sys.exit(5)
"""


@pytest.fixture()
def probe() -> Iterator[Path]:
    """The probe folder, where a sandbox uid can read it (like any task folder)."""
    folder = Path(tempfile.mkdtemp(prefix="station-probe-", dir="/srv" if os.access("/srv", os.W_OK) else None))
    (folder / "evaluator.py").write_text(PROBE_EVALUATOR)
    (folder / "initial_program.py").write_text(PROBE_PROGRAM)
    (folder / "config.yaml").write_text("evaluator: {timeout: 120}\n")
    for path in (folder, *folder.iterdir()):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_program_runs_as_another_user_in_its_own_process_and_only_plain_data_crosses(probe: Path) -> None:
    executor = LocalExecutor(hide=[probe])
    if executor.mode != "namespaces":
        executor.close()
        pytest.skip(f"the sandbox runs in {executor.mode!r} mode here (needs root and unshare)")
    try:
        result = evaluate(create_task("folder", {"path": str(probe)}), PROBE_PROGRAM, executor)
    finally:
        executor.close()
    assert result["status"] == "ok", result
    assert any(layer.startswith("companion") for layer in result["isolation"]), result["isolation"]  # not "none"
    seen, details = result["metrics"], result["details"]
    # apart: another uid, no task folder, no evaluator module, no stand-in variables
    assert seen["program_uid"] != seen["evaluator_uid"], seen
    assert seen["program_task_file"] == 0 and seen["program_evaluator_module"] == 0 and seen["program_apart_env"] == 0
    assert seen["program_others_read"] == 0  # neither the evaluator's memory nor its environment nor its files
    assert seen["evaluator_dumpable"] == 0  # nor by the same uid, where a sandbox gives runs none of their own
    # what crosses: plain data both ways, refused otherwise with the function and the type named
    assert (
        "generator: TypeError: numbers_lazily() returned a generator: only plain data crosses from the program"
        in details
    )
    assert "object_in: TypeError: echo() was given an object (argument [0])" in details, details
    assert "value_error: ('bad input', 7)" in details and "own_error: RuntimeError: OwnError: mine" in details
    assert seen["echo_same"] == 1 and seen["random_carried"] == 1 and seen["prints_caught"] == 1
    # a timeout's signal ends the call; the host kills the worker left running
    assert "timeout: TimeoutError: took too long" in details and seen["sleeper_killed"] == 1
    # `python program.py`, runpy, SourceFileLoader and import all reach the program's own process
    assert "as_main: 5 \"MAIN ['x']\"" in details, details
    assert seen["run_path_uid"] == seen["loader_uid"] == seen["import_uid"] == seen["program_uid"]
    assert seen["child_uid"] == seen["program_uid"]  # a child interpreter's loading too
    assert "main_timeout: TimeoutExpired" in details and seen["main_sleeper_killed"] == 1  # the worker killed
    assert seen["beside_a_running_call"] == seen["program_uid"]  # a fresh load beside a call still running
    assert seen["text_read"] == 1  # reading the program's text reads the real file
    # a forked child of the evaluator calls on a connection of its own; a hundred loads come and go
    assert seen["forked_uid"] == seen["parent_still_calls"] == seen["after_100_loads"] == seen["program_uid"]


# -- the codec: what each side builds from the other's bytes ---------------------------------------------
def _codec() -> Any:
    path = ROOT / "evaluators" / "folder" / "apart" / "apart_codec.py"
    spec = importlib.util.spec_from_file_location("apart_codec_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_codec_carries_plain_data_exactly_and_refuses_the_rest_by_type() -> None:
    np = pytest.importorskip("numpy")
    codec = _codec()
    value = {
        "ints": [0, -1, 2**200, -(2**70)],
        "floats": (1.5, -0.0, float("inf"), float("-inf")),
        ("a", 1): None,
        b"raw": "text é \udc80",
        "arrays": [np.arange(6, dtype=np.int16).reshape(2, 3), np.array([True, False]), np.zeros((0, 4))],
        "scalars": [np.float32(0.25), np.uint64(2**63)],
        "flags": [True, False],
    }
    back = codec.decode(codec.encode(value))
    assert back.keys() == value.keys() and back["ints"] == value["ints"] and back["floats"] == value["floats"]
    assert isinstance(back["floats"], tuple) and back[("a", 1)] is None and back[b"raw"] == value[b"raw"]
    assert [a.dtype for a in back["arrays"]] == [np.int16, np.bool_, np.float64] and back["arrays"][0].shape == (2, 3)
    assert (back["arrays"][0] == value["arrays"][0]).all() and back["arrays"][2].shape == (0, 4)
    assert type(back["scalars"][0]) is np.float32 and back["scalars"][1] == 2**63 and back["flags"] == [True, False]
    nan = codec.decode(codec.encode(float("nan")))
    assert nan != nan
    for other, named in [
        ((i for i in ()), "a generator"),
        ([1, {"k": object()}], "an object (at value[1]['k'])"),
        (np.array(["x"], dtype=object), "a numpy array of dtype object"),
        ({1, 2}, "a set"),
        (lambda: 0, "a function"),
    ]:
        with pytest.raises(codec.NotData) as refused:
            codec.encode(other)
        assert str(refused.value) == named


def test_the_codec_refuses_bytes_that_are_not_a_message_it_sent() -> None:
    pytest.importorskip("numpy")
    codec = _codec()
    good = codec.encode([1, "two"])
    for raw in [
        b"X",  # an unknown tag
        good[:-1],  # cut short
        good + b"N",  # bytes after the value
        b"A" + (3).to_bytes(4, "little") + b"|O8",  # an object array: never built
        b"A" + (5).to_bytes(4, "little") + b"|Q8__",  # a dtype numpy does not know
        b"S" + (1).to_bytes(4, "little") + b"\xff",  # text that is not UTF-8
        b"L" + (1).to_bytes(4, "little") + b"L" * 300,  # nested past MAX_DEPTH
        b"M" + (1).to_bytes(4, "little") + b"L" + (0).to_bytes(4, "little") + b"N",  # a list as a dict key
    ]:
        with pytest.raises(codec.Broken):
            codec.decode(raw)


# -- the task option, and what `station task check` and the contract say ----------------------------------
def test_task_check_and_the_contract_say_whether_the_program_runs_apart(tmp_path: Path) -> None:
    apart = create_task("folder", {"path": str(VALIDATOR)})
    shutil.copytree(VALIDATOR, tmp_path / "shared")
    (tmp_path / "shared" / "task.yaml").write_text("program_process: shared\n")
    shared = create_task("folder", {"path": str(tmp_path / "shared")})
    assert "runs apart from its evaluator" in apart.program_isolation()  # type: ignore[attr-defined]
    assert "program_process: shared" in shared.program_isolation()  # type: ignore[attr-defined]
    assert "apart from the evaluator" in apart.spec() and "not isolated" not in apart.spec()
    assert "the score is not isolated from your program" in shared.spec()
    checked = subprocess.run(
        [sys.executable, "-m", "station.apps.cli", "task", "check", str(VALIDATOR), "--no-baselines"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert checked.returncode == 0 and "\nprogram: runs apart from its evaluator" in checked.stderr, checked.stderr
    (tmp_path / "shared" / "task.yaml").write_text("program_process: together\n")
    with pytest.raises(ValueError, match="program_process"):
        create_task("folder", {"path": str(tmp_path / "shared")})


def test_the_stand_in_and_the_host_work_the_same_without_a_sandbox(tmp_path: Path) -> None:
    """The crossing itself, where no sandbox runs (no root, no unshare): the host as a plain process,
    the evaluator in another with the stand-in installed; every crossing as in the sandbox."""
    pytest.importorskip("numpy")
    apart, channel = ROOT / "evaluators" / "folder" / "apart", tmp_path / "channel"
    channel.mkdir()
    (tmp_path / "program.py").write_text(PROBE_PROGRAM)
    (tmp_path / "evaluator.py").write_text(PROBE_EVALUATOR)
    (tmp_path / "run.py").write_text(
        "import importlib.util, json, sys\n"
        f"sys.path.insert(0, {str(apart)!r})\n"
        "import apart_standin\n"
        f"apart_standin.install({str(tmp_path / 'program.py')!r}, {str(channel)!r})\n"
        f"spec = importlib.util.spec_from_file_location('evaluator', {str(tmp_path / 'evaluator.py')!r})\n"
        "evaluator = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(evaluator)\n"
        f"print(json.dumps(evaluator.evaluate({str(tmp_path / 'program.py')!r})))\n"
    )
    env = {**os.environ, "STATION_CHANNEL": str(channel)}
    host = subprocess.Popen([sys.executable, "-s", str(apart / "apart_host.py"), str(tmp_path / "program.py")], env=env)
    try:
        ran = subprocess.run(
            [sys.executable, "run.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        host.kill()
        host.wait()
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout.splitlines()[-1])
    assert seen["generator"].startswith("TypeError: numbers_lazily() returned a generator: only plain data")
    assert seen["object_in"].startswith("TypeError: echo() was given an object (argument [0])")
    assert seen["value_error"] == "('bad input', 7)" and seen["own_error"] == "RuntimeError: OwnError: mine"
    assert seen["echo_same"] == seen["random_carried"] == seen["prints_caught"] == seen["sleeper_killed"] == 1
    assert seen["timeout"] == "TimeoutError: took too long" and seen["as_main"] == "5 \"MAIN ['x']\""
    assert seen["main_timeout"].startswith("TimeoutExpired") and seen["main_sleeper_killed"] == 1
    assert seen["evaluator_dumpable"] == 0 and seen["program_evaluator_module"] == 0
    uids = {seen[k] for k in ("program_uid", "run_path_uid", "loader_uid", "import_uid", "child_uid", "forked_uid")}
    assert uids == {os.getuid()} and seen["after_100_loads"] == os.getuid()
