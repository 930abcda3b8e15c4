"""Stations whose agents, reviewer, grader and debugger use the three providers' real SDK
clients, served on loopback: failures pause or end as specified and lose nothing, spend is
booked and capped, concurrent turns overlap their calls, and a killed station resumes sending
exactly the conversations an uninterrupted one sends.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from provider_server import Fault, ProviderServer
from remote_world import (
    AGENT_MODELS,
    KEY_ENV,
    ROLE_MODELS,
    count_in_flight,
    endpoint,
    remote_config,
    scripted_responder,
)

from station.apps import cli
from station.apps.world import Station
from station.core.config import parse_config
from station.core.engine import Engine, StationPaused
from station.core.store import Store, canonical_dump

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def server(monkeypatch):
    for env, value in KEY_ENV.items():
        monkeypatch.setenv(env, value)
    with ProviderServer(scripted_responder(), api_keys={KEY_ENV["OPENAI_API_KEY"]}) as s:
        yield s


def create(directory: Path, server: ProviderServer, **overrides) -> Station:
    return Station.create(directory, parse_config(remote_config(server, **overrides)))


def run(directory: Path, *, until: int) -> str:
    station = Station.open(directory)
    try:
        return Engine(station).run(until_tick=until)
    finally:
        station.close()


def agent_requests(server: ProviderServer) -> list[str]:
    """Every conversation the agents sent, in order, as comparable text (roles left out)."""
    names = {m["name"] for m in AGENT_MODELS}
    return [json.dumps({"model": r.model, "system": r.system, "messages": r.messages}, sort_keys=True)
            for r in list(server.requests) if r.method == "POST" and r.model in names]


# -- acceptance 2: kill -9 and resume ------------------------------------------------------
def test_a_killed_station_resumes_sending_the_conversations_an_uninterrupted_one_sends(server, tmp_path, capsys):
    """The station killed (SIGKILL) is a process of its own; the uninterrupted run and the resumed
    one are the same `station run`, here in this process (each process of its own loaded the three
    SDKs again: 5 CPU-s)."""
    config = tmp_path / "remote.yaml"
    config.write_text(yaml.safe_dump(remote_config(server)))
    env = {**os.environ, **KEY_ENV}

    def station_run(directory: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "station.apps.cli", "run", str(config), "--dir", str(directory),
                                 "--until-tick", "10"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)

    def station_run_here(directory: Path) -> int:
        code = cli.main(["run", str(config), "--dir", str(directory), "--until-tick", "10"])
        capsys.readouterr()
        return code

    assert station_run_here(tmp_path / "whole") == 0
    uninterrupted = agent_requests(server)
    assert len(uninterrupted) >= 50  # five agents, ten ticks, plus exchange steps
    assert any(r.model == "grader-station-test" for r in server.requests)  # tests graded through a provider
    assert {json.loads(r)["model"] for r in uninterrupted} == {m["name"] for m in AGENT_MODELS}

    server.requests.clear()
    killed = station_run(tmp_path / "killed")
    deadline = time.monotonic() + 120
    while len(agent_requests(server)) < len(uninterrupted) // 2 and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    before = agent_requests(server)
    assert len(before) < len(uninterrupted), "the kill came too late to test anything"

    server.requests.clear()
    assert station_run_here(tmp_path / "killed") == 0
    after = agent_requests(server)
    # What is sent after the restart is exactly the rest of the uninterrupted run's requests
    # (starting with any whose reply was not recorded before the kill).
    assert after == uninterrupted[len(uninterrupted) - len(after):]
    assert before[:len(uninterrupted) - len(after)] == uninterrupted[:len(uninterrupted) - len(after)]
    a, b = Store(tmp_path / "whole"), Store(tmp_path / "killed")
    assert canonical_dump(a) == canonical_dump(b)


# -- failures ------------------------------------------------------------------------------
def test_a_refused_key_pauses_the_station_and_nothing_is_lost(server, tmp_path, monkeypatch, capsys):
    create(tmp_path / "st", server).close()
    assert run(tmp_path / "st", until=1) == "finished tick 1"
    monkeypatch.setenv("GEMINI_API_KEY", "revoked-key")
    server.api_keys = {KEY_ENV["OPENAI_API_KEY"]}
    code = cli.main(["run", "--dir", str(tmp_path / "st"), "--until-tick", "3"])
    err = capsys.readouterr().err
    assert code == 3
    assert "station paused at tick 2" in err and "key was refused" in err and "gemini-pro-station-test" in err
    assert "nothing is lost" in err
    cli.main(["status", str(tmp_path / "st")])
    status = capsys.readouterr().out
    assert "paused: a model call for Guest_4 failed" in status and ", paused," in status

    st = Station.open(tmp_path / "st")
    done = st.store.all("SELECT agent FROM turns WHERE tick=2 ORDER BY id")
    assert [r["agent"] for r in done] == ["Guest_1", "Guest_2", "Guest_3"]  # Guest_4's turn waits
    st.close()
    monkeypatch.setenv("GEMINI_API_KEY", KEY_ENV["GEMINI_API_KEY"])
    assert cli.main(["run", "--dir", str(tmp_path / "st"), "--until-tick", "3"]) == 0
    st = Station.open(tmp_path / "st")
    per_tick = st.store.all("SELECT tick, COUNT(*) AS n FROM turns GROUP BY tick ORDER BY tick")
    assert [(r["tick"], r["n"]) for r in per_tick] == [(1, 5), (2, 5), (3, 5)]
    assert not (tmp_path / "st" / "paused.txt").exists()
    st.close()


def test_transient_failures_are_retried_inside_the_turn(server, tmp_path):
    create(tmp_path / "st", server).close()
    server.fail_next(Fault("rate_limit", seconds=0.2), "server_error", "drop", "malformed")
    assert run(tmp_path / "st", until=2) == "finished tick 2"
    st = Station.open(tmp_path / "st")
    assert st.store.scalar("SELECT COUNT(*) FROM turns") == 10
    assert st.store.scalar("SELECT SUM(retries) FROM spend") == 4
    st.close()


def test_failing_after_every_retry_pauses_with_the_reason(server, tmp_path):
    create(tmp_path / "st", server).close()
    server.fail_next(*["server_error"] * 5)  # the first call, and its four retries
    with pytest.raises(StationPaused) as paused:
        run(tmp_path / "st", until=1)
    assert "kept failing" in str(paused.value) and "Run the station again" in str(paused.value)
    assert run(tmp_path / "st", until=1) == "finished tick 1"


def test_a_context_too_long_answer_ends_the_session(server, tmp_path):
    create(tmp_path / "st", server).close()
    assert run(tmp_path / "st", until=1) == "finished tick 1"
    server.fail_next("context_too_long")  # Guest_1's turn at tick 2
    assert run(tmp_path / "st", until=2) == "finished tick 2"
    st = Station.open(tmp_path / "st")
    first = st.ctx.agents.get("Guest_1")
    assert first.state == "ended" and first.exit_reason == "context window overflow"
    overflow = st.store.get_input(f"reply/2/{first.session}/0")
    assert overflow["overflow"] and "too long" in overflow["overflow"]  # recorded like any answer
    assert st.store.scalar("SELECT COUNT(*) FROM turns WHERE tick=2") == 5
    st.close()


def test_agents_are_warned_before_the_models_context_window(server, tmp_path):
    small = remote_config(server)
    for spec in small["agents"]:
        spec["model"]["context_limit"] = 12_000
        spec["model"]["max_output_tokens"] = 2_000
    Station.create(tmp_path / "st", parse_config(small)).close()
    run(tmp_path / "st", until=6)
    st = Station.open(tmp_path / "st")
    prompts = " ".join(r["prompt"] for r in st.store.all("SELECT prompt FROM turns"))
    assert "Agent Token Budget" in prompts and "/ 10,000 used" in prompts  # the window less one reply
    st.close()


# -- spend and budgets ---------------------------------------------------------------------
def test_each_turn_records_its_tokens_latency_and_cost(server, tmp_path, capsys):
    create(tmp_path / "st", server).close()
    run(tmp_path / "st", until=2)
    st = Station.open(tmp_path / "st")
    rows = st.store.all("SELECT * FROM turns")
    assert all(r["input_tokens"] > 0 and r["output_tokens"] > 0 and r["reasoning_tokens"] >= 7 for r in rows)
    assert all(r["cost_usd"] > 0 and r["latency_s"] is not None for r in rows)
    assert any(r["cached_input_tokens"] > 0 for r in rows)
    spend = st.store.one("SELECT SUM(cost_usd) AS usd, COUNT(*) AS n FROM spend")
    turns = st.store.scalar("SELECT SUM(cost_usd) FROM turns")
    assert spend["usd"] == pytest.approx(turns + st.store.scalar(
        "SELECT COALESCE(SUM(cost_usd), 0) FROM spend WHERE who IN ('grader', 'reviewer', 'debugger')"))
    st.close()
    cli.main(["status", str(tmp_path / "st"), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["spend"]["usd"] == pytest.approx(spend["usd"], abs=1e-5)
    assert data["spend"]["calls"] == spend["n"] and 0 < data["spend"]["cached_share"] < 1
    assert all(a["spend_usd"] > 0 for a in data["agents"])
    cli.main(["status", str(tmp_path / "st")])
    assert "spend: $" in capsys.readouterr().out


def test_a_tiny_money_cap_pauses_the_station_before_it_is_crossed(server, tmp_path, capsys):
    cap = 0.3  # a call may cost up to $0.08 (8,192 output tokens at $10 per million): about 70 calls fit
    create(tmp_path / "st", server, budget={"station_usd": cap}).close()
    code = cli.main(["run", "--dir", str(tmp_path / "st"), "--until-tick", "30"])
    err = capsys.readouterr().err
    assert code == 3
    assert "budget: the station's money budget would be crossed" in err and "budget.station_usd" in err
    st = Station.open(tmp_path / "st")
    spent = st.store.scalar("SELECT SUM(cost_usd) FROM spend")
    assert 0 < spent <= cap
    tick = st.ctx.tick
    st.close()
    assert cli.main(["set", str(tmp_path / "st"), "budget.station_usd", "1.0"]) == 0
    assert cli.main(["run", "--dir", str(tmp_path / "st"), "--until-tick", str(tick)]) == 0
    capsys.readouterr()


def test_an_agent_cap_names_the_agent(server, tmp_path):
    create(tmp_path / "st", server, budget={"agent_usd": 0.1}).close()
    with pytest.raises(StationPaused) as paused:
        run(tmp_path / "st", until=20)
    assert "Guest_" in str(paused.value) and "money budget would be crossed" in str(paused.value)


def test_a_money_budget_needs_prices_for_every_remote_model(server):
    data = remote_config(server, budget={"station_usd": 1.0})
    del data["prices"]["gpt-station-test"]
    with pytest.raises(ValueError, match="no price: gpt-station-test"):
        parse_config(data)


# -- concurrent turns ----------------------------------------------------------------------
@pytest.mark.parametrize("mode, overlap", [("concurrent", 5), ("sequential", 1)])
def test_concurrent_turns_overlap_their_model_calls(server, tmp_path, mode, overlap):
    flight = count_in_flight(server)
    create(tmp_path / "st", server, turns=mode).close()
    run(tmp_path / "st", until=2)
    assert flight["most"] == overlap


def test_a_concurrent_station_replays_to_the_same_world(server, tmp_path):
    create(tmp_path / "live", server, turns="concurrent").close()
    run(tmp_path / "live", until=6)
    source = Store(tmp_path / "live")
    copy = Station.create(tmp_path / "copy", parse_config(source.get_meta("config")))
    server.requests.clear()
    Engine(copy, replay_source=source).run(until_tick=6)
    copy.close()
    assert not [r for r in server.requests if r.method == "POST"]  # replies came from the source
    assert canonical_dump(Store(tmp_path / "copy")) == canonical_dump(source)


def test_concurrent_prompts_are_built_from_the_world_at_the_start_of_the_tick(server, tmp_path):
    create(tmp_path / "st", server, turns="concurrent").close()
    run(tmp_path / "st", until=3)
    st = Station.open(tmp_path / "st")
    for tick in (1, 2, 3):
        built = st.store.all("SELECT session, prompt FROM turn_prompts WHERE tick=?", (tick,))
        used = {r["session"]: r["prompt"] for r in st.store.all("SELECT session, prompt FROM turns WHERE tick=?",
                                                                (tick,))}
        assert len(built) == 5 and all(used[r["session"]] == r["prompt"] for r in built)
    st.close()


def test_the_debugger_mends_a_crash_through_a_provider(server, tmp_path):
    from test_evaluations import station as research_station
    from test_evaluations import submit

    from evaluators.programs import program

    slip = program("grid", 4).replace("np.zeros(", "np.zeroes(", 1)
    st = research_station(tmp_path, [submit(slip, "Grid with a slip")], n=4,
                          debugger={"model": endpoint(server, ROLE_MODELS["debugger"])},
                          prices={ROLE_MODELS["debugger"]["name"]: {"input": 1.0, "output": 1.0}})
    try:
        Engine(st).run(until_tick=4)
        (row,) = st.store.all("SELECT * FROM evaluations")
        assert row["status"] == "finished" and row["reported_version"] == 2
        assert [r.model for r in server.requests if r.method == "POST"] == ["debugger-station-test"]
        assert st.store.scalar("SELECT COUNT(*) FROM spend WHERE who='debugger' AND cost_usd > 0") == 1
    finally:
        st.close()


def test_a_reviewer_provider_that_keeps_failing_costs_the_paper_attempts_not_the_station(server, tmp_path):
    from test_reviewer import reviews, submissions, submit
    from test_reviewer import station as review_station

    cfg = {**endpoint(server, ROLE_MODELS["reviewer"]), "max_retries": 1}
    st = review_station(tmp_path, [submit()], cfg, reviewer={"max_attempts": 2})
    server.fail_next(*["server_error"] * 4)  # two attempts, each tried twice
    try:
        assert Engine(st).run(ticks=2) == "finished tick 2"
        [sub] = submissions(st)
        assert (sub["status"], sub["attempts"]) == ("failed", 2)
        assert [r[3] for r in reviews(st)] == ["model_error", "model_error"]
        assert len([r for r in server.requests if r.method == "POST"]) == 4
    finally:
        st.close()


# -- operator tools ------------------------------------------------------------------------
def test_station_set_refuses_unsafe_keys_and_bad_values(server, tmp_path, capsys):
    create(tmp_path / "st", server).close()
    assert cli.main(["set", str(tmp_path / "st"), "lifecycle.max_age", "3"]) == 2
    assert "cannot be changed" in capsys.readouterr().err
    assert cli.main(["set", str(tmp_path / "st"), "budget.station_usd", "-1"]) == 2
    assert "budget.station_usd" in capsys.readouterr().err
    assert cli.main(["set", str(tmp_path / "st"), "turns", "concurrent"]) == 0
    run(tmp_path / "st", until=1)
    st = Station.open(tmp_path / "st")
    assert st.config.turns == "concurrent"
    st.close()


def test_doctor_says_what_works_and_what_does_not(server, tmp_path, monkeypatch, capsys):
    config = tmp_path / "remote.yaml"
    data = remote_config(server)
    data["agents"][1]["model"]["name"] = "gpt-unknown"
    config.write_text(yaml.safe_dump(data))
    server.known_models = {m["name"] for m in AGENT_MODELS} | {"reviewer-station-test", "grader-station-test",
                                                               "debugger-station-test"}
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    assert cli.main(["doctor", str(config), "--call"]) == 1
    out = capsys.readouterr().out
    assert "ANTHROPIC_API_KEY MISSING" in out and "gpt-unknown" in out and "not found" in out
    assert "'ready'" not in out or "in /" in out
    assert "need attention" in out
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY_ENV["ANTHROPIC_API_KEY"])
    data["agents"][1]["model"]["name"] = "gpt-station-test"
    config.write_text(yaml.safe_dump(data))
    assert cli.main(["doctor", str(config)]) == 0
    assert "all models answer" in capsys.readouterr().out
