"""A research task from a folder (docs/tasks.md): the submission runs, then the task's scorer judges it.

Native folders: two sandboxed runs through the station's executor, never sharing a process or a
writable file:

1. the submission, with the task's data/ read-only and an empty, writable outputs/;
2. the scorer (scorer_driver.py calling the folder's evaluate.py), with the task folder (private/
   included), a copy of the submission's regular output files and what its function returned,
   all read-only.

The submission never sees the task folder: the executor hides it, and shows only data/. So it
cannot read private/ or import the scorer, and anything it leaves behind (a link, a process, a
later write) cannot reach the copy the scorer reads. Only the scorer's small answer comes back.
A scorer that crashes, hangs, or answers without a finite score raises ScorerFailure: the
station records a scorer failure, alerts the operator and charges the agent nothing.

OpenEvolve and ShinkaEvolve folders: the evaluator runs the program itself, so the two share a
run. Each evaluator function (evaluate, one cascade stage, or ShinkaEvolve's main) is a run of its
own that hands back plain metrics; the station decides the cascade and computes the score here,
where the program cannot reach. Within that run the program runs apart from its evaluator: in the
run's companion (a root and a uid of its own), the evaluator's loading of the program giving it a
stand-in module whose functions call there, plain data crossing (evaluators/folder/apart). A task
whose evaluator hands the program objects declares `program_process: shared` in task.yaml: then
the program runs in the evaluator's own process, and the agents' contract says the score is not
isolated. What the evaluator hands back once it has the program is the program's doing as much as
the evaluator's: a failure from then on counts as the program's (scorer_driver.READY marks the point).
"""

from __future__ import annotations

import json
import math
import pickle
from dataclasses import replace
from pathlib import Path
from typing import Any

from station.core.run_types import Companion, Mount, RunResult, RunSpec
from station.executors.runfiles import Bounds, Refused, copy_tree, run_folder, work_base, work_folder

from .. import certificate
from ..base import Baseline, ScorerFailure, Task, Verdict, register
from ..source_text import unhonoured_line_break
from .layout import EVOLVE_END, EVOLVE_START, TaskFolder, frame_tokens, read_folder
from .reference import judging as reference
from .scorer_driver import READY

DRIVER = Path(__file__).with_name("scorer_driver.py")
COMPAT = Path(__file__).with_name("compat")  # openevolve.evaluation_result and shinka.core, for the scorer
APART = Path(__file__).with_name("apart")  # the program host (the companion) and the evaluator's stand-in
REFERENCE = Path(__file__).with_name("reference")  # a reference-format evaluator's runner and stand-in `station`
DETAILS_MAX_CHARS = 4000
METRICS_MAX = 50
MEAN_NOTE_START = "Score: the MEAN of"  # an evaluation's details begin so when OpenEvolve's mean made the score


class NotChecked(Exception):
    """The machine could not run a check (a system error): nothing is known of the scorer."""


