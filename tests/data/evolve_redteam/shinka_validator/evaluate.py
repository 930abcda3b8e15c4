"""ShinkaEvolve-format evaluator: run_experiment() returns three weights in [0, 1]; validate_fn
checks that they sum to at most 1, so the honest maximum of combined_score (their sum) is 1."""

import math

from shinka.core import run_shinka_eval


def validate_fn(result):
    weights = result.get("weights") if isinstance(result, dict) else None
    if not isinstance(weights, list) or len(weights) != 3:
        return False, "run_experiment must return three weights"
    if not all(isinstance(w, float) and math.isfinite(w) and 0.0 <= w <= 1.0 for w in weights):
        return False, "every weight must be a finite number in [0, 1]"
    if sum(weights) > 1.0 + 1e-9:
        return False, f"the weights sum to {sum(weights)}, more than 1"
    return True, None


def aggregate_metrics_fn(results):
    return {"combined_score": sum(results[0]["weights"])}


def main(program_path, results_dir):
    return run_shinka_eval(
        program_path=program_path,
        results_dir=results_dir,
        experiment_fn_name="run_experiment",
        num_runs=1,
        validate_fn=validate_fn,
        aggregate_metrics_fn=aggregate_metrics_fn,
    )
