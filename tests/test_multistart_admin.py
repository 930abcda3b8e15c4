"""`station multistart --choose admin`: interviews of each branch's agents through their own models, the
administrator model's choice with its two reports, its guidance reaching the installed station's
agents, junk replies refused with a clear error, and interviews never asked twice after a kill.

One small multistart (2 branches x 2 ticks) is shared: its administrator is a recorded (replay) model
whose file first holds two unusable replies (the command stops), then a good one (run again: chosen)."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from station.apps.cli import main
from station.apps.cli_commands import CliError
from station.apps.multistart import LEDGER, Branch
from station.apps.multistart_admin import (
    UnusableReply,
    administrator_model,
    administrator_request,
    ask_administrator,
    parse_reply,
)
from station.core.config import ModelConfig, MultistartConfig, load_config
from station.models import create_model

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo.yaml"
GOOD = "**Chosen branch:** 2\n## Selection report\nBranch 2 reads best.\n## Guidance report\nKeep going, branch 2."
MARK = "An answer recorded before the multistart was killed."


def replies(path: Path, *texts: str) -> None:
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))


def rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(query).fetchall()


def world(branch: Path) -> tuple[list[tuple], list[tuple]]:
    db = branch / "station.db"
    return rows(db, "SELECT seq, key, payload FROM inputs ORDER BY seq"), rows(db, "SELECT * FROM turns")


@pytest.fixture(scope="module")
def admin_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("admin")
    recorded = base / "administrator.jsonl"
    config = yaml.safe_load(DEMO.read_text())
    model = {"provider": "replay", "name": "recorded-administrator", "replay_file": str(recorded)}
    config["multistart"] = {"administrator": {"model": model, "interviews_per_branch": 2}}
    config_file = base / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    out = base / "ms"
    command = ["multistart", str(config_file), "--branches", "2", "--ticks", "2", "--parallel", "2", "--out", str(out)]
    command += ["--choose", "admin"]
    seen: dict[str, Any] = {"out": out}

    replies(
        recorded,
        "I would keep branch seven, I think.",
        "Chosen branch: 9\n## Selection report\nx\n## Guidance report\ny",
    )
    with contextlib.redirect_stderr(io.StringIO()) as err:
        seen["junk_code"] = main(command)
    seen["junk_err"] = err.getvalue()
    seen["junk_ledger"] = json.loads((out / LEDGER).read_text())
    seen["junk_installed"] = (out / "station").exists()
    seen["record"] = json.loads((out / "administrator.json").read_text())
    seen["interviews"] = {n: json.loads((out / "branches" / f"{n}.interviews.json").read_text()) for n in (1, 2)}
    seen["worlds"] = {n: world(out / "branches" / str(n)) for n in (1, 2)}

    # As if killed during the interviews: branch 1 had one answer recorded, branch 2 none yet.
    first = {**seen["interviews"][1]["answers"][0], "answer": MARK}
    (out / "branches" / "1.interviews.json").write_text(json.dumps({"branch": 1, "answers": [first]}))
    (out / "branches" / "2.interviews.json").unlink()
    replies(recorded, GOOD)
    seen["code"] = main(command)
    seen["after"] = {n: json.loads((out / "branches" / f"{n}.interviews.json").read_text()) for n in (1, 2)}
    seen["worlds_after"] = {n: world(out / "branches" / str(n)) for n in (1, 2)}
    return seen


def test_a_junk_reply_is_refused_once_retried_then_stops_with_one_line(admin_run: dict[str, Any]) -> None:
    out, record = admin_run["out"], admin_run["record"]
    assert admin_run["junk_code"] == 2
    err = admin_run["junk_err"]
    assert err.count("\n") == 1 and f"the last is in {out / 'administrator-reply-2.txt'};" in err
    assert [a["error"] for a in record["attempts"]] == [
        "no line 'Chosen branch: <number>'",
        "it names branch 9, which does not exist (the branches: 1, 2)",
    ]
    assert (out / "administrator-reply-1.txt").read_text() == "I would keep branch seven, I think."
    assert admin_run["junk_ledger"]["choice"] is None and not admin_run["junk_installed"]
    assert {b["state"] for b in admin_run["junk_ledger"]["branch"].values()} == {"done"}  # nothing lost


def test_the_recorded_administrator_chooses_and_its_reports_are_kept(admin_run: dict[str, Any]) -> None:
    out = admin_run["out"]
    assert admin_run["code"] == 0
    choice = json.loads((out / LEDGER).read_text())["choice"]
    assert (choice["rule"], choice["branch"]) == ("admin", 2)
    assert (out / "selection.md").read_text() == "Branch 2 reads best.\n" == choice["selection"] + "\n"
    assert (out / "guidance.md").read_text() == "Keep going, branch 2.\n" == choice["guidance"] + "\n"
    assert [a["reply"] for a in json.loads((out / "administrator.json").read_text())["attempts"]] == [
        "administrator-reply-1.txt",
        "administrator-reply-2.txt",
        "administrator-reply-3.txt",
    ]
    assert rows(out / "station" / "station.db", "SELECT * FROM inputs") == rows(
        out / "branches" / "2" / "station.db", "SELECT * FROM inputs"
    )


def test_interviews_are_asked_once_each_and_change_no_branch(admin_run: dict[str, Any]) -> None:
    out, before, after = admin_run["out"], admin_run["interviews"], admin_run["after"]
    for n in (1, 2):
        assert admin_run["worlds_after"][n] == admin_run["worlds"][n]  # no input, no turn of a branch
        assert len(after[n]["answers"]) == 2 and all(a["error"] is None for a in after[n]["answers"])
        assert [a["agent"] for a in after[n]["answers"]] == [a["agent"] for a in before[n]["answers"]]
    assert after[1]["answers"][0]["answer"] == MARK  # recorded before the "kill": not asked again
    assert after[1]["answers"][1] == before[1]["answers"][1]  # the scripted agents answer alike
    request = (out / "administrator-request.md").read_text()
    assert MARK in request and "### Branch 2" in request
    # each answer came from the agent's own (scripted) model, reading its own notes
    assert all(a["answer"].splitlines()[-1].startswith("Best score: ") for a in after[2]["answers"])


def test_the_guidance_reaches_every_agent_of_the_installed_station(
    admin_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    station = admin_run["out"] / "station"
    assert main(["run", "--dir", str(station), "--until-tick", "3"]) == 0
    db = station / "station.db"
    operator = rows(db, "SELECT payload FROM inputs WHERE kind='operator'")
    assert len(operator) == 1 and "Keep going, branch 2." in operator[0][0]
    told = rows(db, "SELECT DISTINCT session FROM conversation WHERE text LIKE '%Keep going, branch 2.%'")
    kept = rows(admin_run["out"] / "branches" / "2" / "station.db", "SELECT session FROM agents WHERE state='active'")
    assert kept and set(kept) <= set(told)  # every agent of the kept branch was told
    assert rows(admin_run["out"] / "branches" / "2" / "station.db", "SELECT * FROM operator_queue") == []


def test_the_scripted_administrator_keeps_the_branch_reporting_the_best(
    admin_run: dict[str, Any], tmp_path: Path
) -> None:
    out = admin_run["out"]
    branches = [Branch(n, 2, None, 0, 0.0, out / "branches" / str(n)) for n in (1, 2, 3)]
    said = admin_run["after"][2]["answers"][0]
    interviews = {
        1: [{**said, "answer": "I tried a few things.\nBest score: 0.5"}],
        2: [said, {**said, "answer": "Best score: 0.9"}],
        3: [{**said, "answer": "Best score: 0.9"}],
    }
    config = load_config(DEMO)  # no administrator set: the reviewer's model, scripted here
    assert administrator_model(config).name == "scripted-administrator"
    record = ask_administrator(tmp_path, branches, interviews, config, {"attempts": []})
    assert record["branch"] == 2  # 0.9 twice: the lower branch
    assert "0.9" in (tmp_path / "selection.md").read_text() and (tmp_path / "guidance.md").read_text().strip()
    reply = create_model(administrator_model(config)).complete(
        [{"role": "user", "text": administrator_request(branches[:1], {1: interviews[1]})}], system=None, agent="a"
    )
    assert parse_reply(reply.text, [1])[0] == 1


@pytest.mark.parametrize(
    "reply, error",
    [
        ("", "no line 'Chosen branch: <number>'"),
        ("Chosen branch: two\n## Selection report\na\n## Guidance report\nb", "no line"),
        ("Chosen branch: 0\n## Selection report\na\n## Guidance report\nb", "branch 0, which does not exist"),
        ("Chosen branch: 1\n## Guidance report\nb\n## Selection report\na", "lacks a '## Selection report' followed"),
        ("Chosen branch: 1\n## Selection report\n\n## Guidance report\nb", "one of its reports is empty"),
        ("Chosen branch: 1\n" + "x" * 50_000, "it is 50,017 characters long; at most 40,000"),
    ],
)
def test_unusable_replies_say_what_is_wrong(reply: str, error: str) -> None:
    with pytest.raises(UnusableReply, match=error.replace("(", r"\(")):
        parse_reply(reply, [1, 2])


def test_an_administrator_that_cannot_be_asked_is_one_line(tmp_path: Path) -> None:
    config = load_config(DEMO)
    missing = ModelConfig(provider="replay", name="gone", replay_file=str(tmp_path / "none.jsonl"))
    config.section(MultistartConfig).administrator.model = missing
    branches = [Branch(1, 2, None, 0, 0.0, tmp_path)]
    with pytest.raises(CliError, match=r"multistart.administrator.model \(replay gone\) could not be asked: replay"):
        ask_administrator(tmp_path, branches, {1: []}, config, {"attempts": []})


def test_station_doctor_checks_a_configured_administrator(tmp_path: Path) -> None:
    from station.apps.doctor import diagnose

    config = load_config(DEMO)
    assert "multistart administrator" not in [f.uses for f in diagnose(config, call=False)]  # unset: the reviewer's
    replay = ModelConfig(provider="replay", name="recorded-administrator", replay_file=str(tmp_path / "r.jsonl"))
    config.section(MultistartConfig).administrator.model = replay
    assert [f.model.name for f in diagnose(config, call=False) if f.uses == "multistart administrator"] == [
        "recorded-administrator"
    ]
