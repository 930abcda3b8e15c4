"""Correcting a station's model settings after it was created (`station set DIR agents.N.model.F V`,
and reviewer/grading/debugger.model.F): a wrong model name pauses the station, the set fixes it,
and the next run goes on; a set on a running station reaches the agents between turns; a replay
applies it at the same point; bad values, unknown fields and new endpoints are refused in one
line; the operator page accepts the same keys with its token and never a new endpoint.

Real stations and the real command (in-process `cli.main` or subprocesses), and real SDK clients
against the loopback provider server. No assertion depends on the machine's speed: runs are
bounded in ticks, and waits only have generous deadlines that a broken station reaches.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from fastapi.testclient import TestClient
from helpers import demo_config, read
from provider_server import ProviderServer
from remote_world import KEY, KEY_ENV, endpoint, scripted_responder

from rooms.archive.config import ReviewerConfig
from rooms.test.config import GradingConfig
from station.apps import cli
from station.apps.web.app import create_app
from station.apps.world import Station
from station.core.config import parse_config
from station.core.engine import Engine
from station.core.store import Store, canonical_dump

DEMO = ROOT / "configs" / "social_demo.yaml"
RIGHT, WRONG = "local-station-test", "local-statoin-test"
TOKEN = "correct-horse-battery-staple"
VLLM = {"provider": "openai", "api": "chat", "name": "qwen", "base_url": "http://127.0.0.1:8000/v1",
        "api_key_env": "VLLM_API_KEY"}


def station(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "station.apps.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def queued(directory: Path) -> list[dict]:
    store = Store(directory)
    try:
        return [json.loads(r["command"]) for r in store.all("SELECT command FROM operator_queue ORDER BY id")]
    finally:
        store.close()


def stored_config(directory: Path) -> dict:
    store = Store(directory)
    try:
        return store.get_meta("config")
    finally:
        store.close()


def models_of(directory: Path) -> dict[str, str]:
    return dict(read(directory, "SELECT name, model_name FROM agents"))


def dump(directory: Path) -> dict:
    store = Store(directory)
    try:
        return canonical_dump(store)
    finally:
        store.close()


@pytest.fixture
def server(monkeypatch):
    for env, value in KEY_ENV.items():
        monkeypatch.setenv(env, value)
    with ProviderServer(scripted_responder(), api_keys={KEY}, known_models={RIGHT}) as s:
        yield s


def offline_station(directory: Path, agents: list[dict]) -> Path:
    """A station that is never run here: its models only need to validate."""
    Station.create(directory, parse_config(demo_config(name="offline", agents=agents))).close()
    return directory


# -- a wrong model name: the station pauses, `station set` fixes it, the next run works -------------
def test_a_wrong_model_name_pauses_the_station_and_station_set_fixes_it(server, tmp_path, capsys):
    config = tmp_path / "remote.yaml"
    remote = endpoint(server, {"provider": "openai", "name": WRONG, "api": "chat"})
    config.write_text(yaml.safe_dump(demo_config(name="wrong-name", agents=[
        {"count": 2, "kind": "guest", "model": remote},
        {"count": 1, "kind": "guest", "model": {"provider": "scripted", "name": "scripted-newcomer"}}])))
    d = tmp_path / "st"
    assert cli.main(["run", str(config), "--dir", str(d), "--until-tick", "2"]) == 3
    err = capsys.readouterr().err
    assert "retrying cannot help" in err and WRONG in err
    # The pause names the fix: the entry's own key, on this station's directory.
    assert f"station set {d} agents.0.model.name NEW" in err and "agents.0.model.api chat" in err
    assert [r.model for r in server.requests if r.method == "POST"] == [WRONG]  # a 404 is not retried
    assert read(d, "SELECT COUNT(*) FROM turns") == [(0,)]

    server.requests.clear()
    assert cli.main(["set", str(d), "agents.0.model.name", RIGHT]) == 0
    out = capsys.readouterr().out
    assert f"agents.0.model.name = '{RIGHT}' queued as operator command #1" in out
    assert "when the station next runs" in out
    assert stored_config(d)["agents"][0]["model"]["name"] == WRONG  # not before it runs

    assert cli.main(["run", "--dir", str(d), "--until-tick", "2"]) == 0
    capsys.readouterr()
    config_now = stored_config(d)
    assert config_now["agents"][0]["model"]["name"] == RIGHT
    assert config_now["agents"][0]["model"]["base_url"] == remote["base_url"]  # the rest is as it was
    assert models_of(d) == {"Guest_1": RIGHT, "Guest_2": RIGHT, "Guest_3": "scripted-newcomer"}
    turns = read(d, "SELECT agent, COUNT(*) FROM turns GROUP BY agent ORDER BY agent")
    assert turns == [("Guest_1", 2), ("Guest_2", 2), ("Guest_3", 2)]
    sent = {r.model for r in server.requests if r.method == "POST"}
    assert sent == {RIGHT}  # every call after the fix used the new name
    spend = read(d, "SELECT DISTINCT who, model FROM spend WHERE who LIKE 'Guest_%' ORDER BY who")
    assert spend == [("Guest_1", RIGHT), ("Guest_2", RIGHT), ("Guest_3", "scripted-newcomer")]
    (change,) = read(d, "SELECT payload FROM events WHERE kind='agents_model_changed'")
    assert json.loads(change[0]) == {"key": "agents.0.model", "model": RIGHT, "agents": ["Guest_1", "Guest_2"]}
    # Recorded as an operator input, applied before the first unit of the second run.
    (recorded,) = read(d, "SELECT payload FROM inputs WHERE kind='operator'")
    assert json.loads(recorded[0])["command"] == {"op": "set", "key": "agents.0.model.name", "value": RIGHT}


def test_a_later_spawn_of_the_entry_uses_the_new_settings(tmp_path, capsys):
    """A respawn copies its predecessor's model: one departed before the set gets the new one too."""
    d = tmp_path / "st"
    Station.create(d, parse_config(demo_config(name="respawn", lifecycle={"max_age": 3}))).close()
    assert cli.main(["run", "--dir", str(d), "--until-tick", "2"]) == 0
    assert cli.main(["set", str(d), "agents.0.model.context_limit", "60000"]) == 0
    assert cli.main(["set", str(d), "agents.0.model.name", "scripted-renamed"]) == 0
    assert cli.main(["run", "--dir", str(d), "--until-tick", "6"]) == 0
    capsys.readouterr()
    store = Store(d)
    try:
        late = [json.loads(r["data"]) for r in store.all("SELECT data FROM agents WHERE json_extract(data, "
                                                         "'$.birth_tick') > 2")]
        assert late, "agents were born after the set"
        assert all(a["model"]["name"] == "scripted-renamed" and a["model"]["context_limit"] == 60000 for a in late)
        assert all(r["model_name"] == "scripted-renamed" for r in store.all("SELECT model_name FROM agents"))
    finally:
        store.close()


