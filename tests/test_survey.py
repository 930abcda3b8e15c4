"""The Archive Surveyor (issue 55): `survey` in the Archive, the surveyor's session, the mailed report.

One small station, run once for the module: three agents on replay models (two mature, one not)
publish two papers and one circle-packing evaluation, then Spiro I asks for a survey; the offline
`scripted-surveyor` writes it through real sandboxed tool runs. A second, tinier station (no
research, no tool runs) has a toy surveyor that first cites a paper that does not exist.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import act, make_old, make_station, recursive, replay_model, reply, yaml_block

from rooms.archive import views
from rooms.archive.survey_session import CITATION
from station.apps import report
from station.apps.world import Station
from station.core.engine import Engine, StationPaused
from station.core.model_api import SCRIPTED_POLICIES, Message, Reply, Usage
from station.core.store import Store, canonical_dump
from station.models.scripted_surveyor import ScriptedSurveyor
from station.workers.sandbox_tools import SandboxTools
from station.workers.views import recorded_session

QUESTION = "What do the papers report about step sizes and restarts, and which evaluations back them?"
CODE = "def construct_packing():\n    return [[0.25, 0.5], [0.75, 0.5]], [0.25, 0.25]\n"
SURVEY = {"enabled": True, "wait_ticks": 1, "min_words": 150, "max_words": 2000}


def paper(title: str, body: str) -> str:
    fields = {"title": title, "abstract": f"{title}: what we measured.", "tags": "search", "content": body}
    return yaml_block(yaml.safe_dump(fields, sort_keys=False, width=10_000))


def survey(prompt: str = QUESTION) -> str:
    return reply(act("survey"), yaml_block(yaml.safe_dump({"prompt": prompt}, width=10_000)))


STEP_PAPER = " ".join(
    f"In run {n} an adaptive step of size 0.{n} reached a sum of radii of 0.{n}5 after {n * 10} rounds."
    for n in range(1, 30)
)
RESTART_PAPER = " ".join(
    f"Restart {n} began from a fresh random layout and kept the best of {n + 2} tries, ending at 0.{n}7."
    for n in range(1, 30)
)


def agents(directory: Path) -> list[dict[str, Any]]:
    spiro = [
        reply(act("goto archive"), survey("x" * 4001), survey(" "), act("survey"), survey(),
              act("create"), paper("Adaptive step sizes", STEP_PAPER)),
        reply(survey(), survey("And a second question meanwhile?")),
    ]
    praxis = [
        reply(act("goto research"), act("submit 1"),
              yaml_block("\n".join(f"{k}: {json.dumps(v)}" for k, v in {
                  "title": "Two circles", "tags": "baseline", "abstract": "Two equal circles side by side.",
                  "content": CODE}.items())),
              act("goto archive"), act("create"), paper("Random restarts", RESTART_PAPER)),
    ]
    nova = [reply(act("goto archive"), survey())]
    return [recursive(replay_model(directory / f"{name}.jsonl", lines, name=name, pad=6), lineage=lineage)
            for name, lines, lineage in (("spiro", spiro, "Spiro"), ("praxis", praxis, "Praxis"),
                                         ("nova", nova, "Nova"))]


def surveyed_station(directory: Path, surveyor: dict[str, Any] | None = None) -> Station:
    directory.mkdir(parents=True, exist_ok=True)
    st = make_station(
        directory / "station", agents(directory),
        lifecycle={"maturity_ticks": 5},
        archive={"review": "none", "survey": {**SURVEY, **({"model": surveyor} if surveyor else {})}},
        research={"tasks": [{"evaluator": "circle_packing", "params": {"n": 2}, "baselines": False,
                             "timeout_s": 20}], "wait_ticks": 1, "delivery": "on_time"},
        stagnation={"enabled": False},
    )
    make_old(st, "Spiro I", "Praxis I")
    return st


@pytest.fixture(scope="module")
def station(tmp_path_factory: pytest.TempPathFactory) -> Station:
    st = surveyed_station(tmp_path_factory.mktemp("survey"))
    Engine(st).run(until_tick=2)
    yield st
    st.close()


def lines_of(st: Station, name: str, tick: int) -> list[str]:
    session = json.loads(st.store.one("SELECT data FROM agents WHERE name=?", (name,))["data"])["session"]
    row = st.store.one("SELECT actions FROM turns WHERE tick=? AND session=?", (tick, session))
    return [line for entry in json.loads(row["actions"])["history"] for line in entry["lines"]]


def surveys(st: Station) -> list[dict[str, Any]]:
    return [dict(r) for r in st.store.all("SELECT * FROM surveys ORDER BY id")]


def mails(st: Station) -> list[dict[str, Any]]:
    return [dict(r) for r in st.store.all(
        "SELECT c.number, c.author, c.title, c.recipients, m.content FROM capsules c JOIN capsule_messages m "
        "ON m.capsule=c.id AND m.k=1 WHERE c.room='mail' ORDER BY c.number")]


# -- the request ---------------------------------------------------------------------------------
def test_a_survey_is_refused_while_the_archive_is_empty_and_to_immature_agents(station: Station) -> None:
    tick1 = "\n".join(lines_of(station, "Spiro I", 1))
    assert "Survey not requested: the prompt has 4001 characters; at most 4000 are allowed." in tick1
    assert "Survey not requested: give your question as a YAML `prompt`" in tick1
    assert "it needs a ```yaml block right below the action with: prompt." in tick1
    assert "Survey not requested: the Archive has no published paper yet, so there is nothing to survey." in tick1
    nova = " ".join(lines_of(station, "Nova I", 1))
    assert "opens to agents aged 5 ticks or more" in nova  # the room's gate: an immature agent never gets in
    assert all(row["agent"] != "Nova I" for row in surveys(station))


def test_one_survey_at_a_time(station: Station) -> None:
    tick2 = lines_of(station, "Spiro I", 2)
    assert any(line.startswith("Survey #1 requested.") for line in tick2)
    assert any("Survey not requested: your survey #1 is still being written" in line for line in tick2)
    assert [row["agent"] for row in surveys(station)] == ["Spiro I"]


# -- the report ----------------------------------------------------------------------------------
def test_the_survey_is_written_by_tools_and_mailed_within_its_wait(station: Station) -> None:
    [row] = surveys(station)
    assert (row["status"], row["end_reason"], row["tick"], row["finished_tick"]) == ("delivered", "finished", 2, 2)
    assert json.loads(row["papers"]) == [1, 2] and json.loads(row["evaluations"]) == [1]
    [mail] = mails(station)
    assert mail["author"] == "Archive Surveyor" and json.loads(mail["recipients"]) == ["Spiro I"]
    assert mail["number"] == row["mail"] and mail["content"] == row["report"]
    assert mail["title"].startswith("Survey #1: What do the papers report")
    assert 150 <= len(mail["content"].split()) <= 2000
    notice = station.store.one("SELECT text FROM messages WHERE agent='Spiro I' AND kind='mail'")["text"]
    assert notice.startswith(f"Mail #{mail['number']} from Archive Surveyor") and "Adaptive step" in notice
    # the read model the viewer shows: every turn with its tool calls and results, the report last
    shown = recorded_session(station.store, views.survey_prefix(1), per_page=100)
    names = [call.name for turn in shown.turns for call in turn.calls]
    assert names[0] == "list_files" and names[-1] == "finish" and "read_file" in names and "search" in names
    listing = shown.turns[0].calls[0]
    assert not listing.error and "archive_1.md" in listing.result.text and "archive_2.md" in listing.result.text
    assert shown.turns[-1].calls[-1].final and views.survey(station.store.db, 1)["report"] == mail["content"]
    # every model call was booked as the surveyor's spend
    assert station.store.scalar("SELECT COUNT(*) FROM spend WHERE who='surveyor'") == len(shown.turns) > 3
    # and `station status` counts it
    assert "archive surveys: 1 mailed, 0 open, 0 failed" in report.status_text(report.status(station, running=False))


def test_every_citation_of_the_report_exists(station: Station) -> None:
    report = surveys(station)[0]["report"]
    cited = {(kind.lower()[:4], int(n)) for kind, n in CITATION.findall(report)}
    papers = {r[0] for r in station.store.all("SELECT number FROM capsules WHERE room='archive' AND deleted=0")}
    records = {r[0] for r in station.store.all("SELECT id FROM evaluations WHERE status='finished'")}
    assert {("arch", 1), ("arch", 2), ("eval", 1)} <= cited  # both papers and the one record were read
    assert all(n in (papers if kind == "arch" else records) for kind, n in cited)
    assert "0.25" in report or "0.5" in report or "score" in report.lower()  # it reports what the records hold


# -- replay --------------------------------------------------------------------------------------
def _no_calls(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a replay asked the surveyor's model or ran a tool")


def test_replay_rebuilds_the_survey_without_a_model_call_or_a_tool_run(
    station: Station, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ScriptedSurveyor, "complete", _no_calls)
    monkeypatch.setattr(SandboxTools, "run", _no_calls)
    again = surveyed_station(tmp_path)
    source = Store(station.store.dir)
    try:
        assert Engine(again, replay_source=source).run(until_tick=2) == "finished tick 2"
        a, b = canonical_dump(source), canonical_dump(again.store)
    finally:
        source.close()
        again.close()
    for table in ("surveys", "capsules", "capsule_messages", "messages", "events"):
        assert a[table] == b[table], table
    # the surveyor's inputs, copied when the replay applies the survey (so in another order)
    ours = [sorted(row[1:] for row in d["inputs"][1:] if row[1].startswith("survey")) for d in (a, b)]
    assert ours[0] == ours[1] and len(ours[0]) > 6


# -- a surveyor that cites what does not exist ---------------------------------------------------
@SCRIPTED_POLICIES.register("toy-surveyor")
class CitesTooMuch:
    """Finishes at once citing Archive #999 beside the real paper; corrects it when told."""

    name = "toy-surveyor"

    def __init__(self, name: str = "toy-surveyor") -> None:
        self.name = name

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        return 1

    def complete(self, messages: list[Message], *, system: str | None, agent: str, tools: Any = None) -> Reply:
        told = messages[-1].get("results", [{}])[0].get("text", "") if messages[-1]["role"] == "tool" else ""
        body = " ".join(["Archive #1 reports adaptive steps measured run by run."] * 4)
        stubborn = "Never mind" in messages[0]["text"]  # the question of a survey that never gets right
        extra = "" if "Archive #999" in told and not stubborn else " Archive #999 reports the opposite."
        call = {"id": f"c{len(messages)}", "name": "finish", "arguments": {"report": body + extra}}
        return Reply(text="", usage=Usage(1, 1), tool_calls=[call])


