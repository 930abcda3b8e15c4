"""The circle-packing verifier (exact float64, zero tolerance), its baseline, the example in its
spec, the submission programs the scripted agents use, and the open station's general task."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from evaluators.base import create_task
from evaluators.circle_packing import CirclePacking
from evaluators.general import GeneralPython
from evaluators.programs import program
from station.core.run_types import RunResult

R = 3 / 32  # dyadic: every coordinate, difference, square and root below is exact in float64


def exact_packing() -> tuple[np.ndarray, np.ndarray]:
    """26 circles whose validity holds exactly in float64.

    A 5 x 5 grid of radius 3/32 at centres 3/32 * (1 + 2k): neighbours are 6/32 apart, so they touch
    exactly (6/32 squared is 36/1024 and its root 6/32, all exact), and the outer circles touch the
    left and bottom sides exactly. Circle 25 (radius 1/32) sits in the strip left free at the right,
    touching the right and bottom sides; its nearest neighbour is sqrt(20)/32 > 4/32 away.
    """
    k = R * (1 + 2 * np.arange(5))
    centers = np.array([(x, y) for y in k for x in k] + [(31 / 32, 1 / 32)])
    radii = np.array([R] * 25 + [1 / 32])
    return centers, radii


def judge(value, n: int = 26):
    return CirclePacking(n).score(RunResult(status="ok", value=value))


def failed(verdict, *words: str) -> None:
    assert verdict.success is False and verdict.score is None and verdict.sort_key is None
    assert verdict.details.startswith("Verification failed: ")
    for word in words:
        assert word in verdict.details, verdict.details


def run_program(source: str):
    """Run a submission's source in-process (trusted test code) and return its packing."""
    namespace: dict = {"__name__": "submission"}
    exec(compile(source, "submission.py", "exec"), namespace)
    return namespace["construct_packing"]()


# ----- exact acceptance and rejection ------------------------------------------------------------

def test_exactly_tangent_packing_is_valid():
    centers, radii = exact_packing()
    verdict = judge((centers, radii))
    assert verdict.success and verdict.score == 76 / 32  # 25 * 3/32 + 1/32, exact
    assert verdict.details == "Valid packing of 26 circles; sum of radii = 2.375000"
    assert verdict.sort_key is None and verdict.metrics == {}


def test_overlap_of_1e_12_is_rejected_by_moving_a_centre():
    centers, radii = exact_packing()
    centers[12, 0] -= 1e-12  # the middle circle moves towards its left neighbour, circle 11
    verdict = judge((centers, radii))
    failed(verdict, "circles 11 and 12 overlap by 1e-12", "1 overlapping pair(s)")
    # The tolerant figure is offered, clearly not as the score.
    assert "With a tolerance of 1e-09 the sum of radii would be 2.375000; that is not the score" in verdict.details


def test_overlap_of_1e_12_is_rejected_by_growing_a_radius():
    centers, radii = exact_packing()
    radii[12] += 1e-12  # now overlaps its four neighbours 7, 11, 13 and 17
    failed(judge((centers, radii)), "overlap by 1e-12", "4 overlapping pair(s)")


def test_large_violations_get_no_tolerant_figure():
    centers, radii = exact_packing()
    radii[12] += 0.01
    verdict = judge((centers, radii))
    failed(verdict, "overlap by 0.01")
    assert "tolerance" not in verdict.details


# ----- each rule -----------------------------------------------------------------------------------

def test_shape_rules():
    centers, radii = exact_packing()
    failed(judge((centers[:25], radii[:25])), "expected 26 circles, but centers has 25 rows")
    failed(judge((np.column_stack([centers, centers[:, 0]]), radii)), "centers must have shape (26, 2), got (26, 3)")
    failed(judge((centers, radii[:25])), "radii must have shape (26,), got (25,)")
    failed(judge((centers, radii.reshape(26, 1))), "radii must have shape (26,)")
    failed(judge((3.0, radii)), "centers has a single number")
    failed(judge(([], [])), "expected 26 circles, but centers has 0 rows")
    failed(judge((centers, radii), n=25), "expected 25 circles")


@pytest.mark.parametrize("which, index, value, words", [
    ("centers", (3, 1), np.nan, ("centers holds NaN or infinite values", "circle 3")),
    ("centers", (0, 0), np.inf, ("centers holds NaN or infinite",)),
    ("radii", 5, -np.inf, ("radii holds NaN or infinite", "circle 5")),
    ("radii", 7, np.nan, ("radii holds NaN",)),
    ("radii", 4, 0.0, ("every radius must be > 0, but circle 4 has radius 0.0",)),
    ("radii", 9, -0.0, ("every radius must be > 0",)),
    ("radii", 2, -0.01, ("every radius must be > 0, but circle 2 has radius -0.01",)),
])
def test_value_rules(which, index, value, words):
    centers, radii = exact_packing()
    (centers if which == "centers" else radii)[index] = value
    failed(judge((centers, radii)), *words)


