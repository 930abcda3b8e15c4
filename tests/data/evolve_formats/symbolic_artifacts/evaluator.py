"""Symbolic regression, returning OpenEvolve's EvaluationResult: metrics, and artifacts that tell
the author what went wrong (its stderr, the stage that failed)."""

import importlib.util
import math
import traceback

from openevolve.evaluation_result import EvaluationResult

POINTS = [(x / 4.0, (x / 4.0) ** 2 + 1.0) for x in range(-8, 9)]


def evaluate(program_path):
    try:
        spec = importlib.util.spec_from_file_location("program", program_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        errors = [(float(module.predict(x)) - y) ** 2 for x, y in POINTS]
    except Exception as err:  # noqa: BLE001 - any failure of the program becomes its artifacts
        return EvaluationResult(
            metrics={"combined_score": 0.0, "mse": float("inf")},
            artifacts={"stderr": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(),
                       "failure_stage": "prediction"},
        )
    mse = sum(errors) / len(errors)
    if not math.isfinite(mse):
        return EvaluationResult(metrics={"combined_score": 0.0}, artifacts={"failure_stage": "non-finite error"})
    return EvaluationResult(metrics={"combined_score": 1.0 / (1.0 + mse), "mse": mse},
                            artifacts={"fit": f"mean squared error {mse:.4f} over {len(POINTS)} points"})
