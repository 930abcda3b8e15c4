"""A research task given as a folder: what it holds, read and checked (docs/tasks.md).

Three formats are recognised:

    native      task.md, task.yaml, evaluate.py (the trusted scorer), and optionally
                data/ (read-only for submissions), private/ (the scorer's only) and baselines/*.py
    openevolve  evaluator.py (evaluate(program_path) -> metrics) and initial_program.py, optionally
                OpenEvolve's config (config.yaml, config_phase_1.yaml, ...: its evaluator and
                prompt sections are read), task.md and task.yaml
    shinka      ShinkaEvolve's evaluate.py (main(program_path, results_dir), writing metrics.json
                and correct.json) and initial.py, optionally task.md and task.yaml
    reference   the reference station's own: research/research_task.md or research_tasks.yaml, its
                evaluator under research/evaluators/, System baselines in a .yamll file (reference/)

Every problem is a TaskFolderError naming the file and what is wrong, so `station task check`
and a station's start-up both say exactly what to fix.
"""

from __future__ import annotations

import ast
import io
import math
import os
import re
import stat
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..base import Baseline
from .reference.folder import ReferenceFolderError, ReferenceTask, is_reference, read_reference
from .text_file import read_text

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FILENAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\.py$")
HEADER_LINE = re.compile(r"^#\s*(title|tags|abstract)\s*:\s*(.*)$", re.IGNORECASE)
MAX_STATEMENT_CHARS = 100_000
MAX_BASELINE_CHARS = 200_000
MAX_CHECKED_ENTRIES = 20_000  # permission checks stop there (big data/ folders)


class TaskFolderError(ValueError):
    """The folder is not a usable task; the message says which file and what to change."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmissionSettings(_Strict):
    mode: Literal["function", "command"] = "function"
    entry: str = Field("main", min_length=1, description="function mode: a function name; command mode: a command")
    filename: str = "submission.py"

    @field_validator("filename")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not FILENAME.match(value):
            raise ValueError("must be a plain Python file name such as submission.py")
        return value


class Resources(_Strict):
    timeout_s: float = Field(600.0, gt=0, le=7 * 24 * 3600)
    memory_mb: int | None = Field(4096, ge=64)
    cpus: float = Field(1.0, gt=0, le=256)
    gpus: float = Field(0.0, ge=0, le=16)


class ScorerSettings(_Strict):
    timeout_s: float = Field(300.0, gt=0, le=24 * 3600)
    memory_mb: int | None = Field(4096, ge=64)
    metric: str = Field("combined_score", min_length=1, description="openevolve, shinka: the metric that is the score")


class TaskSettings(_Strict):
    """task.yaml."""

    title: str = Field("", max_length=200)
    description: str = Field("", max_length=500)
    submission: SubmissionSettings = Field(default_factory=SubmissionSettings)
    resources: Resources = Field(default_factory=Resources)
    scorer: ScorerSettings = Field(default_factory=ScorerSettings)
    higher_is_better: bool = True
    score_name: str = Field("score", min_length=1, max_length=60)
    display_precision: int = Field(4, ge=0, le=17)
    metrics: dict[str, str] = Field(default_factory=dict, description="secondary metric -> format, e.g. '.3f'")
    score_range: tuple[float, float] | None = Field(None, description="[low, high]: where every valid score lies")
    config: str = Field("", description="openevolve: which of the folder's config*.yaml files to read")
    program_process: Literal["apart", "shared"] = Field(
        "apart",
        description="openevolve, shinka: 'shared' runs the program in its evaluator's own process, for an "
        "evaluator that hands it objects, not plain data (the score is then not isolated from the program)",
    )

    @field_validator("score_range")
    @classmethod
    def _range(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not (math.isfinite(value[0]) and math.isfinite(value[1]) and value[0] < value[1]):
            raise ValueError("must be [low, high], two finite numbers with low < high")
        return value

    @field_validator("metrics")
    @classmethod
    def _formats(cls, value: dict[str, str]) -> dict[str, str]:
        for name, spec in value.items():
            try:
                format(1.5, spec)
            except ValueError:
                raise ValueError(f"{name}: {spec!r} is not a number format such as '.3f'") from None
        return value


# OpenEvolve's defaults when its config says nothing (or there is no config)
CASCADE_THRESHOLDS = (0.5, 0.75, 0.9)
FEATURE_DIMENSIONS = ("complexity", "diversity")  # database.feature_dimensions: left out of its mean
# OpenEvolve's config files, by the names its examples use, in the order one is chosen
CONFIG_NAMES = ("config.yaml", "config_phase_1.yaml")
EVOLVE_START, EVOLVE_END = "EVOLVE-BLOCK-START", "EVOLVE-BLOCK-END"
PYTHON_LINES = re.compile(r"\r\n|\r|\n")  # the only line breaks Python honours


@dataclass(frozen=True)
class Cascade:
    """OpenEvolve's cascade: evaluate_stage1, 2, 3 in turn while the score passes each threshold."""

    enabled: bool = False
    thresholds: tuple[float, ...] = ()


