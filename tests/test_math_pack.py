"""The mathematics pack (examples/tasks/math_*): exact verifiers, certificates kept with scored
records, `station verify`, and offline stations that climb on pack tasks.

Each verifier is the folder's own evaluate.py: first called directly on tight constructions, where
one unit in the last place, or one integer, decides validity; then through the real station (a
scripted offline run, the scorer's sandbox, the recorded payload, the agents' review text and the
`station verify` command)."""

from __future__ import annotations

import importlib
import json
import math
import sqlite3
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml

from evaluators import certificate
from evaluators.base import ScorerFailure, create_task
from station.apps.cli import main
from station.apps.world import Station
from station.core.config import load_config
from station.core.engine import Engine
from station.core.run_types import RunResult

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "examples" / "tasks"
TASKS = sorted(p.name for p in PACK.glob("math_*"))
TINY = math.nextafter(0.0, 1.0)  # one unit in the last place above 0


def verifier(name: str) -> Any:
    """The folder's evaluate() (with its own exact.py), imported as the scorer's sandbox imports it."""
    for module in ("evaluate", "exact"):
        sys.modules.pop(module, None)
    sys.path.insert(0, str(PACK / name))
    try:
        return importlib.import_module("evaluate").evaluate
    finally:
        sys.path.pop(0)
        for module in ("evaluate", "exact"):
            sys.modules.pop(module, None)


def refused(name: str, construction: Any) -> str:
    with pytest.raises(ValueError) as caught:
        verifier(name)(construction, {})
    return str(caught.value)


def d11() -> list[list[int]]:
    points = []
    for i, j in combinations(range(11), 2):
        for a in (1, -1):
            for b in (1, -1):
                point = [0] * 11
                point[i], point[j] = a, b
                points.append(point)
    return points


def grid(n: int) -> list[list[Any]]:
    return [[x, y] for y in range(4) for x in range(4)][:n]


# -- each verifier: one unit decides validity ------------------------------------------------------
def test_the_pack_has_six_native_folders_each_with_a_baseline_and_the_best_known_value() -> None:
    assert len(TASKS) >= 6, TASKS
    for name in TASKS:
        folder = PACK / name
        statement = (folder / "task.md").read_text()
        assert "## Best known" in statement and "## Certificate" in statement, name
        assert list((folder / "baselines").glob("*.py")), name
        assert yaml.safe_load((folder / "task.yaml").read_text())["submission"]["mode"] == "function"


def test_autocorrelation_refuses_a_height_one_ulp_below_zero_and_computes_the_bound_exactly() -> None:
    scored = verifier("math_autocorrelation_c1")([1.0, 0.0, "1/2"], {})
    # c = conv([1, 0, 1/2]) = [1, 0, 1, 0, 1/4] peaks at 1: the bound is 2 * 3 * 1 / (3/2)^2 = 8/3
    assert "8/3" in scored["details"] and scored["score"] == 8 / 3
    assert scored["certificate"] == [1, 0, "1/2"]
    assert "height 1" in refused("math_autocorrelation_c1", [1.0, -TINY, "1/2"])
    assert "finite" in refused("math_autocorrelation_c1", [1.0, math.nan])
    assert "'p/q'" in refused("math_autocorrelation_c1", ["1/0"])
    assert "'p/q'" in refused("math_autocorrelation_c1", ["1e999999"])  # no decimal exponents: no huge ints
    assert "positive" in refused("math_autocorrelation_c1", [0, 0])


def test_min_overlap_refuses_a_density_one_ulp_above_one_once_scaled() -> None:
    # heights 1, 1, 0, 0 on [0, 2] already have integral 1: the densest allowed, exactly
    scored = verifier("math_min_overlap")([1.0, 1.0, 0.0, 0.0], {})
    assert scored["score"] == 1.0  # A = the first half: shifted by 1, all of A meets all of B
    message = refused("math_min_overlap", [math.nextafter(1.0, 2.0), 1.0, 0.0, 0.0])
    assert "height 0" in message and "<= 1" in message
    assert verifier("math_min_overlap")([1] * 10, {})["score"] == 0.5  # the constant 1/2


def test_difference_basis_refuses_an_interval_one_longer_or_an_element_one_off() -> None:
    scored = verifier("math_difference_basis")({"n": 6, "basis": [0, 1, 4, 6]}, {})  # a perfect ruler
    assert scored["score"] == 16 / 6 and scored["certificate"] == {"n": 6, "basis": [0, 1, 4, 6]}
    assert "first of them 7" in refused("math_difference_basis", {"n": 7, "basis": [0, 1, 4, 6]})
    assert "first of them 2" in refused("math_difference_basis", {"n": 6, "basis": [0, 1, 5, 6]})
    assert "distinct" in refused("math_difference_basis", {"n": 1, "basis": [0, 1, 1]})
    assert "integer" in refused("math_difference_basis", {"n": 1, "basis": [0, 1.0]})


