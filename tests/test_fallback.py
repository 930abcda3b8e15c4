"""Backup endpoints (`backups:` in a model's config): a station whose provider fails moves its
calls to the backup and back to the base once a probe call is answered; each switch is recorded,
shown by `station status` and the live line, and left out of what a replay rebuilds; `station
doctor` checks every endpoint; a config holding a key, or a bad backup, is refused in one line.
"""

from __future__ import annotations

import io

import pytest
import yaml
from helpers import demo_config
from provider_server import ProviderServer
from remote_world import scripted_responder

from station.apps.cli_commands import StatusLine
from station.apps.doctor import diagnose
from station.apps.endpoints import NewEndpoint, check_spawn
from station.apps.report import status, status_text
from station.apps.world import Station
from station.core.config import ConfigError, ModelConfig, load_config, parse_config
from station.core.engine import Engine
from station.core.store import Store, canonical_dump
from station.models import ModelError, create_model
from station.models.fallback import Chain, chain_for, endpoint_configs

KEY_ENV = "FALLBACK_TEST_KEY"


def test_the_default_moves_on_when_more_than_70_percent_of_the_last_10_calls_failed():
    now = [0.0]
    chain = Chain(3, probe_every_s=60, clock=lambda: now[0])
    for failed in [False] * 3 + [True] * 7:
        assert not chain.record(0, failed)  # 7 of 10: not more than 70%
    assert chain.record(0, failed=True) and chain.current == 1  # 8 of the last 10
    assert not chain.probe_due()  # the base is tried again only after the period
    now[0] = 59.0
    assert not chain.probe_due()
    assert chain.record(1, failed=True) and chain.current == 2  # backup 1's first call failed
    assert chain.record(2, failed=True) and chain.current == 0  # a loop: back to the base
    assert not chain.record(2, failed=True)  # a call sent before the move is old news
    chain.record(0, failed=True)
    now[0] = 200.0
    assert chain.probe_due() and not chain.probe_due()  # one caller probes at a time
    assert not chain.probed(answered=False) and chain.current == 1
    assert not chain.probe_due()  # a failed probe waits out another period
    now[0] = 261.0
    assert chain.probe_due() and chain.probed(answered=True) and chain.current == 0


@pytest.fixture
def servers(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "backup-key")
    with ProviderServer(scripted_responder()) as base, ProviderServer(scripted_responder()) as backup:
        yield base, backup


def config(base: ProviderServer, backup: ProviderServer) -> dict:
    model = {
        "provider": "openai",
        "name": "gpt-fallback-test",
        "api": "chat",
        "base_url": base.openai_url,
        "max_retries": 0,
        "timeout_s": 20,
        "backups": [{"base_url": backup.openai_url, "api_key_env": KEY_ENV}],
    }
    return demo_config(agents=[{"count": 3, "kind": "guest", "model": model}])


def posts(server: ProviderServer) -> int:
    return sum(r.method == "POST" for r in list(server.requests))


def test_an_outage_moves_the_calls_to_the_backup_and_the_probe_brings_them_back(servers, tmp_path):
    base, backup = servers
    cfg = parse_config(config(base, backup))
    now = [0.0]  # the clock of the probe's period (30 minutes): moved by the test, never slept
    chain_for(endpoint_configs(cfg.agents[0].model), cfg.agents[0].model.backup_probe_s).clock = lambda: now[0]
    station = Station.create(tmp_path / "st", cfg)
    shown = io.StringIO()
    engine = Engine(station, on_progress=StatusLine(station, stream=shown))
    try:
        assert engine.run(until_tick=2) == "finished tick 2"
        assert posts(backup) == 0 and posts(base) > 0
        assert status(station, running=False)["endpoints"] == []

        base.fail_next(*["server_error"] * 1000)  # the base is down (500 to every request)
        assert engine.run(until_tick=6) == "finished tick 6"  # every failed call was answered by the backup
        data = status(station, running=False)
        [moved] = data["endpoints"]
        assert (moved["model"], moved["endpoint"], moved["base_url"]) == ("gpt-fallback-test", 1, backup.openai_url)
        assert 3 <= moved["tick"] <= 6 and moved["reason"].startswith("the base failed (more than 70%")
        text = status_text(data)
        assert f"endpoint of openai gpt-fallback-test: backup 1 ({backup.openai_url}) since tick {moved['tick']}" in text
        assert "gpt-fallback-test on backup 1" in shown.getvalue().splitlines()[-1]  # the live line's tick 6
        on_base, on_backup = posts(base), posts(backup)
        assert engine.run(until_tick=7) == "finished tick 7"
        assert posts(base) == on_base and posts(backup) > on_backup  # the base is not tried before the probe is due

        base.reset()  # the base answers again, and the probe is due: the calls come back
        base.responder = scripted_responder()
        now[0] += cfg.agents[0].model.backup_probe_s
        on_backup = posts(backup)
        assert engine.run(until_tick=8) == "finished tick 8"
        assert posts(backup) == on_backup and posts(base) > 3  # the probe and the agents' calls
        [back] = status(station, running=False)["endpoints"]
        assert (back["endpoint"], back["tick"], back["switches"]) == (0, 8, 2)
        assert back["reason"] == "the base answered a probe call"
        assert "on backup" not in shown.getvalue().splitlines()[-1]
    finally:
        station.close()

    # A replay asks no endpoint: it rebuilds the same world and records no switch.
    replayed, source = Station.create(tmp_path / "replayed", cfg), Store(tmp_path / "st")
    try:
        assert Engine(replayed, replay_source=source).run(until_tick=8) == "finished tick 8"
    finally:
        replayed.close()
        source.close()
    a, b = Store(tmp_path / "st"), Store(tmp_path / "replayed")
    try:
        assert canonical_dump(a) == canonical_dump(b)
        assert a.scalar("SELECT COUNT(*) FROM endpoint_switches") == 2
        assert not b.one("SELECT 1 FROM sqlite_master WHERE name='endpoint_switches'")
    finally:
        a.close()
        b.close()