def test_the_grader_and_reviewer_use_their_new_settings_from_their_next_call(tmp_path, capsys):
    d = tmp_path / "st"
    st = Station.create(d, parse_config(demo_config(name="roles", reviewer={"hold_tick": False})))
    try:
        Engine(st).run(until_tick=2)
        worker = next(h.worker for h in st.ctx.hooks if h.name == "reviewer")  # the background reviewer
        assert worker is not None and worker.config.section(ReviewerConfig).model.name == "scripted-reviewer"
        graded = read(d, "SELECT COUNT(*) FROM spend WHERE who='grader'")[0][0]
        assert graded > 0
        assert cli.main(["set", str(d), "grading.model.name", "scripted-grader-2"]) == 0
        assert cli.main(["set", str(d), "reviewer.model.name", "scripted-reviewer-2"]) == 0
        capsys.readouterr()
        Engine(st).run(until_tick=8)
        assert worker.config.section(ReviewerConfig).model.name == "scripted-reviewer-2"  # handed the changed config
        assert st.config.section(GradingConfig).model.name == "scripted-grader-2"
        names = [m for (m,) in read(d, "SELECT model FROM spend WHERE who='grader' ORDER BY id")]
        assert names[:graded] == ["scripted-grader"] * graded
        assert len(names) > graded and set(names[graded:]) == {"scripted-grader-2"}
    finally:
        st.close()