@pytest.mark.parametrize("index, axis, shift, side", [
    (0, 0, -5e-17, "left"), (0, 1, -1e-3, "bottom"), (25, 0, 3e-16, "right"), (20, 1, 0.1, "top"),
])
def test_border_rule(index, axis, shift, side):
    centers, radii = exact_packing()
    centers[index, axis] += shift
    failed(judge((centers, radii)), f"circle {index} ", f"crosses the {side} side")


def test_touching_is_allowed_and_the_arithmetic_is_plain_float64():
    centers = np.array([[0.25, 0.5], [0.75, 0.5]])
    radii = np.array([0.25, 0.25])  # each touches three sides, and the other at (0.5, 0.5)
    assert judge((centers, radii), n=2).success
    # One ulp of 0.25 more is lost to rounding (0.25 + (0.25 + 2**-54) rounds to 0.5): still valid.
    assert judge((centers, np.array([0.25, np.nextafter(0.25, 1)])), n=2).success
    # Two ulps more: 0.75 + r still rounds to 1.0 (no side is crossed), but r0 + r1 = 0.5 + 2**-53 > 0.5.
    verdict = judge((centers, np.array([0.25, 0.25 + 2 ** -53])), n=2)
    failed(verdict, "circles 0 and 1 overlap by 1.11e-16 (distance between centers 0.5 < r0 + r1 = 0.5000000000000001)")


def test_the_pair_distance_matches_the_per_pair_formula_bit_for_bit():
    # The verifier computes all pair distances at once; they must equal the spec's literal formula.
    rng = np.random.default_rng(5)
    for centers in (rng.random((40, 2)), np.round(rng.random((40, 2)), 3) + rng.normal(0, 1e-15, (40, 2))):
        i, j = np.triu_indices(len(centers), 1)
        together = np.sqrt(np.sum((centers[i] - centers[j]) ** 2, axis=1))
        one_by_one = [np.sqrt(np.sum((centers[a] - centers[b]) ** 2)) for a, b in zip(i, j)]
        assert together.tobytes() == np.array(one_by_one).tobytes()


# ----- conversion of the returned value ---------------------------------------------------------------

def test_lists_and_tuples_are_accepted():
    centers, radii = exact_packing()
    for value in ([centers.tolist(), radii.tolist()], (centers.tolist(), radii), [centers, list(radii)]):
        verdict = judge(value)
        assert verdict.success and verdict.score == 2.375
    # Integers are numbers too: these are read, and fail only on geometry.
    failed(judge(([[1, 1], [3, 3]], [1, 1]), n=2), "circle 0 ", "crosses the right side")


@pytest.mark.parametrize("value, words", [
    (None, ("must return a pair (centers, radii); got None",)),
    ("2.5", ("got a str",)),
    ({"centers": [], "radii": []}, ("got a dict",)),
    (np.zeros((2, 26)), ("got a ndarray",)),
    ([np.zeros((26, 2)), np.ones(26), 1], ("got a list of length 3",)),
    ([[[0.1, 0.1], [0.2]], [0.1, 0.1]], ("centers is not a regular array of numbers",)),
    ([np.zeros((26, 2)), [0.1] * 25 + [[0.1, 0.2]]], ("radii is not a regular array",)),
    ([[["0.5", "0.5"]] * 26, [0.01] * 26], ("centers must hold only real numbers",)),
    ([np.zeros((26, 2)), [None] * 26], ("radii must hold only real numbers",)),
    ([np.zeros((26, 2)), [True] * 26], ("radii must hold only real numbers",)),
    ([np.zeros((26, 2)), [1j] * 26], ("radii must hold only real numbers",)),
    ([np.zeros((26, 2)), [10 ** 400] * 26], ("radii must hold only real numbers",)),
])
def test_malformed_values_fail_cleanly(value, words):
    failed(judge(value), *words)


# ----- parameters, registry and spec -------------------------------------------------------------------

@pytest.mark.parametrize("params", [{"n": 1}, {"n": 201}, {"n": "26"}, {"n": 26.0}, {"n": True}, {"n": None},
                                    {"m": 26}])
def test_bad_parameters_raise_value_error(params):
    with pytest.raises(ValueError, match="circle_packing"):
        create_task("circle_packing", params)


def test_task_attributes():
    task = create_task("circle_packing")
    assert isinstance(task, CirclePacking) and task.n == 26 and task.kind == "circle_packing"
    assert (task.mode, task.entry, task.timeout_s, task.display_precision, task.memory_mb) == \
        ("function", "construct_packing", 1200.0, 7, 4096)
    assert task.title == "Circle Packing in a Unit Square (n = 26)"
    assert task.validate_code("x = 1") is None
    assert create_task("circle_packing", {"n": np.int64(40)}).n == 40


