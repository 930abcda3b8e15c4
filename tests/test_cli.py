"""The `station` command as users run it: real subprocesses on real station directories."""
from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "social_demo.yaml"


def station(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "station.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cli") / "demo"
    began = time.monotonic()
    done = station("run", str(DEMO), "--dir", str(d), "--until-tick", "60")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - began < 120
    assert "finished tick 60" in done.stdout
    assert "tick    60 | tick 60 finished" in done.stderr  # the progress line, one per tick off a terminal
    return d


def test_demo_run_keeps_the_whole_history(demo: Path) -> None:
    status = json.loads(station("status", str(demo), "--json").stdout)
    assert status["schema"] == 1 and status["tick"] == 61 and status["state"] == "stopped"
    assert len(status["agents"]) == 5
    counts = status["counts"]
    assert counts["turns"] >= 280 and counts["departures"] > 0 and counts["ascensions"] > 0
    assert set(counts["capsules"]) == {"private", "public", "archive", "mail"}
    assert {"name", "kind", "room", "age", "lineage", "generation", "context_tokens", "tokens_spent"} <= \
        set(status["agents"][0])
    db = sqlite3.connect(demo / "station.db")
    generations = [g for (g,) in db.execute("SELECT json_extract(data, '$.generation') FROM agents")]
    assert max(g or 0 for g in generations) >= 2, "someone inherited a lineage"
    assert db.execute("SELECT COUNT(*) FROM turns").fetchone()[0] == counts["turns"]
    assert db.execute("SELECT MIN(tick), MAX(tick) FROM turns").fetchone() == (1, 60)


def test_status_agents_and_dialogue_read_a_station(demo: Path) -> None:
    text = station("status", str(demo)).stdout
    assert "tick 61" in text
    table = station("agents", str(demo), "--all").stdout
    assert "Guest_1" in table and "ended" in table
    dialogue = station("dialogue", str(demo), "Guest_1", "--tick", "1")
    assert dialogue.returncode == 0
    assert "tick 1" in dialogue.stdout and "/execute_action{goto codex}" in dialogue.stdout
    missing = station("dialogue", str(demo), "Nobody")
    assert missing.returncode == 2 and "no agent named 'Nobody'" in missing.stderr


def test_parse_prints_actions_as_json_lines(tmp_path: Path) -> None:
    reply = tmp_path / "reply.txt"
    reply.write_text("Thinking.\n/execute_action{goto mail}\n/execute_action{create}\n```yaml\ntitle: Hi\n```\n")
    out = station("parse", str(reply)).stdout.strip().splitlines()
    first = json.loads(out[0])
    assert [a["name"] for a in first["actions"]] == ["goto", "create"]
    assert first["actions"][1]["params"] == {"title": "Hi"}
    piped = station("parse", input="/execute_action{}\n").stdout
    assert json.loads(piped)["actions"][0]["error"].startswith("Empty action command")


def test_sigterm_finishes_the_turn_and_exits_zero(tmp_path: Path) -> None:
    d = tmp_path / "s"
    assert station("init", str(DEMO), "--dir", str(d)).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "station.cli", "run", "--dir", str(d), "--ticks", "100000"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped; the station is at tick" in out
    db = sqlite3.connect(d / "station.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # The run resumes where it stopped.
    tick = json.loads(db.execute("SELECT value FROM meta WHERE key='tick'").fetchone()[0])
    again = station("run", "--dir", str(d), "--ticks", "2")
    assert again.returncode == 0 and f"finished tick {tick + 1}" in again.stdout


def test_a_station_runs_in_one_process_at_a_time(tmp_path: Path) -> None:
    d = tmp_path / "s"
    station("init", str(DEMO), "--dir", str(d))
    proc = subprocess.Popen([sys.executable, "-m", "station.cli", "run", "--dir", str(d), "--ticks", "100000"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        second = station("run", "--dir", str(d), "--ticks", "1")
        assert second.returncode == 2 and "already running" in second.stderr
        assert json.loads(station("status", str(d), "--json").stdout)["state"] == "running"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode == 0


def test_clear_errors_for_bad_invocations(tmp_path: Path) -> None:
    nothing = station("run", "--dir", str(tmp_path / "none"), "--ticks", "1")
    assert nothing.returncode == 2 and "give a config file" in nothing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("lifecycle:\n  max_age: zero\n")
    refused = station("init", str(bad), "--dir", str(tmp_path / "b"))
    assert refused.returncode == 2 and "lifecycle.max_age" in refused.stderr
    assert not (tmp_path / "b").exists()
    station("init", str(DEMO), "--dir", str(tmp_path / "c"))
    twice = station("init", str(DEMO), "--dir", str(tmp_path / "c"))
    assert twice.returncode == 2 and "already exists" in twice.stderr
    unknown_op = station("answer", str(tmp_path / "c"), "7", "")
    assert unknown_op.returncode == 2 and "needs: text" in unknown_op.stderr


def test_operator_message_reaches_the_agent_when_it_next_runs(tmp_path: Path) -> None:
    d = tmp_path / "s"
    station("init", str(DEMO), "--dir", str(d))
    queued = station("message", str(d), "Guest_2", "Please check the Codex.")
    assert queued.returncode == 0 and "when the station next runs" in queued.stdout
    assert station("run", "--dir", str(d), "--ticks", "1").returncode == 0
    db = sqlite3.connect(d / "station.db")
    prompt = db.execute("SELECT prompt FROM turns WHERE agent='Guest_2' AND tick=1").fetchone()[0]
    assert "Please check the Codex." in prompt
    other = db.execute("SELECT prompt FROM turns WHERE agent='Guest_1' AND tick=1").fetchone()[0]
    assert "Please check the Codex." not in other


def test_backups_restore_to_a_working_station(demo: Path, tmp_path: Path) -> None:
    automatic = sorted((demo / "backups").glob("resume_at_tick_*.db"))
    assert [p.name for p in automatic] == ["resume_at_tick_0000051.db"]  # every 50 ticks by default
    copy = tmp_path / "copy.db"
    assert station("backup", str(demo), str(copy)).returncode == 0
    restored = tmp_path / "restored"
    restored.mkdir()
    copy.rename(restored / "station.db")
    status = json.loads(station("status", str(restored), "--json").stdout)
    assert status["tick"] == 61 and status["counts"]["turns"] >= 280
    assert station("run", "--dir", str(restored), "--ticks", "1").returncode == 0
    old = tmp_path / "old"
    old.mkdir()
    (old / "station.db").write_bytes(automatic[0].read_bytes())
    assert json.loads(station("status", str(old), "--json").stdout)["tick"] == 51


def test_pause_stops_a_running_station_and_is_refused_when_stopped(tmp_path: Path) -> None:
    d = tmp_path / "s"
    station("init", str(DEMO), "--dir", str(d))
    refused = station("pause", str(d))
    assert refused.returncode == 2 and "not running" in refused.stderr
    proc = subprocess.Popen([sys.executable, "-m", "station.cli", "run", "--dir", str(d), "--ticks", "100000"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(1.0)
    assert station("pause", str(d)).returncode == 0
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "paused by the operator" in out
