"""A station's history never depends on its task folders (issue 52, item 4). With a task folder moved
away, or broken, while the station is stopped, every read command still opens the station and shows
its history from what the station recorded; only `run` needs the folder, and it refuses in one line
naming the folder it looked for.

The station (two tasks: a copy of examples/tasks/line_fit, and circle packing) is the one
test_evaluations_command builds once per test run.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import copy_station
from helpers import web_client
from test_evaluations_command import cli, refused, two_task_station

from station.apps.web.app import create_app
from station.apps.web.export import export


@pytest.fixture(scope="module")
def station(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_task_station(tmp_path_factory)


@pytest.fixture
def folder(station: Path) -> Path:
    return station.parent / "tasks" / "line_fit"


@contextmanager
def moved_away(folder: Path) -> Iterator[None]:
    away = folder.with_name(folder.name + ".moved")
    folder.rename(away)
    try:
        yield
    finally:
        away.rename(folder)


@contextmanager
def broken(file: Path, text: str) -> Iterator[None]:
    kept = file.read_bytes()
    file.write_text(text, encoding="utf-8")
    try:
        yield
    finally:
        file.write_bytes(kept)


def recorded(station: Path) -> dict:
    db = sqlite3.connect(station / "station.db")
    db.row_factory = sqlite3.Row
    try:
        return {
            "baseline": db.execute("SELECT score, title FROM evaluations WHERE task='1' AND author='System'").fetchone(),
            "evaluations": [r[0] for r in db.execute("SELECT id FROM evaluations ORDER BY tick, id")],
            "of_task_1": db.execute("SELECT COUNT(*) FROM evaluations WHERE task='1'").fetchone()[0],
            "agent": db.execute("SELECT name FROM agents WHERE state='active' ORDER BY position").fetchone()[0],
            "paper": db.execute("SELECT number, title FROM capsules WHERE room='archive' ORDER BY number").fetchone(),
            "tick": db.execute("SELECT value FROM meta WHERE key='tick'").fetchone()[0],
        }
    finally:
        db.close()


def test_every_reader_shows_the_history_when_the_task_folder_is_gone(
    station: Path, folder: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    was = recorded(station)
    baseline = was["baseline"]
    assert baseline["score"] < 0 and was["paper"] is not None  # the history the readers must show
    with moved_away(folder):
        status = json.loads(cli(capsys, "status", str(station), "--json"))
        assert status["counts"]["research_best"]["1"]["score"] == baseline["score"]
        assert f"best on task 1: {baseline['score']:.4f}" in cli(capsys, "status", str(station))
        assert was["agent"] in cli(capsys, "agents", str(station))
        assert was["paper"]["title"][:20] in cli(capsys, "papers", str(station))
        assert was["paper"]["title"][:20] in cli(capsys, "paper", str(station), str(was["paper"]["number"]))
        assert "tick" in cli(capsys, "dialogue", str(station), was["agent"], "--limit", "1")
        listed = json.loads(cli(capsys, "evaluations", str(station), "--json"))
        assert [e["id"] for e in listed["evaluations"]] == was["evaluations"]
        assert listed["tasks"]["1"] == {"title": "Fit a line", "score": "minus the mean squared error", "precision": 4}
        # the web viewer (`station serve`) and its static export
        client = web_client(create_app(station))
        overview = client.get("/")
        assert overview.status_code == 200 and "Best on task 1" in overview.text
        assert baseline["title"] in client.get("/research").text
        assert export(station, tmp_path / "site", limit=3) == 3
        # only running needs the folder: one line naming the folder it looked for, and nothing changes
        line = refused(capsys, "run", "--dir", str(station), "--ticks", "1")
        assert line.startswith(f"station: task 1's folder {folder} is gone (moved or deleted): put it back"), line
        assert recorded(station)["tick"] == was["tick"]


@pytest.mark.parametrize(
    "name, text, why",
    [
        ("task.yaml", "title: [Fit a line\n", "is not valid YAML"),
        ("evaluate.py", "def evaluate(result, task_dir:\n    return 1.0\n", "SyntaxError"),
    ],
    ids=["settings not YAML", "scorer not Python"],
)
def test_readers_open_a_station_whose_task_folder_broke_and_run_says_what_broke(
    station: Path, folder: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, why: str
) -> None:
    was = recorded(station)
    with broken(folder / name, text):
        assert f"best on task 1: {was['baseline']['score']:.4f}" in cli(capsys, "status", str(station))
        listed = json.loads(cli(capsys, "evaluations", str(station), "--json", "--task", "1"))
        assert listed["tasks"]["1"]["title"] == "Fit a line" and listed["total"] == was["of_task_1"]
        assert web_client(create_app(station)).get("/").status_code == 200
        line = refused(capsys, "run", "--dir", str(station), "--ticks", "1")
        assert str(folder) in line and why in line, line
    assert recorded(station)["tick"] == was["tick"]


def test_a_station_from_before_task_records_opens_naming_a_lost_task_from_its_config(
    station: Path, folder: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old = copy_station(station, tmp_path / "old")
    db = sqlite3.connect(old / "station.db")  # as a station made before the station recorded its tasks
    with db:
        db.execute("DELETE FROM meta WHERE key='research_tasks'")
    db.close()
    listed = json.loads(cli(capsys, "evaluations", str(old), "--json"))
    assert listed["tasks"]["1"]["title"] == "Fit a line"  # read from the folder, which is there
    with moved_away(folder):
        listed = json.loads(cli(capsys, "evaluations", str(old), "--json"))
        assert listed["tasks"]["1"]["title"] == f"the task in {folder}"
        assert listed["tasks"]["2"]["title"] == "Circle Packing in a Unit Square (n = 5)"
        assert [e["id"] for e in listed["evaluations"]] == recorded(station)["evaluations"]
        assert "best on task 1" in cli(capsys, "status", str(old))