def test_kissing_refuses_the_d11_roots_with_one_coordinate_one_larger() -> None:
    points = d11()
    assert verifier("math_kissing_11")(points, {})["score"] == 220  # squared distance 2 = squared length 2
    points[0][points[0].index(1)] = 2
    assert "squared distance 2, less than the largest squared length 5" in refused("math_kissing_11", points)
    big = [[c * 10**13 for c in p] for p in d11()]  # beyond int64 products: exact Python integers
    assert verifier("math_kissing_11")(big, {})["metrics"]["min_squared_distance"] == 2 * 10**26
    assert "origin" in refused("math_kissing_11", [[0] * 11, [1] + [0] * 10])


def test_min_max_distance_refuses_a_point_one_ulp_onto_another() -> None:
    points = grid(16)
    points[1] = [1, math.nextafter(1.0, 0.0)]  # one ulp below point 5, (1, 1): valid, a huge exact ratio
    scored = verifier("math_min_max_distance_16")(points, {})
    assert scored["score"] > 1e32 and scored["certificate"][1][1].endswith("/9007199254740992")
    points[1] = [1, 1.0]
    assert "coincide" in refused("math_min_max_distance_16", points)
    points[1] = [1, f"{2**1200 - 1}/{2**1200}"]  # closer than any float could say: refused, not a broken score
    assert "far too close" in refused("math_min_max_distance_16", points)
    assert verifier("math_min_max_distance_16")(grid(16), {})["score"] == 18


def test_heilbronn_refuses_a_point_one_ulp_onto_another_and_reads_exact_fractions() -> None:
    points = [[k, k * k] for k in range(13)]  # on a parabola: no three collinear
    points[12] = ["1/3", "1/9"]
    scored = verifier("math_heilbronn_convex_13")(points, {})
    assert scored["score"] > 0 and scored["certificate"][12] == ["1/3", "1/9"]
    points[1] = [TINY, 0]  # a hair from point 0: valid, with a tiny smallest triangle
    assert verifier("math_heilbronn_convex_13")(points, {})["score"] >= 0  # exact and positive; as a float, 0
    points[1] = [0.0, 0]
    assert "repeats point 0" in refused("math_heilbronn_convex_13", points)


@pytest.mark.parametrize(
    "name, published",
    [
        ("math_autocorrelation_c1", 1.5052939684401607),  # AlphaEvolve's 600 steps: C1 <= 1.5053
        ("math_min_max_distance_16", 12.88926611203463),  # AlphaEvolve's 16 points: sqrt(12.889266112)
        ("math_heilbronn_convex_13", 0.03093688903489562),  # AlphaEvolve's 13 points: 0.0309
        ("math_kissing_11", 593),  # AlphaEvolve's 593 integer points in dimension 11
    ],
)
def test_the_shipped_best_known_constructions_verify_to_their_published_values(name: str, published: float) -> None:
    construction = json.loads((PACK / name / "known" / "alphaevolve.json").read_text())
    assert verifier(name)(construction, {})["score"] == published


