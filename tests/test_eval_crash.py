"""`kill -9` of a station while evaluations are queued and running, then a restart.

The station runs as a real `station run` subprocess with real sandboxed evaluations. It is
killed while one evaluation runs and others wait in the queue; after a restart every
submission ends with exactly one result message, and the killed run's sandbox is gone.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from helpers import act, read, reply, sandboxes_alive, yaml_block

ROOT = Path(__file__).resolve().parents[1]
SLOW = ("import time\n\ndef construct_packing():\n    time.sleep({seconds})  # marker-{marker}\n"
        "    return [[0.25, 0.5], [0.75, 0.5]], [0.25, 0.25]\n")


def submission(title: str, seconds: float) -> str:
    body = "\n".join(f"{k}: {json.dumps(v)}" for k, v in {
        "title": title, "tags": "crash", "abstract": "Sleeps, then returns two circles.",
        "content": SLOW.format(seconds=seconds, marker=title.replace(" ", "-"))}.items())
    return reply(act("goto research"), act("submit 1"), yaml_block(body))


def write_config(tmp_path: Path) -> Path:
    agents = []
    for name in ("Spiro", "Veritas"):
        # the one running at the kill is the first evaluation (three wait behind it), a "first": 3 s
        replies = [submission(f"{name} first", 3), submission(f"{name} second", 1)] + ["Waiting."] * 60
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in replies))
        agents.append({"count": 1, "kind": "recursive", "lineage": name,
                       "model": {"provider": "replay", "name": f"replay-{name}", "replay_file": str(path)}})
    config = {"name": "eval-crash", "seed": 3, "agents": agents,
              "lifecycle": {"maturity_ticks": 0}, "notifications": {"tips_every_ticks": 0},
              "engine": {"backup_every_ticks": 0},
              "research": {"tasks": [{"evaluator": "circle_packing", "params": {"n": 2}, "baselines": False,
                                      "timeout_s": 30}],
                           "executor": {"max_parallel": 1}, "wait_ticks": 3}}
    path = tmp_path / "crash.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_kill_9_with_queued_and_running_evaluations_then_every_one_is_delivered_once(tmp_path: Path) -> None:
    config, directory = write_config(tmp_path), tmp_path / "st"
    run = subprocess.Popen([sys.executable, "-m", "station.apps.cli", "run", str(config), "--dir", str(directory),
                            "--until-tick", "30"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            running = read(directory, "SELECT evaluation FROM evaluation_runs WHERE state='running'")
            queued = read(directory, "SELECT id FROM evaluations WHERE status='queued'")
            if running and len(queued) >= 3:
                break
            assert run.poll() is None, run.stderr.read().decode() if run.stderr else ""
            time.sleep(0.05)
        else:
            raise AssertionError("never saw one evaluation running with others queued")
        time.sleep(0.5)  # well inside the 3-second run
        run.send_signal(signal.SIGKILL)
        run.wait(10)
    finally:
        if run.poll() is None:
            run.kill()
    assert read(directory, "SELECT COUNT(*) FROM messages WHERE kind='evaluation'")[0][0] < 4
    time.sleep(1.0)
    assert sandboxes_alive("marker-") == []  # the killed station's sandbox died with it

    resumed = subprocess.run([sys.executable, "-m", "station.apps.cli", "run", "--dir", str(directory), "--until-tick", "12"],
                             cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    rows = read(directory, "SELECT id, status, score FROM evaluations ORDER BY id")
    assert [(r[1], r[2]) for r in rows] == [("finished", 0.5)] * 4
    messages = [m[0] for m in read(directory, "SELECT text FROM messages WHERE kind='evaluation'")]
    delivered = sorted(int(re.search(r"Evaluation #(\d+)", m).group(1)) for m in messages)
    assert delivered == [r[0] for r in rows]  # each exactly once
