"""A task's scorer that fails is seen while the station runs: in the live line, at the end of a run,
and in `station status` (not Healthy while it fails; counts per task), until it works again.

The station is real: a task folder whose trusted scorer raises, a replayed agent submitting every
tick, `station run` and `station status` as subprocesses.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from helpers import act, read, reply, station_cli, yaml_block

from rooms.research.states import SCORER_WINDOW

BROKEN = "def evaluate(returned, context):\n    return {'score': 1.0 / (returned - returned)}\n"
MENDED = "def evaluate(returned, context):\n    return {'score': float(returned)}\n"


def scorer_station(tmp_path: Path, scorer: str) -> Path:
    """A config: one replayed agent submits to a one-task folder every tick; its scorer is `scorer`."""
    task = tmp_path / "task"
    task.mkdir()
    (task / "task.md").write_text("# A number\nReturn a number.\n")
    (task / "task.yaml").write_text("scorer: {timeout_s: 30}\n")
    (task / "evaluate.py").write_text(scorer)
    os.chmod(task, 0o755)
    body = "\n".join(
        f"{k}: {json.dumps(v)}"
        for k, v in {
            "title": "A number",
            "tags": "numbers",
            "abstract": "Returns 3.",
            "content": "def main():\n    print('submission ran')\n    return 3\n",
        }.items()
    )
    submit = reply(act("goto research"), act("submit 1"), yaml_block(body))
    (tmp_path / "agent.jsonl").write_text("".join(json.dumps({"text": submit}) + "\n" for _ in range(40)))
    settings = {
        "name": "scorer-watch",
        "seed": 5,
        "engine": {"backup_every_ticks": 0},
        "agents": [
            {
                "count": 1,
                "kind": "recursive",
                "lineage": "Spiro",
                "model": {"provider": "replay", "name": "replay-scorer", "replay_file": "agent.jsonl"},
            }
        ],
        "lifecycle": {"maturity_ticks": 0},
        "notifications": {"tips_every_ticks": 0},
        "research": {
            "tasks": [{"folder": "task"}],
            "executor": {"max_parallel": 1},
            "wait_ticks": 1,
            "max_open_per_agent": 5,
        },
    }
    (tmp_path / "station.yaml").write_text(yaml.safe_dump(settings))
    return tmp_path / "station.yaml"


def status(tmp_path: Path) -> tuple[list[str], dict]:
    text = station_cli("status", "st", cwd=tmp_path)
    data = station_cli("status", "st", "--json", cwd=tmp_path)
    assert text.returncode == 0 and data.returncode == 0, text.stderr + data.stderr
    return text.stdout.splitlines(), json.loads(data.stdout)


def test_scorer_failures_are_counted_while_running_and_the_station_is_unhealthy_until_mended(tmp_path: Path) -> None:
    scorer_station(tmp_path, BROKEN)
    ran = station_cli("run", "station.yaml", "--dir", "st", "--until-tick", "4", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    failed = read(tmp_path / "st", "SELECT COUNT(*) FROM evaluations WHERE status='scorer_failed'")[0][0]
    assert failed >= 3
    # the live line (one line a tick when not on a terminal) counts them, beside "0 failed"
    live = [line for line in ran.stderr.splitlines() if line.startswith("tick ")]
    assert f"0 failed, {failed} scorer failures in 20 ticks" in live[-1], live
    # the end-of-run summary says how many were not scored, and which task's scorer fails
    assert f"{failed} not scored (the task's scorer failed)" in ran.stdout, ran.stdout
    assert f"the scorer of task 1 fails: {min(failed, SCORER_WINDOW)} of its last" in ran.stdout
    assert "ZeroDivisionError" in ran.stdout

    lines, data = status(tmp_path)
    assert "Healthy" not in lines[1].split("(")[0] and lines[1].split(", ")[2].startswith("Unhealthy"), lines[1]
    assert any(
        line.startswith("problem: the scorer of task 1 fails") and "ZeroDivisionError" in line for line in lines
    ), lines
    assert data["health"] == "Unhealthy" and data["station_status"] == "Healthy"  # agents' view is unchanged
    health = data["scorer_health"]["1"]
    assert health["failed"] == failed and health["failing"] and health["recent_failed"] == min(failed, SCORER_WINDOW)
    assert data["counts"]["submissions"]["scorer_failed"] == failed

    # the operator mends the scorer (a folder task reads evaluate.py afresh for each run)
    (tmp_path / "task" / "evaluate.py").write_text(MENDED)
    ran = station_cli("run", "--dir", "st", "--until-tick", str(4 + SCORER_WINDOW + 2), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    scored = read(tmp_path / "st", "SELECT COUNT(*) FROM evaluations WHERE status='finished'")[0][0]
    assert scored >= SCORER_WINDOW
    lines, data = status(tmp_path)
    assert data["health"] == "Healthy" and data["problems"] == [] and lines[1].endswith(", Healthy"), lines[1]
    health = data["scorer_health"]["1"]  # the count in all stays; the alarm does not
    assert health["failed"] == failed and not health["failing"] and health["recent_failed"] == 0
    assert not any(line.startswith("problem:") for line in lines)
    assert "the scorer of task 1 fails" not in ran.stdout