def test_a_report_citing_a_missing_paper_is_sent_back_until_corrected(tmp_path: Path) -> None:
    spiro = [reply(act("goto archive"), act("create"), paper("Adaptive step sizes", STEP_PAPER)), survey(),
             survey("Never mind the records: what else?")]
    st = make_station(tmp_path / "station", [recursive(replay_model(tmp_path / "s.jsonl", spiro, pad=4))],
                      lifecycle={"maturity_ticks": None}, rooms={"disabled": ["research"]},
                      archive={"review": "none", "survey": {**SURVEY, "min_words": 20, "max_turns": 2,
                                                            "model": {"provider": "scripted", "name": "toy-surveyor"}}})
    try:
        Engine(st).run(until_tick=3)
        first, second = recorded_session(st.store, views.survey_prefix(1)).turns
        assert first.calls[0].error and "Archive #999" in first.calls[0].result.text
        assert second.calls[0].final
        [mail] = mails(st)
        assert "#999" not in mail["content"] and "Archive #1" in mail["content"]
        # the slot is free again: a second survey that never cites right ends at its turn limit, unmailed
        done = [(r["id"], r["status"], r["end_reason"], r["mail"]) for r in surveys(st)]
        assert done == [(1, "delivered", "finished", mail["number"]), (2, "failed", "turn_limit", None)]
        told = st.store.all("SELECT text FROM messages WHERE kind='survey'")
        assert [r[0] for r in told] == [
            "Your survey #2 ended without a report (the surveyor used all of its 2 steps without finishing). "
            "Nothing was mailed; you may ask again with `survey` in the Archive Room."]
    finally:
        st.close()