# -- refusals ------------------------------------------------------------------------------------
REFUSED = [
    ("agents.0.model.api", "chat2", "agents.0.model.api: Input should be 'responses' or 'chat' (got 'chat2')"),
    ("agents.0.model.timeout_s", "-1", "agents.0.model.timeout_s: Input should be greater than 0 (got -1)"),
    ("agents.0.model.max_retries", "1000", "agents.0.model.max_retries: Input should be less than or equal to 100"),
    ("agents.0.model.options", "[1, 2]", "agents.0.model.options: Input should be a valid dictionary"),
    ("agents.0.model.context_limit", "0", "agents.0.model.context_limit: Input should be greater than 0"),
    ("agents.0.model.name", "''", "agents.0.model.name: String should have at least 1 character"),
    ("agents.1.model.max_output_tokens", "2000",
     "agents.1.model.max_output_tokens: anthropic: thinking_budget must be smaller than max_output_tokens"),
    ("agents.2.model.name", "x", "agents.2.model.name: the station's config has no agents.2 (it has agents.0 to "
                                 "agents.1)"),
    ("agents.0.model.provider", "anthropic", "'agents.0.model.provider' cannot be changed on a station: a model's "
                                             "changeable settings are base_url, name, api"),
    ("agents.0.model.api_key_env", "OTHER_KEY", "'agents.0.model.api_key_env' cannot be changed"),
    ("reviewer.model.nme", "x", "'reviewer.model.nme' cannot be changed"),
    ("debugger.model.temperature", "0.5", "'debugger.model.temperature' cannot be changed"),
    ("agents.0.kind", "recursive", "'agents.0.kind' cannot be changed on a station; changeable: budget.*"),
    ("grading.model.max_output_tokens", "many", "grading.model.max_output_tokens: Input should be a valid integer"),
]


@pytest.mark.parametrize("key, value, says", REFUSED, ids=[r[0] + "=" + r[1] for r in REFUSED])
def test_bad_values_and_unknown_fields_are_refused_in_one_line(tmp_path, capsys, key, value, says):
    d = offline_station(tmp_path / "st", [
        {"count": 1, "model": VLLM},
        {"count": 1, "model": {"provider": "anthropic", "name": "claude-x", "thinking_budget": 4096,
                               "max_output_tokens": 16000}}])
    assert cli.main(["set", str(d), key, value]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err  # one line
    assert captured.err.startswith("station: ") and says in captured.err
    assert queued(d) == []


def test_a_new_endpoint_needs_the_flag_and_a_known_one_does_not(tmp_path, capsys):
    d = offline_station(tmp_path / "st", [{"count": 1, "model": VLLM},
                                          {"count": 1, "model": {"provider": "gemini", "name": "gemini-x"}}])
    refusal = ("refused: this model would send VLLM_API_KEY to http://127.0.0.1:9/v1 which this station's config "
               "does not use; give --allow-new-endpoint on the command line if you mean it")
    assert cli.main(["set", str(d), "agents.0.model.base_url", "http://127.0.0.1:9/v1"]) == 2
    assert capsys.readouterr().err == f"station: {refusal}\n"
    # A URL (or a proxy) in the options is an endpoint too.
    for options in ("{http_options: {base_url: 'http://127.0.0.1:9'}}", "{client_args: {proxy: 'http://127.0.0.1:9'}}"):
        assert cli.main(["set", str(d), "agents.1.model.options", options]) == 2
        assert "would send GEMINI_API_KEY to http://127.0.0.1:9 which" in capsys.readouterr().err
    assert queued(d) == []
    # The same endpoint spelled otherwise, and the provider's own API, need no flag.
    assert cli.main(["set", str(d), "agents.0.model.base_url", "HTTP://127.0.0.1:8000/v1/"]) == 0
    assert cli.main(["set", str(d), "agents.1.model.options", "{temperature: 0.5}"]) == 0
    assert cli.main(["set", str(d), "agents.0.model.base_url", "http://127.0.0.1:9/v1", "--allow-new-endpoint"]) == 0
    assert "allowed by --allow-new-endpoint: this model sends VLLM_API_KEY to http://127.0.0.1:9/v1" \
        in capsys.readouterr().err
    assert [c["value"] for c in queued(d)] == ["HTTP://127.0.0.1:8000/v1/", {"temperature": 0.5},
                                               "http://127.0.0.1:9/v1"]


# -- a running station -----------------------------------------------------------------------------
def test_a_set_on_a_running_station_reaches_its_agents_between_turns(tmp_path):
    d = tmp_path / "st"
    assert station("init", str(DEMO), "--dir", str(d)).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "station.apps.cli", "run", "--dir", str(d), "--ticks", "100000"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not read(d, "SELECT 1 FROM turns LIMIT 1"):
            assert proc.poll() is None and time.monotonic() < deadline, "the run never committed a turn"
            time.sleep(0.05)
        done = station("set", str(d), "agents.0.model.name", "scripted-renamed")
        assert done.returncode == 0 and "takes effect now" in done.stdout, done.stderr
        deadline = time.monotonic() + 120
        while not read(d, "SELECT 1 FROM spend WHERE model='scripted-renamed' AND who LIKE 'Guest_%'"):
            assert proc.poll() is None and time.monotonic() < deadline, "no call used the new name"
            time.sleep(0.05)
        assert station("pause", str(d)).returncode == 0
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=60)
    assert proc.returncode == 0 and "paused by the operator" in out, err
    (recorded,) = read(d, "SELECT payload FROM inputs WHERE kind='operator' AND key='op/1'")
    point = json.loads(recorded[0])["point"]
    assert point > 0  # applied between two units of the running station, not at a start
    assert stored_config(d)["agents"][0]["model"]["name"] == "scripted-renamed"
    assert set(dict(read(d, "SELECT name, model_name FROM agents WHERE state='active'")).values()) == \
        {"scripted-renamed"}
    # Calls before the set used the old name, calls after it the new one; nothing in between.
    calls = read(d, "SELECT model FROM spend WHERE who LIKE 'Guest_%' ORDER BY id")
    names = [m for (m,) in calls]
    first_new = names.index("scripted-renamed")
    assert set(names[:first_new]) == {"scripted-newcomer"} and set(names[first_new:]) == {"scripted-renamed"}


