"""Config loading: defaults, shipped configs, and loud errors that name the key path."""
from __future__ import annotations

from pathlib import Path

import pytest

from station.core.config import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["demo.yaml", "social_demo.yaml", "open_station.yaml", "circle_packing_n26.yaml",
                                  "circle_packing_n32.yaml", "folder_task.yaml", "openevolve_task.yaml"])
def test_shipped_configs_load(name: str) -> None:
    cfg = load_config(ROOT / "configs" / name)
    assert cfg.agents and sum(a.count for a in cfg.agents) == 5


@pytest.mark.parametrize("name, title", [("folder_task.yaml", "Fit a line"),
                                         ("openevolve_task.yaml", "openevolve function minimization")])
def test_the_folder_task_configs_build_their_task_from_any_working_dir(monkeypatch, tmp_path, name, title) -> None:
    from rooms.research.tasks import load_tasks

    monkeypatch.chdir(tmp_path)
    tasks = load_tasks(load_config(ROOT / "configs" / name).research)
    assert tasks["1"].title == title and tasks["1"].folder.path.is_relative_to(ROOT / "examples" / "tasks")


def test_relative_paths_in_a_config_resolve_beside_it_whatever_the_working_dir(monkeypatch, tmp_path) -> None:
    """A replay file, a codex set and a task folder named relative to the config file are found by
    `station init` run from another directory, and by the station run from a third."""
    import json
    import shutil

    import yaml

    from station.apps import cli
    from station.apps.world import Station
    from station.core.engine import Engine
    from station.core.store import Store

    project = (tmp_path / "project").resolve()
    (project / "replies").mkdir(parents=True)
    replies = ["Hello from the replay file.", "Still here."]
    (project / "replies" / "agent.jsonl").write_text("".join(json.dumps({"text": r}) + "\n" for r in replies))
    shutil.copytree(ROOT / "codex" / "sets" / "research", project / "my_codex")
    shutil.copytree(ROOT / "examples" / "tasks" / "line_fit", project / "tasks" / "fit")
    settings = {"name": "paths", "seed": 1, "engine": {"backup_every_ticks": 0},
                "notifications": {"tips_every_ticks": 0}, "codex": {"set": "./my_codex"},
                "agents": [{"count": 1, "model": {"provider": "replay", "name": "replay-paths",
                                                  "replay_file": "replies/agent.jsonl"}}],
                "research": {"tasks": [{"folder": "tasks/fit", "baselines": False}]}}
    (project / "station.yaml").write_text(yaml.safe_dump(settings))
    for folder in ("elsewhere", "third"):
        (tmp_path / folder).mkdir()

    monkeypatch.chdir(tmp_path / "elsewhere")
    config = load_config("../project/station.yaml")
    assert config.agents[0].model.replay_file == str(project / "replies" / "agent.jsonl")
    assert config.codex.set == str(project / "my_codex")
    assert config.research.tasks[0].folder == str(project / "tasks" / "fit")
    assert cli.main(["init", "../project/station.yaml", "--dir", "st"]) == 0
    # an agent spec in a file reads its replay file beside itself too: the one the config replays, so
    # no --allow-new-endpoint is needed
    (project / "spare.yaml").write_text(yaml.safe_dump({"model": settings["agents"][0]["model"]}))
    assert cli.main(["spawn", "st", "../project/spare.yaml"]) == 0
    store = Store(tmp_path / "elsewhere" / "st")
    try:
        (command,) = [json.loads(r["command"]) for r in store.all("SELECT command FROM operator_queue")]
    finally:
        store.close()
    assert command["agent"]["model"]["replay_file"] == str(project / "replies" / "agent.jsonl")

    monkeypatch.chdir(tmp_path / "third")  # neither the config's folder nor where the station was made
    station = Station.open(tmp_path / "elsewhere" / "st")
    try:
        Engine(station).run(ticks=1)
        # both agents, the config's and the spawned one, read the file: each replies its first line
        assert [r["reply"] for r in station.store.all("SELECT reply FROM turns ORDER BY id")] == [replies[0]] * 2
    finally:
        station.close()


def test_defaults_follow_the_reference() -> None:
    cfg = parse_config({})
    assert cfg.lifecycle.max_age == 300
    assert cfg.lifecycle.maturity_ticks == 50
    assert cfg.tokens.guest_ceiling == 100_000
    assert cfg.tokens.prune_cooldown_ticks == 5
    assert cfg.lineage.selection == "evolution"
    assert cfg.engine.max_internal_steps == 50


@pytest.mark.parametrize("data, path, words", [
    ({"lifecycle": {"max_age": -3}}, "lifecycle.max_age", "greater than 0"),
    ({"lifecycle": {"max_agee": 3}}, "lifecycle.max_agee", "unknown key"),
    ({"agents": [{"count": 2, "model": {"provider": "nope"}}]}, "agents.0.model.provider", "scripted"),
    ({"agents": [{"kind": "recursive"}]}, "agents.0", "lineage"),
    ({"tokens": {"guest_warning_ratio": 1.5}}, "tokens.guest_warning_ratio", "less than or equal"),
    ({"rooms": {"disabled": ["exit"]}}, "rooms.disabled", "cannot be disabled"),
    ({"seed": "abc"}, "seed", "integer"),
])
def test_bad_values_name_the_key_path(data: dict, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    text = str(err.value)
    assert f"  {path}:" in text and words in text


def test_duplicate_keys_and_bad_yaml_are_refused(tmp_path: Path) -> None:
    dup = tmp_path / "dup.yaml"
    dup.write_text("seed: 1\nseed: 2\n")
    with pytest.raises(ConfigError, match="duplicate key 'seed'"):
        load_config(dup)
    bad = tmp_path / "bad.yaml"
    bad.write_text("lifecycle: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(top)


def test_unknown_codex_set_and_text_override_fail_before_creating(tmp_path: Path) -> None:
    from station.apps.world import Station
    from station.core.texts import TextsError
    with pytest.raises(TextsError, match="codex set 'nope' not found"):
        Station.create(tmp_path / "a", parse_config({"codex": {"set": "nope"}}))
    with pytest.raises(TextsError, match="unknown text names"):
        Station.create(tmp_path / "b", parse_config({"codex": {"texts": {"not_a_text": "x"}}}))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_key_pasted_where_its_variables_name_belongs_is_not_printed() -> None:
    secret = "sk-proj-abc123secret"
    for model in ({"api_key_env": secret}, {"backups": [{"base_url": "https://b.example", "api_key_env": secret}]}):
        spec = {"agents": [{"count": 1, "model": {"provider": "openai", "name": "m", **model}}]}
        with pytest.raises(ConfigError) as err:
            parse_config(spec, "t")
        assert "api_key_env" in str(err.value) and secret not in str(err.value)