@register("folder")
class FolderTask(Task):
    """`research.tasks: [{folder: path}]` is the evaluator "folder" with params {path: ...}."""

    def __init__(self, path: str) -> None:
        folder = read_folder(path)
        self.folder: TaskFolder = folder
        settings = folder.settings
        self.title, self.description = settings.title, settings.description or settings.title
        self.mode, self.entry = settings.submission.mode, settings.submission.entry
        self.filename = settings.submission.filename
        resources = settings.resources
        self.timeout_s, self.memory_mb = resources.timeout_s, resources.memory_mb
        if folder.runs_program:  # the candidate program runs inside the evaluator's own run
            self.mode, self.filename = "function", "program.py"
            self.entry = f"{folder.entry_points[0]}(program_path) of {folder.scorer_file}"
            self.timeout_s, self.memory_mb = settings.scorer.timeout_s, settings.scorer.memory_mb
        self.num_cpus, self.num_gpus = resources.cpus, resources.gpus
        self.display_precision = settings.display_precision
        self.metric_formats = dict(settings.metrics)

    # -- what agents read ----------------------------------------------------------------------
    def spec(self) -> str:
        return f"{self.folder.statement.rstrip()}\n\n{self._contract()}"

    def _contract(self) -> str:
        s = self.folder.settings
        better = "higher is better" if s.higher_is_better else "lower is better"
        if self.folder.reference is not None:
            return reference.contract(self)
        if self.folder.runs_program:
            return self._evolve_contract(better)
        if self.mode == "function":
            run = (
                f"Submit a Python file (`{self.filename}`) defining `{self.entry}()`, called with no arguments. "
                "What it returns (numbers, strings, lists, dicts, NumPy arrays) is handed to the task's scorer; "
                "files it writes under `outputs/` are handed over too."
            )
        else:
            run = (
                f"Submit a Python file (`{self.filename}`); the station runs `{self.entry}` in its working "
                "directory. The task's scorer reads the files it leaves under `outputs/`."
            )
        data = "The task's data is in `data/` (read-only). " if self.folder.data_dir else ""
        sign = (
            "" if s.higher_is_better else f" The leaderboard shows minus the {s.score_name}, so that higher is better."
        )
        limits = f"{self.timeout_s:g} s of wall-clock time, {self._memory()}, {self.num_cpus:g} CPU core(s)"
        limits += f", {self.num_gpus:g} GPU(s)" if self.num_gpus else ", no GPU"
        return (
            "## How submissions run and are scored\n"
            f"{run} {data}\n\n"
            f"The score is the {s.score_name} ({better}).{sign} It is computed by the task's own scorer in a "
            "separate sandbox, from what your run returned or left in `outputs/`: printing a score changes "
            "nothing. If the scorer rejects the result (a value it cannot use: the wrong shape, not finite, "
            "too large), you get its reason, and the evaluation counts as failed.\n\n"
            f"Limits per run: {limits}. Files kept between runs go under `storage/` (see the storage rules).\n"
        )

    def _evolve_contract(self, better: str) -> str:
        stages = self.folder.stages
        if self.folder.format == "shinka":
            calls = "`main(program_path, results_dir)`, which runs your program's experiment and writes its metrics"
        elif len(stages) == 1:
            calls = f"`{stages[0]}(program_path)`"
        else:
            calls = (
                ", then ".join(f"`{f}`" for f in stages) + " (each stage only while the previous one's score "
                "reaches its threshold)"
            )
        limits = f"{self.timeout_s:g} s of wall-clock time per call, {self._memory()}, {self.num_cpus:g} CPU core(s)"
        limits += f", {self.num_gpus:g} GPU(s)" if self.num_gpus else ", no GPU"
        return (
            "## How submissions run and are scored\n"
            "Submit a complete Python program (it replaces the task's initial program). The task's evaluator "
            f"calls {calls} on it, each call in a fresh sandbox, and hands back its metrics. The station computes "
            f"the score from them, outside that sandbox: {self._score_rule(better)}"
            f"{self._range_text()} {self._rejections()}{self._frame_rule()}\n\n"
            f"{self._isolation_text()}\n\n"
            f"Limits: {limits}. Files kept between runs go under `storage/` (see the storage rules).\n"
        )

    def _score_rule(self, better: str) -> str:
        metric = self.folder.settings.scorer.metric
        if not self.folder.mean_rule:
            return f"the score is the `{metric}` metric ({better}); a program without it is rejected."
        left_out = ", ".join(f"`{name}`" for name in self.folder.feature_dimensions) or "none"
        return (
            f"the score is the `{metric}` metric ({better}). **When the evaluator hands back no numeric "
            f"`{metric}`, the score is the mean of all its numeric metrics**, whatever each one measures "
            "(OpenEvolve's rule: numbers and booleans count; NaN and texts such as an `error` do not, nor the "
            f"MAP-Elites feature dimensions: {left_out}); each evaluation's details name the metrics averaged."
        )

    def _isolation_text(self) -> str:
        if self.folder.program_apart:
            return (
                "What is isolated: your program runs in a process of its own, apart from the evaluator (its own "
                "file system view and user; it does not see the task folder). The evaluator calls your program's "
                "functions through a stand-in: arguments and results cross as plain data only (None, numbers, "
                "strings, bytes, lists, tuples, dicts, NumPy arrays of numbers); any other value (a generator, an "
                "object of your own class) is refused with an error naming its type. What your program prints is "
                "passed on; Python's and NumPy's global random generators are handed to your program with each "
                "call and back with the answer. A run that fails in any way after the evaluator was handed your "
                "program counts against your program, and your program's source is stored with its evaluation."
            )
        return (
            "What is isolated and what is not: the sandbox keeps your program from the station, other runs, the "
            "network and API keys, but not from the evaluator. Your program runs inside the evaluator's sandbox, "
            "inside the evaluator's own process (this task declares that its evaluator needs it there), so code in "
            "it could change what the evaluator measures or hands back, and the station cannot tell such metrics "
            "from honest ones: the score is not isolated from your program. What the station does: it "
            "computes the score itself, so nothing in the sandbox sets the score directly; only numbers count; a "
            "metric that is not a finite number, and a run that fails in any way after the evaluator was handed "
            "your program (an exception, an exit, a killed process), count against your program; and your "
            "program's source is stored with its evaluation, where it can be read. Changing the evaluator's "
            "measurements is cheating, not research."
        )

    def program_isolation(self) -> str:
        """For `station task check`: whether an evolve program runs apart from its evaluator, and why
        ("" for a native folder, whose submission never shares the scorer's run)."""
        if not self.folder.runs_program:
            return ""
        if self.folder.program_apart:
            return (
                "runs apart from its evaluator, in a process of its own (the run's companion: its own root, "
                "and its own uid where the sandbox gives runs uids); the evaluator's loading of it gives a "
                "stand-in module, and only plain data crosses between them"
            )
        return (
            "shares its evaluator's process (task.yaml says program_process: shared): it can change what the "
            "evaluator measures, so the score is not isolated from the program"
        )

    def _rejections(self) -> str:
        if self.folder.format == "shinka":
            return "A result the evaluator marks as not correct rejects the program, with its reason."
        return "A string `error` metric, or a `ValueError`, rejects the program."

    def _frame_rule(self) -> str:
        if not self.folder.frame:
            return ""
        return (
            f" Only the code between the `{EVOLVE_START}` and `{EVOLVE_END}` comments may change: a program "
            "whose code outside them differs from the initial program's is rejected before it runs."
        )

    def _memory(self) -> str:
        return f"{self.memory_mb} MB of memory" if self.memory_mb else "no memory cap"

    def baselines(self) -> list[Baseline]:
        return list(self.folder.baselines)

    def private_paths(self) -> list[Path]:
        return [self.folder.path]  # the whole folder: submissions see data/ only, through its mount

    def data_mounts(self) -> list[Mount]:
        data = self.folder.data_dir
        return [Mount(data, "data")] if data else []

    # -- the two runs ----------------------------------------------------------------------------
    def execute(
        self, executor: Any, code: str, *, mounts: list[Mount], label: str, cpu_only: bool = False
    ) -> RunResult:
        if self.folder.reference is not None:
            return reference.execute(self, executor, code, mounts=mounts, label=label, cpu_only=cpu_only)
        with work_folder(work_base(executor), label) as work:
            inputs, outputs, copied = Path(work, "inputs"), Path(work, "outputs"), Path(work, "outputs-copy")
            for folder in (inputs, copied):
                folder.mkdir()
            run_folder(outputs)  # the executor shares it with the sandbox's group when it mounts it
            (inputs / self.filename).write_text(code, encoding="utf-8")
            if self.folder.runs_program:
                moved = self._outside_the_blocks(code)
                if moved:
                    return RunResult(status="ok", value={"rejected": moved})
                return self._evaluate_program(executor, inputs, copied, label)
            writable = Mount(outputs, "outputs", writable=True)
            spec = self.run_spec(code, mounts=[*mounts, writable], label=label, cpu_only=cpu_only)
            ran = executor.run(spec)
            if ran.status != "ok":
                return ran  # a crash or a timeout is the submission's own outcome
            try:
                copy_tree(outputs, copied, Bounds(spec.max_storage_mb << 20, spec.max_files), "outputs/")
            except Refused as err:  # what the submission left cannot be handed over: its failure
                return replace(ran, status="error", value=None, error=f"Outputs refused: {err}")
            with open(inputs / "value.pkl", "wb") as f:
                pickle.dump(ran.value, f)  # plain data, as the executor decoded it
            self._write_settings(inputs, action="score")
            judged = executor.run(self._scorer_spec(inputs, copied, f"{label}-score"))
        if judged.status == "system_error":
            return judged  # the machine failed, not the scorer: the station pauses as for any run
        if judged.status != "ok":
            trace = f"\n{judged.traceback}" if judged.traceback else ""
            raise ScorerFailure(f"the task's scorer failed: {judged.error}{trace}", ran)
        return replace(ran, value=judged.value, duration_s=ran.duration_s + judged.duration_s)

    def _outside_the_blocks(self, code: str) -> str:
        """Why a ShinkaEvolve program is refused before it runs: it holds a line break Python does not
        honour, or what Python runs outside its EVOLVE-BLOCKs (its tokens, not its text lines) is not
        the initial program's ("" when it is, or the task marks no blocks)."""
        if not self.folder.frame:
            return ""
        odd = unhonoured_line_break(code)
        if odd is not None:
            return odd
        if frame_tokens(code) == frame_tokens(self.folder.baselines[0].code):  # baselines[0]: initial.py
            return ""
        return (
            f"the code outside the {EVOLVE_START} / {EVOLVE_END} comments differs from the initial program's; "
            "only the code between them may change"
        )

    def _evaluate_program(self, executor: Any, inputs: Path, outputs: Path, label: str) -> RunResult:
        """Each evaluator function in a run of its own, the cascade decided here. The value is
        {"metrics", "notes"}: the stages' metrics merged, and what else they said (artifacts,
        correctness, feedback), as plain data; `score` computes the score."""
        metrics: dict[str, Any] = {}
        notes: dict[str, Any] = {}
        logs: list[RunResult] = []
        thresholds = self.folder.cascade.thresholds
        stages = self.folder.entry_points
        program = self._program_folder(inputs)
        for stage, function in enumerate(stages, 1):
            self._write_settings(inputs, action="score", function=function)
            judged = executor.run(self._scorer_spec(inputs, outputs, f"{label}-{function}", program))
            logs.append(judged)
            outcome = self._stage_outcome(judged, function)
            if outcome is not None:
                return _with_logs(outcome, logs)
            found = judged.value["metrics"]
            metrics.update(found)
            notes.update({k: v for k, v in judged.value.items() if k not in ("outcome", "metrics")})
            if _error_of(found) or stage == len(stages) or stage > len(thresholds):
                break
            if _threshold_score(found, self.folder.settings.scorer.metric) < thresholds[stage - 1]:
                break
        return _with_logs(RunResult(status="ok", value={"metrics": metrics, "notes": notes}), logs)

    def _program_folder(self, inputs: Path) -> Path | None:
        """The program alone in a folder of its own: what the companion that runs it mounts (None
        when the program shares its evaluator's process)."""
        if not self.folder.program_apart:
            return None
        folder = inputs.parent / "program"
        folder.mkdir(exist_ok=True)
        (folder / self.filename).write_bytes((inputs / self.filename).read_bytes())
        return folder

    @staticmethod
    def _stage_outcome(judged: RunResult, function: str) -> RunResult | None:
        """None when the run handed back metrics. A failure before the evaluator was handed the program
        (it cannot be imported, lacks the function) is the evaluator's: ScorerFailure. From then on the
        program shares the run, so a timeout or any failure is the program's outcome, never a free pass."""
        answer = judged.value
        if judged.status == "system_error":
            return judged
        if judged.status == "ok" and isinstance(answer, dict) and isinstance(answer.get("metrics"), dict):
            return None
        if READY not in judged.stderr:
            trace = f"\n{judged.traceback}" if judged.traceback else ""
            raise ScorerFailure(f"the task's evaluator failed before it ran the program: {judged.error}{trace}", judged)
        if judged.status == "timeout":
            return judged
        why = judged.error if judged.status != "ok" else f"{function}() handed back no metrics the station can read"
        return replace(
            judged,
            status="error",
            value=None,
            error=f"{why} (the evaluator's run failed after it was handed the program: it counts as the program's)",
        )

    def check_scorer(self, executor: Any) -> str | None:
        """Import the scorer in its own sandbox, as an evaluation does, and look for its entry points:
        None when it is usable, else what is wrong (for `station task check`). NotChecked when the
        machine could not run the check (a system error): that says nothing of the scorer."""
        with work_folder(work_base(executor), "check") as work:
            inputs, outputs = Path(work, "inputs"), Path(work, "outputs")
            inputs.mkdir()
            outputs.mkdir()
            self._write_settings(inputs, action="check")
            judged = executor.run(self._scorer_spec(inputs, outputs, "task-check"))
        scorer = self.folder.scorer_file
        if judged.status == "system_error":
            raise NotChecked(judged.error or "the executor failed")
        if judged.status != "ok":
            trace = f"\n{judged.traceback.rstrip()}" if judged.traceback else ""
            return f"{scorer} cannot be imported in the scorer's sandbox: {judged.error}{trace}"
        missing = judged.value.get("missing") if isinstance(judged.value, dict) else None
        if not isinstance(missing, list):
            return f"{scorer} gave no answer the station can read"
        if missing:
            return f"{scorer} defines no {', '.join(f'{name}()' for name in missing)}"
        problems = judged.value.get("problems")  # a reference-format evaluator's contract, imported
        return f"{scorer}: {'; '.join(map(str, problems))}" if problems else None

    def config_notes(self) -> list[str]:
        """For `station task check`: what a reference-format folder's constant_config.yaml set here."""
        return reference.config_notes(self.folder.reference) if self.folder.reference is not None else []

    def _write_settings(self, inputs: Path, *, action: str, function: str = "", **extra: Any) -> None:
        folder = self.folder
        settings = {
            "action": action,
            "format": folder.format,
            "scorer_file": folder.scorer_file,
            "entry_points": list(folder.entry_points),
            "filename": self.filename,
            "mode": self.mode,
            "function": function,
            "apart": folder.program_apart,
            **(reference.scorer_settings(folder.reference) if folder.reference is not None else {}),
            **extra,
        }
        (inputs / "scorer.json").write_text(json.dumps(settings), encoding="utf-8")

    def _scorer_spec(self, inputs: Path, outputs: Path, label: str, program: Path | None = None) -> RunSpec:
        scorer = self.folder.settings.scorer
        # an OpenEvolve evaluator runs the program too: its run has the task's limit (a config may override it)
        runs_program = self.folder.runs_program
        timeout = self.timeout_s if runs_program else scorer.timeout_s
        mounts = [Mount(self.folder.path, "task"), Mount(outputs, "outputs"), Mount(inputs, "inputs")]
        mounts.append(Mount(COMPAT, "compat"))
        if self.folder.program_apart:
            mounts.append(Mount(APART, "apart"))
        if self.folder.reference is not None:
            mounts.append(Mount(REFERENCE, "reference"))
        if self.folder.format == "shinka":  # its main() writes metrics.json and correct.json here
            results = inputs.parent / "results"
            if not results.is_dir():  # one per evaluation, its stages share it
                run_folder(results)  # the executor shares it with the sandbox's group when it mounts it
            mounts.append(Mount(results, "results", writable=True))
        return RunSpec(
            code=DRIVER.read_text(encoding="utf-8"),
            mode="function",
            entry="run_scorer",
            filename="station_scorer.py",
            mounts=mounts,
            timeout_s=timeout,
            cpu_seconds=math.ceil(timeout * max(1.0, self.num_cpus)),
            memory_mb=scorer.memory_mb,
            num_cpus=self.num_cpus if runs_program else 1.0,
            label=label,
            companion=_program_host(program) if program is not None else None,
        )

    # -- the scorer's answer -------------------------------------------------------------------
    def score(self, result: RunResult) -> Verdict:
        if self.folder.reference is not None:
            return reference.score(self, result)
        if self.folder.runs_program:
            return self._score_program(result)
        answer = result.value
        if not isinstance(answer, dict) or answer.get("outcome") not in ("scored", "rejected"):
            raise ScorerFailure(f"the task's scorer gave no answer the station can read ({_shown(answer)})", result)
        if answer["outcome"] == "rejected":
            return Verdict(False, details=f"Rejected by the task's scorer: {_clip(str(answer.get('message')))}")
        raw = answer.get("score")
        value = _finite(raw) if _is_number(raw) else None
        if value is None:
            raise ScorerFailure(
                f"the task's scorer returned a score that is not a finite number: {_shown(raw)}", result
            )
        outside = self._outside_range(value)
        if outside:
            raise ScorerFailure(f"the task's scorer returned a score {outside}", result)
        metrics = answer.get("metrics") or {}
        if not isinstance(metrics, dict):
            raise ScorerFailure(f"the task's scorer returned metrics that are not a dict: {_shown(metrics)}", result)
        shown_metrics: dict[str, float | None] = {}
        for name, number in list(metrics.items())[:METRICS_MAX]:
            shown_metrics[str(name)[:60]] = _finite(number) if _is_number(number) else None
        s = self.folder.settings
        if not s.higher_is_better:
            shown_metrics.setdefault(s.score_name, value)
        details = _clip(str(answer.get("details") or f"{s.score_name} = {value:.{self.display_precision}f}"))
        kept = _certificate(answer, result) if "certificate" in answer else None
        if isinstance(kept, str):
            return Verdict(False, details=f"Rejected: {kept}.")
        return Verdict(True, value if s.higher_is_better else -value, details, shown_metrics, certificate=kept)

    def verify(self, executor: Any, construction: Any) -> Verdict:
        """`station verify`: the scorer's verdict on `construction` handed to it as what a submission's
        function returned, in the scorer's own sandbox, as an evaluation scores it (no submission runs)."""
        if self.folder.runs_program or self.mode != "function":
            raise ValueError(f"{self.folder.path}: only a native function-mode folder's scorer verifies constructions")
        with work_folder(work_base(executor), "verify") as work:
            inputs, outputs = Path(work, "inputs"), Path(work, "outputs")
            inputs.mkdir()
            outputs.mkdir()
            (inputs / self.filename).write_text("# station verify: a construction to check, no submission\n")
            with open(inputs / "value.pkl", "wb") as f:
                pickle.dump(construction, f)  # plain JSON data, read from the certificate
            self._write_settings(inputs, action="score")
            judged = executor.run(self._scorer_spec(inputs, outputs, "verify"))
        if judged.status != "ok":
            trace = f"\n{judged.traceback}" if judged.traceback else ""
            raise ScorerFailure(f"the task's scorer failed: {judged.error}{trace}", judged)
        return self.score(judged)

    def _score_program(self, result: RunResult) -> Verdict:
        """The score of an OpenEvolve or ShinkaEvolve program, computed here from the metrics its
        evaluator handed back. Those were made in the run the program shared: anything unusable in
        them is the program's."""
        value = result.value if isinstance(result.value, dict) else {}
        if "rejected" in value:
            return Verdict(False, details=f"Rejected: {value['rejected']}.")
        metrics, notes = value.get("metrics"), value.get("notes") or {}
        if not isinstance(metrics, dict):
            return Verdict(False, details="The evaluator handed back no metrics the station can read.")
        error = _error_of(metrics)
        if notes.get("correct") is False:  # ShinkaEvolve's verdict on the program's results
            error = error or notes.get("error") or "the results are not correct"
        if error:
            return Verdict(False, details=_clip(f"Rejected by the task's evaluator: {error}{_notes_text(notes)}"))
        s = self.folder.settings
        left_out = self.folder.feature_dimensions if self.folder.mean_rule else None
        score, averaged = _program_score(metrics, s.scorer.metric, left_out)
        if isinstance(score, str):
            return Verdict(False, details=f"Rejected: {score}")
        outside = self._outside_range(score)
        if outside:
            return Verdict(False, details=f"Rejected: the evaluator handed back a score {outside}.")
        numbers = {k: v for k, v in metrics.items() if _is_number(v)}
        shown: dict[str, float | None] = {str(k)[:60]: _finite(v) for k, v in list(numbers.items())[:METRICS_MAX]}
        if not s.higher_is_better:
            shown.setdefault(s.score_name, score)
        texts = "\n".join(f"{k}: {v}" for k, v in metrics.items() if k not in numbers)
        details = (texts or f"{s.score_name} = {score:.{self.display_precision}f}") + _notes_text(notes)
        if averaged:  # said first and loudly: the score is not one metric
            details = f"{mean_note(averaged, s.scorer.metric)}\n\n{details}"
        return Verdict(True, score if s.higher_is_better else -score, _clip(details), shown)

    def _range_text(self) -> str:
        bounds = self.folder.settings.score_range
        return (
            f" A score outside [{bounds[0]:g}, {bounds[1]:g}], the range this task declares, is refused."
            if bounds
            else ""
        )

    def _outside_range(self, value: float) -> str:
        """Why `value` breaks task.yaml's score_range ("" when it does not, or there is none)."""
        bounds = self.folder.settings.score_range
        if bounds is None or bounds[0] <= value <= bounds[1]:
            return ""
        return f"of {value:g}, outside the range [{bounds[0]:g}, {bounds[1]:g}] the task declares (score_range)"


