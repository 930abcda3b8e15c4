"""Two-stage scoring for trained JAX tasks: the run trains on the training split only, the station
scores its checkpoints on the scored split in a sandbox that runs none of the submission's code.

Per trial, three parties (docs/sandbox.md, "Training tasks"; the trainer's side is
station_jax/exchange.py, the scorer's station_jax/scoring.py):

- the **training run** (the submission and the harness) sees the training data, its own
  `checkpoints/` folder and nothing scored. It exports its apply function once (StableHLO, one
  example per call, the parameters as arguments) and offers a checkpoint after each epoch;
- the **scoring run** is started by the station when the export appears and lives as long as
  the trial. It runs the station's scorer only: it checks the export (no callbacks, no custom
  calls beyond LAPACK, no big constants: station_jax/verify.py), then computes the outputs of
  every scored example, one example per call, for each checkpoint it is handed;
- the **watcher** (TrialWatch, a thread here in the trusted parent) carries checkpoints from the
  trainer to the scorer as bytes (never through a link, never more than the caps), measures the
  outputs against the station's own targets (the task's `measure`), keeps the best measurement
  and writes `stop` when patience, the checkpoint limit or its own clock runs out. It touches what
  the runs wrote only through station/executors/runfiles.py (no link followed, bounded reads), and
  writes `stop` into `control/`, a folder of its own the trainer sees read-only: never a path the
  run controls. Its hands on the folders are station/executors/trial_folders.py: on this host
  (LocalFolders), or on Ray (the executor's `trial_place`) on the trial's node, where an actor of
  the station's own does the same through runfiles and the bytes cross through Ray's object
  store (station/executors/ray_exchange.py): the nodes need no file system shared with the station.

Why this shape. Scoring in a second sandbox keeps the scored inputs out of every process that ran
the submission's Python, so no hook, monkeypatch or import-time trick can read them. Exporting
makes the network a computation the station can run without that Python, and one example per
call means no output can depend on another example (in a time series the next windows' inputs
are this window's targets). One scorer per trial, alive for the whole trial, pays JAX's start-up
and compilation once instead of once per epoch (the goal: under 10% of a trial's time,
scripts/bench_jax.py). The trainer waits only until its checkpoint is taken, and the watcher
takes the next one only when the last is measured: one checkpoint in flight and one waiting,
whatever the network's size; only the best measurement is kept, no checkpoint. The watcher
polls files (every 50 ms) instead of holding a channel: the same two plain runs work through the
local executor and Ray, and a run that ignores `stop` is still ended by its own time limit, its
later checkpoints unused.

What a task built on this provides: `data_dir()` (train-only), `scoring_dir(n)` (the scorer's
inputs), `example_spec(n)`, `scorer_settings(n)`, `measure(n, outputs)`,
`stop_rule(n)`, `failed_trial_score`, `summary(...)`. A trial without a measured checkpoint
fails the evaluation (or counts `failed_trial_score`): it is never dropped from the mean.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from station.core.run_types import Mount, RunResult, RunSpec, RunStatus
from station.executors.ray_exchange import SiteLost
from station.executors.runfiles import Refused, run_folder, work_base, work_folder
from station.executors.trial_folders import CONTROL, INBOX, OUTBOX, TRAIN, LocalFolders

from ..base import Verdict
from .station_jax.exchange import APPLY_FILE, CHECKPOINT_FILE, CONTROL_DIR, STOP_FILE
from .station_jax.scoring import DONE_FILE, SETTINGS_FILE, checkpoint_name, outputs_name, refused_name
from .task import CHECK_TIMEOUT_S, HARNESS_DIR, HARNESS_TARGET, JaxTrainingTask, learning_curves

EXCHANGE_TARGET = "checkpoints"  # the trainer's folder, as the run sees it
CONTROL_TARGET = CONTROL_DIR  # the station's folder the trainer reads `stop` from (read-only there)
COMPILE_CACHE_TARGET = "jax_compiled"  # the evaluation's compilation cache, as its runs see it
POLL_S = 0.05
MAX_EXPORT_BYTES = 16 << 20  # an export is code: kilobytes, plus at most 1 MiB of constants
MAX_OUTPUT_BYTES = 256 << 20  # one checkpoint's outputs (forecasting: at most 64 MB)
MAX_REFUSAL_BYTES = 4000
# The scorer lives the trial's own limit plus this, counted from its start (when the export
# appears): after the trainer's end it has at least this long, and the trial's grace beyond the
# late allowance, for the last checkpoints (one being scored, one waiting). Its CPU time: the same
# seconds of one core. An export that spins is stopped there (it was the limit plus 120 s).
SCORER_MARGIN_S = 10.0
SCORER_CPUS = 1.0  # the scorer's CPU time: one core's, for as long as it may live
SCORER_DRIVER = '''"""The station's scorer for a trained JAX task: only the station's code runs here."""


def run_scorer():
    import station_jax.scoring as scoring

    return scoring.main("inbox", "outbox", "scoring_data")
'''


def with_compile_cache(spec: RunSpec, folder: Path) -> RunSpec:
    """`spec` with a JAX compilation cache in `folder`, for the runs of one evaluation on the CPU:
    its check compiles the training step at the trials' shapes, and each trial loads it (and the
    small operations around it) instead of compiling them again, a third of a short trial's CPU.
    Only these runs, all running one submission's code, can read or write it, and it ends with
    the evaluation; the scorer, which runs the station's code only, never sees it. Each entry is
    written and read under JAX's file lock (parallel trials write at once), and the cache keeps
    to half the run's storage quota (JAX evicts the least recently used entries)."""
    run_folder(folder)  # the executor shares it with the sandbox's group when it mounts it
    return replace(
        spec,
        mounts=[*spec.mounts, Mount(folder, COMPILE_CACHE_TARGET, writable=True)],
        env={
            **spec.env,
            "JAX_COMPILATION_CACHE_DIR": COMPILE_CACHE_TARGET,
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # a trial's many small compilations add up
            "JAX_COMPILATION_CACHE_MAX_SIZE": str((spec.max_storage_mb << 20) // 2),
        },
    )


class Unusable(Refused):
    """A file the trainer or scorer left that the station will not read (one line)."""


@dataclass(frozen=True)
class ExampleSpec:
    """One example of the scored data, without a batch axis: its input and output arrays."""

    inputs: list[tuple[tuple[int, ...], str]]
    outputs: list[tuple[tuple[int, ...], str]]


@dataclass(frozen=True)
class StopRule:
    """When the station stops taking a trial's checkpoints."""

    patience: int | None  # checkpoints without a better one; None: no early stopping
    max_checkpoints: int
    budget_s: float  # from the moment the export appears
    late_s: float  # a checkpoint that appeared this long after the budget still counts (the last save)


@dataclass
class TrialWatch:
    """The station's side of one trial (see the module's docstring). `measure(outputs)` returns
    {"score" (higher is better), "metric", "metrics", "line"} or raises ValueError."""

    folder: Path
    rule: StopRule
    measure: Any
    max_checkpoint_bytes: int
    curve: list[float | None] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    best: dict[str, Any] | None = None
    best_checkpoint: int | None = None
    stop: str | None = None
    failure: str | None = None
    scorer: Future | None = None
    folders: Any = None  # where the folders are: LocalFolders(folder), or on a Ray trial's node (ray_exchange.py)

    def __post_init__(self) -> None:
        if self.folders is None:
            self.folders = LocalFolders(self.folder)
        # the runs' mount sources, on the runs' host; the trainer reads `stop` in control/: the
        # station never opens train/stop
        self.train, self.inbox, self.outbox, self.control = (
            self.folders.path(w) for w in (TRAIN, INBOX, OUTBOX, CONTROL)
        )
        self.taken = 0
        self.pending: int | None = None  # handed to the scorer, outputs not read yet
        self.deadline: float | None = None
        self.seen_at: float | None = None  # when the waiting checkpoint first appeared

    def follow(self, trainer: Future, start_scorer: Any) -> dict[str, Any]:
        """Carry checkpoints until the trial is over; returns what the station measured."""
        try:
            self._loop(trainer, start_scorer)
        except Refused as err:  # what a run left: the trial's failure, charged to the submission
            self.failure = self.failure or str(err)
        finally:
            _signal(self.folders, CONTROL, STOP_FILE)  # an honest trainer still waiting ends now
            _signal(self.folders, INBOX, DONE_FILE)
        return {
            "checkpoints": self.taken,
            "curve": self.curve,
            "best_checkpoint": self.best_checkpoint,
            "best": self.best,
            "stop": self.stop or "run-ended",
            "failure": self.failure,
            "notes": self.notes[:5],
        }

    def _loop(self, trainer: Future, start_scorer: Any) -> None:
        while True:
            now = time.monotonic()
            if self.scorer is None:
                exported = take(self.folders, TRAIN, APPLY_FILE, MAX_EXPORT_BYTES, "the exported apply function")
                if exported is not None:
                    self.folders.write(INBOX, APPLY_FILE, exported)
                    self.deadline = now + self.rule.budget_s
                    self.scorer = start_scorer()
                elif trainer.done():
                    self.failure = "the run ended before it exported its apply function"
                    return
            elif self.scorer.done():
                self._scorer_ended(self.scorer.result())
                return
            elif self.pending is not None:
                self._note_waiting(now)
                self._collect()
            elif self.stop is not None:
                if trainer.done():
                    return
            elif not self._hand_over(now) and trainer.done():  # the run ended and left nothing more
                if not self.taken:
                    self.failure = "the run ended without handing over a checkpoint"
                return
            time.sleep(POLL_S)

    def _note_waiting(self, now: float) -> None:
        if self.seen_at is None and self.folders.present(TRAIN, CHECKPOINT_FILE):
            self.seen_at = now

    def _hand_over(self, now: float) -> bool:
        """Take the trainer's checkpoint, if there is one, and give it to the scorer."""
        self._note_waiting(now)
        if self.seen_at is None:
            if self.deadline is not None and now > self.deadline + self.rule.late_s:
                self._halt("time-budget")
            return False
        assert self.deadline is not None
        if self.seen_at > self.deadline + self.rule.late_s:
            self._halt("time-budget")
            return False
        raw = take(self.folders, TRAIN, CHECKPOINT_FILE, self.max_checkpoint_bytes, "the checkpoint")
        self.seen_at = None
        if raw is None:
            return False
        self.taken += 1
        self.folders.write(INBOX, checkpoint_name(self.taken), raw)
        self.pending = self.taken
        return True

    def _collect(self) -> None:
        """Read the scorer's answer for the pending checkpoint, if it is there, and measure it."""
        k = self.pending
        assert k is not None
        refused = take(self.folders, OUTBOX, refused_name(k), MAX_REFUSAL_BYTES, "the scorer's answer")
        outputs = (
            None if refused is not None else take(self.folders, OUTBOX, outputs_name(k), MAX_OUTPUT_BYTES, "outputs")
        )
        if refused is None and outputs is None:
            return
        self.folders.remove(INBOX, checkpoint_name(k))
        self.pending = None
        measured = None
        try:
            if refused is not None:
                raise ValueError(f"checkpoint refused: {refused.decode('utf-8', 'replace')}")
            measured = self.measure(load_arrays(outputs))
        except (ValueError, Unusable) as err:
            self.notes.append(f"checkpoint {k}: {err}")
        self.curve.append(None if measured is None else measured["metric"])
        if measured is not None and (self.best is None or measured["score"] > self.best["score"]):
            self.best, self.best_checkpoint = measured, k
        since_best = k - (self.best_checkpoint or 0)
        if self.rule.patience is not None and since_best >= self.rule.patience:
            self._halt("early-stopping")
        elif k >= self.rule.max_checkpoints:
            self._halt("max-epochs")

    def _halt(self, why: str) -> None:
        """Take no more checkpoints, and tell the trainer (which may ignore it: its time limit holds)."""
        self.stop = why
        _signal(self.folders, CONTROL, STOP_FILE)

    def _scorer_ended(self, result: RunResult) -> None:
        value = result.value if isinstance(result.value, dict) else {}
        if result.status == "system_error":
            self.failure = f"system error in the scoring run: {result.error}"
        elif value.get("refused"):
            self.stop, self.failure = "refused", f"refused: {str(value['refused'])[:MAX_REFUSAL_BYTES]}"
        else:  # checkpoints measured before still count
            self.stop = "scorer-ended"
            self.failure = f"the station could not run the exported apply function: {result.error or 'it ended early'}"


def take(folders: Any, where: str, name: str, limit: int, what: str) -> bytes | None:
    """The bytes of a file the trainer or scorer left in the trial's folder `where`, then the file
    removed; None when absent; Unusable unless it is a regular file with one link, under `limit`
    bytes (runfiles.take: a link could point the station at data it holds, a huge file at its memory)."""
    try:
        return folders.take(where, name, limit, what)
    except Refused as err:
        raise Unusable(str(err)) from None


def load_arrays(raw: bytes | None) -> dict[str, np.ndarray]:
    """The arrays of an .npz the scorer wrote, as plain data (no pickles)."""
    import io

    try:
        with np.load(io.BytesIO(raw or b""), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError) as err:
        raise Unusable(f"the scorer's outputs could not be read: {err}") from None


def _signal(folders: Any, where: str, name: str) -> None:
    """An empty file `name` in the trial's folder `where`, the station's own, that the runs only read."""
    try:
        folders.write(where, name, b"")
    except OSError:
        pass  # the folder is gone or full (or its Ray node lost): the run's own time limit ends it


class TwoStageTask(JaxTrainingTask):
    """A JAX training task scored in two stages (the module's docstring)."""

    max_checkpoint_mb = 400  # one checkpoint's parameters (100 M float32); the storage quota is larger
    failed_trial_score: float | None = None  # None: a trial with no measured checkpoint fails the evaluation

    # -- what a task provides -----------------------------------------------------------------------
    def scoring_dir(self, trial: int) -> Path:
        """The folder the scorer sees as `scoring_data/`: the scored inputs (with their targets only
        where the scorer's mode measures the outputs itself)."""
        raise NotImplementedError

    def example_spec(self, trial: int) -> ExampleSpec:
        raise NotImplementedError

    def scorer_settings(self, trial: int) -> dict[str, Any]:
        return {"mode": "map"}

    def measure(self, trial: int, outputs: dict[str, np.ndarray]) -> dict[str, Any]:
        """{"score": higher is better, "metric": the number shown per checkpoint, "metrics": {...},
        "line": one line of details}; ValueError when the outputs cannot count."""
        raise NotImplementedError

    def stop_rule(self, trial: int) -> StopRule:
        raise NotImplementedError

    def late_allowance_s(self) -> float:
        """How late after the budget the last checkpoint may appear: the harness's last save."""
        return 5.0 + 0.05 * self.trial_budget_s

    # -- running -----------------------------------------------------------------------------------
    def execute(
        self, executor: Any, code: str, *, mounts: list[Mount], label: str, cpu_only: bool = False
    ) -> RunResult:
        try:
            gpus: float | None = 0.0 if cpu_only else self._gpus_per_trial(executor)
        except Exception:  # noqa: BLE001 - e.g. a Ray cluster out of reach: the check run reports it as before
            gpus = None
        placed = getattr(executor, "trial_place", None)  # Ray: each trial on one node, its exchange through Ray
        with work_folder(work_base(executor), f"{label}-trials") as work:  # removed at the end, swept after a kill
            base = self.run_spec(code, mounts=mounts, label=label, cpu_only=True)
            # the check compiles what the trials run, for the same device, and they load it: on this
            # host only (on Ray the trials' nodes are not the check's, and share no folder with it)
            cached = gpus == 0.0 and placed is None
            if cached:
                base = with_compile_cache(base, work / "compiled")
            check = executor.run(
                self._trial_spec(base, "check", 0, 0.0, min(CHECK_TIMEOUT_S, self.timeout_s), as_trials=cached)
            )
            if check.status != "ok" or not isinstance(check.value, dict) or "checked" not in check.value:
                return check  # a crash, a timeout, test mode or a contract error: reported as it is
            if gpus is None:
                gpus = self._gpus_per_trial(executor)
            with (
                ThreadPoolExecutor(2 * self.trials, thread_name_prefix=f"{label}-run") as runs,
                ThreadPoolExecutor(self.trials, thread_name_prefix=f"{label}-watch") as watchers,
            ):
                futures = [
                    watchers.submit(self._trial, executor, runs, base, n, gpus, work / f"trial{n}")
                    for n in range(self.trials)
                ]
                outcomes = [f.result() for f in futures]
        return combine_measured(check, outcomes, gpus)

    def _trial(
        self, executor: Any, runs: ThreadPoolExecutor, base: RunSpec, n: int, gpus: float, folder: Path
    ) -> tuple[RunResult, RunResult | None, dict[str, Any]]:
        """One trial: on this host (its folders in `folder`), or on Ray in a place of its own."""
        placed = getattr(executor, "trial_place", None)
        try:
            with placed(f"{base.label}-trial{n}", base.num_cpus, gpus) if placed else nullcontext() as place:
                return self._trial_at(place, executor, runs, base, n, gpus, folder)
        except SiteLost as err:  # Ray failed under the trial: a system error, charged to nobody
            return RunResult(status="system_error", error=str(err)), None, lost_trial(str(err))

    def _trial_at(
        self, place: Any, executor: Any, runs: ThreadPoolExecutor, base: RunSpec, n: int, gpus: float, folder: Path
    ) -> tuple[RunResult, RunResult | None, dict[str, Any]]:
        spec = self.example_spec(n)
        run = executor.run if place is None else place.run
        watch = TrialWatch(
            folder,
            self.stop_rule(n),
            lambda outputs: self.measure(n, outputs),
            max_checkpoint_bytes=self.max_checkpoint_mb << 20,
            folders=None if place is None else place.folders,
        )
        settings = {
            **self.scorer_settings(n),
            "inputs": [[list(s), d] for s, d in spec.inputs],
            "outputs": [[list(s), d] for s, d in spec.outputs],
        }
        watch.folders.write(INBOX, SETTINGS_FILE, json.dumps(settings).encode())
        trainer_spec = self._trial_spec(base, "train", n, gpus, self.timeout_s, exchange=EXCHANGE_TARGET)
        exchange = [Mount(watch.train, EXCHANGE_TARGET, True), Mount(watch.control, CONTROL_TARGET)]
        trainer_spec = replace(trainer_spec, mounts=[*trainer_spec.mounts, *exchange])
        scorer_spec = self._scorer_spec(base, n, watch, watch.folders.provide(self.scoring_dir(n)))
        trainer = runs.submit(run, trainer_spec)
        ended: list[float] = []
        trainer.add_done_callback(lambda _: ended.append(time.monotonic()))
        measured = watch.follow(trainer, lambda: runs.submit(run, scorer_spec))
        scorer = watch.scorer.result() if watch.scorer is not None else None
        result = trainer.result()
        # what two-stage scoring added after the run (its last checkpoint, the scorer's exit): for the bench
        measured["after_run_s"] = round(time.monotonic() - ended[0], 2) if ended else None
        return result, scorer, measured

    def _scorer_spec(self, base: RunSpec, n: int, watch: TrialWatch, scoring: Path | None = None) -> RunSpec:
        """`scoring`: where the scorer's inputs are on its host (default: scoring_dir(n), here)."""
        timeout = self.timeout_s + SCORER_MARGIN_S
        # On Ray the trial's reservation (its trainer's num_cpus) covers the scorer: a reservation of
        # its own is asked for only once the export appears, when the trainers may hold every CPU,
        # and each trainer then waits for its scorer to take a checkpoint until its own time limit
        # (measured: a 1-CPU instance, tests/test_redteam_export.py). So Ray is asked for nothing
        # more; its CPU time is one core's, for the trial's limit plus the margin. Through
        # trial_place (ray_exchange.py) it runs in the trial's placement group: its trainer's node.
        return RunSpec(
            code=SCORER_DRIVER,
            mode="function",
            entry="run_scorer",
            filename="station_scorer.py",
            mounts=[
                Mount(HARNESS_DIR, HARNESS_TARGET),
                Mount(watch.inbox, "inbox"),
                Mount(watch.outbox, "outbox", writable=True),
                Mount(scoring or self.scoring_dir(n), "scoring_data"),
            ],
            timeout_s=timeout,
            cpu_seconds=math.ceil(timeout * SCORER_CPUS),
            memory_mb=self.memory_mb,
            max_processes=self.max_processes,
            max_storage_mb=max(base.max_storage_mb, 2 * (MAX_OUTPUT_BYTES >> 20)),
            num_cpus=0.0,  # within the trial's reservation (above)
            num_gpus=0.0,
            env=self.env(),
            label=f"{base.label}-score{n}",
        )

    # -- scoring ------------------------------------------------------------------------------------------
    def score(self, result: RunResult) -> Verdict:
        found = self.read_trials(result, count=self.trials)
        if isinstance(found, Verdict):
            return found
        value, trials = found
        lines: list[str] = []
        kept: list[dict[str, Any]] = []
        failed: list[int] = []
        for n, trial in enumerate(trials):
            head = self.trial_head(n, trial)
            station = trial.get("station") or {}
            reported = trial.get("reported") or {}
            ran = run_line(trial, reported)
            if station.get("best") is None:
                why = "; ".join(filter(None, [station.get("failure"), ran])) or "no checkpoint could be measured"
                lines.append(f"{head}: no measured checkpoint: {why}")
                failed.append(n)
                if self.failed_trial_score is not None:
                    kept.append({"trial": n, "score": self.failed_trial_score, "failed": True, "value": {}})
                continue
            best = station["best"]
            lines.append(
                f"{head}: {best['line']}; best checkpoint {station['best_checkpoint']} of {station['checkpoints']} "
                f"(stopped by the station: {station['stop']}). Reported by the run: {self.reported_line(reported)}"
                + (f"; {ran}" if ran else "")
            )
            lines += [f"  {note}" for note in station.get("notes") or []]
            kept.append({**best, "trial": n, "value": {"curve": station["curve"], **curves_reported(reported)}})
        if failed and self.failed_trial_score is None:
            head = (
                f"No score: {len(failed)} of {len(trials)} trials have no checkpoint the station could measure "
                "(every trial counts; a failed one fails the evaluation)."
            )
            return Verdict(False, details="\n".join([head, *lines]))
        score, metrics, extra = self.summary(kept)
        head = f"{len(trials)} trials, scored by the station from their checkpoints; score {score:.{self.display_precision}f}"
        if failed:
            head += f" ({len(failed)} failed, counted as {self.failed_trial_score})"
        reported_values = [t.get("reported") or {} for t in trials]
        extra = [*extra, *self.gpu_warning(value, reported_values)]
        scores = [k["score"] for k in kept]
        spread = statistics.pstdev(scores) if len(scores) > 1 else 0.0
        best = max(kept, key=lambda k: k["score"])
        tail = [
            f"Spread over seeds: std {spread:.{self.display_precision}f}",
            f"Best trial {best['trial']}: hyperparameters (reported by the run) "
            f"{json.dumps(reported_values[best['trial']].get('hparams', {}))}",
        ]
        figure = learning_curves(self.curve_panels(), [k for k in kept if not k.get("failed")], self.curve_x_label)
        samples = [self.sample_score(k) for k in kept] if self.external_mode else None
        return Verdict(
            True, score, "\n".join([head, *lines, *extra, *tail]), metrics=metrics, figure=figure, samples=samples
        )

    def sample_score(self, scored: dict[str, Any]) -> float:
        """One trial's score, as the external evaluation counts it (the score is their mean)."""
        return float(scored["score"])

    def reported_line(self, reported: dict[str, Any]) -> str:
        """What the run says about itself, shown as its claim (a task may word it its own way)."""
        return reported_line(reported)

    def curve_panels(self) -> list[tuple[str, str, bool]]:
        return [
            ("curve", "validation metric (measured by the station)", False),
            ("train_curve", "training loss (reported by the run)", True),
        ]


def lost_trial(why: str) -> dict[str, Any]:
    """What the station measured of a trial that Ray lost (nothing)."""
    none = {"checkpoints": 0, "curve": [], "best_checkpoint": None, "best": None, "stop": "run-ended"}
    return {**none, "failure": why, "notes": []}


def curves_reported(reported: dict[str, Any]) -> dict[str, Any]:
    return {"train_curve": reported.get("train_curve")}


def reported_line(reported: dict[str, Any]) -> str:
    """What the run says about itself, shown as its claim."""
    loss = reported.get("train_curve")
    last = loss[-1] if isinstance(loss, list) and loss else None
    parts = [
        f"{reported.get('epochs')} epochs",
        f"{reported.get('seconds')} s",
        f"{reported.get('steps_per_second')} steps/s",
        f"stopped by {reported.get('stop')}",
    ]
    if isinstance(last, (int, float)):
        parts.append(f"last training loss {last:.5f}")
    devices = reported.get("device")
    if isinstance(devices, list):
        parts.append("on " + ", ".join(str(d) for d in devices))
    return ", ".join(parts)


def run_line(trial: dict[str, Any], reported: dict[str, Any]) -> str:
    """How the training run ended, when not cleanly: its status and error, or its contract error."""
    if trial.get("status") != "ok":
        return f"the run ended with {trial.get('status')}: {trial.get('error') or 'no result'}"
    if reported.get("contract_error"):
        return f"the run stopped with an error: {reported['contract_error']}"
    return ""


def combine_measured(
    check: RunResult, outcomes: list[tuple[RunResult, RunResult | None, dict[str, Any]]], gpus_per_trial: float
) -> RunResult:
    """One RunResult for the evaluation: per trial the run's outcome, what it reported (as its
    claim) and what the station measured; the logs one after another."""
    listed = []
    for n, (run, _, measured) in enumerate(outcomes):
        reported = run.value if isinstance(run.value, dict) else None
        listed.append(
            {
                "trial": n,
                "status": run.status,
                "error": run.error,
                "duration_s": round(run.duration_s, 2),
                "seed": (reported or {}).get("seed"),
                "reported": reported,
                "station": measured,
            }
        )
    runs = [r for r, _, _ in outcomes] + [s for _, s, _ in outcomes if s is not None]
    broken = next((r for r in runs if r.status == "system_error"), None)
    measured_any = any(m["best"] is not None for _, _, m in outcomes)
    crashed = [r for r, _, m in outcomes if r.status != "ok" and m["best"] is None]
    status: RunStatus
    if broken is not None:  # the machinery failed, not the code: no partial score is charged to anyone
        status, error, trace, code = "system_error", broken.error, None, None
    elif not measured_any and len(crashed) == len(outcomes):
        # nothing to score and every run failed: the evaluation fails like a single run (the debugger may fix it)
        first = next((r for r in crashed if r.status == "error"), crashed[0])
        status, error, trace, code = first.status, first.error, first.traceback, first.exit_code
    else:
        status, error, trace, code = "ok", None, None, 0
    logs = [("check", check)]
    for n, (run, scorer, _) in enumerate(outcomes):
        logs.append((f"trial {n}", run))
        if scorer is not None:
            logs.append((f"trial {n}, station's scorer", scorer))
    return RunResult(
        status=status,
        value={"check": check.value, "trials": listed, "gpus_per_trial": gpus_per_trial},
        stdout="\n".join(f"=== {name} ===\n{r.stdout}" for name, r in logs if r.stdout),
        stderr="\n".join(f"=== {name} ===\n{r.stderr}" for name, r in logs if r.stderr),
        exit_code=code,
        error=error,
        traceback=trace,
        duration_s=check.duration_s + max(r.duration_s for r, _, _ in outcomes),
        isolation=outcomes[0][0].isolation,
    )
