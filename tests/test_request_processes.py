"""`engine.request_processes`: the provider calls are made in worker processes. A station that
uses them sends the same conversations and records the same world as one that does not; the
workers retry, classify failures, honour the endpoints' bounds and survive being killed, as the
station's own process would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator

import pytest
from provider_server import Fault, ProviderServer
from remote_world import AGENT_MODELS, KEY_ENV, count_in_flight, endpoint, remote_config, scripted_responder

from station.apps.world import Station
from station.core import engine as engine_module
from station.core.config import parse_config
from station.core.engine import Engine, StationPaused
from station.core.store import Store, canonical_dump

TICKS = 3


@pytest.fixture
def server(monkeypatch):
    for env, value in KEY_ENV.items():
        monkeypatch.setenv(env, value)
    with ProviderServer(scripted_responder(), api_keys={KEY_ENV["OPENAI_API_KEY"]}) as s:
        yield s


def create(directory, server, processes: int, every_sdk: bool = False, **overrides) -> Station:
    """The remote station with `processes` request workers. Unless `every_sdk`, each of its models
    (same names) goes through the OpenAI-compatible endpoint: the workers' machinery is the same
    for every provider, and a worker that loads one SDK starts in a third of the CPU."""
    config = remote_config(server, turns="concurrent", **overrides)
    config.setdefault("engine", {})["request_processes"] = processes
    if not every_sdk:
        for holder in [*config["agents"], *(config[role] for role in ("grading", "reviewer", "debugger"))]:
            holder["model"] = endpoint(server, {**holder["model"], "provider": "openai",
                                                "api": holder["model"].get("api", "chat")})
    return Station.create(directory, parse_config(config))


def run(directory, until: int) -> str:
    station = Station.open(directory)
    try:
        return Engine(station).run(until_tick=until)
    finally:
        station.close()


@contextlib.contextmanager
def opened(directory) -> Iterator[Station]:
    """The station at `directory`, open for several runs: its request workers start once (at its
    first call) and serve every run, as in a station run on and on, until it closes."""
    station = Station.open(directory)
    try:
        yield station
    finally:
        station.close()


def world(directory) -> list[tuple]:
    """What the agents saw and said, turn by turn, and what it cost."""
    station = Station.open(directory)
    try:
        turns = station.store.all("SELECT tick, agent, prompt, reply FROM turns ORDER BY id")
        spend = station.store.scalar("SELECT ROUND(SUM(cost_usd), 8) FROM spend")
        return [tuple(row) for row in turns] + [("spend", spend)]
    finally:
        station.close()


def test_a_station_with_request_processes_records_the_world_one_without_them_does_and_replays_to_it(server, tmp_path):
    """One station with request processes (every SDK), checked from two sides: it records the
    world a station without them records, and a replay of it records the same world again without
    a single call (each side once cost a station of its own with two workers loading every SDK)."""
    create(tmp_path / "here", server, 0, every_sdk=True).close()
    assert run(tmp_path / "here", TICKS) == f"finished tick {TICKS}"
    create(tmp_path / "workers", server, 2, every_sdk=True).close()
    assert run(tmp_path / "workers", TICKS) == f"finished tick {TICKS}"
    here, workers = world(tmp_path / "here"), world(tmp_path / "workers")
    assert len(here) == 5 * TICKS + 1 and here[-1][1] > 0
    assert workers == here
    # the replay: the replies come from the recorded station, none from the provider
    source = Store(tmp_path / "workers")
    copy = Station.create(tmp_path / "copy", parse_config(source.get_meta("config")))
    server.requests.clear()
    Engine(copy, replay_source=source).run(until_tick=TICKS)
    copy.close()
    assert not [r for r in server.requests if r.method == "POST"]  # the replies came from the source
    assert by_key(canonical_dump(Store(tmp_path / "copy"))) == by_key(canonical_dump(source))


def test_the_workers_retry_transient_failures_and_book_the_retries(server, tmp_path):
    create(tmp_path / "st", server, 2).close()
    server.fail_next(Fault("rate_limit", seconds=0.2), "server_error", "drop", "malformed")
    assert run(tmp_path / "st", 2) == "finished tick 2"
    station = Station.open(tmp_path / "st")
    assert station.store.scalar("SELECT COUNT(*) FROM turns") == 10
    assert station.store.scalar("SELECT SUM(retries) FROM spend") == 4
    station.close()


def test_a_refused_key_pauses_the_station_with_the_providers_reason(server, tmp_path, monkeypatch):
    create(tmp_path / "st", server, 1, every_sdk=True).close()  # one worker, every SDK: one provider's key refused, the others'
    monkeypatch.setenv("OPENAI_API_KEY", "revoked-key")  # the workers start with this environment
    with pytest.raises(StationPaused) as paused:
        run(tmp_path / "st", 1)
    assert "key was refused" in str(paused.value) and "gpt-station-test" in str(paused.value)
    monkeypatch.setenv("OPENAI_API_KEY", KEY_ENV["OPENAI_API_KEY"])
    assert run(tmp_path / "st", 1) == "finished tick 1"


def test_a_context_too_long_answer_still_ends_the_session(server, tmp_path):
    create(tmp_path / "st", server, 1).close()  # one worker: the outcome does not depend on how many
    with opened(tmp_path / "st") as station:
        assert Engine(station).run(until_tick=1) == "finished tick 1"
        server.fail_next("context_too_long")
        assert Engine(station).run(until_tick=2) == "finished tick 2"
    station = Station.open(tmp_path / "st")
    ended = [a for a in station.ctx.agents.all() if a.state == "ended"]
    assert [a.exit_reason for a in ended] == ["context window overflow"]
    station.close()


def test_the_workers_together_keep_an_endpoints_bound(server, tmp_path):
    flight = count_in_flight(server)
    config = remote_config(server)
    one = config["agents"][0]["model"]  # every agent on one endpoint, two calls at a time
    agents = [{"count": 6, "kind": "guest", "model": {**one, "max_in_flight": 2}}]
    create(tmp_path / "st", server, 3, agents=agents).close()
    assert run(tmp_path / "st", 1) == "finished tick 1"
    assert flight["most"] == 2


def test_a_killed_worker_costs_a_retry_not_the_turn_and_the_workers_end_with_the_station(server, tmp_path):
    station = create(tmp_path / "st", server, 2)
    station.close()
    station = Station.open(tmp_path / "st")
    answer, killed, alive = server.responder, [], []

    def kill_a_worker_once(request):
        if not killed:
            workers = [w for w in station.ctx.models.processes._workers if w is not None]
            killed.append(workers[0].process.pid)
            os.kill(workers[0].process.pid, signal.SIGKILL)
            time.sleep(0.2)  # its answer has nobody to go to
        return answer(request)

    server.responder = kill_a_worker_once
    try:
        assert Engine(station).run(until_tick=2) == "finished tick 2"
        # the workers (but the one killed) live on with the station
        alive = [w.process for w in station.ctx.models.processes._workers
                 if w is not None and w.process.pid not in killed]
        assert alive and all(p.running() for p in alive)
        # forked from one zygote, which loaded the SDKs once for all of them (not from the station's process)
        parents = {parent(w.process.pid) for w in station.ctx.models.processes._workers if w is not None}
        assert len(parents) == 1 and os.getpid() not in parents
    finally:
        station.close()
    assert not any(p.running() for p in alive)  # and end with it
    assert killed
    station = Station.open(tmp_path / "st")
    assert station.store.scalar("SELECT COUNT(*) FROM turns") == 10
    assert station.store.scalar("SELECT SUM(retries) FROM spend") >= 1
    station.close()


def parent(pid: int) -> int:
    return int(next(line for line in open(f"/proc/{pid}/status") if line.startswith("PPid:")).split()[1])


def test_turns_are_applied_while_later_replies_are_still_coming(server, tmp_path):
    """Guest_1 acts as soon as its own reply is in, not once the whole tick's replies are."""
    create(tmp_path / "st", server, 2).close()
    answer, seen = server.responder, []
    db = tmp_path / "st" / "station.db"

    def last_agent_waits_for_the_first_turn(request):
        if request.model == "gemini-flash-station-test" and not seen:  # Guest_5's first call of tick 2
            with contextlib.closing(sqlite3.connect(db, timeout=30)) as con:
                for _ in range(400):  # 20 s at most: the whole tick waits for this answer otherwise
                    if con.execute("SELECT 1 FROM turns WHERE tick=2 AND agent='Guest_1'").fetchone():
                        break
                    time.sleep(0.05)
                seen.append(bool(con.execute("SELECT 1 FROM turns WHERE tick=2 AND agent='Guest_1'").fetchone()))
        return answer(request)

    with opened(tmp_path / "st") as station:
        assert Engine(station).run(until_tick=1) == "finished tick 1"
        server.responder = last_agent_waits_for_the_first_turn
        assert Engine(station).run(until_tick=2) == "finished tick 2"
    assert seen == [True]


