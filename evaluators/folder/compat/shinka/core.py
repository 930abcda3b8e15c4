"""ShinkaEvolve's evaluation loop, as a task folder's evaluate.py calls it from main(program_path,
results_dir): load the program, call its experiment function `num_runs` times (with
`get_experiment_kwargs(run)`), check each result (`validate_fn`), combine the valid ones
(`aggregate_metrics_fn`), and write metrics.json and correct.json into `results_dir`.
Returns (metrics, correct, error). Options of the real loop that concern its own machinery
(parallel runs, early stopping, plotting) are accepted and do nothing here.

load_program goes through importlib.util.spec_from_file_location, looked up when it is called:
where the program runs apart from its evaluator (evaluators/folder/apart), that gives the
stand-in module, so each experiment runs in the program's own process and only its result, as
plain data, reaches validate_fn and aggregate_metrics_fn here."""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

METRICS_ON_ERROR: dict[str, Any] = {"combined_score": 0.0}


def load_program(program_path: str) -> Any:
    spec = importlib.util.spec_from_file_location("program", program_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load a program from {program_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_shinka_eval(
    program_path: str,
    results_dir: str,
    experiment_fn_name: str = "run_experiment",
    num_runs: int = 1,
    get_experiment_kwargs: Callable[[int], dict[str, Any]] | None = None,
    aggregate_metrics_fn: Callable[[list[Any]], dict[str, Any]] | None = None,
    validate_fn: Callable[[Any], tuple[bool, str | None]] | None = None,
    default_metrics_on_error: dict[str, Any] | None = None,
    **_options: Any,
) -> tuple[dict[str, Any], bool, str | None]:
    try:
        metrics, problems = _run(program_path, experiment_fn_name, num_runs, get_experiment_kwargs, validate_fn)
        valid = metrics.pop("valid results")
        if valid:
            metrics.update(aggregate_metrics_fn(valid) if aggregate_metrics_fn else {})
        else:
            metrics.update(default_metrics_on_error or METRICS_ON_ERROR)
        correct, error = not problems, (problems[0] if problems else None)
    except Exception as err:  # noqa: BLE001 - the program's failure is reported, not raised
        metrics = dict(default_metrics_on_error or METRICS_ON_ERROR)
        correct, error = False, f"{type(err).__name__}: {err}"
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, "metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, default=str)
    with open(os.path.join(results_dir, "correct.json"), "w", encoding="utf-8") as f:
        json.dump({"correct": correct, "error": error}, f)
    return metrics, correct, error


def _run(
    program_path: str,
    name: str,
    runs: int,
    kwargs_of: Callable[[int], dict[str, Any]] | None,
    validate: Callable[[Any], tuple[bool, str | None]] | None,
) -> tuple[dict[str, Any], list[str]]:
    """Each run of the experiment: the valid results, the timings and why the others are not valid."""
    experiment = getattr(load_program(program_path), name, None)
    if not callable(experiment):
        raise AttributeError(f"the program defines no {name}()")
    valid, times, problems = [], [], []
    for run in range(runs):
        began = time.perf_counter()
        result = experiment(**(kwargs_of(run) if kwargs_of else {}))
        times.append(time.perf_counter() - began)
        ok, why = validate(result) if validate else (True, None)
        if ok:
            valid.append(result)
        else:
            problems.append(why or f"run {run} gave a result that is not valid")
    return {
        "valid results": valid,
        "execution_time_mean": statistics.fmean(times) if times else 0.0,
        "execution_time_std": statistics.pstdev(times) if times else 0.0,
        "num_valid_runs": len(valid),
        "num_invalid_runs": len(problems),
        "all_validation_errors": problems,
    }, problems
