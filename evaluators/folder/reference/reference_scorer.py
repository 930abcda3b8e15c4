"""A reference-format task's evaluator, run in the scorer's sandbox (scorer_driver.py hands over to
run() here). Before the evaluator is imported, the stand-in `station` package (standin/ beside this
file) goes first on the import path, the task's constant_config.yaml values are set on its
constants, and its storage paths get a scratch folder in this run's working dir, the task's
storage/system linked into it read-only.

scorer.json's "action":
    check     import the evaluator, construct it, and compare what it asks of a submission with what
              the station read from its source: {"outcome": "checked", "missing", "problems"}
    validate  its validate_submission_code(content, author, agent_module) on the submitted file,
              before anything of it runs: {"outcome": "valid"} or {"outcome": "rejected", "message"}
    score     its evaluate_submission(result, eval_id, author) on what the submission returned
              (function mode) or printed (command mode): {"outcome": "reference", "success", "score",
              "details", "sort_key"} as plain data, or {"outcome": "rejected", "message"}

An AssertionError, ValueError, OverflowError or FloatingPointError out of evaluate_submission or
validate_submission_code rejects the submission (the values it was given could not be judged, as
for a native scorer); any other exception ends this run with an error: a scorer failure.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
from pathlib import Path
from typing import Any

STANDIN = Path(__file__).resolve().parent / "standin"
REJECTING = (AssertionError, ValueError, OverflowError, FloatingPointError)
TEXT_MAX_CHARS = 4000


def run(settings: dict[str, Any], task_dir: Path) -> dict[str, Any]:
    _stand_in(settings.get("config") or {}, task_dir)
    evaluator_file = task_dir / settings["scorer_file"]
    sys.path.insert(0, str(evaluator_file.parent))  # its own helper modules, as the reference finds them
    evaluator = _evaluator(evaluator_file, settings["class_name"])
    action = settings["action"]
    if action == "check":
        return _check(evaluator, settings["contract"])
    if action == "validate":
        return _validate(evaluator, Path("inputs", settings["filename"]).read_text(encoding="utf-8"))
    if settings["mode"] == "function":
        with open(os.path.join("inputs", "value.pkl"), "rb") as f:
            result = pickle.load(f)  # written by the station from the plain data the submission returned
    else:
        result = Path("inputs", "output.txt").read_text(encoding="utf-8")  # what the command printed
    try:
        answer = evaluator.evaluate_submission(result, settings.get("eval_id"), None)
    except REJECTING as err:
        return {"outcome": "rejected", "message": f"the evaluator could not judge the result ({_one_line(err)})"}
    return _answer(answer)


def _stand_in(config: dict[str, Any], task_dir: Path) -> None:
    for name in [n for n in sys.modules if n == "station" or n.startswith("station.")]:
        del sys.modules[name]  # whatever else is called `station` is not what the evaluator means
    sys.path.insert(0, str(STANDIN))
    constants = importlib.import_module("station.constants")  # the stand-in, found first

    for key, value in config.items():
        setattr(constants, key, value)
    research = Path(constants.BASE_STATION_DATA_PATH, constants.ROOMS_DIR_NAME, constants.SHORT_ROOM_NAME_RESEARCH)
    storage = research / constants.RESEARCH_STORAGE_DIR
    for folder in ("shared", "lineages"):
        (storage / folder).mkdir(parents=True, exist_ok=True)
    for folder in (constants.RESEARCH_INTERNAL_DIR, constants.RESEARCH_EVALUATIONS_SUBDIR_NAME):
        (research / folder).mkdir(parents=True, exist_ok=True)
    system = task_dir / "research" / "storage" / "system"
    link = storage / constants.RESEARCH_STORAGE_SYSTEM_DIR
    if system.is_dir() and not link.exists():
        link.symlink_to(system)  # the task folder's mount is read-only
    else:
        link.mkdir(exist_ok=True)


def _evaluator(path: Path, class_name: str) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return getattr(module, class_name)()


def _check(evaluator: Any, read: dict[str, Any]) -> dict[str, Any]:
    missing = [
        n for n in ("evaluate_submission", "get_expected_function_name") if not callable(getattr(evaluator, n, None))
    ]
    problems = []
    live = {"mode": evaluator.get_execution_mode(), "filename": evaluator.get_submission_filename()}
    if live["mode"] == "function":
        live["function"] = evaluator.get_expected_function_name()
    else:
        live["command"] = evaluator.get_execution_command()
    for key, value in live.items():
        if read.get(key) != value:
            problems.append(
                f"the evaluator's {key} is {value!r} when imported, {read.get(key)!r} as read from its source"
            )
    return {"outcome": "checked", "missing": missing, "problems": problems}


def _validate(evaluator: Any, content: str) -> dict[str, Any]:
    check = getattr(evaluator, "validate_submission_code", None)
    if not callable(check):
        return {"outcome": "valid"}
    try:
        answer = check(content, None, None)
    except REJECTING as err:
        return {"outcome": "rejected", "message": _one_line(err)}
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise TypeError(f"validate_submission_code() must return (is_valid, message), not {answer!r:.200}")
    if answer[0]:
        return {"outcome": "valid"}
    return {"outcome": "rejected", "message": _text(answer[1] or "the task's validate_submission_code refused it")}


def _answer(answer: Any) -> dict[str, Any]:
    if not isinstance(answer, (tuple, list)) or len(answer) not in (3, 4):
        raise TypeError(f"evaluate_submission() must return (success, score, details[, sort_key]), not {answer!r:.200}")
    success, score, details = answer[:3]
    sort_key = answer[3] if len(answer) == 4 else None
    if isinstance(details, dict):
        shown: Any = {str(k): _plain(v) for k, v in details.items()}
    else:
        shown = _text(details)
    return {
        "outcome": "reference",
        "success": bool(success),
        "score": _plain(score),
        "details": shown,
        "sort_key": [_plain(k) for k in sort_key] if isinstance(sort_key, (tuple, list)) else _plain(sort_key),
    }


def _plain(value: Any) -> Any:
    """A number stays a number (NumPy scalars become Python's), None stays None, a (text, raw value)
    pair keeps its raw value, anything else becomes short text."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        return _plain(item())
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return _plain(value[1])
    return _text(value)


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text[:TEXT_MAX_CHARS]


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:500]}" if lines else type(err).__name__
