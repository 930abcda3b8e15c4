"""Stage 2 of a folder task's evaluation: the task's own scorer, in a sandbox of its own.

This file is the program the scorer's sandbox runs, called through the function-mode harness
(entry `run_scorer`); the station itself imports only its READY line from it. Its working dir holds, read-only:

    task/     the task folder (evaluate.py or evaluator.py, data/, private/)
    outputs/  a copy of the files the submission left in its outputs/ (regular files only)
    inputs/   scorer.json (how to call the scorer), value.pkl (what the submission returned,
              written by the station from plain data), and the submission's source file
    compat/   stand-ins for `openevolve.evaluation_result` and `shinka.core` (evaluators/folder/compat)
    apart/    OpenEvolve and ShinkaEvolve: the stand-in that runs the program apart (evaluators/folder/apart)
    reference/  reference-format tasks: their runner and the stand-in `station` (evaluators/folder/reference)
    results/  ShinkaEvolve only: empty and writable, the `results_dir` its main() writes into

It returns plain data. Native scorer: {"outcome": "scored", "score", "metrics", "details"} or
{"outcome": "rejected", "message"}. A scorer that raises ValueError rejects the submission, and so
does arithmetic that overflows (OverflowError, FloatingPointError): numbers that large come from
the values being scored. Any other exception ends this run with an error, which the station treats
as the scorer's failure, never the submission's.

OpenEvolve evaluator: one function (`evaluate`, or one stage of a cascade) called on the program,
and {"outcome": "metrics", "metrics", "artifacts"} back, numbers and short texts only; the station
decides the cascade and computes the score itself. ShinkaEvolve evaluator: main(program_path,
"results"), then its metrics.json and correct.json read back the same way, with "correct",
"error" and "feedback" (its text_feedback); its "private" metrics stay here.

The program runs apart (scorer.json's "apart"): in a process of its own, the run's companion
(evaluators/folder/apart/apart_host.py, reached through the channel folder), and before the
evaluator is imported its ways of loading the program give it a stand-in module whose functions
call there, plain data crossing (apart_standin.py); this process is made non-dumpable. Without
a channel (an executor that runs no companion) the evaluation fails before the program is handed
over: the station's failure, never a silent return to one process. A task may declare that its
evaluator needs the program in its own process (task.yaml `program_process: shared`): then
nothing here is trusted once the program is handed over. Either way READY goes to stderr just before, and the station counts any
failure of the run after that line as the program's.

`scorer.json`'s "action" is "score", or "check" (import the scorer and look for its entry points,
for `station task check`: {"outcome": "checked", "missing": [names]}).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

SETTINGS = os.path.join("inputs", "scorer.json")
APART = "apart"  # the stand-in and the program host (evaluators/folder/apart), mounted beside compat/
CHANNEL_ENV = "STATION_CHANNEL"  # station.core.run_types.CHANNEL_ENV (this file runs without the station)
READY = "station: the evaluator is loaded; handing it the program"
TEXT_MAX_CHARS = 2000


def run_scorer() -> dict[str, Any]:
    with open(SETTINGS, encoding="utf-8") as f:
        settings = json.load(f)
    task_dir = Path("task").resolve()
    sys.path.insert(0, str(task_dir))  # the scorer may import its own helper modules
    if Path("compat").is_dir():
        sys.path.append(str(Path("compat").resolve()))  # after the installed packages
    if settings["format"] == "reference":  # its evaluator imports the reference's `station`: a stand-in here
        return _load(Path("reference", "reference_scorer.py").resolve()).run(settings, task_dir)
    if settings.get("apart") and settings.get("action") == "score":
        _run_apart(Path("inputs", settings["filename"]).resolve())
    module = _load(task_dir / settings["scorer_file"])
    if settings.get("action") == "check":
        names = settings["entry_points"]
        return {"outcome": "checked", "missing": [n for n in names if not callable(getattr(module, n, None))]}
    submission = Path("inputs", settings["filename"]).resolve()
    if settings["format"] == "openevolve":
        return _openevolve(module, settings["function"], str(submission))
    if settings["format"] == "shinka":
        return _shinka(module, str(submission))
    try:
        return _native(module, settings, task_dir, submission)
    except ValueError as err:  # the scorer's way to reject a submission
        return {"outcome": "rejected", "message": str(err) or type(err).__name__}
    except (OverflowError, FloatingPointError) as err:  # out-of-range numbers: the submission's values
        return {
            "outcome": "rejected",
            "message": f"the scorer could not compute with the values given ({_one_line(err)})",
        }


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:500]}" if lines else type(err).__name__


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _run_apart(program: Path) -> None:
    """Before the evaluator is imported: its loading of the program gives it a stand-in whose
    functions run in the program's own process, the run's companion."""
    channel = os.environ.get(CHANNEL_ENV)
    if not channel:  # never a silent fallback to the evaluator's own process
        raise RuntimeError(f"the executor ran no companion ({CHANNEL_ENV} is unset): the program cannot run apart")
    standin = _load(Path(APART, "apart_standin.py").resolve())
    standin.install(str(program), channel)


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


def _openevolve(module: Any, name: str, program: str) -> dict[str, Any]:
    """OpenEvolve's rules: `name`(program_path) -> a metrics dict (or an object with one); a string
    `error` in it, or a ValueError, rejects the program (the station reads both)."""
    function = getattr(module, name, None)
    if not callable(function):
        raise AttributeError(f"the evaluator defines no {name}(program_path)")
    sys.stderr.write(READY + "\n")
    sys.stderr.flush()
    try:
        result = function(program)
    except ValueError as err:
        return {"outcome": "metrics", "metrics": {"error": str(err) or type(err).__name__}}
    found = getattr(result, "metrics", result)  # an EvaluationResult-like object, or a dict
    if not isinstance(found, dict):
        raise TypeError(f"{name}() returned {type(result).__name__}, not a dict of metrics")
    artifacts = getattr(result, "artifacts", None)
    return {
        "outcome": "metrics",
        "metrics": {str(k): _plain(v) for k, v in found.items()},
        "artifacts": {str(k): _text(v) for k, v in artifacts.items()} if isinstance(artifacts, dict) else {},
    }


def _shinka(module: Any, program: str) -> dict[str, Any]:
    """ShinkaEvolve's rules: main(program_path, results_dir) writes metrics.json (numbers, a "public"
    and a "private" dict, "text_feedback") and correct.json ({"correct", "error"}) there."""
    results = Path("results")
    sys.stderr.write(READY + "\n")
    sys.stderr.flush()
    module.main(program, str(results))
    metrics = json.loads((results / "metrics.json").read_text(encoding="utf-8"))
    correct = json.loads((results / "correct.json").read_text(encoding="utf-8"))
    if not isinstance(metrics, dict) or not isinstance(correct, dict):
        raise TypeError("metrics.json and correct.json must each hold a JSON object")
    public = metrics.pop("public", None)
    metrics.pop("private", None)  # ShinkaEvolve keeps these from the program's author
    feedback = metrics.pop("text_feedback", "")
    shown = {**metrics, **(public if isinstance(public, dict) else {})}
    return {
        "outcome": "metrics",
        "metrics": {str(k): _plain(v) for k, v in shown.items()},
        "correct": correct.get("correct") is True,
        "error": _text(correct.get("error") or ""),
        "feedback": _text(feedback),
    }


def _text(value: Any) -> str:
    """An artifact or a message as short text (bytes decoded, never raising)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    text = value if isinstance(value, str) else repr(value)
    return text[:TEXT_MAX_CHARS]


def _plain(value: Any) -> Any:
    """A metric as plain data: a number or a boolean (OpenEvolve's mean counts it) stays one,
    anything else becomes short text."""
    if isinstance(value, (int, float)):
        return value
    number = getattr(value, "item", None)  # a NumPy scalar
    if callable(number) and getattr(value, "ndim", None) == 0:
        return _plain(number())
    text = value if isinstance(value, str) else repr(value)
    return text[:TEXT_MAX_CHARS]
