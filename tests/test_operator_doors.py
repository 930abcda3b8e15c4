"""No poison pill through the operator's own doors.

A lineage name the station cannot use (its storage folder is `[a-z]+` of the name) once came in
through `station spawn` or a config and paused the station on every resume, for good. Names are
now checked where they enter (the config, the shared spawn parsing behind the CLI and the web
console), with nothing queued or created. And a system error that comes back on the same
evaluation at every resume ends, after SYSTEM_ERROR_LIMIT identical ones, as a system error
charged to nobody, with an operator alert, and the station goes on.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from helpers import act, config, read, reply, station_cli, yaml_block

from rooms.research.worker import SYSTEM_ERROR_LIMIT
from station.apps.world import Station
from station.core.config import parse_config
from station.core.context import StationPaused
from station.core.engine import Engine
from station.core.store import Store

BAD_LINEAGES = ["Ada2", "Ada Lovelace", "ada", "Shared", "DaVinci", "Ada/../x"]


def number_task(root: Path) -> Path:
    """A task folder whose honest scorer takes the number a submission returns."""
    root.mkdir()
    (root / "task.md").write_text("# A number\nReturn a number.\n")
    (root / "task.yaml").write_text("scorer: {timeout_s: 30}\n")
    (root / "evaluate.py").write_text("def evaluate(returned, context):\n    return {'score': float(returned)}\n")
    os.chmod(root, 0o755)
    return root


def submitting_model(path: Path) -> dict:
    """A replayed agent that submits once (at its first turn), then waits."""
    body = "\n".join(
        f"{k}: {json.dumps(v)}"
        for k, v in {
            "title": "A number",
            "tags": "numbers",
            "abstract": "Returns 3.",
            "content": "def main():\n    return 3\n",
        }.items()
    )
    replies = [reply(act("goto research"), act("submit 1"), yaml_block(body))] + ["Waiting."] * 30
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in replies))
    return {"provider": "replay", "name": "replay-doors", "replay_file": str(path)}


# -- names, where they enter ---------------------------------------------------------------------
@pytest.mark.parametrize("lineage", BAD_LINEAGES)
def test_station_spawn_refuses_a_lineage_the_station_cannot_use_and_queues_nothing(
    tmp_path: Path, lineage: str
) -> None:
    Station.create(tmp_path / "st", parse_config(config([{"count": 1}]))).close()
    spec = yaml.safe_dump({"kind": "recursive", "lineage": lineage, "model": {"provider": "scripted"}})
    refused = station_cli("spawn", "st", spec, cwd=tmp_path)
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()  # one line, naming the key and the name
    assert line.startswith("station: spawn: lineage: ") and repr(lineage) in line, line
    assert read(tmp_path / "st", "SELECT COUNT(*) FROM operator_queue") == [(0,)]


def test_a_good_lineage_still_spawns(tmp_path: Path) -> None:
    Station.create(tmp_path / "st", parse_config(config([{"count": 1}]))).close()
    spec = yaml.safe_dump({"kind": "recursive", "lineage": "Ada", "model": {"provider": "scripted"}})
    assert station_cli("spawn", "st", spec, cwd=tmp_path).returncode == 0
    station = Station.open(tmp_path / "st")
    try:
        Engine(station).run(ticks=1)
        assert station.agents.get("Ada I") is not None
    finally:
        station.close()


def test_a_config_with_a_bad_lineage_is_refused_with_the_key_s_path_and_nothing_is_created(tmp_path: Path) -> None:
    settings = config([{"count": 1}, {"kind": "recursive", "lineage": "Ada2"}])
    (tmp_path / "station.yaml").write_text(yaml.safe_dump(settings))
    refused = station_cli("init", "station.yaml", "--dir", "st", cwd=tmp_path)
    assert refused.returncode == 2
    assert "agents.1.lineage: a lineage name is a single word of letters only" in refused.stderr
    assert "(got 'Ada2')" in refused.stderr
    assert not (tmp_path / "st").exists()


def test_a_config_refused_while_the_station_is_built_leaves_nothing_behind(tmp_path: Path) -> None:
    """An unknown research task is found only once the rooms are built: the half-made directory goes."""
    settings = config([{"count": 1}], research={"tasks": [{"evaluator": "no_such_task"}]})
    (tmp_path / "station.yaml").write_text(yaml.safe_dump(settings))
    refused = station_cli("init", "station.yaml", "--dir", "st", cwd=tmp_path)
    assert refused.returncode == 2 and "unknown research task 'no_such_task'" in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["station.yaml"]  # no st, no .st.creating-PID


def test_the_web_console_s_spawn_refuses_it_too(tmp_path: Path) -> None:
    from helpers import web_client

    from station.apps.web.app import create_app

    Station.create(tmp_path / "st", parse_config(config([{"count": 1}]))).close()
    client = web_client(create_app(tmp_path / "st"))
    answer = client.post(
        "/operator/spawn", data={"spec": "kind: recursive\nlineage: Ada2"}, headers={"accept": "application/json"}
    )
    assert answer.status_code == 400 and "lineage" in answer.json()["error"] and "Ada2" in answer.json()["error"]
    assert read(tmp_path / "st", "SELECT COUNT(*) FROM operator_queue") == [(0,)]


def test_a_bad_spawn_queued_by_an_older_version_is_an_alert_not_a_pause(tmp_path: Path) -> None:
    """A spawn already in the queue when the station upgraded skipped today's check: it is dropped
    with an operator alert when applied, and the station runs on."""
    station = Station.create(tmp_path / "st", parse_config(config([{"count": 1}])))
    station.close()
    store = Store(tmp_path / "st")
    store.execute(
        "INSERT INTO operator_queue(command, queued_at) VALUES(?, 0)",
        (json.dumps({"op": "spawn", "agent": {"kind": "recursive", "lineage": "Ada2"}}),),
    )
    store.close()
    station = Station.open(tmp_path / "st")
    try:
        assert Engine(station).run(ticks=2) == "finished tick 2"
        alerts = [json.loads(r[0]) for r in station.store.all("SELECT payload FROM events WHERE kind='operator_alert'")]
        assert [a["problem"] for a in alerts] == [
            "spawn refused: lineage: a lineage name is a single word of letters only "
            "(no spaces, digits or symbols) (got 'Ada2')"
        ]
        assert [a.name for a in station.agents.all()] == ["Guest_1"]
    finally:
        station.close()


# -- a system error that recurs on the same evaluation -----------------------------------------
def test_a_station_created_before_names_were_checked_gives_its_poisoned_evaluation_up_and_goes_on(
    tmp_path: Path,
) -> None:
    """The old poison pill itself: an agent of lineage 'Ada2' (a config older than the check, kept as
    stored) submits; its storage cannot be mounted, every time. The station pauses twice, then the
    evaluation ends as a system error charged to nobody and the station goes on."""
    number_task(tmp_path / "task")
    agent = {"count": 1, "kind": "recursive", "lineage": "Ada2", "model": submitting_model(tmp_path / "ada.jsonl")}
    settings = config(
        [agent],
        lifecycle={"maturity_ticks": 0},
        research={"tasks": [{"folder": str(tmp_path / "task")}], "wait_ticks": 1, "executor": {"max_parallel": 1}},
    )
    Station.create(tmp_path / "st", parse_config(settings, stored=True)).close()
    pauses = []
    for _ in range(SYSTEM_ERROR_LIMIT):
        station = Station.open(tmp_path / "st")
        try:
            why = Engine(station).run(until_tick=3)
        except StationPaused as err:
            pauses.append(str(err))
            continue
        finally:
            station.close()
        assert why == "finished tick 3"
    assert len(pauses) == SYSTEM_ERROR_LIMIT - 1
    assert all("not a lineage name: 'Ada2'" in p for p in pauses)
    assert f"identical failure 1 of {SYSTEM_ERROR_LIMIT}" in pauses[0]
    store = Store(tmp_path / "st")
    try:
        row = store.one("SELECT status, score, error FROM evaluations")
        assert row["status"] == "system_failed" and row["score"] is None and "not a lineage name" in row["error"]
    finally:
        store.close()


def test_a_recurring_system_error_ends_the_evaluation_after_the_limit_and_the_station_goes_on(tmp_path: Path) -> None:
    """A real fault of the machine: the executor's scratch folder does not exist. Each `station run`
    pauses on the same evaluation; only identical failures count (a different one starts again)."""
    number_task(tmp_path / "task")
    scratch = tmp_path / "scratch"  # not there
    settings = config(
        [{"count": 1, "kind": "recursive", "lineage": "Spiro", "model": submitting_model(tmp_path / "agent.jsonl")}],
        lifecycle={"maturity_ticks": 0},
        research={
            "tasks": [{"folder": "task"}],
            "wait_ticks": 1,
            "executor": {"max_parallel": 1, "scratch_dir": str(scratch)},
        },
    )
    (tmp_path / "station.yaml").write_text(yaml.safe_dump(settings))
    first = station_cli("run", "station.yaml", "--dir", "st", "--until-tick", "4", cwd=tmp_path)
    assert first.returncode == 3, first.stderr[-2000:]
    assert (
        "No such file or directory" in first.stderr and f"identical failure 1 of {SYSTEM_ERROR_LIMIT}" in first.stderr
    )
    scratch.write_text("a file where a folder should be")  # another fault: the count starts again
    for tries in range(1, SYSTEM_ERROR_LIMIT):
        again = station_cli("run", "--dir", "st", "--until-tick", "4", cwd=tmp_path)
        assert again.returncode == 3, again.stderr[-2000:]
        assert "Not a directory" in again.stderr and f"identical failure {tries} of" in again.stderr
        assert read(tmp_path / "st", "SELECT status FROM evaluations") == [("queued",)]
    last = station_cli("run", "--dir", "st", "--until-tick", "4", cwd=tmp_path)
    assert last.returncode == 0, last.stderr[-2000:]
    directory = tmp_path / "st"
    assert read(directory, "SELECT status, score FROM evaluations") == [("system_failed", None)]
    assert read(directory, "SELECT MAX(tick) FROM turns") == [(4,)]  # the station went on
    assert "1 not run (system errors)" in last.stdout and "evaluation #1 was not run" in last.stdout
    assert "1 not run (system errors) in 20 ticks" in last.stderr  # the live line
    # the author is told plainly, without the machine's details; it does not count against them
    (message,) = [m[0] for m in read(directory, "SELECT text FROM messages WHERE kind='evaluation'")]
    assert "could not be run" in message and "does not count against you" in message
    assert "Not a directory" not in message and str(tmp_path) not in message
    alerts = [json.loads(p[0]) for p in read(directory, "SELECT payload FROM events WHERE kind='operator_alert'")]
    assert len(alerts) == 1 and "given up" in alerts[0]["problem"] and "Not a directory" in alerts[0]["error"]
    status = json.loads(station_cli("status", "st", "--json", cwd=tmp_path).stdout)
    assert status["health"] == "Unhealthy" and status["counts"]["submissions"]["system_failed"] == 1
    assert status["system_failures"][0]["id"] == 1 and "Not a directory" in status["problems"][0]
    assert status["counts"]["submissions"]["failed"] == 0  # nothing charged as the code's failure
    # the web console says so too: a banner on the overview, the queue's list of failures, the board's filter
    from helpers import web_client

    from station.apps.web.app import create_app

    client = web_client(create_app(directory))
    overview = client.get("/").text
    assert 'id="system-failed"' in overview and "could not be run" in overview
    assert "system_failed" in client.get("/research/queue").text
    assert 'href="/research/1"' in client.get("/research?status=system_failed").text