@dataclass(frozen=True)
class TaskFolder:
    path: Path  # absolute
    format: Literal["native", "openevolve", "shinka", "reference"]
    settings: TaskSettings
    statement: str  # task.md, or what the OpenEvolve or ShinkaEvolve folder offers instead
    baselines: tuple[Baseline, ...]
    cascade: Cascade = Cascade()
    stages: tuple[str, ...] = ()  # openevolve: the evaluator's functions, in the order they may run
    config_file: str = ""  # openevolve: the config read ("" when there is none)
    configs: tuple[str, ...] = ()  # openevolve: every config*.yaml the folder holds
    feature_dimensions: tuple[str, ...] = ()  # openevolve: metrics its mean of the metrics leaves out
    frame: str = ""  # shinka: the initial program with its EVOLVE-BLOCKs emptied, which a program must keep
    reference: ReferenceTask | None = None  # reference: the folder as the reference station reads it

    @property
    def scorer_file(self) -> str:
        if self.reference is not None:
            return self.reference.evaluator_file
        return "evaluator.py" if self.format == "openevolve" else "evaluate.py"

    @property
    def entry_points(self) -> tuple[str, ...]:
        """The functions the scorer must define."""
        fixed = {"native": ("evaluate",), "shinka": ("main",), "reference": ("evaluate_submission",)}
        return fixed.get(self.format, self.stages)

    @property
    def runs_program(self) -> bool:
        """The evaluator runs the program itself (OpenEvolve, ShinkaEvolve): the two share a sandbox."""
        return self.format in ("openevolve", "shinka")

    @property
    def program_apart(self) -> bool:
        """The program runs in a process of its own, apart from its evaluator (unless task.yaml says
        `program_process: shared`): the evaluator's loading of it gives a stand-in module."""
        return self.runs_program and self.settings.program_process == "apart"

    @property
    def mean_rule(self) -> bool:
        """OpenEvolve's rule applies: without a numeric combined_score the score is the mean of the
        numeric metrics (an OpenEvolve folder whose task.yaml names no `scorer.metric`)."""
        return self.format == "openevolve" and "metric" not in self.settings.scorer.model_fields_set

    @property
    def data_dir(self) -> Path | None:
        found = self.path / "data"
        return found if found.is_dir() else None

    @property
    def private_dir(self) -> Path | None:
        found = self.path / "private"
        return found if found.is_dir() else None


