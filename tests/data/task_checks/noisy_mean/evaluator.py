"""Guess a quarter: the metrics have no combined_score, and one of them carries unseeded noise."""

import importlib.util
import random


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    guess = float(program.guess())
    closeness = 1.0 / (1.0 + abs(guess - 0.25)) + random.uniform(0.0, 0.001)  # never seeded
    return {
        "closeness": closeness,
        "valid": True,
        "complexity": 7.0,
        "stability": float("nan"),
        "note": "closeness carries noise",
    }
