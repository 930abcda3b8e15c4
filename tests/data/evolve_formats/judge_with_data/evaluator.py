"""An online-judge evaluator: the cases live in a data file beside it and a helper module of the
folder reads them (upstream examples keep helpers and datasets next to evaluator.py)."""

import importlib.util

from judge.cases import load_cases


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases = load_cases()
    passed = 0
    for numbers, target in cases:
        answer = module.solve(list(numbers), target)
        if answer is not None:
            i, j = answer
            if i != j and 0 <= i < len(numbers) and 0 <= j < len(numbers) and numbers[i] + numbers[j] == target:
                passed += 1
    return {"combined_score": passed / len(cases), "passed": float(passed), "cases": float(len(cases))}
