"""`station study` through the real command line on small open stations (run by `station run`): the
files it writes and what they hold, its one-line refusals, two stations compared with confidence
intervals, and a station studied while it runs."""

from __future__ import annotations

import json
import math
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import networkx as nx
import pandas as pd
import pytest
from study_station import SQUARE, StudyStation, build_society

from station.apps.cli import main
from station.core.run_lock import run_lock
from station.study import compare, load
from station.study.compare import unique_names
from station.study.schema import EDGE_KINDS, METRIC_TABLES, TABLES

AGENTS = {"society": 5, "pair": 2}  # each station's lives: its `lives` summary metric, known by construction


@pytest.fixture(scope="module")
def stations(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The hand-made society of tests/study_station.py (five lives, a mail cycle, papers, evaluations) and
    a pair who mail each other; both folders are named "seed" (as two runs of one config are), so the
    comparison must tell them apart."""
    base = tmp_path_factory.mktemp("study-stations")
    pair = StudyStation(base / "pair" / "seed", last_tick=20)
    pair.life(1, "Guest_1", born=1, name="Ann I", lineage="Ann", generation=1, ascended=2)
    pair.life(2, "Guest_2", born=1, name="Ben I", lineage="Ben", generation=1, ascended=2)
    pair.mail(3, "Ann I", ["Ben I"], "hello")
    pair.mail(4, "Ben I", ["Ann I"], "hello back")
    pair.evaluation(0, "System", code=SQUARE, delivered=1, score=1.0)
    pair.evaluation(5, "Ann I", code=SQUARE, abstract="improves evaluation 1", delivered=6, score=1.5)
    pair.turns()
    return {"society": build_society(base / "society" / "seed"), "pair": pair.finish()}


@pytest.fixture(scope="module")
def studied(stations: dict[str, Path]) -> Path:
    """The first station studied into its default folder, DIR/study."""
    assert main(["study", str(stations["society"])]) == 0
    return stations["society"] / "study"


def columns(table: str) -> list[str]:
    return [name for name, _, _ in {**TABLES, **METRIC_TABLES}[table]]


def test_one_station_writes_every_table_graph_and_manifest(studied: Path, stations: dict[str, Path]) -> None:
    manifest = json.loads((studied / "study.json").read_text(encoding="utf-8"))
    assert manifest["station"] == str(stations["society"].resolve())
    assert manifest["config"] == "open-station"
    assert (manifest["first_tick"], manifest["last_tick"]) == (1, 60) and manifest["window"] >= 1
    assert {"pandas", "networkx", "scikit-learn"} <= set(manifest["versions"])
    for table in [*TABLES, *METRIC_TABLES]:
        parquet = pd.read_parquet(studied / f"{table}.parquet")
        csv = pd.read_csv(studied / f"{table}.csv")
        assert list(parquet.columns) == columns(table) == list(csv.columns), table
        assert len(parquet) == len(csv) == manifest["tables"][table], table
    lives = pd.read_parquet(studied / "lives.parquet")
    assert len(lives) == AGENTS["society"] and str(lives["generation"].dtype) == "Int64"
    summary = pd.read_parquet(studied / "summary.parquet").set_index("metric")["value"]
    assert summary["lives"] == AGENTS["society"]

    edges = pd.read_parquet(studied / "edges.parquet")
    whole = nx.read_graphml(studied / "network.graphml", force_multigraph=True)
    assert set(lives["agent"]) <= set(whole.nodes)
    assert whole.number_of_edges() == len(edges)
    acts = ["source", "target", "kind", "tick", "record", "detail"]
    read_back = sorted(((s, t, *(d.get(a) for a in acts[2:])) for s, t, d in whole.edges(data=True)), key=repr)
    rows = edges[acts].astype(object).replace({pd.NA: None}).itertuples(index=False, name=None)
    assert read_back == sorted(rows, key=repr)  # a missing value has no <data> element: read back as no key
    assert {"mail", "reply", "review", "citation", "built_on", "read"} <= set(edges["kind"])  # the society's acts
    for kind in EDGE_KINDS:
        one = nx.read_graphml(studied / f"network_{kind}.graphml", force_multigraph=True)
        assert one.number_of_edges() == int((edges["kind"] == kind).sum()), kind
    assert sorted(p.name for p in studied.iterdir()) == sorted(["study.json", *manifest["files"]])


def test_the_summary_and_what_was_written_are_printed(stations: dict[str, Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "csv-only"
    assert main(["study", str(stations["pair"]), "--out", str(out), "--format", "csv", "--window", "4"]) == 0
    printed = capsys.readouterr().out
    lives_line = next(line for line in printed.splitlines() if line.startswith("lives "))
    assert lives_line.split()[1] == str(AGENTS["pair"])
    assert f"to {out}" in printed
    assert not list(out.glob("*.parquet")) and (out / "lives.csv").is_file()
    network = pd.read_csv(out / "network.csv")
    assert json.loads((out / "study.json").read_text(encoding="utf-8"))["window"] == 4
    assert (network["window_end"] - network["window_start"]).max() <= 3


def test_a_later_study_replaces_an_earlier_one_and_nothing_else(
    studied: Path, stations: dict[str, Path], capsys
) -> None:
    (studied / "lives.csv").write_text("stale\n", encoding="utf-8")
    assert main(["study", str(stations["society"]), "--out", str(studied)]) == 0
    assert pd.read_csv(studied / "lives.csv").columns[0] == "session"  # written again
    mine = studied / "my_notes.txt"
    mine.write_text("keep me", encoding="utf-8")
    try:
        assert main(["study", str(stations["society"]), "--out", str(studied)]) == 2
        assert "my_notes.txt" in capsys.readouterr().err
        assert mine.read_text(encoding="utf-8") == "keep me"
    finally:
        mine.unlink()
    assert not [p for p in studied.parent.iterdir() if p.name.startswith(".study.")]  # no temporary folder left


def refusal(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("station: ") and "\n" not in err and "Traceback" not in err
    return err


def test_bad_input_is_refused_in_one_line(stations: dict[str, Path], tmp_path: Path, capsys) -> None:
    station = str(stations["pair"])
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x", encoding="utf-8")
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"\xff\xd8")
    assert "no station at" in refusal(["study", str(tmp_path / "nowhere")], capsys)
    assert "is a file" in refusal(["study", str(a_file)], capsys)
    assert "--window 0" in refusal(["study", station, "--window", "0"], capsys)
    assert "--first 9 is after --last 3" in refusal(["study", station, "--first", "9", "--last", "3"], capsys)
    assert "need --out" in refusal(["study", station, str(stations["society"])], capsys)
    assert "given twice" in refusal(["study", station, station, "--out", str(tmp_path / "x")], capsys)
    assert "cat.jpg" in refusal(["study", station, "--out", str(foreign)], capsys)
    assert "files the station's agents" in refusal(["study", station, "--out", f"{station}/files/study"], capsys)
    assert "not being studied" in refusal(["study", station, "--out", f"{stations['society']}/study-of-three"], capsys)
    assert "cannot write" in refusal(["study", station, "--out", str(a_file / "study")], capsys)
    assert "is a station directory" in refusal(["study", station, "--out", station], capsys)
    # a folder that looks like an earlier study of its own, but holds the station: never replaced
    holder = stations["pair"].parent
    (holder / "study.json").write_text(json.dumps({"written_by": "station study", "files": ["seed/"]}))
    try:
        assert "holds the station" in refusal(["study", station, "--out", str(holder)], capsys)
    finally:
        (holder / "study.json").unlink()
    assert sorted(p.name for p in foreign.iterdir()) == ["cat.jpg"] and a_file.read_text(encoding="utf-8") == "x"


def test_two_stations_compared_with_a_confidence_interval(stations: dict[str, Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "seeds"
    assert main(["study", str(stations["society"]), str(stations["pair"]), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # both folders are named "seed": the second is made unique
    assert (out / "seed" / "study.json").is_file() and (out / "seed-2" / "study.json").is_file()
    table = pd.read_parquet(out / "comparison.parquet").set_index("metric")
    assert list(table.columns) == ["seed", "seed-2", "n", "mean", "sd", "ci_low", "ci_high", "meaning"]
    lives = table.loc["lives"]
    # by hand: values 5 and 2; mean 3.5; sd sqrt(((5 - 3.5)^2 + (2 - 3.5)^2) / 1) = sqrt(4.5); t(0.975, 1 df) =
    # 12.7062; half-width 12.7062 * sqrt(4.5) / sqrt(2) = 12.7062 * 1.5 = 19.0593
    assert (lives["seed"], lives["seed-2"], lives["n"], lives["mean"]) == (5.0, 2.0, 2, 3.5)
    assert lives["sd"] == pytest.approx(math.sqrt(4.5))
    assert (lives["ci_low"], lives["ci_high"]) == pytest.approx((3.5 - 19.0593, 3.5 + 19.0593), abs=1e-4)
    assert pd.read_csv(out / "comparison.csv").set_index("metric").loc["lives", "ci_high"] == pytest.approx(22.5593)
    line = next(line for line in printed.splitlines() if line.startswith("lives "))
    assert line.split()[1:4] == ["5", "2", "3.5"] and "[-15.56, 22.56]" in line
    # the pair published no paper: a metric of papers has one value, so no spread and no interval
    cited = table.loc["papers_cited_share"]
    assert math.isnan(cited["seed-2"]) and cited["n"] == 1 and cited["mean"] == cited["seed"]
    assert math.isnan(cited["sd"]) and math.isnan(cited["ci_low"]) and math.isnan(cited["ci_high"])
    # the Python API gives the same table
    api = compare([load(stations["society"]), load(stations["pair"])])
    pd.testing.assert_frame_equal(api.set_index("metric"), table)
    svg = ET.parse(out / "comparison.svg").getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    texts = {"".join(t.itertext()) for t in svg.iter("{http://www.w3.org/2000/svg}text")}
    assert {"seedseed", "seed-2seed-2"} <= texts  # the legend: each station's line, titled by its name
    assert len(list(svg.iter("{http://www.w3.org/2000/svg}polyline"))) >= 2
    manifest = json.loads((out / "study.json").read_text(encoding="utf-8"))
    assert manifest["kind"] == "comparison" and set(manifest["stations"]) == {"seed", "seed-2"}


def test_a_station_being_run_is_studied_without_disturbing_it(stations: dict[str, Path], tmp_path: Path) -> None:
    """The engine's lock is held and a write transaction is open: the study reads what was committed."""
    station = stations["pair"]
    db = sqlite3.connect(station / "station.db")
    try:
        with run_lock(station):
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE meta SET value = value WHERE key = 'tick'")
            assert main(["study", str(station), "--out", str(tmp_path / "live")]) == 0
            db.execute("ROLLBACK")
    finally:
        db.close()
    assert len(pd.read_parquet(tmp_path / "live" / "lives.parquet")) == AGENTS["pair"]


def test_station_folders_in_a_comparison_get_safe_distinct_names() -> None:
    names = ["seed", "seed", "run 1/2", "..", ".hidden", "study.json"]
    assert unique_names(names, reserved=["study.json"]) == [
        "seed",
        "seed-2",
        "run_1_2",
        "station",
        "hidden",
        "study.json-2",
    ]
