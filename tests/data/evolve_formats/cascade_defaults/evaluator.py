"""Three cascade stages, each stricter, and no config: OpenEvolve's defaults apply (cascade on,
thresholds 0.5, 0.75, 0.9). Each stage says in its metrics that it ran."""

import importlib.util
import math


def _error(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    value = float(module.estimate_pi())
    if not math.isfinite(value):
        raise ValueError("estimate_pi() returned a non-finite number")
    return abs(value - math.pi)


def evaluate_stage1(program_path):
    return {"combined_score": max(0.0, 1.0 - _error(program_path)), "stage1_ran": 1.0}


def evaluate_stage2(program_path):
    return {"combined_score": max(0.0, 1.0 - 10.0 * _error(program_path)), "stage2_ran": 1.0}


def evaluate_stage3(program_path):
    return {"combined_score": max(0.0, 1.0 - 100.0 * _error(program_path)), "stage3_ran": 1.0}


def evaluate(program_path):
    return evaluate_stage3(program_path)
