"""Red team: what a run leaves on disk, against the station's own hands (issue 50, item 3 and 4).

The station is root on the host and reads, copies and removes what sandboxed runs wrote. Each
attack plants something in a folder a run can write and looks whether the station follows it,
breaks on it, or blames the breakage on nobody:

- a `stop` link in a trained task's checkpoints/ (the station used to touch it: a root-owned
  file anywhere, or the times of /etc/nologin bumped);
- a 3000-deep folder tree in checkpoints/ (the evaluation folder's clean-up raised RecursionError);
- a checkpoint swapped for a folder while the station reads it (the station's unlink raised);
- deep trees and paths longer than the kernel takes in a folder task's outputs/ (the copy for the
  scorer raised ENAMETOOLONG or RecursionError);
- `station evaluate` on such a submission (a traceback, and its temporary folders left in /tmp);
- a station killed with kill -9 during a two-stage evaluation (its evaluation folder stayed forever).

Each hostile layout ends as a failure charged to the submission, the station goes on, an honest run
beside them scores, and no evaluation folder outlives its evaluation or the next start.
Real sandboxed runs (forecasting at its tiny settings, one epoch at most), real folders, the real
command line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import shared_task_data
from helpers import read

from evaluators.base import create_task
from rooms.research.standalone import evaluate as evaluate_standalone
from station.executors import LocalExecutor, runfiles

ROOT = Path(__file__).resolve().parents[1]
TINY = {"size": "small", "trials": 1, "trial_budget_s": 600, "max_epochs": 1, "patience": 1, "grace_s": 120}
HEAD = '''import json, os, time
import numpy as np
import flax.linen as nn
import station_jax.forecast as h
SETTINGS = json.loads(os.environ.get("STATION_TRIAL", '{"trial": 0, "phase": "check"}'))
TRAINING = SETTINGS["phase"] == "train"


def create_network(hparams):
    return nn.Dense(32)
'''
# The trial's own code replaces the harness (h.main): no training, only the attack.
ATTACK = '''

def attack(ns):
    if not TRAINING:
        return {{"checked": True}}
{body}
    return {{"seed": 0, "epochs": 0}}


h.main = attack
'''
DEEP = 3000  # the red team's tree
PAST_RECURSION = 1200  # past Python's recursion limit (1000): what broke rmtree, os.walk and os.fwalk


def attack(body: str) -> str:
    return HEAD + ATTACK.format(body=textwrap.indent(textwrap.dedent(body), "    "))


def nest(folder: str, depth: int, name: str) -> str:
    """Python that nests `depth` folders called `name` below `folder` (a chdir at a time: no path
    is ever longer than one name), then comes back."""
    return textwrap.dedent(f"""
        back = os.open(".", os.O_RDONLY)
        os.chdir({folder!r})
        for _ in range({depth}):
            os.mkdir({name!r})
            os.chdir({name!r})
        os.fchdir(back)
    """)


def left_in(folder: Path) -> list[str]:
    """The station's folders (run dirs, evaluation folders) still in `folder`."""
    return sorted(p.name for p in folder.glob("station-*"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with shared_task_data(tmp_path_factory, "forecast") as root:
        yield root


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scratch")


@pytest.fixture(scope="module")
def local(cache: Path, scratch: Path) -> Iterator[LocalExecutor]:
    task = create_task("forecasting", TINY)
    task.dataset.ensure()
    executor = LocalExecutor(scratch_base=scratch, hide=task.private_paths())
    yield executor
    executor.close()


def evaluate(executor, code: str, **params):
    task = create_task("forecasting", {**TINY, **params})
    result = task.execute(executor, code, mounts=[], label="redteam-files")
    return task, result, (task.score(result) if result.status == "ok" else None)


# -- the trial's exchange folder -------------------------------------------------------------------
def test_a_planted_stop_link_leads_the_station_nowhere(local, scratch: Path, tmp_path: Path) -> None:
    """Trial 0 links checkpoints/stop to a file the test owns (its times set in 2001), trial 1 to a
    name in a folder the test owns. The station tells the trainer to stop through a folder of its
    own: it creates nothing there and changes no time."""
    marker = tmp_path / "marker"
    marker.mkdir()
    existing = marker / "existing"
    existing.write_text("untouched\n")
    os.utime(existing, (1e9, 1e9))
    created = marker / "created"
    body = f"""
        target = [{str(existing)!r}, {str(created)!r}][SETTINGS["trial"]]
        os.symlink(target, "checkpoints/stop")
    """
    _, result, verdict = evaluate(local, attack(body), trials=2)
    assert result.status == "ok" and verdict is not None and not verdict.success, result.error
    assert "the run ended before it exported its apply function" in verdict.details
    assert sorted(p.name for p in marker.iterdir()) == ["existing"]
    assert existing.stat().st_mtime == 1e9 and existing.stat().st_atime == 1e9
    assert existing.read_text() == "untouched\n"
    assert left_in(scratch) == []


def test_a_3000_deep_tree_in_checkpoints_is_removed_and_charged(local, scratch: Path) -> None:
    """The evaluation folder holds it when the trial ends; its removal never recurses."""
    _, result, verdict = evaluate(local, attack(nest("checkpoints", DEEP, "d")))
    assert result.status == "ok" and verdict is not None and not verdict.success, result.error
    assert "no measured checkpoint" in verdict.details
    assert left_in(scratch) == []


def test_a_checkpoint_swapped_for_a_folder_while_the_station_reads_it(local, scratch: Path) -> None:
    """The run publishes an export, offers a 64 MB checkpoint, waits (inotify) until the station
    starts reading it, and puts a folder in its place. The station keeps what it read, does not
    trip on the folder, and charges the trial; the station goes on (the next test)."""
    body = """
        import ctypes
        with open("checkpoints/apply.jaxexport", "wb") as f:
            f.write(b"not an export")
        while os.path.exists("checkpoints/apply.jaxexport"):  # the station took it
            time.sleep(0.01)
        with open("checkpoints/checkpoint.partial", "wb") as f:
            f.truncate(64 << 20)
        libc = ctypes.CDLL(None, use_errno=True)
        watch = libc.inotify_init()
        assert libc.inotify_add_watch(watch, b"checkpoints/checkpoint.partial", 0x1) >= 0  # IN_ACCESS
        os.rename("checkpoints/checkpoint.partial", "checkpoints/checkpoint.npz")
        os.read(watch, 4096)  # the station is reading it
        os.rename("checkpoints/checkpoint.npz", "checkpoints/taken-away")
        os.mkdir("checkpoints/checkpoint.npz")
        os.mkdir("checkpoints/checkpoint.npz/inside")
        print("SWAPPED", flush=True)
    """
    _, result, verdict = evaluate(local, attack(body))
    assert result.status == "ok" and verdict is not None and not verdict.success, result.error
    assert "SWAPPED" in result.stdout
    assert "no measured checkpoint" in verdict.details
    assert left_in(scratch) == []


def test_an_honest_run_beside_the_attacks_scores(local, scratch: Path) -> None:
    """The shipped baseline, raising its own epoch limit: the station takes its one checkpoint and
    says stop through its control folder, which the trainer hears."""
    task = create_task("forecasting", TINY)
    code = task.baselines()[0].code + """
import json as _json, os as _os
_os.environ["STATION_TRIAL"] = _json.dumps({**_json.loads(_os.environ["STATION_TRIAL"]), "max_epochs": 50})
"""
    _, result, verdict = evaluate(local, code)
    assert verdict is not None and verdict.success, result.stderr[-3000:]
    trial = result.value["trials"][0]
    assert trial["station"]["checkpoints"] == 1 and trial["station"]["stop"] == "max-epochs"
    assert trial["reported"]["stop"] == "station" and trial["reported"]["epochs"] == 2  # it heard stop
    assert -0.5 < verdict.score < 0
    assert left_in(scratch) == []


# -- a folder task's outputs/ -----------------------------------------------------------------------
TASK = {
    "task.md": "# Anything\nWrite files under outputs/.\n",
    "evaluate.py": (
        "import os\n\ndef evaluate(returned, context):\n"
        "    return float(len(os.listdir(context.get('outputs_dir', 'outputs'))))\n"
    ),
}
LONG = "n" * 250  # one name the kernel takes; 20 of them nested make a path it does not


def folder_task(root: Path) -> Path:
    for name, text in TASK.items():
        (root / name).write_text(text)
        (root / name).chmod(0o644)
    root.chmod(0o755)
    return root


def outputs_code(body: str) -> str:
    return "import os\n\ndef main():\n" + textwrap.indent(body, "    ") + "    return 1\n"


@pytest.mark.parametrize(
    ("layout", "why"),
    [
        (nest("outputs", PAST_RECURSION, "d"), "nests folders deeper than"),
        (nest("outputs", 20, LONG), "holds a path longer than"),
        (nest("outputs", 40, "d") + "open('outputs/' + 'd/' * 40 + 'x', 'w').write('x' * 10)\n", None),
    ],
    ids=["1200-deep", "long-paths", "40-deep-honest"],
)
def test_hostile_outputs_of_a_folder_task_are_the_submission_s_failure(tmp_path: Path, layout: str, why) -> None:
    (tmp_path / "task").mkdir()
    folder_task(tmp_path / "task")
    task = create_task("folder", {"path": str(tmp_path / "task")})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    executor = LocalExecutor(scratch_base=scratch, hide=task.private_paths())
    try:
        result = evaluate_standalone(task, outputs_code(layout), executor)
    finally:
        executor.close()
    if why is None:  # nested, but within every bound: scored
        assert result["status"] == "ok" and result["score"] == 1.0, result
    else:
        assert result["status"] == "error", result
        assert result["error"].startswith("Outputs refused: outputs/ ") and why in result["error"], result["error"]
    assert left_in(scratch) == []


ODD_ENTRIES = """
open("outputs/honest", "w").write("1")
open(b"outputs/not utf-8 \\xff\\nand a newline", "w").write("2")
os.symlink("/etc/shadow", "outputs/link-to-the-host")  # resolved on the host, it would be the station's
os.symlink("honest", "outputs/link-inside")
os.mkfifo("outputs/pipe")  # opened for reading, it would block the station's copy
os.link("outputs/honest", "outputs/hard-link")
"""


def test_links_pipes_and_odd_names_in_outputs_are_left_out_or_copied_as_bytes(tmp_path: Path) -> None:
    """Links (to a host secret, inside outputs/), a FIFO, a hard link and a name that is not UTF-8 and
    holds a newline. The scorer counts what was handed over: the regular files (the honest one, the
    odd name, the hard link's second name: the run's own bytes), never a link or a pipe."""
    (tmp_path / "task").mkdir()
    folder_task(tmp_path / "task")
    task = create_task("folder", {"path": str(tmp_path / "task")})
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    executor = LocalExecutor(scratch_base=scratch, hide=task.private_paths())
    try:
        result = evaluate_standalone(task, outputs_code(ODD_ENTRIES), executor)
    finally:
        executor.close()
    assert result["status"] == "ok", result
    assert result["score"] == 3.0, result  # honest, the odd name, the hard link; no link, no pipe
    assert left_in(scratch) == []


def test_station_evaluate_on_a_hostile_output_ends_with_a_line_not_a_traceback(tmp_path: Path) -> None:
    """Folders nested past the recursion limit in outputs/ and in storage/shared: the command says
    why the submission failed, exits 1, and leaves nothing in its temporary folder."""
    (tmp_path / "task").mkdir()
    folder_task(tmp_path / "task")
    submission = tmp_path / "submission.py"
    submission.write_text(outputs_code(nest("outputs", PAST_RECURSION, "d") + nest("storage/shared", PAST_RECURSION, "d")))
    temp = tmp_path / "temp"
    temp.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "station.apps.cli", "evaluate", str(tmp_path / "task"), str(submission)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(temp)},
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert "status:    error (Outputs refused: outputs/ nests folders deeper than" in done.stdout, done.stdout
    assert left_in(temp) == []


# -- kill -9 during a two-stage evaluation ---------------------------------------------------------
# Its first trial leaves a marker in the persistent storage and sleeps (to be killed); run again, it
# finds the marker and ends at once (without a checkpoint: a charged failure).
SLOW_ONCE = attack("""
    marker = "storage/shared/started-once"
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(600)
""")


def station_config(tmp_path: Path, scratch: Path) -> Path:
    body = "\n".join(f"{k}: {json.dumps(v)}" for k, v in {
        "title": "Slow once", "tags": "files", "abstract": "Sleeps in its first trial only.",
        "content": SLOW_ONCE}.items())
    replies = ["/execute_action{goto research}\n/execute_action{submit 1}\n```yaml\n" + body + "\n```"]
    replay = tmp_path / "agent.jsonl"
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in [*replies, *["Waiting."] * 40]))
    config = {
        "name": "files-crash", "seed": 1, "engine": {"backup_every_ticks": 0},
        "agents": [{"count": 1, "kind": "recursive", "lineage": "Ada",
                    "model": {"provider": "replay", "name": "replay-ada", "replay_file": str(replay)}}],
        "lifecycle": {"maturity_ticks": 0}, "notifications": {"tips_every_ticks": 0},
        "research": {"tasks": [{"evaluator": "forecasting", "params": TINY, "baselines": False}],
                     "executor": {"max_parallel": 1, "scratch_dir": str(scratch)}, "wait_ticks": 1},
    }
    path = tmp_path / "station.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_kill_9_during_a_two_stage_evaluation_leaves_no_folder_after_the_next_start(cache: Path, tmp_path: Path) -> None:
    """A real `station run` is killed while its evaluation's trial trains: the evaluation folder
    (checkpoints, compile cache, exchange) is left, as nothing runs in a killed process. The next
    start removes it before it evaluates again, and that evaluation removes its own."""
    scratch, directory = tmp_path / "scratch", tmp_path / "st"
    scratch.mkdir()
    env = {**os.environ, "STATION_FORECAST_DATA": str(cache), "TMPDIR": str(scratch)}
    command = [sys.executable, "-m", "station.apps.cli", "run"]
    run = subprocess.Popen([*command, str(station_config(tmp_path, scratch)), "--dir", str(directory),
                            "--until-tick", "5"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    marker = directory / "files/research/storage/shared/started-once"
    try:
        deadline = time.monotonic() + 240
        while not (marker.exists() and list(scratch.glob("station-eval-1-v1-trials-*/trial0/train"))):
            assert run.poll() is None, run.stderr.read().decode() if run.stderr else ""
            assert time.monotonic() < deadline, "the trial never started"
            time.sleep(0.1)
        run.send_signal(signal.SIGKILL)
        run.wait(10)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    (left,) = scratch.glob("station-eval-1-v1-trials-*")  # what kill -9 leaves
    resumed = subprocess.run([*command, "--dir", str(directory), "--until-tick", "2"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read(directory, "SELECT id, status FROM evaluations") == [(1, "failed")]  # charged: no checkpoint
    assert not left.exists()
    assert list(scratch.glob("station-*-trials-*")) == []


def test_ctrl_c_during_a_two_stage_evaluation_leaves_no_folder(cache: Path, tmp_path: Path) -> None:
    """A graceful stop kills the runs, then waits (bounded) for each evaluation to remove its folder:
    it used to exit while the evaluation's thread was still cleaning up (one stop in ten left one)."""
    scratch, directory = tmp_path / "scratch", tmp_path / "st"
    scratch.mkdir()
    env = {**os.environ, "STATION_FORECAST_DATA": str(cache), "TMPDIR": str(scratch)}
    run = subprocess.Popen([sys.executable, "-m", "station.apps.cli", "run", str(station_config(tmp_path, scratch)),
                            "--dir", str(directory), "--until-tick", "5"],
                           cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not list(scratch.glob("station-eval-1-v1-train0-*")):  # the trial's run: it sleeps
            assert run.poll() is None, run.stderr.read().decode() if run.stderr else ""
            assert time.monotonic() < deadline, "the trial never started"
            time.sleep(0.1)
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err.decode()
    assert list(scratch.glob("station-*-trials-*")) == []


# -- the helper itself, on layouts a run can make --------------------------------------------------
def make_deep(folder: Path, depth: int, name: str = "d", leaf: str = "deep.txt") -> None:
    back = os.open(".", os.O_RDONLY)
    try:
        os.chdir(folder)
        for _ in range(depth):
            os.mkdir(name)
            os.chdir(name)
        Path(leaf).write_text("deep\n")
    finally:
        os.fchdir(back)
        os.close(back)


def test_take_reads_only_a_regular_file_of_its_own(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"the station's own data")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "link").symlink_to(secret)
    (folder / "folder").mkdir()
    os.mkfifo(folder / "fifo")
    (folder / "big").write_bytes(b"x" * 101)
    os.link(secret, folder / "hard")
    (folder / "good").write_bytes(b"checkpoint")
    for name, why in [("link", "not a regular file (Too many levels of symbolic links)"),
                      ("folder", "not a regular file of its own"), ("fifo", "not a regular file of its own"),
                      ("hard", "not a regular file of its own"), ("big", "holds 101 bytes, more than the 100")]:
        with pytest.raises(runfiles.Refused, match=re.escape(why)):
            runfiles.take(folder, name, 100, "the checkpoint")
    assert runfiles.take(folder, "absent", 100, "the checkpoint") is None
    assert runfiles.take(folder, "good", 100, "the checkpoint") == b"checkpoint"
    assert not (folder / "good").exists() and secret.read_bytes() == b"the station's own data"
    runfiles.write(folder, "stop", b"")  # the station's own folder: a file of its own, whole
    assert (folder / "stop").read_bytes() == b"" and not (folder / "stop.partial").exists()


def test_copy_tree_keeps_to_its_bounds_and_leaves_links_out(tmp_path: Path) -> None:
    source, bounds = tmp_path / "outputs", runfiles.Bounds(max_bytes=1000, max_files=20, max_depth=5, max_path=200)
    (source / "a" / "b").mkdir(parents=True)
    (source / "a" / "b" / "result.txt").write_text("42\n")
    (source / "link").symlink_to("/etc/passwd")
    os.mkfifo(source / "fifo")
    target = tmp_path / "copy"
    target.mkdir()
    runfiles.copy_tree(source, target, bounds, "outputs/")
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == ["a", "a/b", "a/b/result.txt"]
    for n, (make, why) in enumerate([
        (lambda s: (s / "big").write_bytes(b"x" * 1001), "holds more than the 1,000 bytes allowed"),
        (lambda s: [(s / f"f{i}").touch() for i in range(21)], "holds more than 20 files and folders"),
        (lambda s: make_deep(s, 6), "nests folders deeper than 5 levels"),
        (lambda s: make_deep(s, 1, "n" * 201), "holds a path longer than 200 bytes"),
    ]):
        hostile = tmp_path / f"hostile{n}"
        hostile.mkdir()
        make(hostile)
        into = tmp_path / f"into{n}"
        into.mkdir()
        with pytest.raises(runfiles.Refused, match=f"^outputs/ {re.escape(why)}"):
            runfiles.copy_tree(hostile, into, bounds, "outputs/")


def test_a_work_folder_is_removed_at_its_end_and_swept_only_when_its_station_died(tmp_path: Path) -> None:
    with runfiles.work_folder(tmp_path, "eval-7-v1-trials") as live:
        make_deep(runfiles.run_folder(live / "train"), PAST_RECURSION)
        dead = Path(tempfile.mkdtemp(prefix="station-eval-8-v1-trials-", dir=tmp_path))  # a killed station's
        (dead / runfiles.WORK_MARKER).touch()
        make_deep(dead, PAST_RECURSION)
        unmarked = tmp_path / "station-someone-elses"
        unmarked.mkdir()
        assert runfiles.sweep(tmp_path) == [dead.name]  # the live one holds its lock
        assert live.is_dir() and not dead.exists() and unmarked.is_dir()
        assert stat.S_IMODE(live.stat().st_mode) == 0o711 and stat.S_IMODE((live / "train").stat().st_mode) == 0o700
    assert not live.exists()


def test_a_deep_tree_in_shared_storage_leaves_its_listing_usable(tmp_path: Path) -> None:
    """A run nests folders past the recursion limit in storage/shared: every agent's listing of the
    area used to fail ("it leads through a loop of links": os.fwalk's RecursionError)."""
    from rooms.research import storage as rs

    rs.ensure_layout(tmp_path)
    shared = rs.parse_path("shared", None)
    folder = rs.contained(tmp_path, shared)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("hello\n")
    make_deep(folder, PAST_RECURSION)
    listing = rs.list_files(tmp_path, shared)
    assert listing is not None and listing.files == [("notes.txt", 6)] and not listing.complete
    assert rs.area_usage(tmp_path, shared) == (1, 6, False)
    runfiles.remove_tree(folder)
