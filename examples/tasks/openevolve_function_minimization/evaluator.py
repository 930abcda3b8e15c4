"""An evaluator in OpenEvolve's format, for a small function-minimisation task.

OpenEvolve calls evaluate(program_path) and reads the returned metrics; `combined_score` is the
fitness. With cascade evaluation on (config.yaml), evaluate_stage1 runs first as a cheap filter
and evaluate_stage2 only for programs whose stage-1 score reaches the first threshold.

Each trial starts numpy's and Python's random generators from its own fixed seed, so a program
scores the same every time it is evaluated: a better score is a better search, not a luckier draw.
"""

import importlib.util
import math
import random

import numpy as np

GLOBAL_X, GLOBAL_Y, GLOBAL_VALUE = -1.70408284, 0.67750781, -1.518685840848579


def _load(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trial(module, seed):
    np.random.seed(seed)
    random.seed(seed)
    x, y, value = module.run_search()
    x, y, value = float(x), float(y), float(value)
    if not all(math.isfinite(v) for v in (x, y, value)):
        raise ValueError("run_search() returned a non-finite number")
    true_value = float(module.evaluate_function(x, y))
    if abs(true_value - value) > 1e-6:
        raise ValueError(f"run_search() reported {value} but the function is {true_value} there")
    distance = math.hypot(x - GLOBAL_X, y - GLOBAL_Y)
    return value, distance


def _scores(trials):
    values = [v for v, _ in trials]
    distances = [d for _, d in trials]
    value_score = sum(1.0 / (1.0 + abs(v - GLOBAL_VALUE)) for v in values) / len(values)
    distance_score = sum(1.0 / (1.0 + d) for d in distances) / len(distances)
    reliability = sum(1 for d in distances if d < 0.5) / len(distances)
    return {
        "value_score": value_score,
        "distance_score": distance_score,
        "reliability_score": reliability,
        "combined_score": 0.5 * value_score + 0.3 * distance_score + 0.2 * reliability,
    }


def evaluate_stage1(program_path):
    """One quick trial: does the program run, and does it land anywhere near the minimum?"""
    try:
        return _scores([_trial(_load(program_path), 0)])
    except Exception as err:  # as OpenEvolve evaluators do: a failing program scores nothing
        return {"combined_score": 0.0, "error": f"{type(err).__name__}: {err}"}


def evaluate_stage2(program_path):
    """Five trials, for the reliability of the search."""
    try:
        module = _load(program_path)
        return _scores([_trial(module, seed) for seed in range(5)])
    except Exception as err:
        return {"combined_score": 0.0, "error": f"{type(err).__name__}: {err}"}


def evaluate(program_path):
    """Without cascade evaluation: the full check at once."""
    return evaluate_stage2(program_path)