def test_station_verify_accepts_a_best_known_construction_in_the_scorers_sandbox(
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = PACK / "math_min_max_distance_16"
    assert main(["verify", str(folder), str(folder / "known" / "alphaevolve.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("value: 12.88926611203463\n") and out.endswith("OK\n")


# -- the certificate kept with a verdict ---------------------------------------------------------------
def test_a_certificate_over_one_mib_is_refused_and_one_that_is_not_json_is_the_scorers_failure() -> None:
    task = create_task("folder", {"path": str(PACK / "math_autocorrelation_c1")})
    answer = {"outcome": "scored", "score": 2.0, "details": "d"}
    kept = task.score(RunResult(status="ok", value={**answer, "certificate": [1, "1/2"]}))
    assert kept.certificate == certificate.make([1, "1/2"])
    assert kept.to_payload()["certificate"]["sha256"] == certificate.sha256('[1,"1/2"]')
    big = task.score(RunResult(status="ok", value={**answer, "certificate": ["9" * 1000] * 1100}))
    assert not big.success and "1 MiB" in big.details and big.certificate is None
    with pytest.raises(ScorerFailure, match="not plain JSON"):
        task.score(RunResult(status="ok", value={**answer, "certificate": [math.inf]}))
    assert "certificate" not in task.score(RunResult(status="ok", value=answer)).to_payload()


# -- offline stations on pack tasks, and `station verify` on their records -----------------------------
def offline_station(directory: Path, task: str, ticks: int) -> Path:
    """An offline station on the shipped configs/math_pack.yaml, naming one pack task, run as `station
    run` runs it (the engine, three scripted agents, the sandbox) for `ticks` ticks from the System
    baseline's result. The config delivers every result on time (`delivery: on_time`), so the station
    unfolds the same, and climbs as far, on a fast machine and a slow one."""
    settings = yaml.safe_load((ROOT / "configs" / "math_pack.yaml").read_text())  # the shipped demo
    settings["research"]["tasks"] = [{"folder": str(PACK / task)}]
    config = directory.parent / f"{directory.name}.yaml"
    config.write_text(yaml.safe_dump(settings))
    station = Station.create(directory, load_config(config))
    try:
        engine = Engine(station)
        while station.store.scalar("SELECT COUNT(*) FROM evaluations WHERE author = 'System' AND status = 'queued'"):
            assert station.ctx.tick <= 200, "the System baseline has no result after 200 ticks"
            engine.run(ticks=1)
        engine.run(ticks=ticks)
    finally:
        station.close()
    return directory


def rows(directory: Path, sql: str, params: tuple = ()) -> list[tuple]:
    db = sqlite3.connect(directory / "station.db")
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def climb(directory: Path) -> tuple[float, int, float]:
    """The System baseline's score, and the agents' best evaluation and its score (scores as the board
    ranks them: higher is better)."""
    ((baseline,),) = rows(directory, "SELECT score FROM evaluations WHERE author = 'System'")
    found = rows(
        directory,
        "SELECT id, score FROM evaluations WHERE author != 'System' AND status = 'finished' ORDER BY score DESC",
    )
    assert found, rows(directory, "SELECT id, author, status FROM evaluations")
    return baseline, found[0][0], found[0][1]


@pytest.fixture(scope="module")
def autocorrelation_station(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return offline_station(tmp_path_factory.mktemp("math") / "c1", "math_autocorrelation_c1", 90)


def test_offline_agents_climb_on_two_pack_tasks(autocorrelation_station: Path, tmp_path: Path) -> None:
    baseline, _, best = climb(autocorrelation_station)
    assert baseline == -2.0 and best > baseline + 0.05, (baseline, best)  # the bound 2 -> 1.891 (90 ticks)
    # 30 ticks: the agents pass the bar at tick 14 of this run (and reach 18.62 by tick 74)
    baseline, _, best = climb(offline_station(tmp_path / "mm", "math_min_max_distance_16", 30))
    assert baseline == pytest.approx(-26.64) and best > baseline + 2, (baseline, best)  # 26.64 -> 20.18


def test_station_verify_rechecks_a_record_and_refuses_a_tampered_certificate(
    autocorrelation_station: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, number, score = climb(autocorrelation_station)
    folder = str(PACK / "math_autocorrelation_c1")
    saved = tmp_path / "certificate.json"
    command = ["verify", folder, "--station", str(autocorrelation_station), "--evaluation", str(number)]
    assert main([*command, "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    stored = json.loads(saved.read_text())
    assert f"value: {-score!r}" in out and f"SHA-256 {stored['sha256']}" in out and out.endswith("hold\n")
    # the agents' review of the record names the same certificate
    station = Station.open(autocorrelation_station)
    try:
        room = station.ctx.rooms["research"]
        row = station.store.one("SELECT * FROM evaluations WHERE id = ?", (number,))
        assert f"Certificate: SHA-256 {stored['sha256']}" in room.record_text(station.ctx, row)
    finally:
        station.close()
    # and so does the evaluation's page in the web viewer
    from helpers import web_client

    from station.apps.web.app import create_app

    page = web_client(create_app(autocorrelation_station)).get(f"/research/{number}").text
    assert f"Certificate: SHA-256 <code>{stored['sha256']}</code>" in page
    # the saved certificate file verifies on its own; one changed height is refused
    assert main(["verify", folder, str(saved)]) == 0 and capsys.readouterr().out.endswith("OK\n")
    stored["construction"][0] = "3/2" if stored["construction"][0] != "3/2" else 2
    saved.write_text(json.dumps(stored))
    assert main(["verify", folder, str(saved)]) == 1
    assert "REFUSED: the certificate's SHA-256 does not match" in capsys.readouterr().out
    # the same change inside the station's record: refused there too
    (version,) = rows(autocorrelation_station, "SELECT reported_version FROM evaluations WHERE id = ?", (number,))[0]
    db = sqlite3.connect(autocorrelation_station / "station.db")
    with db:
        key = db.execute(
            "SELECT input_key FROM evaluation_versions WHERE evaluation = ? AND version = ?", (number, version)
        ).fetchone()[0]
        payload = json.loads(db.execute("SELECT payload FROM inputs WHERE key = ?", (key,)).fetchone()[0])
        payload["certificate"]["construction"] = stored["construction"]
        db.execute("UPDATE inputs SET payload = ? WHERE key = ?", (json.dumps(payload), key))
    db.close()
    assert main(command) == 1
    assert "REFUSED: the certificate's SHA-256 does not match" in capsys.readouterr().out
