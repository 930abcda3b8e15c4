"""What every JAX training trial shares: the agent's hooks, hyperparameters, seeds, budgets.

This package is mounted read-only into each run as `station_jax`; the station appends a
two-line driver to the submission that calls a trial module here (`forecast`, `sokoban`, `rna`)
with the submission's globals. The harness owns the loop: agents supply hooks only. Nothing the
run returns is scored (two-stage scoring, evaluators/jaxtrain/two_stage.py), so the harness
need not guard itself against the submission: patching it changes only the run's own report.

Trial settings come from the station in the environment variable STATION_TRIAL (JSON):
phase ("check" or "train"), trial number, data folder, budgets and task-specific options.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_BASE_SEED = 0  # fixed, so that an evaluation can be repeated; the spec's time-based default cannot


class ContractError(Exception):
    """The submission broke the task's contract (reported to its author, not debugged)."""


# -- search spaces: plain values are fixed; these are sampled once per trial ------------------------
@dataclass(frozen=True)
class choice:  # noqa: N801 - reads like Ray Tune's tune.choice
    options: tuple

    def __init__(self, options) -> None:
        if not list(options):
            raise ContractError("choice() needs at least one option")
        object.__setattr__(self, "options", tuple(options))

    def sample(self, rng) -> Any:
        return self.options[int(rng.integers(len(self.options)))]


@dataclass(frozen=True)
class uniform:  # noqa: N801
    low: float
    high: float

    def sample(self, rng) -> float:
        return float(rng.uniform(self.low, self.high))


@dataclass(frozen=True)
class loguniform:  # noqa: N801
    low: float
    high: float

    def sample(self, rng) -> float:
        if not 0 < self.low <= self.high:
            raise ContractError(f"loguniform({self.low}, {self.high}) needs 0 < low <= high")
        return float(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))


@dataclass(frozen=True)
class randint:  # noqa: N801
    low: int
    high: int  # exclusive, like numpy and Ray Tune

    def sample(self, rng) -> int:
        return int(rng.integers(self.low, self.high))


def sample_hyperparameters(space: Any, seed: int) -> dict[str, Any]:
    """One draw from the agent's space, the same for the same seed on every machine."""
    import numpy as np

    if space is None:
        return {}
    if not isinstance(space, dict) or not all(isinstance(k, str) for k in space):
        raise ContractError(
            f"_define_hyperparameters() must return a dict with string keys, got {type(space).__name__}"
        )
    rng = np.random.default_rng([seed, 1])  # stream 1: hyperparameters (stream 0 is the model)
    drawn = {}
    for name in sorted(space):  # sorted: the draw must not depend on the dict's order
        value = space[name]
        drawn[name] = value.sample(rng) if isinstance(value, (choice, uniform, loguniform, randint)) else value
    return drawn


# -- the agent's hooks -----------------------------------------------------------------------------------
@dataclass
class Hooks:
    create_network: Callable
    create_optimizer: Callable
    define_hyperparameters: Callable | None
    complete: Callable | None
    base_seed: int
    batch_size: int
    extra: dict[str, Callable]  # task-specific overridable hooks (compute_loss, training_step)


def default_optimizer(learning_rate: float):
    import optax

    return optax.adam(learning_rate, eps=1e-8)


def load_hooks(
    ns: dict[str, Any], *, default_batch: int, overridable: dict[str, Callable], forbidden: dict[str, str] | None = None
) -> Hooks:
    """The hooks a submission defines (in its globals `ns`), with the harness's defaults."""
    for name, why in (forbidden or {}).items():
        if callable(ns.get(name)):
            raise ContractError(f"submission.py defines {name}(): {why}")
    network = ns.get("create_network")
    if not callable(network):
        raise ContractError("submission.py must define create_network(hparams)")
    base_seed = ns.get("BASE_SEED", DEFAULT_BASE_SEED)
    if isinstance(base_seed, bool) or not isinstance(base_seed, int) or not 0 <= base_seed < 2**31:
        raise ContractError(f"BASE_SEED must be an int in [0, 2**31), got {base_seed!r}")
    batch = ns.get("BATCH_SIZE", default_batch)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 65536:
        raise ContractError(f"BATCH_SIZE must be an int from 1 to 65536, got {batch!r}")
    extra = {name: ns[name] if callable(ns.get(name)) else fallback for name, fallback in overridable.items()}
    return Hooks(
        network,
        ns["create_optimizer"] if callable(ns.get("create_optimizer")) else default_optimizer,
        ns.get("_define_hyperparameters") if callable(ns.get("_define_hyperparameters")) else None,
        ns.get("complete") if callable(ns.get("complete")) else None,
        base_seed,
        batch,
        extra,
    )


def hyperparameters(hooks: Hooks, seed: int) -> dict[str, Any]:
    space = hooks.define_hyperparameters() if hooks.define_hyperparameters else {}
    return sample_hyperparameters(space, seed)


def plain(value: Any) -> Any:
    """Hyperparameters as JSON-able data for the report (anything else as its repr)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    try:
        return plain(value.item())  # numpy and jax scalars
    except (AttributeError, ValueError, TypeError):
        return repr(value)[:200]


# -- the trial's settings, time and integrity ------------------------------------------------------------
def trial_settings() -> dict[str, Any]:
    text = os.environ.get("STATION_TRIAL")
    if not text:
        raise ContractError("this code runs only under the station's training harness (STATION_TRIAL is unset)")
    return json.loads(text)


def report_progress(text: str) -> None:
    """Tell the station how far training is ("epoch 3/120"), for its status displays only: the file
    named by STATION_PROGRESS is replaced whole, and the station reads it as untrusted text."""
    path = os.environ.get("STATION_PROGRESS")
    if not path:
        return
    try:
        with open(path + ".new", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".new", path)
    except OSError:
        pass  # a display aid: never a reason for a trial to fail


class Clock:
    """The trial's training budget: the harness stops training when it is spent, then reports."""

    def __init__(self, budget_s: float) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + budget_s

    def spent(self) -> bool:
        return time.monotonic() >= self.deadline

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def require_finite(value: float, what: str) -> float:
    if not math.isfinite(value):
        raise ContractError(f"{what} is not finite ({value}): training diverged (try a smaller learning rate)")
    return value


def run_trial(ns: dict[str, Any], run: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """The driver's body: test mode, or one phase of a trial with contract errors as data. What it
    returns is the run's report, which the station shows as the run's claim and never scores."""
    if callable(ns.get("test")):
        print("=== Test Mode Detected ===", flush=True)
        ns["test"]()
        return {"test_mode": True}
    try:
        return run(ns, trial_settings())
    except ContractError as err:
        return {"contract_error": str(err)}


def device_names() -> list[str]:
    import jax

    names = []
    for device in jax.devices():
        kind = str(getattr(device, "device_kind", "") or "")
        names.append(device.platform if kind.lower() in ("", device.platform) else f"{device.platform} ({kind})")
    return names
