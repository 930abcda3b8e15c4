"""Sorting by comparisons: the evaluator counts the comparisons a program makes and reports a
wrong answer through a string `error` metric, the way many upstream evaluators do."""

import importlib.util
import math
import random

N = 64


class Counted:
    comparisons = 0

    def __init__(self, value):
        self.value = value

    def __lt__(self, other):
        Counted.comparisons += 1
        return self.value < other.value


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    values = random.Random(5).sample(range(1000), N)
    Counted.comparisons = 0
    out = module.sort_numbers([Counted(v) for v in values])
    if [getattr(x, "value", None) for x in out] != sorted(values):
        return {"combined_score": 0.0, "error": "the output is not the input in ascending order"}
    used = max(Counted.comparisons, 1)
    return {"combined_score": min(1.0, N * math.log2(N) / used), "comparisons": float(used)}
