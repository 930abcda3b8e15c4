"""A task folder in the reference station's own format, read and checked (docs/tasks.md, "The
reference station's folders").

Two layouts, both under the folder's research/:

    paper-era  research_tasks.yaml (a list of tasks: id, title, content = the text agents read),
               evaluators/task_<id>_evaluator.py (class Task<id>Evaluator), System baselines in
               pending_evaluations.yamll
    newer      research_task.md (the text agents read), evaluators/evaluator.py (the class that
               subclasses ResearchTaskEvaluator), System baselines in baseline.yamll

Either may hold storage/system/ (files every submission reads, read-only, at storage/system) and
the folder's root a constant_config.yaml (the reference's settings; those with a meaning here map
to ours, the others are listed as ignored). A folder holding both task texts is read as the newer
layout when it has evaluators/evaluator.py (its System baselines from pending_evaluations.yamll when
it has no baseline.yamll, as the reference's circle packing n=26 folder ships them), else as the
paper-era one, as the reference's own older registry reads it (its circle packing n=32 folder has
research_task.md beside task_1_evaluator.py and no evaluator.py).

What a submission must define (the evaluator's get_expected_function_name, get_execution_mode, ...)
is read here from the evaluator's source, never by importing it: the evaluator imports the
reference's own `station` package, which exists only inside the scorer's sandbox (standin/).
`station task check` imports it there and compares (reference_scorer.py).
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ...base import Baseline
from ..text_file import read_text

MAX_TEXT_CHARS = 100_000
MAX_CODE_CHARS = 200_000
BASE_CLASS = "ResearchTaskEvaluator"
CONTRACT_METHODS = (
    "get_expected_function_name",
    "get_execution_mode",
    "get_execution_command",
    "get_submission_filename",
    "get_secondary_metrics_format",
)
CODER_ONLY = re.compile(r"__CODER_ONLY_BEGIN__.*?__CODER_ONLY_END__", re.DOTALL)  # kept from agents
RESEARCH_TASK_PREFIX = re.compile(r"^Research Task( \w+)?:\s*", re.IGNORECASE)
MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)

# constant_config.yaml keys with a meaning here: the task.yaml setting each one sets
APPLIED = {
    "RESEARCH_EVAL_TIMEOUT": "resources.timeout_s",
    "RESEARCH_EVAL_CPU_NUM": "resources.cpus",
    "RESEARCH_EVAL_GPU_NUM": "resources.gpus",
    "RESEARCH_EVAL_MEMORY_LIMIT": "resources.memory_mb",
    "RESEARCH_SCORE_DISPLAY_PRECISION": "display_precision",
}
# keys that are the station's settings here, not a task's: task check names where they go
STATION_WIDE = {
    "RESEARCH_EVAL_MAX_TICK": "research.wait_ticks",
    "RESEARCH_SUBMISSION_COOLDOWN_TICKS": "research.cooldown_ticks",
    "RESEARCH_NO_SCORE": "research.no_score",
}


class ReferenceFolderError(ValueError):
    """The folder is not a usable reference-format task; the message names the file and the fix."""


@dataclass(frozen=True)
class Contract:
    """What the evaluator asks of a submission (the reference's defaults where it says nothing)."""

    function: str = ""
    mode: Literal["function", "command"] = "function"
    command: str = ""
    filename: str = "submission.py"
    metric_formats: dict[str, str | None] = field(default_factory=dict)
    validates: bool = False  # defines validate_submission_code


@dataclass(frozen=True)
class ReferenceTask:
    layout: Literal["paper", "newer"]
    task_id: str
    title: str
    statement: str
    evaluator_file: str  # relative to the folder
    text_file: str  # what agents read, relative to the folder
    baselines_file: str  # relative to the folder (it may not exist: no baselines)
    class_name: str
    contract: Contract
    baselines: tuple[Baseline, ...]
    config: dict[str, Any]  # constant_config.yaml as read (the stand-in's constants take it too)
    applied: dict[str, Any]  # our settings, by task.yaml path, from the config
    station_wide: dict[str, str]  # config key -> the station setting it corresponds to
    ignored: tuple[str, ...]  # config keys without a meaning here

    def describe(self) -> str:
        """Which layout and files were read, for `station task check`."""
        layout = "newer layout" if self.layout == "newer" else "paper-era layout"
        return f"{layout}: {self.text_file}, {self.evaluator_file}, baselines from {self.baselines_file}"

    @property
    def system_dir(self) -> str:
        return "research/storage/system"


def is_reference(folder: Path) -> bool:
    research = folder / "research"
    return (research / "research_task.md").is_file() or (research / "research_tasks.yaml").is_file()


def read_reference(folder: Path) -> ReferenceTask:
    research = folder / "research"
    config = _config(folder / "constant_config.yaml")
    newer_evaluator = (research / "evaluators" / "evaluator.py").is_file()
    if (research / "research_task.md").is_file() and (
        newer_evaluator or not (research / "research_tasks.yaml").is_file()
    ):
        layout: Literal["paper", "newer"] = "newer"
        task_id, statement = "1", _text(research / "research_task.md", MAX_TEXT_CHARS)
        title = _first_heading(statement) or folder.name.replace("_", " ")
        evaluator = research / "evaluators" / "evaluator.py"
        baselines_file = research / "baseline.yamll"
        if not baselines_file.is_file():  # a paper-era folder given the newer files keeps its queued baselines
            baselines_file = research / "pending_evaluations.yamll"
    else:
        layout = "paper"
        task_id, title, statement = _paper_task(research / "research_tasks.yaml")
        evaluator = research / "evaluators" / f"task_{task_id}_evaluator.py"
        baselines_file = research / "pending_evaluations.yamll"
    if not evaluator.is_file():
        raise ReferenceFolderError(f"{folder} is a reference-format task ({layout} layout) but has no {evaluator}")
    class_name, contract = _contract(evaluator, task_id)
    applied, station_wide, ignored = _map_config(config, folder / "constant_config.yaml")
    return ReferenceTask(
        layout=layout,
        task_id=task_id,
        title=title,
        statement=CODER_ONLY.sub("", statement),
        evaluator_file=str(evaluator.relative_to(folder)),
        text_file=f"research/{'research_task.md' if layout == 'newer' else 'research_tasks.yaml'}",
        baselines_file=str(baselines_file.relative_to(folder)),
        class_name=class_name,
        contract=contract,
        baselines=_baselines(baselines_file, task_id),
        config=config,
        applied=applied,
        station_wide=station_wide,
        ignored=ignored,
    )


def _paper_task(file: Path) -> tuple[str, str, str]:
    """The first task of research_tasks.yaml: (id, title, content). One folder is one task here."""
    try:
        tasks = yaml.safe_load(_text(file, MAX_TEXT_CHARS))
    except yaml.YAMLError as err:
        raise ReferenceFolderError(f"{file} is not valid YAML: {' '.join(str(err).split())}") from None
    if not isinstance(tasks, list) or not tasks or not isinstance(tasks[0], dict):
        raise ReferenceFolderError(f"{file}: the top level must be a list of tasks (id, title, content)")
    first = tasks[0]
    missing = [key for key in ("id", "content") if key not in first]
    if missing:
        raise ReferenceFolderError(f"{file}: the first task has no {', '.join(missing)}")
    task_id = str(first["id"]).strip()
    if not re.fullmatch(r"[A-Za-z0-9_]+", task_id):
        raise ReferenceFolderError(f"{file}: task id {task_id!r} must be letters, digits or _")
    title = str(first.get("title") or "").strip() or f"Research task {task_id}"
    return task_id, title, str(first["content"])


def _contract(evaluator: Path, task_id: str) -> tuple[str, Contract]:
    """The evaluator class and what its methods return, read from the source: each method that
    says something must return a literal (or a module-level constant holding one)."""
    try:
        tree = ast.parse(_text(evaluator, MAX_CODE_CHARS), filename=str(evaluator))
    except SyntaxError as err:
        raise ReferenceFolderError(f"{evaluator} is not valid Python: line {err.lineno}: {err.msg}") from None
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    named = f"Task{task_id}Evaluator"
    found = classes.get(named) or next(
        (node for node in classes.values() if any(_base_name(base) == BASE_CLASS for base in node.bases)), None
    )
    if found is None:
        raise ReferenceFolderError(f"{evaluator} defines no class {named} (nor any subclass of {BASE_CLASS})")
    constants = _module_constants(tree)
    methods = {node.name: node for node in found.body if isinstance(node, ast.FunctionDef)}
    read = {name: _returned(methods[name], constants, evaluator) for name in CONTRACT_METHODS if name in methods}
    mode = read.get("get_execution_mode", "function")
    if mode not in ("function", "command"):
        raise ReferenceFolderError(f"{evaluator}: get_execution_mode() returns {mode!r}, not 'function' or 'command'")
    formats = read.get("get_secondary_metrics_format") or {}
    if not isinstance(formats, dict) or not all(isinstance(v, (str, type(None))) for v in formats.values()):
        raise ReferenceFolderError(f"{evaluator}: get_secondary_metrics_format() must return a dict of format strings")
    contract = Contract(
        function=str(read.get("get_expected_function_name", "")),
        mode=mode,
        command=str(read.get("get_execution_command", "")),
        filename=str(read.get("get_submission_filename", "submission.py")),
        metric_formats={str(k): v for k, v in formats.items()},
        validates="validate_submission_code" in methods,
    )
    if mode == "function" and not contract.function.isidentifier():
        raise ReferenceFolderError(f"{evaluator}: get_expected_function_name() must return a function name")
    if mode == "command" and not contract.command.strip():
        raise ReferenceFolderError(f"{evaluator}: command mode needs get_execution_command() to return the command")
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\.py", contract.filename):
        raise ReferenceFolderError(f"{evaluator}: get_submission_filename() must return a plain .py file name")
    return found.name, contract


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, RecursionError):
                pass
    return found


