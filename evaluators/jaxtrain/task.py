"""JAX training tasks: what the three of them share (forecasting, Sokoban, RNA).

The harness (`station_jax/`, mounted read-only into every run) owns the training loop; the
agent's submission supplies hooks, and the station appends a driver that calls the task's
harness module. An evaluation is a quick check run on the CPU (build, one step, the export: a
crash there is an ordinary crash the debugger may fix, and no trial starts), then `trials`
trial runs with seeds BASE_SEED + trial, all at once (on Ray each is a task with its own
`num_cpus`/`num_gpus`). How a trial is run and scored is two_stage.py: the run trains on the
training split only and hands over checkpoints; the station scores them in a sandbox of its own.
Here: the settings, specs and GPU placement of the runs, and the details and figures of a verdict.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from station.core.run_types import Mount, RunResult

from ..base import ExternalPlan, Task, Verdict, figure_number
from .claims import MAX_CURVE_POINTS, claims, thin_indices

HARNESS_DIR = Path(__file__).resolve().parent / "station_jax"
HARNESS_TARGET = "station_jax"  # `import station_jax` works in the run: its working dir is on sys.path
CHECK_TIMEOUT_S = 600.0

DRIVER = """

# ---- appended by the station: hands your hooks to the training harness (not part of your code) ----
def _station_trial():
    import station_jax.%(module)s as _harness
    return _harness.main(globals())