def test_the_first_calls_go_out_while_later_prompts_are_still_being_built(server, tmp_path, monkeypatch):
    """A tick's prompts are committed in batches (here of one), and each batch's call is sent as it
    commits: Guest_5's prompt is made only once Guest_1's call has reached the provider. Sent after
    the whole prompt pass, as before, it would wait here for the 30 s and fail."""
    create(tmp_path / "st", server, 2).close()
    answer, first_call = server.responder, threading.Event()
    compose, waited = engine_module.compose, []

    def note_the_first_call(request):
        if request.model == AGENT_MODELS[0]["name"]:
            first_call.set()
        return answer(request)

    def last_prompt_waits_for_the_first_call(ctx, agent):
        if agent.name == "Guest_5" and ctx.tick == 2:
            waited.append(first_call.wait(30))
        return compose(ctx, agent)

    with opened(tmp_path / "st") as station:
        assert Engine(station).run(until_tick=1) == "finished tick 1"
        monkeypatch.setattr(engine_module, "PROMPT_BATCH", 1)
        server.responder = note_the_first_call
        monkeypatch.setattr(engine_module, "compose", last_prompt_waits_for_the_first_call)
        assert Engine(station).run(until_tick=2) == "finished tick 2"
    assert waited == [True]


def by_key(dump: dict) -> dict:
    """The dump with the inputs by key: with replies taken as they come, the live run records a
    tick's replies between its turns' other inputs, the replay all of them first (`seq` differs)."""
    cols, *rows = dump["inputs"]
    key = cols.index("key")
    return {**dump, "inputs": [cols[1:]] + sorted((r[1:] for r in rows), key=lambda r: r[key - 1])}