def _returned(method: ast.FunctionDef, constants: dict[str, Any], file: Path) -> Any:
    """The value a get_...() method returns: its one return statement's literal."""
    returns = [node for node in ast.walk(method) if isinstance(node, ast.Return)]
    raises = any(isinstance(node, ast.Raise) for node in ast.walk(method))
    if not returns and raises:
        return None  # e.g. a command-mode-only method a function-mode task leaves unimplemented
    if len(returns) != 1 or returns[0].value is None:
        raise ReferenceFolderError(
            f"{file}: {method.name}() must return one literal value (a string, or a dict of strings), which the "
            "station reads without importing the evaluator"
        )
    value = returns[0].value
    if isinstance(value, ast.Name) and value.id in constants:
        return constants[value.id]
    try:
        return ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        raise ReferenceFolderError(
            f"{file}: {method.name}() returns an expression the station cannot read without importing the "
            f"evaluator (line {value.lineno}); return a literal instead"
        ) from None


def _baselines(file: Path, task_id: str) -> tuple[Baseline, ...]:
    """The System entries of a .yamll file (YAML documents separated by ---) for this task."""
    if not file.is_file():
        return ()
    try:
        documents = list(yaml.safe_load_all(_text(file, MAX_CODE_CHARS * 5)))
    except yaml.YAMLError as err:
        raise ReferenceFolderError(f"{file} is not valid YAML: {' '.join(str(err).split())}") from None
    found = []
    for number, entry in enumerate(documents, 1):
        if entry is None:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise ReferenceFolderError(f"{file}: entry {number} is not a mapping with a `content` text")
        if str(entry.get("research_task_id", task_id)) != task_id:
            continue  # a baseline of another task of research_tasks.yaml
        tags = entry.get("tags") or ["baseline"]
        found.append(
            Baseline(
                title=str(entry.get("title") or f"Baseline {entry.get('id', number)}"),
                tags=tuple(str(t) for t in tags) if isinstance(tags, list) else ("baseline",),
                abstract=str(entry.get("abstract") or f"Baseline {entry.get('id', number)} of {file.name}."),
                code=entry["content"],
            )
        )
    return tuple(found)


