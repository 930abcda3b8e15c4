"""ShinkaEvolve-format evaluator: main(program_path, results_dir) runs the program's
run_experiment twice (n = 5 and 6) through run_shinka_eval, which writes metrics.json and
correct.json. combined_score is the mean ratio of the smallest gap to the best possible one."""

import math

from shinka.core import run_shinka_eval


def get_experiment_kwargs(run_index):
    return {"n": 5 + run_index, "seed": run_index}


def _smallest_gap(angles):
    points = [(math.cos(a), math.sin(a)) for a in angles]
    return min(math.dist(p, q) for i, p in enumerate(points) for q in points[i + 1 :])


def validate_fn(result):
    angles = result.get("angles") if isinstance(result, dict) else None
    if not isinstance(angles, list) or len(angles) != result.get("n"):
        return False, "run_experiment must return n angles"
    if not all(isinstance(a, float) and math.isfinite(a) for a in angles):
        return False, "every angle must be a finite number"
    return True, None


def aggregate_metrics_fn(results):
    ratios = [_smallest_gap(r["angles"]) / (2 * math.sin(math.pi / r["n"])) for r in results]
    score = sum(ratios) / len(ratios)
    return {
        "combined_score": score,
        "public": {"ratio_n5": ratios[0], "ratio_n6": ratios[-1]},
        "private": {"hidden_margin": 1.0 - score},
        "text_feedback": "The closest pair sets the score; spread the points over the whole circle.",
    }


def main(program_path, results_dir):
    metrics, correct, error = run_shinka_eval(
        program_path=program_path,
        results_dir=results_dir,
        experiment_fn_name="run_experiment",
        num_runs=2,
        get_experiment_kwargs=get_experiment_kwargs,
        validate_fn=validate_fn,
        aggregate_metrics_fn=aggregate_metrics_fn,
    )
    return metrics, correct, error
