"""`station evaluations DIR`: a station's research evaluations listed as the other reader commands list
things (issue 52, item 5): by submission or best first, one task's with --task, a page at a time,
as JSON for scripts, and a one-line error for a bad option. Compared with the station's database.

The station (two tasks: a copy of examples/tasks/line_fit, whose score is minus a mean squared error,
and circle packing, which the scripted agents submit to) is built once per test run and shared with
test_readers_without_task, which moves and breaks its task folder: reading never needs it.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import ROOT, shared_world

from station.apps.cli import main
from station.apps.world import Station
from station.core.config import load_config

CONFIG = """\
name: history-without-folders
seed: 3
agents:
  - count: 3
    kind: guest
    model: {provider: scripted, name: scripted-newcomer}
lifecycle: {max_age: 20, life_warning_ticks: 4, maturity_ticks: 4, min_tests_for_ascension: 1}
grading:
  model: {provider: scripted, name: scripted-grader}
research:
  tasks:
    - folder: tasks/line_fit     # only its System baseline
    - evaluator: circle_packing  # the scripted agents' own play: their submissions
      params: {n: 5}
  executor: {kind: local, max_parallel: 2}
  delivery: on_time              # the same history on a fast machine and a slow one
  wait_ticks: 1
"""


def build_two_task_station(directory: Path) -> None:
    """`station run` for 12 ticks, the task folder and the config beside the station directory."""
    base = directory.parent
    shutil.copytree(ROOT / "examples" / "tasks" / "line_fit", base / "tasks" / "line_fit")
    (base / "station.yaml").write_text(CONFIG, encoding="utf-8")
    assert main(["run", str(base / "station.yaml"), "--dir", str(directory), "--ticks", "12"]) == 0


def two_task_station(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_world(tmp_path_factory, "two-task-history", build_two_task_station)


@pytest.fixture(scope="module")
def station(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_task_station(tmp_path_factory)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """What a `station` command prints; it must succeed."""
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line a `station` command refuses with."""
    code = main(list(args))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err, err
    return err


def stored(station: Path, where: str = "1") -> list[sqlite3.Row]:
    db = sqlite3.connect(station / "station.db")
    db.row_factory = sqlite3.Row
    try:
        return db.execute(f"SELECT * FROM evaluations WHERE {where} ORDER BY tick, id").fetchall()
    finally:
        db.close()


def listed(capsys: pytest.CaptureFixture[str], station: Path, *args: str) -> dict:
    return json.loads(cli(capsys, "evaluations", str(station), "--json", *args))


def test_by_tick_every_evaluation_in_the_order_it_was_submitted_scored_as_the_board_shows_it(
    station: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = stored(station)
    assert {r["task"] for r in rows} == {"1", "2"} and "queued" not in {r["status"] for r in rows}  # on_time
    data = listed(capsys, station)
    assert data["total"] == len(rows) and data["sort"] == "tick"
    for shown, row in zip(data["evaluations"], rows, strict=True):
        assert (shown["id"], shown["task"], shown["tick"], shown["author"]["name"], shown["title"]) == (
            row["id"], row["task"], row["tick"], row["author"], row["title"])
        assert shown["status"] == {"finished": "scored"}.get(row["status"], row["status"])
        assert shown["score"] == row["score"] and shown["reported_metrics"] == json.loads(row["metrics"] or "{}")
    assert data["tasks"]["2"] == {"title": "Circle Packing in a Unit Square (n = 5)", "score": "", "precision": 7}
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: no cell wraps
    table = cli(capsys, "evaluations", str(station))
    assert "task 1: Fit a line · scores are minus the mean squared error, higher is better" in table
    assert "task 2: Circle Packing in a Unit Square (n = 5) · higher scores are better" in table
    assert f"{rows[0]['score']:.4f}" in table and f"{rows[-1]['score']:.7f}" in table  # each task's precision
    assert "mean squared error 36.8031" in table  # its evaluator's number, shown as reported (not the score)


def best_first(rows: list[sqlite3.Row]) -> list[int]:
    """The leaderboard's order (no task here gives sort keys): scored first, higher first, then the earlier."""
    scored = lambda r: r["status"] == "finished" and r["score"] is not None
    return [r["id"] for r in sorted(rows, key=lambda r: (not scored(r), -(r["score"] or 0), r["tick"], r["id"]))]


def test_by_score_each_task_best_first(station: Path, capsys: pytest.CaptureFixture[str]) -> None:
    circles = stored(station, "task = '2'")
    assert len({r["score"] for r in circles}) > 2 and best_first(circles) != [r["id"] for r in circles]
    ranked = listed(capsys, station, "--sort", "score", "--task", "2")
    assert [e["id"] for e in ranked["evaluations"]] == best_first(circles) and set(ranked["tasks"]) == {"2"}
    every_task = listed(capsys, station, "--sort", "score")
    expected = best_first(stored(station, "task = '1'")) + best_first(circles)
    assert [e["id"] for e in every_task["evaluations"]] == expected
    assert "Evaluations, each task's best first" in cli(capsys, "evaluations", str(station), "--sort", "score")


def test_limit_and_offset_show_one_page_and_say_where_the_others_are(
    station: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    every = [e["id"] for e in listed(capsys, station)["evaluations"]]
    page = listed(capsys, station, "--limit", "2", "--offset", "1")
    assert [e["id"] for e in page["evaluations"]] == every[1:3] and page["total"] == len(every)
    table = cli(capsys, "evaluations", str(station), "--limit", "2", "--offset", "1")
    assert f"evaluations 2-3 of {len(every)}; next: --offset 3; previous: --offset 0" in table
    past = cli(capsys, "evaluations", str(station), "--offset", "100")
    assert f"no evaluations from --offset 100: there are {len(every)}" in past


@pytest.mark.parametrize(
    "args, error",
    [
        (("--task", "3"), "no task '3' in this station; its tasks: 1, 2"),
        (("--task", "circle"), "no task 'circle' in this station; its tasks: 1, 2"),
        (("--limit", "-1"), "--limit must be at least 1 and --offset at least 0"),
        (("--limit", "0"), "--limit must be at least 1 and --offset at least 0"),
        (("--offset", "-2"), "--limit must be at least 1 and --offset at least 0"),
    ],
)
def test_a_bad_option_gets_one_line_saying_what_to_change(
    station: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], error: str
) -> None:
    assert refused(capsys, "evaluations", str(station), *args) == f"station: {error}"


def test_an_unknown_sort_and_a_station_without_research_are_refused(
    station: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["evaluations", str(station), "--sort", "best"])
    assert stop.value.code == 2 and "invalid choice: 'best' (choose from 'tick', 'score')" in capsys.readouterr().err
    Station.create(tmp_path / "social", load_config(ROOT / "configs" / "social_demo.yaml")).close()
    line = refused(capsys, "evaluations", str(tmp_path / "social"))
    assert line == "station: this station has no research tasks, so no evaluations"