def _config(file: Path) -> dict[str, Any]:
    if not file.is_file():
        return {}
    try:
        data = yaml.safe_load(_text(file, MAX_TEXT_CHARS))
    except yaml.YAMLError as err:
        raise ReferenceFolderError(f"{file} is not valid YAML: {' '.join(str(err).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ReferenceFolderError(f"{file}: the top level must be a mapping of setting names")
    return data


def _map_config(config: dict[str, Any], file: Path) -> tuple[dict[str, Any], dict[str, str], tuple[str, ...]]:
    applied: dict[str, Any] = {}
    for key, value in config.items():
        if key not in APPLIED or (value is None and key != "RESEARCH_EVAL_MEMORY_LIMIT"):
            continue  # null: the reference's own default, which is ours too
        path = APPLIED[key]
        if key == "RESEARCH_EVAL_MEMORY_LIMIT":
            applied[path] = _memory_mb(value, file)
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ReferenceFolderError(f"{file}: {key} must be a non-negative number, not {value!r}")
        else:
            applied[path] = int(value) if key == "RESEARCH_SCORE_DISPLAY_PRECISION" else float(value)
    station_wide = {key: STATION_WIDE[key] for key in config if key in STATION_WIDE}
    ignored = tuple(sorted(key for key in config if key not in APPLIED and key not in STATION_WIDE))
    return applied, station_wide, ignored


def _memory_mb(value: Any, file: Path) -> int | None:
    """The reference's memory limit ("64g", "8g", None) in MB."""
    if value is None:
        return None
    found = MEMORY.match(str(value))
    if not found:
        raise ReferenceFolderError(f"{file}: RESEARCH_EVAL_MEMORY_LIMIT must be like '8g' or null, not {value!r}")
    scale = {"": 1 / (1 << 20), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1 << 20}[found.group(2).lower()]
    return max(64, int(float(found.group(1)) * scale))


def _text(file: Path, limit: int) -> str:
    return read_text(file, limit, ReferenceFolderError)


def _first_heading(markdown: str) -> str:
    """The first Markdown heading of any level, without the reference's "Research Task:" prefix."""
    for line in markdown.splitlines():
        if line.startswith("#"):
            return RESEARCH_TASK_PREFIX.sub("", line.lstrip("#").strip()).strip()
    return ""