# -- replay ------------------------------------------------------------------------------------------
def test_a_replay_applies_the_model_sets_at_the_same_point(tmp_path):
    src, out, fork = tmp_path / "src", tmp_path / "out", tmp_path / "fork"
    assert station("init", str(DEMO), "--dir", str(src)).returncode == 0
    assert station("run", "--dir", str(src), "--until-tick", "6").returncode == 0
    # A new name (lineages and spend follow it) and a smaller context window (sessions end sooner).
    assert station("set", str(src), "agents.0.model.name", "scripted-renamed").returncode == 0
    assert station("set", str(src), "agents.0.model.context_limit", "20000").returncode == 0
    done = station("run", "--dir", str(src), "--until-tick", "16")
    assert done.returncode == 0, done.stderr
    original = dump(src)
    assert station("replay", str(src), str(out)).returncode == 0
    replayed = dump(out)
    assert replayed["turns"] == original["turns"] and replayed["agents"] == original["agents"]
    assert replayed == original
    assert set(models_of(out).values()) >= {"scripted-newcomer", "scripted-renamed"}  # both names lived
    # A fork before the point starts from the config the station was created with.
    assert station("replay", str(src), str(fork), "--until-tick", "4").returncode == 0
    assert stored_config(fork)["agents"][0]["model"] == {**stored_config(src)["agents"][0]["model"],
                                                         "name": "scripted-newcomer", "context_limit": None}
    assert set(models_of(fork).values()) == {"scripted-newcomer"}


# -- the operator page ------------------------------------------------------------------------------
def test_the_operator_page_accepts_a_model_key_with_the_token_and_never_a_new_endpoint(tmp_path):
    d = offline_station(tmp_path / "st", [{"count": 1, "model": VLLM}])
    client = TestClient(create_app(d, host="0.0.0.0", token=TOKEN))
    headers = {"accept": "application/json"}
    with_token = {**headers, "x-station-token": TOKEN}
    page = client.get("/operator", headers={"x-station-token": TOKEN}).text
    assert "agents.N.model.FIELD" in page and "reviewer.model.FIELD" in page
    form = {"key": "agents.0.model.name", "value": "qwen-right"}
    assert client.post("/operator/set", data=form, headers=headers).status_code == 403  # no token
    ok = client.post("/operator/set", data=form, headers=with_token)
    assert ok.status_code == 200 and ok.json()["ok"]
    ok = client.post("/operator/set", data={"key": "agents.0.model.base_url", "value": "http://127.0.0.1:8000/v1/"},
                     headers=with_token)
    assert ok.status_code == 200  # the endpoint the config already uses
    for key, value in (("agents.0.model.base_url", "http://127.0.0.1:9/v1"),
                       ("agents.0.model.options", "{extra_body: {proxy_url: 'http://127.0.0.1:9/v1'}}")):
        refused = client.post("/operator/set", data={"key": key, "value": value}, headers=with_token)
        assert refused.status_code == 403, key
        assert refused.json()["error"].startswith("refused: this model would send VLLM_API_KEY to "
                                                  "http://127.0.0.1:9/v1")
        assert "--allow-new-endpoint" in refused.json()["error"]
    bad = client.post("/operator/set", data={"key": "agents.0.model.api", "value": "soap"}, headers=with_token)
    assert bad.status_code == 400 and bad.json()["error"].startswith("agents.0.model.api: Input should be")
    unknown = client.post("/operator/set", data={"key": "agents.0.model.provider", "value": "gemini"},
                          headers=with_token)
    assert unknown.status_code == 400 and "cannot be changed" in unknown.json()["error"]
    assert queued(d) == [{"op": "set", "key": "agents.0.model.name", "value": "qwen-right"},
                         {"op": "set", "key": "agents.0.model.base_url", "value": "http://127.0.0.1:8000/v1/"}]