def test_spec_for_n_32_names_32_and_its_example_is_valid():
    task = create_task("circle_packing", {"n": 32})
    text = task.spec()
    assert text.startswith("# Circle Packing in a Unit Square (n = 32)")
    assert "**32 circles**" in text and "(32, 2)" in text and "(32,)" in text and "1200 seconds" in text
    assert "26" not in text  # nothing left over from another n
    example = re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)
    centers, radii = run_program(example)
    assert len(radii) == 32
    verdict = task.score(RunResult(status="ok", value=(centers, radii)))
    assert verdict.success and verdict.details.startswith("Valid packing of 32 circles")


def test_spec_reports_an_overridden_timeout():
    task = create_task("circle_packing")
    task.timeout_s = 1260.0
    assert "1260 seconds" in task.spec()


def test_spec_states_the_configured_processors_and_the_paper_config_gives_1260_s():
    from rooms.research.tasks import load_tasks
    from station.core.config import load_config

    assert "One CPU core, no GPU." in create_task("circle_packing").spec()  # the text recorded stations read
    assert "4 CPU cores, 1 GPU." in create_task("circle_packing", {"cpus": 4, "gpus": 1}).spec()
    (task,) = load_tasks(load_config(Path(__file__).resolve().parents[1] / "configs" / "circle_packing_n26.yaml").research).values()
    assert task.timeout_s == 1260 and "1260 seconds" in task.spec() and task.run_spec("x", mounts=[], label="t").timeout_s == 1260
    with pytest.raises(ValueError, match="cpus"):
        create_task("circle_packing", {"cpus": 0})


@pytest.mark.parametrize("n", [2, 3, 7, 26, 32, 61, 200])
def test_ring_baseline_is_strictly_valid(n):
    task = CirclePacking(n)
    (baseline,) = task.baselines()
    assert baseline.title == "Ring Pattern Baseline" and baseline.tags == ("baseline", "rings")
    verdict = task.score(RunResult(status="ok", value=run_program(baseline.code)))
    assert verdict.success, verdict.details
    assert verdict.score > 0.2 * n ** 0.5  # sanity: a real packing, not vanishing circles


def test_general_python_always_scores_one_when_the_program_finishes():
    task = create_task("general_python")
    assert isinstance(task, GeneralPython) and task.mode == "command" and task.entry == "python submission.py"
    assert task.timeout_s == 600.0 and task.title == "General Purpose Python Execution"
    verdict = task.score(RunResult(status="ok", value="anything at all", exit_code=0))
    assert verdict.success and verdict.score == 1.0 and "logs" in verdict.details
    assert task.score(RunResult(status="error", exit_code=1, error="boom")).success is False
    assert "python submission.py" in task.spec()
    with pytest.raises(ValueError, match="bad parameters"):
        create_task("general_python", {"n": 3})


def test_unknown_task():
    with pytest.raises(ValueError, match="unknown research task 'nope'"):
        create_task("nope")


# ----- the scripted agents' programs --------------------------------------------------------------

def test_program_helper_substitutes_constants():
    source = program("optimized", 32, STARTS=3, SEED=7)
    assert re.search(r"^N = 32\b", source, re.M) and re.search(r"^STARTS = 3\b", source, re.M)
    assert re.search(r"^SEED = 7\b", source, re.M) and re.search(r"^HOPS = 24\b", source, re.M)
    with pytest.raises(ValueError, match="unknown program"):
        program("spiral", 26)
    with pytest.raises(ValueError, match="no constant STARTS"):
        program("grid", 26, STARTS=3)
    with pytest.raises(TypeError):
        program("optimized", 26, SEED="0; import os")
    with pytest.raises(ValueError):
        program("grid", 0)


@pytest.fixture(scope="module")
def scores_26() -> dict[str, float]:
    """Each program at n = 26; the optimiser at its default effort (a few seconds), run only here."""
    scores = {}
    for kind in ("grid", "hex", "optimized"):
        verdict = judge(run_program(program(kind, 26)))
        assert verdict.success, f"{kind}: {verdict.details}"
        scores[kind] = verdict.score
    return scores


def test_programs_improve_grid_hex_optimized(scores_26):
    assert scores_26["grid"] < scores_26["hex"] < scores_26["optimized"]
    baseline = judge(run_program(CirclePacking(26).baselines()[0].code)).score
    assert baseline < scores_26["grid"]  # the leaderboard starts low


def test_optimized_program_reaches_2_60_for_26_circles(scores_26):
    assert scores_26["optimized"] >= 2.60


@pytest.mark.parametrize("n", [2, 5, 32, 61])
def test_cheap_programs_are_valid_for_other_n(n):
    for source in (program("grid", n), program("hex", n), program("optimized", n, STARTS=1, HOPS=1)):
        verdict = judge(run_program(source), n=n)
        assert verdict.success, verdict.details