def _certificate(answer: dict[str, Any], result: RunResult) -> dict[str, Any] | str:
    """The certificate of the construction a native scorer says it verified (its answer's
    "certificate"), or why the record cannot keep it (too big: the submission's). A certificate
    that is not plain JSON data is the scorer's failure."""
    try:
        return certificate.make(answer["certificate"])
    except certificate.TooLarge as err:
        return str(err)
    except (TypeError, ValueError) as err:
        why = f"the task's scorer returned a certificate that is not plain JSON data: {err}"
        raise ScorerFailure(why, result) from None


def _program_host(program: Path) -> Companion:
    """The run's companion that runs an evolve program apart from its evaluator (apart/apart_host.py)."""
    return Companion(
        code=(APART / "apart_host.py").read_text(encoding="utf-8"),
        filename="program_host.py",
        mounts=(Mount(APART, "apart"), Mount(program, "program")),
    )


def mean_note(averaged: list[str], metric: str = "combined_score") -> str:
    """What an evaluation's details (and `station task check`) say when OpenEvolve's mean rule made the score."""
    return (
        f"{MEAN_NOTE_START} the evaluator's numeric metrics {', '.join(averaged)} (OpenEvolve's rule for an "
        f"evaluator that hands back no numeric {metric}), whatever each one measures; the task's author can make "
        "one metric the score in task.yaml (scorer: {metric: NAME})."
    )