def read_folder(path: str | Path) -> TaskFolder:
    """The task folder at `path`, checked; a TaskFolderError says what is missing or wrong."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise TaskFolderError(f"task folder {folder} does not exist or is not a folder")
    folder = folder.resolve()
    if is_reference(folder):
        _check_readable(folder)
        return _reference(folder)
    if not (folder / "evaluate.py").is_file() and not (folder / "evaluator.py").is_file():
        raise TaskFolderError(
            f"{folder} holds neither evaluate.py (a Station or ShinkaEvolve task) nor evaluator.py (an "
            "OpenEvolve task); see docs/tasks.md for what a task folder holds"
        )
    _check_readable(folder)
    if not (folder / "evaluate.py").is_file():
        return _openevolve(folder)
    if (folder / "initial.py").is_file() and {"main"} <= _top_level_names(folder / "evaluate.py") - {"evaluate"}:
        return _shinka(folder)
    return _native(folder)


def _check_readable(folder: Path) -> None:
    """Run as root, the sandbox gives each run an unprivileged uid of its own, which reads the task
    folder as "others" do: say so now rather than fail every evaluation later."""
    if os.geteuid() != 0:
        return  # runs read the folder as this user (or, in a user namespace, as its mapped root)
    closed: list[str] = []
    checked = 0
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            path = Path(root, name)
            mode = path.lstat().st_mode
            need = (stat.S_IROTH | stat.S_IXOTH) if stat.S_ISDIR(mode) else stat.S_IROTH
            if not stat.S_ISLNK(mode) and mode & need != need:
                closed.append(str(path.relative_to(folder)))
            checked += 1
        if checked > MAX_CHECKED_ENTRIES:
            break
    if os.stat(folder).st_mode & 0o005 != 0o005:
        closed.insert(0, ".")
    if closed:
        shown = ", ".join(closed[:5]) + (f" and {len(closed) - 5} more" if len(closed) > 5 else "")
        raise TaskFolderError(
            f"sandboxed runs cannot read parts of {folder}: {shown}. Runs use an unprivileged user of their own "
            f"(submissions never see the folder, only data/; the scorer reads all of it): chmod -R o+rX '{folder}'"
        )


def _native(folder: Path) -> TaskFolder:
    settings = _settings(folder, required=False)  # every setting has a default
    statement = _text(folder / "task.md", MAX_STATEMENT_CHARS, required=True)
    if not settings.title:
        settings = settings.model_copy(update={"title": _first_heading(statement) or folder.name})
    baselines = tuple(_baseline(file) for file in sorted((folder / "baselines").glob("*.py")))
    return TaskFolder(folder, "native", settings, statement, baselines)


def _reference(folder: Path) -> TaskFolder:
    """A folder in the reference station's format (reference/folder.py), its settings from what its
    evaluator asks and its constant_config.yaml."""
    from .reference.judging import metric_formats

    try:
        found = read_reference(folder)
    except ReferenceFolderError as err:
        raise TaskFolderError(str(err)) from None
    contract = found.contract
    entry = contract.function if contract.mode == "function" else contract.command
    data: dict[str, Any] = {
        "title": found.title[:200],
        "submission": {"mode": contract.mode, "entry": entry, "filename": contract.filename},
        "metrics": metric_formats(contract.metric_formats),
    }
    for path, value in found.applied.items():
        section, _, key = path.rpartition(".")
        (data.setdefault(section, {}) if section else data)[key] = value
    try:
        settings = TaskSettings.model_validate(data)
    except ValidationError as err:
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise TaskFolderError(
            f"{folder / 'constant_config.yaml'} gives a setting this station refuses: {where}"
        ) from None
    return TaskFolder(folder, "reference", settings, found.statement, found.baselines, reference=found)


def _openevolve(folder: Path) -> TaskFolder:
    program = folder / "initial_program.py"
    if not program.is_file():
        raise TaskFolderError(f"{folder} has an OpenEvolve evaluator.py but no initial_program.py")
    settings = _settings(folder, required=False)
    config_file = _config_file(folder, settings.config)
    config = _yaml(folder / config_file, required=False) if config_file else {}
    evolve = _evaluator_section(config, folder / config_file)
    scorer = settings.scorer
    if "timeout" in evolve and "scorer" not in _yaml(folder / "task.yaml", required=False):
        scorer = scorer.model_copy(update={"timeout_s": float(evolve["timeout"])})
    updates: dict[str, Any] = {"scorer": scorer, "title": settings.title or folder.name.replace("_", " ")}
    settings = settings.model_copy(update=updates)
    statement = _text(folder / "task.md", MAX_STATEMENT_CHARS, required=False) or _evolve_statement(
        folder, program, _system_message(config)
    )
    initial = _initial_baseline(program)
    thresholds = evolve.get("cascade_thresholds", list(CASCADE_THRESHOLDS))
    if not isinstance(thresholds, list) or not all(isinstance(t, (int, float)) for t in thresholds):
        raise TaskFolderError(f"{folder / config_file}: evaluator.cascade_thresholds must be a list of numbers")
    cascade = Cascade(bool(evolve.get("cascade_evaluation", True)), tuple(float(t) for t in thresholds))
    stages = _stages(folder, cascade)
    configs = tuple(sorted(p.name for p in folder.glob("config*.yaml") if p.is_file()))
    features = _feature_dimensions(config, folder / config_file)
    return TaskFolder(
        folder,
        "openevolve",
        settings,
        statement,
        (initial,),
        cascade,
        stages,
        config_file,
        configs=configs,
        feature_dimensions=features,
    )


def _shinka(folder: Path) -> TaskFolder:
    """A ShinkaEvolve folder: evaluate.py's main(program_path, results_dir) and initial.py."""
    settings = _settings(folder, required=False)
    settings = settings.model_copy(update={"title": settings.title or folder.name.replace("_", " ")})
    program = folder / "initial.py"
    code = _text(program, MAX_BASELINE_CHARS, required=True)
    frame = evolve_frame(code)
    if frame is None or (frame and frame_tokens(code) is None):
        raise TaskFolderError(
            f"{program}: an {EVOLVE_START} marker has no {EVOLVE_END} after it (or the reverse), or the program "
            "does not tokenize as Python"
        )
    statement = _text(folder / "task.md", MAX_STATEMENT_CHARS, required=False) or _evolve_statement(
        folder, program, _docstring(folder / "evaluate.py")
    )
    return TaskFolder(folder, "shinka", settings, statement, (_initial_baseline(program),), frame=frame)