def test_a_surveyor_that_cannot_be_used_pauses_the_station_and_the_survey_waits(tmp_path: Path) -> None:
    # An empty replay file fails every call for good, as a refused key does: the tick that waits for
    # the survey pauses the station with the reason, and nothing of the survey is recorded.
    spiro = [reply(act("goto archive"), act("create"), paper("Adaptive step sizes", STEP_PAPER)), survey()]
    broken = replay_model(tmp_path / "surveyor.jsonl", [], name="surveyor-replay")
    st = make_station(tmp_path / "station", [recursive(replay_model(tmp_path / "s.jsonl", spiro, pad=4))],
                      lifecycle={"maturity_ticks": None}, rooms={"disabled": ["research"]},
                      archive={"review": "none", "survey": {**SURVEY, "model": broken}})
    try:
        with pytest.raises(StationPaused, match="survey.*exhausted"):
            Engine(st).run(until_tick=2)
        assert [(r["id"], r["status"]) for r in surveys(st)] == [(1, "open")]
        assert st.store.scalar("SELECT COUNT(*) FROM inputs WHERE key LIKE 'survey%'") == 0
    finally:
        st.close()


def test_station_doctor_checks_the_surveyors_model_when_surveys_are_on() -> None:
    from helpers import config

    from station.apps.doctor import diagnose
    from station.core.config import parse_config

    model = {"provider": "openai", "name": "surveyor-test-model", "api_key_env": "SURVEY_TEST_KEY_UNSET"}
    on = parse_config(config([], archive={"survey": {"enabled": True, "model": model}}))
    [found] = [f for f in diagnose(on, call=False) if f.uses == "archive surveyor"]
    assert found.model.name == "surveyor-test-model" and not found.ok and "MISSING" in found.key
    off = parse_config(config([], archive={"survey": {"model": model}}))
    assert "archive surveyor" not in [f.uses for f in diagnose(off, call=False)]