def _program_score(
    metrics: dict[str, Any], metric: str, left_out: tuple[str, ...] | None
) -> tuple[float | str, list[str]]:
    """The score and the metrics averaged for it ([] when it is one metric); a string says why there
    is no usable score. The named metric (`scorer.metric`, by default OpenEvolve's combined_score);
    when it is not a number and `left_out` is given (OpenEvolve's rule applies), the mean of the
    numeric metrics other than `left_out` (its MAP-Elites feature dimensions), as OpenEvolve ranks
    programs: ints, floats and booleans count, NaN and texts do not."""
    if left_out is not None and not _is_number(metrics.get(metric)):
        return _openevolve_mean(metrics, left_out)
    return _named_score(metrics, metric), []


def _openevolve_mean(metrics: dict[str, Any], left_out: tuple[str, ...]) -> tuple[float | str, list[str]]:
    numeric = []
    for name, value in metrics.items():
        if isinstance(value, (int, float)):  # booleans too, as Python (and OpenEvolve) counts them
            try:
                number = float(value)
            except OverflowError:  # an int beyond floats: OpenEvolve skips it
                continue
            if not math.isnan(number):
                numeric.append((name, number))
    kept = [(name, n) for name, n in numeric if name not in left_out] or numeric  # all, when only features
    if not kept:
        return "the evaluator handed back no numeric metric, so there is nothing to average (OpenEvolve's rule)", []
    mean = sum(n for _, n in kept) / len(kept)
    names = [name for name, _ in kept]
    if not math.isfinite(mean):
        return f"the mean of the evaluator's numeric metrics ({', '.join(names)}) is not a finite number", names
    return mean, names