def evolve_frame(code: str) -> str | None:
    """`code` with what lies between each EVOLVE-BLOCK-START and -END line left out (the part a
    program may change); "" when it has no markers (all of it may change); None when the markers
    do not pair up. Text, for readers: whether a program kept the frame is decided on what Python
    runs (frame_tokens)."""
    if EVOLVE_START not in code and EVOLVE_END not in code:
        return ""
    kept: list[str] = []
    inside = False
    for line in PYTHON_LINES.split(code):  # not splitlines(): Python breaks lines only at \n and \r
        if EVOLVE_START in line or EVOLVE_END in line:
            if (EVOLVE_START in line) == inside:
                return None
            inside = not inside
            kept.append(line.strip())
        elif not inside and line.strip():  # blank lines and trailing spaces do not count
            kept.append(line.rstrip())
    return None if inside else "\n".join(kept).strip()


Token = tuple[str, str | int]


def frame_tokens(code: str) -> tuple[Token, ...] | None:
    """What Python runs outside the EVOLVE-BLOCKs, as tokens: each logical line's nesting depth and
    its tokens, with the block markers (comments holding EVOLVE-BLOCK-START / -END) in place;
    other comments, blank lines and indentation width do not count. None when the code does not
    tokenize or its markers do not pair up. Two programs with equal frame_tokens run the same
    code outside their blocks, whatever their text looks like (a frame folded into a comment or
    a string is not among its tokens)."""
    text = code.replace("\r\n", "\n").replace("\r", "\n")  # as Python reads a source file
    kept: list[Token] = []
    inside, depth, line_start = False, 0, True
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            kind = token.type
            if kind in (tokenize.INDENT, tokenize.DEDENT):
                depth += 1 if kind == tokenize.INDENT else -1
            elif kind == tokenize.COMMENT:
                marker = _marker(token.string)
                if marker is not None:
                    if (marker == EVOLVE_START) == inside:
                        return None
                    inside = not inside
                    kept.append(("marker", marker))
            elif kind != tokenize.NL:
                if not inside:
                    kept.extend(_frame_token(token, depth, line_start))
                line_start = kind == tokenize.NEWLINE
    except (tokenize.TokenError, SyntaxError):  # an unclosed bracket or string, an inconsistent dedent
        return None
    return None if inside else tuple(kept)


def _marker(comment: str) -> str | None:
    if EVOLVE_START in comment and EVOLVE_END in comment:
        return None  # a comment naming both marks no block (the textual view would refuse it)
    return EVOLVE_START if EVOLVE_START in comment else EVOLVE_END if EVOLVE_END in comment else None


def _frame_token(token: tokenize.TokenInfo, depth: int, line_start: bool) -> list[Token]:
    """A token outside the blocks; a logical line's first token is preceded by its depth, which says
    which statement it belongs to (where INDENT and DEDENT tokens fall depends on the blocks)."""
    name = tokenize.tok_name[token.type]
    shown: Token = (name, "") if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER) else (name, token.string)
    return [("depth", depth), shown] if line_start and token.type != tokenize.ENDMARKER else [shown]