"""


class JaxTrainingTask(Task):
    mode = "function"
    entry = "_station_trial"
    harness_module = ""  # "forecast", "sokoban" or "rna"
    data_target = ""  # where the task's data folder appears in the run, e.g. "task_data/forecasting"
    max_processes = 256  # XLA's and Ray's threads
    curve_x_label = "epoch"  # what the x values of the trials' learning curves count (see curve_panels)
    external_mode = False  # True on the copy `external` makes: scored as the paper's external evaluation

    def __init__(
        self,
        *,
        trials: int,
        trial_budget_s: float,
        trial_cpus: float,
        gpus_per_trial: float | None,
        grace_s: float,
        memory_mb: int | None,
    ) -> None:
        if not 1 <= trials <= 64:
            raise ValueError("trials must be between 1 and 64")
        if trial_budget_s <= 0 or grace_s <= 0:
            raise ValueError("trial_budget_s and grace_s must be positive")
        if gpus_per_trial is not None and gpus_per_trial < 0:
            raise ValueError("gpus_per_trial must be >= 0 (or null: one per trial when the executor has GPUs)")
        self.trials, self.trial_budget_s, self.grace_s = trials, float(trial_budget_s), float(grace_s)
        self.num_cpus, self.gpus_per_trial, self.memory_mb = float(trial_cpus), gpus_per_trial, memory_mb
        self.timeout_s = self.trial_budget_s + self.grace_s  # per trial; a config's timeout_s overrides it

    # -- the external evaluation ---------------------------------------------------------------------
    def external(self, seeds: int | None = None) -> ExternalPlan:
        """One evaluation of `seeds` trials (default: the paper's count for this task), scored the
        external way (`external_changes`); the trials' scores give the mean and standard error."""
        twin = copy.copy(self)
        twin.trials = seeds or self.external_seeds()
        if not 1 <= twin.trials <= 64:
            raise ValueError("seeds must be between 1 and 64")
        twin.external_mode = True
        changes = twin.external_changes()
        return ExternalPlan((twin,), f"{twin.trials} seeds" + (f"; {changes}" if changes else ""))

    def external_seeds(self) -> int:
        """The paper's seed count for the external evaluation: the internal one unless it says more."""
        return self.trials

    def external_changes(self) -> str:
        """Apply to this copy what else the external evaluation changes; say what, in one line."""
        return ""

    # -- what a run sees -------------------------------------------------------------------------------
    def program(self, code: str) -> str:
        return code.rstrip("\n") + "\n" + DRIVER % {"module": self.harness_module}

    def data_dir(self) -> Path:
        """The training data a run reads, built on first use."""
        raise NotImplementedError

    def prepare(self, say: Callable[[str], None]) -> None:
        say("the data")
        self.data_dir()

    def data_mounts(self) -> list[Mount]:
        return [Mount(HARNESS_DIR, HARNESS_TARGET), Mount(self.data_dir(), self.data_target)]

    def trial_settings(self) -> dict[str, Any]:
        """Task-specific settings every trial gets (budgets, score windows, ...)."""
        return {}

    def env(self) -> dict[str, str]:
        # several trials may share one GPU: no process takes most of its memory up front
        return {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_CPP_MIN_LOG_LEVEL": "2"}

    # -- running (two_stage.py) ------------------------------------------------------------------------
    def _trial_spec(self, base, phase: str, trial: int, gpus: float, timeout_s: float, **extra: Any):
        settings = {
            "phase": phase,
            "trial": trial,
            "data": self.data_target,
            "budget_s": self.trial_budget_s,
            **self.trial_settings(),
            **extra,
        }
        # RLIMIT_AS breaks CUDA: a GPU trial runs without a memory cap (the GPU's own memory bounds it)
        return replace(
            base,
            num_gpus=gpus,
            timeout_s=timeout_s,
            memory_mb=None if gpus else self.memory_mb,
            cpu_seconds=math.ceil(timeout_s * max(1.0, self.num_cpus)),
            env={**base.env, "STATION_TRIAL": json.dumps(settings)},
            label=f"{base.label}-{phase}{trial if phase == 'train' else ''}",
        )

    def _gpus_per_trial(self, executor: Any) -> float:
        if self.gpus_per_trial is not None:
            return self.gpus_per_trial
        count = getattr(executor, "gpu_count", lambda: 0)()
        return 1.0 if count else 0.0

    # -- scoring ------------------------------------------------------------------------------------------
    def summary(self, scored: list[dict[str, Any]]) -> tuple[float, dict[str, float | None], list[str]]:
        """(primary score, secondary metrics, extra detail lines) from the scored trials."""
        raise NotImplementedError

    @staticmethod
    def untrained_verdict(value: dict[str, Any]) -> Verdict | None:
        """The verdict of a run that trained nothing: test mode, or a contract broken at the check."""
        if value.get("test_mode") is True:
            return Verdict(False, details="Test mode - no scoring")
        error = value.get("contract_error")
        if error is not None and not (isinstance(error, str) and not error):  # the run's words: any type, length
            kind = type(error).__name__
            shown = error[:2000] if isinstance(error, str) else f"a contract error that is not text ({kind})"
            return Verdict(False, details=f"ERROR: {shown}")
        return None

    def curve_panels(self) -> list[tuple[str, str, bool]]:
        """The learning curves a trial returns, for the viewer: (key in the trial's value, panel
        title, lower is better). A curve is a list of numbers (one per epoch) or of [x, y] pairs."""
        return [("curve", "validation metric", False), ("train_curve", "training loss", True)]

    def trial_head(self, n: int, trial: dict[str, Any]) -> str:
        """How the details name the n-th trial."""
        return f"Trial {trial['trial']}" + (f" (seed {trial['seed']})" if trial.get("seed") is not None else "")

    def read_trials(self, result: RunResult, count: int | None = None) -> tuple[dict[str, Any], list] | Verdict:
        """(the run's value, its trials), or the verdict of a run with no trials to judge (`count`:
        how many trials the task runs, when a run must have them all)."""
        value = result.value if isinstance(result.value, dict) else {}
        early = self.untrained_verdict(value)
        if early is not None:
            return early
        trials = value.get("trials")
        if not isinstance(trials, list) or not trials or (count is not None and len(trials) != count):
            return Verdict(False, details="The run returned nothing the station could read.")
        return value, [_with_claims(trial) for trial in trials]

    @staticmethod
    def gpu_warning(value: dict[str, Any], trial_values: list[dict[str, Any]]) -> list[str]:
        """A line for the author when the trials were given a GPU that JAX did not use."""
        if value.get("gpus_per_trial") and trial_values and not any(gpu_device(v) for v in trial_values):
            return [
                "Warning: each trial was given a GPU, but JAX saw only the CPU: install JAX's CUDA "
                "build where the trials run (pip install -e '.[gpu]')."
            ]
        return []


def _with_claims(trial: Any) -> Any:
    """A trial as the station listed it, with what its run reported made plain and bounded: the run
    wrote that itself (it may have skipped the harness), so it may hold arrays, long texts, anything."""
    if not isinstance(trial, dict):
        return trial
    reported = claims(trial.get("reported"))
    return {**trial, "reported": reported, "seed": (reported or {}).get("seed")}


def learning_curves(
    panels: list[tuple[str, str, bool]], scored: list[dict[str, Any]], x_label: str = "epoch"
) -> dict[str, Any] | None:
    """A "curves" figure: per panel, one series per scored trial that returned that curve; None
    when no trial returned any. A scored trial: {"trial": n, "value": its data, "label": optional}."""
    drawn = []
    for key, title, lower in panels:
        series = []
        for one in scored:
            label = one.get("label") or f"trial {one['trial']}"
            curve = curve_series(str(label), one["value"].get(key))
            if curve is not None:
                series.append(curve)
        if series:
            drawn.append({"title": title, "lower_is_better": lower, "series": series})
    return {"kind": "curves", "x_label": x_label, "panels": drawn} if drawn else None


def curve_series(label: str, curve: Any) -> dict[str, Any] | None:
    """One trial's curve as plain finite numbers, evenly thinned to MAX_CURVE_POINTS; "x" is kept
    when the curve held [x, y] pairs or points were left out (else x is 1, 2, ...)."""
    if not isinstance(curve, (list, tuple)):
        return None
    picked = thin_indices(len(curve), MAX_CURVE_POINTS)  # thinned first: a huge list costs nothing
    xs, ys = [], []
    pairs = False
    for i in picked:
        item = curve[i]
        if isinstance(item, (list, tuple)) and len(item) == 2:
            pairs, x, y = True, figure_number(item[0]), figure_number(item[1])
        else:
            x, y = float(i + 1), figure_number(item)
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    if not ys:
        return None
    series: dict[str, Any] = {"label": label, "values": ys}
    if pairs or len(ys) < len(curve):
        series["x"] = xs
    return series


def gpu_device(trial: dict[str, Any]) -> bool:
    """Did the trial's JAX run on an accelerator (its reported devices are not all CPUs)?"""
    return any(not str(name).startswith("cpu") for name in trial.get("device") or [])