def _named_score(metrics: dict[str, Any], metric: str) -> float | str:
    if metric not in metrics:
        named = ", ".join(sorted(k for k, v in metrics.items() if _is_number(v))[:12]) or "none"
        return (
            f"the evaluator handed back no {metric!r} metric (its numeric metrics: {named}); "
            "the task's author names the metric that is the score in task.yaml (scorer: {metric: NAME})"
        )
    value = metrics[metric]
    if not _is_number(value):
        return f"the evaluator's {metric!r} is not a number: {_shown(value)}"
    number = _finite(value)
    return number if number is not None else f"the evaluator's {metric!r} is not a finite number: {_shown(value)}"


def _threshold_score(metrics: dict[str, Any], metric: str) -> float:
    """What a cascade stage's score is compared with its threshold, as OpenEvolve compares it: the
    named metric, else the mean of the finite numeric ones (minus infinity: no score, stop)."""
    named = _finite(metrics[metric]) if _is_number(metrics.get(metric)) else None
    if named is not None:
        return named
    finite = [n for n in (_finite(v) for v in metrics.values() if _is_number(v)) if n is not None]
    return sum(finite) / len(finite) if finite and metric not in metrics else -math.inf


def _notes_text(notes: dict[str, Any]) -> str:
    """What the evaluator said besides its metrics, as OpenEvolve and ShinkaEvolve show it to the
    program's author: artifacts (stderr, a traceback, ...) and text feedback."""
    parts = []
    feedback = notes.get("feedback")
    if isinstance(feedback, str) and feedback.strip():
        parts.append(f"### Feedback\n{feedback.strip()}")
    artifacts = notes.get("artifacts")
    for key, text in artifacts.items() if isinstance(artifacts, dict) else []:
        parts.append(f"### {str(key).replace('_', ' ').capitalize()}\n```\n{str(text).rstrip()}\n```")
    return "\n\n## Last execution output\n" + "\n\n".join(parts) if parts else ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except OverflowError:  # an int beyond floats
        return None
    return number if math.isfinite(number) else None


def _error_of(metrics: dict[str, Any]) -> str:
    error = metrics.get("error")
    return error if isinstance(error, str) else ""


def _with_logs(result: RunResult, runs: list[RunResult]) -> RunResult:
    """`result` with the output and the time of every run that led to it, and their sandbox's layers."""
    joined = {
        name: "\n".join(text for text in (getattr(r, name) for r in runs) if text) for name in ("stdout", "stderr")
    }
    isolation = next((r.isolation for r in reversed(runs) if r.isolation), result.isolation)
    return replace(
        result,
        duration_s=sum(r.duration_s for r in runs),
        stdout=joined["stdout"],
        stderr=joined["stderr"],
        isolation=isolation,
    )


def _clip(text: str) -> str:
    return text if len(text) <= DETAILS_MAX_CHARS else text[:DETAILS_MAX_CHARS] + " [...]"


def _shown(value: Any) -> str:
    return _clip(repr(value))[:300]
