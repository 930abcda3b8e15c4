"""Guess eight hidden numbers in [0, 1]: combined_score is 1 / (1 + 10 * the mean squared error).
The numbers are drawn when the evaluator is imported and kept in its module state."""

import importlib.util
import math
import random

_rng = random.Random(20260511)
_HIDDEN = [_rng.random() for _ in range(8)]


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    guess = [float(v) for v in module.guess()]
    if len(guess) != len(_HIDDEN) or not all(math.isfinite(v) for v in guess):
        return {"combined_score": 0.0, "error": "guess() must return eight finite numbers"}
    mse = sum((g - h) ** 2 for g, h in zip(guess, _HIDDEN)) / len(_HIDDEN)
    return {"combined_score": 1.0 / (1.0 + 10.0 * mse), "mse": mse}