def test_a_station_stopped_mid_tick_keeps_the_replies_already_asked_for(server, tmp_path):
    create(tmp_path / "st", server, 2).close()
    answer = server.responder

    def stop_when_the_last_agent_asks(request):
        if request.model == "gemini-flash-station-test":  # Guest_5's, the tick's last call
            engine.stop.set()
        return answer(request)

    with opened(tmp_path / "st") as station:
        assert Engine(station).run(until_tick=1) == "finished tick 1"
        engine = Engine(station)
        server.responder = stop_when_the_last_agent_asks
        assert engine.run(until_tick=2) == "stopped"
        acted = station.store.scalar("SELECT COUNT(*) FROM turns WHERE tick=2")
        asked = station.store.scalar("SELECT COUNT(*) FROM inputs WHERE tick=2 AND key LIKE 'reply/2/%/0'")
    assert acted < 5 and asked == 5  # every reply paid for is kept for the turns still to come
    server.responder, before, seen = answer, set(bodies(server.requests)), len(server.requests)
    assert run(tmp_path / "st", 2) == "finished tick 2"
    assert not set(bodies(list(server.requests)[seen:])) & before  # none asked again


def bodies(requests) -> list[str]:
    return [json.dumps([r.model, r.system, r.messages], sort_keys=True) for r in list(requests) if r.method == "POST"]


def test_a_worker_loads_the_sdks_of_the_configs_providers_and_another_when_a_model_switches_to_it(server):
    """Loading all three SDKs costs each worker seconds at every start: a worker loads those of the
    providers the config names, and another provider's when a call needs it (an operator's switch)."""
    import subprocess
    import sys
    from pathlib import Path

    from station.core.config import ModelConfig
    from station.models.request_processes import RequestProcesses

    loaded = subprocess.run([sys.executable, "-c", "import sys\nfrom station.models.request_worker import preload\n"
                             "preload(['openai', 'scripted'])\n"
                             "print(sorted(m for m in ('anthropic', 'openai', 'google.genai') if m in sys.modules))"],
                            cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['openai']"
    processes = RequestProcesses(1, providers=lambda: ["openai"])
    try:
        claude = ModelConfig(**endpoint(server, {"provider": "anthropic", "name": "claude-station-test"}))
        reply = processes.call(claude, [{"role": "user", "text": "Hello from tick 1."}], None, "Guest_1")
        assert reply.text
    finally:
        processes.close()
