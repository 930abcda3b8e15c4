"""The `station` command as users run it: real subprocesses on real station directories."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import copy_station
from helpers import read

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "social_demo.yaml"


def station(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "station.apps.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cli") / "demo"
    done = station("run", str(DEMO), "--dir", str(d), "--until-tick", "60", timeout=600)  # speed: bench_turns.py
    assert done.returncode == 0, done.stderr
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


def first_turn_committed(d: Path, proc: subprocess.Popen, seconds: float = 120) -> None:
    """Wait (however slow the machine) until the run holds the station and has its signal handlers."""
    deadline = time.monotonic() + seconds
    while not read(d, "SELECT 1 FROM turns LIMIT 1"):
        assert proc.poll() is None and time.monotonic() < deadline, "the run never committed a turn"
        time.sleep(0.05)


def test_sigterm_finishes_the_turn_and_exits_zero(tmp_path: Path) -> None:
    d = tmp_path / "s"
    assert station("init", str(DEMO), "--dir", str(d)).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "station.apps.cli", "run", "--dir", str(d), "--ticks", "100000"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first_turn_committed(d, proc)
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


def test_a_reader_asking_whether_a_station_runs_never_makes_a_run_fail_to_start(tmp_path: Path) -> None:
    """`is_running` (the viewer, `station status`) holds a shared lock on run.lock for an instant; a run
    starting at that moment waits it out instead of saying the station runs elsewhere."""
    import fcntl
    import threading

    from station.core.run_lock import StationBusy, is_running, run_lock

    (tmp_path / "run.lock").write_text("")
    with open(tmp_path / "run.lock") as probe:
        fcntl.flock(probe, fcntl.LOCK_SH)  # a reader's probe, caught in the act
        threading.Timer(0.1, fcntl.flock, (probe, fcntl.LOCK_UN)).start()
        with run_lock(tmp_path):
            assert is_running(tmp_path)
            with pytest.raises(StationBusy, match="already running"):  # a real run is still refused
                with run_lock(tmp_path):
                    pass
    assert not is_running(tmp_path)


def test_a_station_runs_in_one_process_at_a_time(tmp_path: Path) -> None:
    d = tmp_path / "s"
    station("init", str(DEMO), "--dir", str(d))
    proc = subprocess.Popen([sys.executable, "-m", "station.apps.cli", "run", "--dir", str(d), "--ticks", "100000"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        first_turn_committed(d, proc)
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
    proc = subprocess.Popen([sys.executable, "-m", "station.apps.cli", "run", "--dir", str(d), "--ticks", "100000"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first_turn_committed(d, proc)
    assert station("pause", str(d)).returncode == 0
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "paused by the operator" in out


# -- CLI polish: what a user sees ---------------------------------------------------------------
def test_a_reader_that_goes_away_ends_any_command_quietly(demo60: Path) -> None:
    for args in (["status", str(demo60)], ["status", str(demo60), "--json"], ["agents", str(demo60), "--all"],
                 ["dialogue", str(demo60), "Guest_1"], ["papers", str(demo60)], ["paper", str(demo60), "1"],
                 ["parse", str(ROOT / "README.md")]):
        read_end, write_end = os.pipe()
        os.close(read_end)  # like `| head -1` that has already exited
        try:
            done = subprocess.run([sys.executable, "-m", "station.apps.cli", *args], cwd=ROOT, stdout=write_end,
                                  stderr=subprocess.PIPE, text=True, timeout=120)
        finally:
            os.close(write_end)
        assert (done.returncode, done.stderr) == (141, ""), args  # no traceback, no "Exception ignored"


def test_status_names_only_the_other_callers_who_spent(demo60: Path, tmp_path: Path) -> None:
    data = json.loads(station("status", str(demo60), "--json").stdout)
    active = {a["name"] for a in data["agents"]}
    roles = [who for who in data["spend"]["by_caller"] if who not in active]  # the reviewer, the grader, ...
    left = data["spend"]["agents_who_left"]  # summed, not listed: a long station has tens of thousands
    others = len(roles) + left["callers"]
    assert left["callers"] > 5 and left["usd"] == 0 and all(data["spend"]["by_caller"][w]["usd"] == 0 for w in roles)
    assert sum(c["calls"] for c in data["spend"]["by_caller"].values()) + left["calls"] == data["spend"]["calls"]
    text = station("status", str(demo60)).stdout
    assert f"  other callers: {others} (no spend)\n" in text and "$0.0000," not in text

    paid = copy_station(demo60, tmp_path / "paid")
    db = sqlite3.connect(paid / "station.db")
    db.execute("INSERT INTO spend(at, tick, who, model, provider, input_tokens, cached_input_tokens, "
               "cache_write_tokens, output_tokens, reasoning_tokens, cost_usd) "
               "VALUES(0, 1, 'reviewer', 'm', 'p', 10, 0, 0, 10, 0, 0.25)")
    db.commit()
    db.close()
    line = next(x for x in station("status", str(paid)).stdout.splitlines() if "other callers" in x)
    assert line == f"  other callers: reviewer $0.2500; {others - 1} more with no spend"
    again = json.loads(station("status", str(paid), "--json").stdout)
    assert set(again["spend"]["by_caller"]) == set(data["spend"]["by_caller"])  # the living and the roles
    assert again["spend"]["by_caller"]["reviewer"]["usd"] == 0.25 and again["spend"]["usd"] == 0.25


def test_operator_commands_refuse_unknown_agents_and_requests(demo60: Path, tmp_path: Path) -> None:
    d = copy_station(demo60, tmp_path / "s")
    db = sqlite3.connect(d / "station.db")
    ended = db.execute("SELECT name, state FROM agents WHERE state!='active' ORDER BY name").fetchone()
    waiting = db.execute("SELECT id FROM human_requests WHERE resolved_tick IS NULL ORDER BY id").fetchone()
    queued = lambda: db.execute("SELECT COUNT(*) FROM operator_queue").fetchone()[0]  # noqa: E731
    before = queued()
    for args in (["message", str(d), "Nobody", "hi"], ["end-agent", str(d), "Nobody"]):
        refused = station(*args)
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr == "station: no active agent named 'Nobody'; see `station agents DIR`\n"
    refused = station("message", str(d), ended[0], "hi")
    assert refused.returncode == 2 and f"({ended[0]} has {ended[1]})" in refused.stderr
    assert station("end-agent", str(d), "*").returncode == 2  # * means everyone only for a message
    unknown = station("answer", str(d), "999", "an answer")
    assert unknown.returncode == 2 and unknown.stderr.startswith("station: no request #999 (")
    assert queued() == before
    assert station("message", str(d), "*", "hello all").returncode == 0
    assert station("message", str(d), json.loads(station("status", str(d), "--json").stdout)["agents"][0]["name"],
                   "hello you").returncode == 0
    assert waiting is not None, "the demo has an open External Counter request"
    assert station("answer", str(d), str(waiting[0]), "here you are").returncode == 0
    assert queued() == before + 3


def test_dialogue_at_a_tick_without_a_turn_says_which_ticks_there_are(demo60: Path) -> None:
    db = sqlite3.connect(demo60 / "station.db")
    # the dialogue follows the session: Guest_1's turns and, after it ascended, its new name's
    first, last = db.execute("SELECT MIN(tick), MAX(tick) FROM turns WHERE session="
                             "(SELECT session FROM agents WHERE name='Guest_1')").fetchone()
    missing = station("dialogue", str(demo60), "Guest_1", "--tick", "999")
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr == f"station: Guest_1 has no turn at tick 999; its turns are at ticks {first}-{last}\n"
    unknown = station("dialogue", str(demo60), "Nobody", "--tick", "1")
    assert unknown.returncode == 2 and "no agent named 'Nobody'" in unknown.stderr


def test_parse_refuses_what_it_cannot_read_in_one_line(tmp_path: Path) -> None:
    unreadable = tmp_path / "secret.txt"
    unreadable.write_text("/execute_action{goto mail}\n")
    unreadable.chmod(0)
    cases = {"/nonexistent": "No such file or directory", str(tmp_path): "Is a directory"}
    if not os.access(unreadable, os.R_OK):  # root reads it anyway
        cases[str(unreadable)] = "Permission denied"
    for name, why in cases.items():
        done = station("parse", str(ROOT / "README.md"), name)
        assert done.returncode == 2 and done.stdout == ""  # nothing printed before the error either
        assert done.stderr == f"station: cannot read {name}: {why}\n"


def test_agents_table_keeps_each_agent_on_one_line_when_piped(demo60: Path) -> None:
    db = sqlite3.connect(demo60 / "station.db")
    names = [n for (n,) in db.execute("SELECT name FROM agents")]
    table = station("agents", str(demo60), "--all", env={**os.environ, "COLUMNS": "60"}).stdout
    lines = table.splitlines()
    for name in names:
        row = [x for x in lines if f"│ {name} " in x]
        assert len(row) == 1 and "…" not in row[0], name  # whole, and not wrapped onto a second line
    assert len(lines) == len(names) + 4  # the rows, the header and the borders


def test_status_shows_scores_with_six_significant_digits(demo60: Path) -> None:
    best = json.loads(station("status", str(demo60), "--json").stdout)["counts"]["research_best"]["1"]
    line = next(x for x in station("status", str(demo60)).stdout.splitlines() if x.startswith("best on task 1:"))
    assert line.startswith(f"best on task 1: {best['score']:.6g} (evaluation #{best['evaluation']}")
    assert len(str(best["score"])) > 10  # the stored score has many more digits


def test_status_lists_tasks_in_numeric_order(demo60: Path) -> None:
    from station.apps.report import status_text

    data = json.loads(station("status", str(demo60), "--json").stdout)
    best = data["counts"]["research_best"]["1"]
    data["counts"]["research_best"] = {"10": best, "2": {**best, "score": 7}, "1": best}
    shown = [x.split(":")[0] for x in status_text(data).splitlines() if x.startswith("best on task")]
    assert shown == ["best on task 1", "best on task 2", "best on task 10"]


def test_export_force_refreshes_an_earlier_export_and_nothing_else(demo60: Path, demo60_site, tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(demo60_site[0], site)  # what `station export demo60 --out site` wrote (conftest)
    marker = json.loads((site / ".station-export").read_text())
    assert marker["station"] == str(demo60.resolve()) and marker["exported_at"]
    (site / "stale.html").write_text("from an older export")
    again = station("export", str(demo60), "--out", str(site))
    assert again.returncode == 2 and "--force" in again.stderr
    refreshed = station("export", str(demo60), "--out", str(site), "--force")
    assert refreshed.returncode == 0, refreshed.stderr
    assert (site / "index.html").exists() and not (site / "stale.html").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    refused = station("export", str(demo60), "--out", str(mine), "--force")
    assert refused.returncode == 2 and "is not an earlier export" in refused.stderr
    assert [p.name for p in mine.iterdir()] == ["keep.txt"]


def test_help_imports_no_heavy_module() -> None:
    loaded = subprocess.run([sys.executable, "-c", "import sys; from station.apps.cli import build_parser; "
                             "build_parser(); print(' '.join(sorted(sys.modules)))"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60).stdout.split()
    heavy = [m for m in loaded if m.split(".")[0] in ("pydantic", "rich", "numpy", "rooms", "yaml", "fastapi")
             or m in ("station.core.engine", "station.apps.world", "station.core.config", "station.apps.readers", "station.apps.report")]
    assert "station.apps.cli" in loaded and heavy == []
    assert station("--help").returncode == 0


def test_agents_dialogue_and_message_import_no_room(demo60: Path, tmp_path: Path) -> None:
    """They read or write the engine's own tables only: a call does not pay for importing every room
    (~0.3 CPU-s; scripts and these tests call them often). `status` counts what each room holds: it does."""
    d = str(copy_station(demo60, tmp_path / "s"))
    calls = [["agents", d, "--all"], ["dialogue", d, "Guest_1"], ["message", d, "*", "hello"]]
    done = subprocess.run([sys.executable, "-c", f"import sys; from station.apps.cli import main; codes = [main(a) for a "
                           f"in {calls!r}]; print(codes, ' '.join(sorted(sys.modules)), file=sys.stderr)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    codes, loaded = done.stderr.splitlines()[-1].split("] ")
    assert codes == "[0, 0, 0" and "Guest_1" in done.stdout and "operator command #1 (message) queued" in done.stdout
    rooms = [m for m in loaded.split() if m.split(".")[0] in ("rooms", "evaluators", "numpy") or m == "station.apps.world"]
    assert "station.apps.report" in loaded.split() and rooms == []
