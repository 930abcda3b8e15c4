"""Stage 2 of a folder task's evaluation: the task's own scorer, in a sandbox of its own.

This file is not imported by the station: it is the program the scorer's sandbox runs, called
through the function-mode harness (entry `run_scorer`). Its working dir holds, read-only:

    task/     the task folder (evaluate.py or evaluator.py, data/, private/)
    outputs/  a copy of the files the submission left in its outputs/ (regular files only)
    inputs/   scorer.json (how to call the scorer), value.pkl (what the submission returned,
              written by the station from plain data), and the submission's source file

It returns plain data: {"outcome": "scored", "score", "metrics", "details"} or
{"outcome": "rejected", "message"} (or, for an OpenEvolve evaluator, {"outcome": "crashed", ...}
when the exception came from the submitted program itself). A scorer that raises ValueError rejects the submission;
any other exception ends this run with an error, which the station treats as the scorer's
failure, never the submission's.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import pickle
import sys
import traceback
from pathlib import Path
from typing import Any

SETTINGS = os.path.join("inputs", "scorer.json")


def run_scorer() -> dict[str, Any]:
    with open(SETTINGS, encoding="utf-8") as f:
        settings = json.load(f)
    task_dir = Path("task").resolve()
    sys.path.insert(0, str(task_dir))  # the scorer may import its own helper modules
    module = _load(task_dir / settings["scorer_file"])
    submission = Path("inputs", settings["filename"]).resolve()
    try:
        if settings["format"] == "native":
            return _native(module, settings, task_dir, submission)
        return _openevolve(module, settings, str(submission))
    except ValueError as err:  # the scorer's way to reject a submission
        return {"outcome": "rejected", "message": str(err) or type(err).__name__}
    except Exception as err:
        if settings["format"] == "openevolve" and _raised_in(err, str(submission)):
            return {
                "outcome": "crashed",
                "message": _one_line(err),
                "traceback": "".join(traceback.format_exception(err)),
            }
        raise  # the scorer's own failure


def _raised_in(err: BaseException, filename: str) -> bool:
    """Whether the exception passed through the submitted program's own code."""
    return any(frame.filename == filename for frame in traceback.extract_tb(err.__traceback__))


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:500]}" if lines else type(err).__name__


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _native(module: Any, settings: dict[str, Any], task_dir: Path, submission: Path) -> dict[str, Any]:
    outputs = Path("outputs").resolve()
    context = {
        "task_dir": task_dir,
        "data_dir": task_dir / "data" if (task_dir / "data").is_dir() else None,
        "private_dir": task_dir / "private" if (task_dir / "private").is_dir() else None,
        "outputs_dir": outputs,
        "submission_file": submission,
        "mode": settings["mode"],
    }
    if settings["mode"] == "function":
        with open(os.path.join("inputs", "value.pkl"), "rb") as f:
            given = pickle.load(f)  # written by the station from the plain data the submission returned
    else:
        given = outputs
    answer = module.evaluate(given, context)
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = {"score": answer}
    if not isinstance(answer, dict):
        raise TypeError(f"evaluate() must return a dict with a score, not {type(answer).__name__}")
    return {"outcome": "scored", **answer}


def _openevolve(module: Any, settings: dict[str, Any], program: str) -> dict[str, Any]:
    """OpenEvolve's rules: evaluate(program_path) -> metrics; with a cascade, evaluate_stage1, 2, 3
    while the stage's score reaches its threshold; the score is the configured metric
    (combined_score), else the mean of the numeric metrics. A string `error` rejects the program."""
    metric, thresholds = settings["metric"], settings["cascade_thresholds"]
    metrics: dict[str, Any] = {}
    if settings["cascade"] and hasattr(module, "evaluate_stage1"):
        for stage in (1, 2, 3):
            function = getattr(module, f"evaluate_stage{stage}", None)
            if function is None:
                break
            found = _metrics(function(program))
            metrics.update(found)
            if stage > len(thresholds) or _score(found, metric) < thresholds[stage - 1]:
                break
    else:
        metrics = _metrics(module.evaluate(program))
    if isinstance(metrics.get("error"), str) and metrics["error"]:
        raise ValueError(metrics["error"])
    numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    notes = [f"{k}: {v}" for k, v in metrics.items() if k not in numbers]
    return {"outcome": "scored", "score": _score(metrics, metric), "metrics": numbers, "details": "\n".join(notes)}


def _metrics(result: Any) -> dict[str, Any]:
    found = getattr(result, "metrics", result)  # an EvaluationResult-like object, or a dict
    if not isinstance(found, dict):
        raise TypeError(f"the evaluator returned {type(result).__name__}, not a dict of metrics")
    return dict(found)


def _score(metrics: dict[str, Any], metric: str) -> float:
    if metric in metrics:
        return float(metrics[metric])
    numbers = [float(v) for v in metrics.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    finite = [v for v in numbers if math.isfinite(v)]
    if not finite:
        raise TypeError(f"the evaluator returned no {metric!r} and no numeric metric")
    return sum(finite) / len(finite)