def _initial_baseline(program: Path) -> Baseline:
    return Baseline(
        title="Initial program",
        tags=("baseline", "initial program"),
        abstract=f"The task's {program.name}, as the task folder ships it.",
        code=_text(program, MAX_BASELINE_CHARS, required=True),
    )


def _top_level_names(file: Path) -> set[str]:
    """The names a scorer file defines at its top level (functions, imports, assignments), read from
    the source, not imported."""
    try:
        tree = ast.parse(_text(file, MAX_BASELINE_CHARS * 5, required=True), filename=str(file))
    except SyntaxError as err:
        raise TaskFolderError(f"{file} is not valid Python: line {err.lineno}: {err.msg}") from None
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return defined


def _docstring(file: Path) -> str:
    try:
        return ast.get_docstring(ast.parse(_text(file, MAX_BASELINE_CHARS * 5, required=True))) or ""
    except SyntaxError as err:
        raise TaskFolderError(f"{file} is not valid Python: line {err.lineno}: {err.msg}") from None


def _stages(folder: Path, cascade: Cascade) -> tuple[str, ...]:
    """evaluate_stage1, 2, 3 (as far as they are defined) with cascade evaluation and a stage 1,
    else evaluate. Read from the source, not imported: the station decides the cascade itself."""
    defined = _top_level_names(folder / "evaluator.py")
    if not (cascade.enabled and "evaluate_stage1" in defined):
        return ("evaluate",)
    stages = ["evaluate_stage1"]
    while len(stages) < 3 and f"evaluate_stage{len(stages) + 1}" in defined:
        stages.append(f"evaluate_stage{len(stages) + 1}")
    return tuple(stages)


def exposure_warnings(folder: Path) -> list[str]:
    """Ways the folder's private answers may be readable elsewhere than in the folder itself: a
    private/ (or a file in it) that is a link, and a folder inside a git repository."""
    notes = []
    private = folder / "private"
    links = [private] if private.is_symlink() else _links_under(private)
    for link in links[:3]:
        shown = link.relative_to(folder)
        notes.append(
            f"{shown} is a symbolic link (to {os.readlink(link)}): only the task folder itself is kept from "
            "submissions, so the answers are only as hidden as the place the link points to, and the scorer's "
            f"sandbox, which shows the task folder alone, may not reach them. Replace the link by the files "
            f"themselves (a real {shown} inside the task folder)."
        )
    repository = next((p for p in (folder, *folder.parents) if (p / ".git").exists()), None)
    if repository is not None and (private.is_dir() or private.is_symlink()):  # no private/: nothing to keep out
        notes.append(
            f"the task folder is inside the git repository {repository}: whatever of it was ever committed "
            f"(private/ included) is also in {repository / '.git'}'s object store, readable by anyone who can "
            "read the repository, long after the files themselves change. Keep the answers out of git: list "
            "private/ in .gitignore before the first commit (if it was committed, remove it from the history, "
            "or make new answers), or keep the task folder outside any repository."
        )
    return notes


def _links_under(folder: Path) -> list[Path]:
    found: list[Path] = []
    if not folder.is_dir():
        return found
    for checked, (root, dirs, files) in enumerate(os.walk(folder)):
        found += [Path(root, n) for n in (*dirs, *files) if Path(root, n).is_symlink()]
        if checked > MAX_CHECKED_ENTRIES:
            break
    return found


def _settings(folder: Path, *, required: bool) -> TaskSettings:
    data = _yaml(folder / "task.yaml", required=required)
    try:
        return TaskSettings.model_validate(data)
    except ValidationError as err:
        lines = [f"{folder / 'task.yaml'} is not valid:"]
        for e in err.errors():
            where = ".".join(str(p) for p in e["loc"]) or "(top level)"
            what = "unknown key" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
            lines.append(f"  {where}: {what}")
        raise TaskFolderError("\n".join(lines)) from None