def test_doctor_checks_the_base_and_every_backup(servers, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    base, backup = servers
    cfg = config(base, backup)
    cfg["agents"][0]["model"]["backups"].append({"base_url": "http://127.0.0.1:9/v1"})  # nothing listens there
    findings = diagnose(parse_config(cfg), call=False)
    remote = [f for f in findings if f.model.remote]
    assert [(f.uses, f.model.base_url, f.ok) for f in remote] == [
        ("agents[0]", base.openai_url, True),
        ("agents[0] (backup 1)", backup.openai_url, True),
        ("agents[0] (backup 2)", "http://127.0.0.1:9/v1", False),
    ]
    assert remote[1].key == f"{KEY_ENV} set"
    assert {r.headers.get("authorization") for r in backup.requests} == {"Bearer backup-key"}  # its own key


@pytest.mark.parametrize(
    ("backups", "problem"),
    [
        ([{"base_url": "http://b.example/v1", "api_key": "sk-secret"}],
         "agents.0.model.backups.0: api_key: keys never go in the config"),
        ([{"base_url": "b.example/v1"}],
         "agents.0.model.backups.0.base_url: a backup's base_url is an http:// or https:// address"),
        ([{"base_url": "http://a.example/v1"}],
         "agents.0.model: backups: each endpoint (base_url and api_key_env) must differ"),
    ],
)
def test_a_key_in_the_config_or_a_bad_backup_is_refused_in_one_line(tmp_path, backups, problem):
    path = tmp_path / "station.yaml"
    model = {"provider": "openai", "name": "m", "base_url": "http://a.example/v1", "backups": backups}
    path.write_text(yaml.safe_dump({"agents": [{"model": model}]}))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    lines = str(refused.value).splitlines()
    assert lines[0] == f"invalid station config ({path}):" and len(lines) == 2
    assert lines[1].strip().startswith(problem)
    assert "sk-secret" not in str(refused.value)


def test_a_backup_that_would_send_a_key_to_a_new_server_needs_the_operators_flag():
    cfg = parse_config(
        {"agents": [{"model": {"provider": "openai", "name": "m", "base_url": "http://a.example/v1"}}]}
    )
    model = {"provider": "openai", "name": "m", "base_url": "http://a.example/v1",
             "backups": [{"base_url": "http://b.example/v1", "api_key_env": "OTHER_KEY"}]}
    with pytest.raises(NewEndpoint, match="send OTHER_KEY to http://b.example/v1 which"):
        check_spawn(cfg, {"model": model})
    assert check_spawn(cfg, {"model": model}, allow=True) == [
        "allowed by --allow-new-endpoint: this model sends OTHER_KEY to http://b.example/v1"]


def test_a_backup_whose_key_is_not_set_is_named_at_the_first_call(monkeypatch):
    monkeypatch.delenv("MISSING_BACKUP_KEY", raising=False)
    cfg = ModelConfig(provider="openai", name="m", base_url="http://127.0.0.1:9/v1",
                      backups=[{"api_key_env": "MISSING_BACKUP_KEY"}])
    with pytest.raises(ModelError, match=r"^backup 1 \(the provider default\): no API key for openai model m: "
                                         "set MISSING_BACKUP_KEY"):
        create_model(cfg)
