"""The research coder's command back-end (`research.coder.backend: command`, docs/coder.md "Back-ends").

A stand-in CLI (tests/data/fake_coder_cli.py: the real ones cannot run here) is the coder of one
small offline station (one scripted agent, four circles, four ticks). It runs in the sandbox with
no key and no network but its own loopback, asks its model through $OPENAI_BASE_URL, which the
station's relay forwards to tests/provider_server.py with the station's key, writes the program,
submits it (`submit_attempt`), mends it after the failed attempt, submits again and writes
REPORT.md. The tests read that station, replay it with no CLI and no sandbox, copy it under a tiny
cap, and check the relay's refusals and the sandbox's loopback on their own.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import copy_station
from helpers import rows, session_of
from provider_server import Answer, ProviderServer, Request
from pydantic import ValidationError

from rooms.research import coder_command
from rooms.research.config import CoderConfig
from rooms.research.states import open_evaluations
from rooms.research.store import insert_evaluation
from rooms.research.worker import EvaluationWorker
from station.apps import report
from station.apps.cli_commands import replay
from station.apps.world import Station
from station.core import commands
from station.core.budget import Ledger
from station.core.config import ExecutorConfig, ModelConfig, StationConfig, parse_config
from station.core.context import StationPaused
from station.core.engine import Engine
from station.core.run_types import RunSpec
from station.core.store import Store, canonical_dump
from station.executors import create_executor
from station.workers.relay import Relay

ROOT = Path(__file__).resolve().parents[1]
CLI = (Path(__file__).parent / "data" / "fake_coder_cli.py").read_text(encoding="utf-8")
KEY_ENV, KEY = "STATION_TEST_CODER_KEY", "sk-station-test-7f3a9c"
TICKS = 4  # the agent's instruction, submitted at tick 2, delivered at the end of tick 3
PRICE = {"input": 1.0, "output": 1.0}  # dollars per million tokens: the coder's spend shows


def responder(request: Request) -> Answer:
    """The CLI's model: the instruction's program, with a slip the first time, mended once told."""
    asked = str(request.messages[-1]["text"])
    prompt, _, failed = asked.partition("The attempt failed")
    program = re.findall(r"```python\n(.*?)```", prompt, re.S)[-1]
    written = program if failed else "improt math\n" + program
    return Answer(f"```python\n{written}```")


def config(base_url: str) -> dict[str, Any]:
    command = {
        "argv": ["python", "-I", "-c", CLI, "{prompt_file}", "{workspace}"],
        "provider": "openai-chat",
        "model": {
            "provider": "openai",
            "api": "chat",
            "name": "fake-coder",
            "base_url": base_url,
            "api_key_env": KEY_ENV,
        },
        "timeout_s": 60,
    }
    agent = {
        "count": 1,
        "kind": "recursive",
        "lineage": "Spiro",
        "model": {"provider": "scripted", "name": "scripted-newcomer"},
    }
    return {
        "name": "coder-command",
        "seed": 5,
        "agents": [agent],
        "lifecycle": {"maturity_ticks": 8},
        "notifications": {"tips_every_ticks": 0},
        "engine": {"backup_every_ticks": 0},
        "prices": {"fake-coder": PRICE},
        "research": {
            "mode": "coder",
            "coder": {"backend": "command", "command": command},
            "tasks": [{"evaluator": "circle_packing", "params": {"n": 4}, "timeout_s": 30, "baselines": False}],
            "executor": {"kind": "local"},
            "delivery": "on_time",
        },
    }


@pytest.fixture(scope="module")
def server() -> Any:
    with ProviderServer(responder, api_keys={KEY}) as served:
        patch = pytest.MonkeyPatch()
        patch.setenv(KEY_ENV, KEY)
        try:
            yield served
        finally:
            patch.undo()


@pytest.fixture(scope="module")
def station(tmp_path_factory: pytest.TempPathFactory, server: ProviderServer) -> Path:
    directory = tmp_path_factory.mktemp("command") / "st"
    st = Station.create(directory, parse_config(config(server.openai_url)))
    try:
        assert Engine(st).run(until_tick=TICKS) == f"finished tick {TICKS}"
    finally:
        st.close()
    return directory


def payload(directory: Path, key: str) -> dict[str, Any]:
    return json.loads(rows(directory, "SELECT payload FROM inputs WHERE key=?", (key,))[0][0])


# -- the station ----------------------------------------------------------------------------------------
def test_the_cli_implements_the_instruction_through_the_relay_and_reports(
    station: Path, server: ProviderServer
) -> None:
    row = rows(station, "SELECT * FROM evaluations ORDER BY id")[0]
    assert row["status"] == "finished" and row["score"] == pytest.approx(1.0) and row["coder_end"] == "finished"
    attempts = rows(station, "SELECT version, source, status FROM evaluation_versions WHERE evaluation=?", (row["id"],))
    assert [tuple(a) for a in attempts] == [(1, "coder", "error"), (2, "coder", "ok")]
    assert "SyntaxError" in payload(station, f"eval-run/{row['id']}/1")["error"]  # the slip, caught by the attempt
    assert "improt" not in row["code"] and "def construct_packing" in row["code"]
    assert "## Final Result" in row["coder_report"] and "0.999999999999" in row["coder_report"]
    end = payload(station, f"coder/{row['id']}/end")
    assert (end["spawns"], end["calls"], end["attempts"], end["exit_code"]) == (1, 2, 2, 0)
    assert "fake coder: report written" in end["output_tail"]
    call = payload(station, f"coder/{row['id']}/call/1")
    assert call["status"] == 200 and call["usage"]["input_tokens"] > 0 and "construct_packing" in call["request"]
    message = rows(station, "SELECT text FROM messages WHERE kind='evaluation'")[0][0]
    assert "Score: 0.999999999999 (computed by the station)" in message and "made 2 official attempt(s)" in message

    # the endpoint saw the station's key; the sandbox never held it
    generations = [r for r in server.requests if r.provider == "openai-chat"]
    assert len(generations) == 2 and {r.headers["authorization"] for r in generations} == {f"Bearer {KEY}"}
    assert {r.model for r in generations} == {"fake-coder"}  # the configured model, not the one the CLI named
    env = json.loads((station / "files" / "coder" / str(row["id"]) / "workspace" / "env.json").read_text())
    assert KEY not in json.dumps(env) and KEY_ENV not in env and env["OPENAI_API_KEY"] == "station-relay"
    assert env["OPENAI_BASE_URL"].startswith("http://127.0.0.1:")


def test_the_cli_s_calls_are_booked_as_coder_and_a_tiny_cap_stops_it(
    station: Path, tmp_path: Path, server: ProviderServer
) -> None:
    st = Station.open_to_read(station)
    try:
        spent = report.status(st, running=False)["spend"]["by_caller"]["coder"]["usd"]
    finally:
        st.close()
    assert spent > 0

    capped = copy_station(station, tmp_path / "capped")
    store = Store(capped)
    try:  # what has been spent, and less than one more call
        commands.queue(store, commands.set_command(store, "budget.station_usd", str(round(spent + 1e-6, 8))))
    finally:
        store.close()
    asked = len(server.requests)
    st = Station.open(capped)
    try:
        ctx = st.ctx
        with ctx.store.transaction():
            insert_evaluation(
                ctx.store,
                task="1",
                author="Spiro I",
                session=session_of(st, "Spiro I"),
                lineage="Spiro",
                tick=ctx.tick,
                title="Again",
                tags=["x"],
                abstract="x.",
                code="",
                instruction="Print it.\n```python\nprint(1)\n```",
                sees_all=False,
            )
        with pytest.raises(StationPaused, match=r"budget.station_usd"):
            Engine(st).run(until_tick=TICKS + 3)
    finally:
        st.close()
    assert len(server.requests) == asked  # refused at the relay: nothing reached the endpoint
    assert not rows(capped, "SELECT key FROM inputs WHERE key IN ('coder/2/end', 'coder/2/call/1')")


def test_a_replay_rebuilds_the_same_world_without_the_cli_the_model_or_a_sandbox(
    station: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a replay started the CLI or ran an attempt")

    monkeypatch.setattr(coder_command, "run_cli", refuse)
    monkeypatch.setattr(EvaluationWorker, "_run", refuse)
    out = tmp_path / "replayed"
    assert replay(station, out, None, None)[0] == 0
    original, replayed = Store(station), Store(out)
    try:
        again, before = canonical_dump(replayed), canonical_dump(original)
    finally:
        original.close()
        replayed.close()
    assert {"coder/1/end", "coder/1/call/2", "coder/1/spawn/1", "coder/1/attempt/2", "eval-run/1/2"} <= {
        r[1] for r in again["inputs"][1:]
    }
    assert comparable(again) == comparable(before)
    assert not (out / "files" / "coder").exists()  # nothing ran: no workspace was made


def comparable(dump: dict[str, list[list[Any]]]) -> dict[str, list[list[Any]]]:
    """The dump with its inputs in key order and without the author background workers note."""
    cols, *body = dump["inputs"]
    agent = cols.index("agent")
    body = sorted(([None if i == agent else v for i, v in enumerate(r)][1:] for r in body), key=lambda r: r[0])
    return {**dump, "inputs": [cols[1:], *body]}


# -- the config, the relay, the sandbox's loopback ---------------------------------------------------------
def test_a_command_backend_without_argv_or_model_and_an_unknown_backend_are_refused_in_one_line() -> None:
    model = ModelConfig(provider="openai", name="m")
    for given, said in (
        ({"backend": "command", "command": {"model": model}}, "research.coder.command.argv is empty"),
        ({"backend": "command", "command": {"argv": ["codex"]}}, "research.coder.command.model is missing"),
        (
            {"backend": "command", "command": {"argv": ["codex"], "provider": "anthropic", "model": model}},
            "needs 'anthropic'",
        ),
        ({"backend": "telepathy"}, "unknown research.coder.backend 'telepathy'; known: tools, command"),
    ):
        with pytest.raises(ValidationError, match=re.escape(said)):
            CoderConfig.model_validate(given)
    assert CoderConfig().backend == "tools"


def test_the_relay_refuses_other_paths_and_methods_and_books_nothing(tmp_path: Path) -> None:
    ledger = Ledger(None, StationConfig)
    recorded: list[dict[str, Any]] = []
    model = ModelConfig(provider="openai", name="m", base_url="http://127.0.0.1:9/v1")
    relay = Relay(
        tmp_path / "r.sock",
        provider="openai-chat",
        model=model,
        ledger=ledger,
        record=recorded.append,
        submit=lambda path: {"text": "no", "error": True},
    )
    answers: list[tuple[int, str]] = []

    def ask(method: str, path: str, body: bytes | None = b"{}") -> None:
        conn = http.client.HTTPConnection("relay")
        conn.sock = socket.socket(socket.AF_UNIX)
        conn.sock.connect(str(tmp_path / "r.sock"))
        conn.request(method, path, body=body)
        reply = conn.getresponse()
        answers.append((reply.status, json.loads(reply.read())["error"]["message"]))

    asking = threading.Thread(
        target=lambda: [
            ask("POST", "/v1/files"),
            ask("GET", "/v1/models", None),
            ask("POST", "/v1/responses"),
            ask("POST", "/v1/chat/completions", b"not json"),
        ]
    )
    asking.start()
    relay.serve_while(asking.is_alive, stop_file=tmp_path / "stop")
    relay.close()
    assert answers == [
        (404, "the station's relay forwards only openai-chat generation requests, not /v1/files"),
        (405, "the station's relay takes POST requests only"),
        (404, "the station's relay forwards only openai-chat generation requests, not /v1/responses"),
        (400, "the request body is not JSON"),
    ]
    assert recorded == [] and ledger.station_totals() == (0, 0.0)


LOOPBACK_PROBE = """
import socket, sys
def reach(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return "reached"
    except OSError as err:
        return type(err).__name__
own = socket.socket()
try:
    own.bind(("127.0.0.1", 0)); own.listen()
    mine = reach(own.getsockname()[1])
except OSError as err:
    mine = type(err).__name__
print(mine, reach(int(sys.argv[1])))
"""


def test_a_run_s_own_loopback_is_up_only_when_asked_and_the_host_s_stays_out_of_reach() -> None:
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen()  # a service of the host's, on its loopback
    executor = create_executor(ExecutorConfig(kind="local"))
    if executor.mode == "process":
        pytest.skip("no network namespace here: process mode shares the host's network")
    try:
        seen = {}
        for loopback in (False, True):
            spec = RunSpec(
                code=LOOPBACK_PROBE,
                mode="command",
                entry=f"python -I submission.py {host.getsockname()[1]}",
                timeout_s=30,
                loopback=loopback,
            )
            result = executor.run(spec)
            assert result.status == "ok", result.error
            seen[loopback] = (result.stdout.split(), "own-loopback" in result.isolation)
    finally:
        executor.close()
        host.close()
    assert seen[False] == (["OSError", "OSError"], False)  # lo is down: nothing at all on 127.0.0.1
    assert seen[True] == (["reached", "ConnectionRefusedError"], True)  # its own listener; the host's is not there


def test_a_station_killed_during_a_session_starts_the_cli_again_and_keeps_its_attempts(
    tmp_path: Path, server: ProviderServer
) -> None:
    settings = config(server.openai_url)
    settings["research"]["coder"]["command"]["argv"].append("pause-after-attempt-1")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(settings))
    directory = tmp_path / "st"
    run = subprocess.Popen(
        [sys.executable, "-m", "station.apps.cli", "run", str(tmp_path / "c.yaml"), "--dir", str(directory)]
        + ["--until-tick", str(TICKS)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    marker = directory / "files" / "coder" / "1" / "workspace" / ".paused"
    try:  # the first attempt is recorded and the CLI waits after it
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read().decode() if run.stderr else ""
            time.sleep(0.05)
        running = Store(directory)  # what `station status` tells while the CLI works
        try:
            assert [(e.id, e.state, e.progress) for e in open_evaluations(running, live=True)] == [
                (1, "running", "coder turn 2")
            ]
        finally:
            running.close()
        run.send_signal(signal.SIGKILL)
        run.wait(10)
    finally:
        if run.poll() is None:
            run.kill()
    assert [r[0] for r in rows(directory, "SELECT key FROM inputs WHERE key LIKE 'coder/%' ORDER BY key")] == [
        "coder/1/attempt/1",
        "coder/1/call/1",
        "coder/1/spawn/1",
    ]

    st = Station.open(directory)  # run again (in this process: the same code as `station run`, sooner)
    try:
        assert Engine(st).run(until_tick=TICKS) == f"finished tick {TICKS}"
    finally:
        st.close()
    # the second start asks afresh (the slip again) and mends it: its attempts are 2 and 3, not 1 and 2
    assert [tuple(r) for r in rows(directory, "SELECT version, status FROM evaluation_versions")] == [
        (1, "error"),
        (2, "error"),
        (3, "ok"),
    ]
    end = payload(directory, "coder/1/end")
    assert (end["spawns"], end["calls"], end["attempts"], end["end"]) == (2, 3, 3, "finished")
