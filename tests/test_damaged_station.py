"""A damaged station, a bad config or a full disk ends a command with one clear line (what, where,
what to do), never a traceback, and changes nothing on disk. Terminal views never pass escape
sequences from agent text through. Each case runs the installed `station` command."""
from __future__ import annotations

import hashlib
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DEMO, act, make_station, recursive, replay_model

from station.core.engine import Engine

STATION = Path(sys.executable).with_name("station")


def station(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(STATION), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("station: "), done.stderr
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("healthy") / "demo"
    done = station("run", "--dir", str(directory), str(DEMO), "--ticks", "2")
    assert done.returncode == 0, done.stderr
    return directory


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_a_damaged_database_is_named_with_what_to_do_and_left_as_it_was(healthy: Path, tmp_path: Path,
                                                                         damage: str) -> None:
    directory = tmp_path / damage
    shutil.copytree(healthy, directory)
    db = directory / "station.db"
    data = db.read_bytes()
    db.write_bytes({"empty": b"", "truncated": data[:len(data) // 3],
                    "garbage": bytes(range(256)) * 400}[damage])
    before = digest(db)
    for command in (["status", str(directory)], ["run", "--dir", str(directory), "--ticks", "1"],
                    ["dialogue", str(directory), "Spiro"], ["papers", str(directory)]):
        line = one_line_error(station(*command))
        assert str(db) in line and "backup" in line, line
    assert digest(db) == before


@pytest.mark.parametrize("content, says", [
    (b"name: caf\xe9\n", "is not UTF-8 text (byte 0xe9 at offset 9)"),
    (bytes(range(256)) * 8, "is not UTF-8 text"),
    (b"name: [unclosed\n", "is not valid YAML: line 2, column 1"),
    (b"a: 1\n\tb: 2\n", "is not valid YAML: line 2, column 1"),
])
def test_an_unreadable_config_is_one_line(tmp_path: Path, content: bytes, says: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_bytes(content)
    line = one_line_error(station("run", "--dir", "relative-dir", "config.yaml", cwd=tmp_path))
    assert says in line and "config.yaml" in line
    assert not (tmp_path / "relative-dir").exists()


def _can_mount_tmpfs() -> bool:
    return subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=1m none /mnt"],
                          capture_output=True).returncode == 0


@pytest.mark.skipif(not shutil.which("unshare") or not _can_mount_tmpfs(), reason="needs a private tmpfs mount")
def test_a_full_disk_stops_the_run_with_one_line_and_keeps_every_committed_tick(tmp_path: Path) -> None:
    """A 2 MB file system fills up after a few ticks: the run stops with one line, the station opens
    and says where it stands, and a run with room again goes on from there."""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (f"mount -t tmpfs -o size=2m none {disk} && cd {disk} && "
              f"{STATION} run --dir demo {DEMO} --ticks 40; echo rc=$?; "
              f"{STATION} status demo --json > {tmp_path}/status.json; cp -a demo {tmp_path}/kept")
    done = subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=600)
    assert "rc=2" in done.stdout, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("station: ")]
    assert len(errors) == 1 and "is full" in errors[0] and "run the same command again" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    import json

    tick = json.loads((tmp_path / "status.json").read_text())["tick"]
    assert tick >= 2  # some ticks were committed before the disk filled
    again = station("run", "--dir", str(tmp_path / "kept"), "--ticks", "1")
    assert again.returncode == 0, again.stderr
    assert json.loads(station("status", str(tmp_path / "kept"), "--json").stdout)["tick"] == tick + 1


def test_the_dialogue_view_passes_no_escape_sequence_through(tmp_path: Path) -> None:
    hostile = ("Title\x1b]0;owned\x07 clipboard\x1b]52;c;ZWNobyBvd25lZA==\x07 clear\x1b[2J\x1b[H "
               "[bold red]markup[/] \x9b31m")
    model = replay_model(tmp_path / "r.jsonl", [hostile, act("help lobby")], pad=2)
    st = make_station(tmp_path / "s", [recursive(model)])
    try:
        Engine(st).run(until_tick=2)
    finally:
        st.close()
    shown = station("dialogue", str(tmp_path / "s"), "Spiro I")
    assert shown.returncode == 0, shown.stderr
    assert "clipboard" in shown.stdout and "[bold red]markup[/]" in shown.stdout
    assert "\x1b" not in shown.stdout and "\x9b" not in shown.stdout and "\x07" not in shown.stdout


def test_a_new_station_directory_is_private_to_its_owner(tmp_path: Path) -> None:
    done = station("init", "--dir", "mine", str(DEMO), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE((tmp_path / "mine").stat().st_mode) == 0o700


def test_a_backup_is_as_private_as_the_station(healthy: Path, tmp_path: Path) -> None:
    done = station("backup", str(healthy), str(tmp_path / "copy.db"))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE((tmp_path / "copy.db").stat().st_mode) == 0o600