def _yaml(file: Path, *, required: bool) -> dict[str, Any]:
    text = _text(file, MAX_STATEMENT_CHARS, required=required)
    if not text:
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise TaskFolderError(f"{file} is not valid YAML: {' '.join(str(err).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TaskFolderError(f"{file}: the top level must be a mapping")
    return data


def _config_file(folder: Path, chosen: str) -> str:
    """Which OpenEvolve config to read: task.yaml's `config`, else config.yaml, else the first phase's
    (config_phase_1.yaml), else the only config*.yaml; "" when the folder has none."""
    found = sorted(p.name for p in folder.glob("config*.yaml") if p.is_file())
    if chosen:
        if chosen not in found:
            shown = ", ".join(found) or "none"
            raise TaskFolderError(
                f"{folder / 'task.yaml'}: config {chosen!r} is not among the folder's configs ({shown})"
            )
        return chosen
    named = [name for name in CONFIG_NAMES if name in found]
    if named:
        return named[0]
    if len(found) > 1:
        raise TaskFolderError(
            f"{folder} has several OpenEvolve configs ({', '.join(found)}): choose one in task.yaml (config: NAME)"
        )
    return found[0] if found else ""


def _evaluator_section(config: dict[str, Any], file: Path) -> dict[str, Any]:
    """The `evaluator` section of an OpenEvolve config (timeout, cascade), when there is one."""
    section = config.get("evaluator") or {}
    if not isinstance(section, dict):
        raise TaskFolderError(f"{file}: evaluator must be a mapping")
    return section


def _feature_dimensions(config: dict[str, Any], file: Path) -> tuple[str, ...]:
    """The config's `database.feature_dimensions` (OpenEvolve's MAP-Elites axes), or its default."""
    database = config.get("database") or {}
    found = database.get("feature_dimensions", list(FEATURE_DIMENSIONS)) if isinstance(database, dict) else None
    if not isinstance(found, list) or not all(isinstance(name, str) for name in found):
        raise TaskFolderError(f"{file}: database.feature_dimensions must be a list of metric names")
    return tuple(found)


def _system_message(config: dict[str, Any]) -> str:
    prompt = config.get("prompt") or {}
    return str(prompt.get("system_message", "") if isinstance(prompt, dict) else "").strip()


def _evolve_statement(folder: Path, program: Path, message: str) -> str:
    """What agents read when an OpenEvolve or ShinkaEvolve folder has no task.md: the system message
    (or the evaluator's description), and the initial program, its EVOLVE-BLOCKs named."""
    code = _text(program, MAX_BASELINE_CHARS, required=True)
    title = folder.name.replace("_", " ")
    blocks = (
        f"\n\nThe part meant to change lies between the `{EVOLVE_START}` and `{EVOLVE_END}` comments; "
        "the rest is the frame the evaluator relies on."
        if EVOLVE_START in code
        else ""
    )
    return (
        f"# {title}\n\n{message or 'Improve the program below.'}\n\n"
        f"## The initial program\n```python\n{code.rstrip()}\n```{blocks}\n"
    )


def _text(file: Path, limit: int, *, required: bool) -> str:
    if not file.is_file():
        if required:
            raise TaskFolderError(f"{file.parent} has no {file.name}")
        return ""
    return read_text(file, limit, TaskFolderError)


def _first_heading(markdown: str) -> str:
    for line in markdown.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def _baseline(file: Path) -> Baseline:
    """A baseline program; its leading `# title:`, `# tags:` and `# abstract:` lines describe it
    (an abstract may go on over further `#` lines)."""
    code = _text(file, MAX_BASELINE_CHARS, required=True)
    fields = {"title": "", "tags": "", "abstract": ""}
    current = None
    for line in code.splitlines():
        if not line.startswith("#"):
            break
        found = HEADER_LINE.match(line)
        if found:
            current = found.group(1).lower()
            fields[current] = found.group(2).strip()
        elif current == "abstract" and line.strip("# "):
            fields["abstract"] += " " + line.lstrip("#").strip()
    tags = tuple(t.strip() for t in fields["tags"].split(",") if t.strip()) or ("baseline",)
    title = fields["title"] or file.stem.replace("_", " ")
    return Baseline(title=title, tags=tags, abstract=fields["abstract"] or f"Baseline {file.name}.", code=code)
