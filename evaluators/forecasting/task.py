"""Neural-activity forecasting (spec research §3.4): the ZAPBench interface on our simulated data or the real arrays.

Agents supply hooks (`create_network`, optionally `compute_loss`, `create_optimizer`,
`_define_hyperparameters`, `complete`, `BASE_SEED`, `BATCH_SIZE`); the harness trains 3 seeds on
the training split only, and the station scores them in two stages (jaxtrain/two_stage.py): each
epoch's checkpoint is run by the station's own scorer on every validation window and neuron (the
windows ZAPBench scores: the first ones take their context from the training split), one window
per call of the exported network, and the scorer sends back the summed errors
(station_jax/window_scoring.py). Early stopping and the best epoch are the station's. Score:
−mean(best val MAE over seeds), with the MAE at horizons 1, 4, 8, 16 and 32 as secondary metrics.
The test split stays in the dataset's private folder and is scored only by `station external`
(the paper's external evaluation: the test MAE at the epoch validation picked); the whole dataset
folder is hidden from runs.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from ..base import Baseline, register
from ..jaxtrain.station_jax.windows import CONTEXT, HORIZON, HORIZONS_REPORTED
from ..jaxtrain.two_stage import ExampleSpec, StopRule, TwoStageTask
from .dataset import ForecastDataset, data_root
from .play import submission as scripted_play

METRICS = tuple(f"Val_MAE_{h}" for h in HORIZONS_REPORTED)
TEST_METRICS = tuple(f"Test_MAE_{h}" for h in HORIZONS_REPORTED)


@register("forecasting")
class Forecasting(TwoStageTask):
    title = "Neural Activity Forecasting"
    description = "Forecast 32 future frames of whole-brain neural activity from the 4 frames before."
    harness_module = "forecast"
    data_target = "task_data/forecasting"
    display_precision = 6
    metric_formats = {name: ".4f" for name in METRICS}

    @classmethod
    def scripted_submission(cls, shown_title: str, seen: Any, rng: random.Random) -> dict[str, str] | None:
        return scripted_play(seen, rng)

    def __init__(
        self,
        size: str = "default",
        seed: int = 0,
        path: str | None = None,
        trials: int = 3,
        trial_budget_s: float = 300.0,
        max_epochs: int = 120,
        patience: int = 20,
        trial_cpus: float = 1.0,
        gpus_per_trial: float | None = None,
        grace_s: float = 240.0,
        memory_mb: int | None = 6144,
        split: str = "default",
        batch_size: int = 32,
    ) -> None:
        """`split`: how the simulated recording is cut ("default" 70/15/15, or ZAPBench's "official"
        70/10/20); `batch_size`: the BATCH_SIZE a submission gets unless it sets its own (the paper: 8)."""
        super().__init__(
            trials=trials,
            trial_budget_s=trial_budget_s,
            trial_cpus=trial_cpus,
            gpus_per_trial=gpus_per_trial,
            grace_s=grace_s,
            memory_mb=memory_mb,
        )
        if max_epochs < 1 or patience < 1 or not 1 <= batch_size <= 65536:
            raise ValueError("max_epochs and patience must be at least 1, batch_size from 1 to 65536")
        self.max_epochs, self.patience, self.batch_size = max_epochs, patience, batch_size
        self.dataset = ForecastDataset(data_root(), size=size, seed=seed, path=path, split=split)
        self._counts: dict[tuple[str, ...], list[int]] = {}

    # -- data ----------------------------------------------------------------------------------------------
    def data_dir(self) -> Path:
        return self.dataset.ensure().train_dir  # the training split only

    def private_paths(self) -> list[Path]:
        # val, test and the scorer's inputs (runs get theirs through mounts), and the key of the draw
        return [self.dataset.dir, *filter(None, [self.dataset.secret_dir])]

    def scored_splits(self) -> tuple[str, ...]:
        """The splits each checkpoint is measured on: validation picks the best epoch; the external
        evaluation also measures the test split at every epoch and reports it at the one picked."""
        return ("val", "test") if self.external_mode else ("val",)

    def trial_settings(self) -> dict[str, Any]:
        return {"max_epochs": self.max_epochs, "default_batch": self.batch_size}

    def external_changes(self) -> str:
        """The paper's external evaluation of ZAPBench: the internal setup, with a final evaluation
        on the test split (here: at the epoch each trial's validation MAE picked)."""
        if not self.dataset.frames["test"]:
            raise ValueError(f"forecasting: {self.dataset.name} has no test split to evaluate on")
        return "scored on the test split at the epoch the validation split picked"

    def sample_score(self, scored: dict[str, Any]) -> float:
        return float(scored["held_out"]["score"])

    # -- two-stage scoring -----------------------------------------------------------------------------------
    def scoring_dir(self, trial: int) -> Path:
        return self.dataset.scored_windows(self.scored_splits())

    def example_spec(self, trial: int) -> ExampleSpec:
        n = self.dataset.n_neurons
        return ExampleSpec(inputs=[((CONTEXT, n), "float32")], outputs=[((HORIZON, n), "float32")])

    def scorer_settings(self, trial: int) -> dict[str, Any]:
        return {"mode": "windows", "groups": len(self.scored_splits())}

    def stop_rule(self, trial: int) -> StopRule:
        return StopRule(self.patience, self.max_epochs, self.trial_budget_s, self.late_allowance_s())

    def measure(self, trial: int, outputs: dict[str, np.ndarray]) -> dict[str, Any]:
        """One checkpoint's MAE per scored split, from the error sums the station's scorer made."""
        splits = self.scored_splits()
        sums, windows, nonfinite = (np.asarray(outputs.get(k)) for k in ("abs_error", "windows", "nonfinite"))
        if sums.shape != (len(splits), HORIZON) or windows.shape != (len(splits),):
            raise ValueError(f"the scorer's sums have shapes {sums.shape} and {windows.shape}")
        if int(nonfinite):
            raise ValueError(f"the predictions hold {int(nonfinite):,} NaN or infinite values")
        expected = self.window_counts()
        if windows.tolist() != expected:
            raise ValueError(f"the scorer measured {windows.tolist()} windows, not {expected}")
        if 0 in expected:
            raise ValueError(f"the {splits[expected.index(0)]} split has no window of {CONTEXT + HORIZON} frames")
        by_split = sums / (windows[:, None] * float(self.dataset.n_neurons))
        measured = horizon_result(by_split[0], "val", "Val")
        if self.external_mode:  # the epoch is still picked on validation; the test MAE rides along
            measured["held_out"] = horizon_result(by_split[1], "test", "Test")
            measured["line"] += f"; {measured['held_out']['line']}"
        return measured

    def window_counts(self) -> list[int]:
        """How many windows of each scored split the scorer must have measured."""
        splits = self.scored_splits()
        if splits not in self._counts:  # a dict: external()'s copy shares it, and scores other splits
            groups = np.load(self.scoring_dir(0) / "group.npy")
            self._counts[splits] = np.bincount(groups, minlength=len(splits)).tolist()
        return self._counts[splits]

    # -- what agents read ---------------------------------------------------------------------------------
    def spec(self) -> str:
        refs = self.dataset.references()
        return SPEC.format(
            data=self.dataset.describe(),
            batch=self.batch_size,
            persistence=refs["persistence"]["mae"],
            context_mean=refs["context_mean"]["mae"],
            train_mean=refs["train_mean"]["mae"],
            trials=self.trials,
            budget=self.trial_budget_s / 60,
            epochs=self.max_epochs,
            patience=self.patience,
            target=self.data_target,
        )

    def baselines(self) -> list[Baseline]:
        code = (Path(__file__).parent / "baselines" / "shared_mlp.py").read_text(encoding="utf-8")
        return [
            Baseline(
                "Shared-Neuron MLP",
                ("baseline", "mlp", "shared-weights"),
                "One small MLP shared by every neuron maps its last 4 frames to the next 32 "
                "(4 -> 64 -> 32, BatchNorm, dropout 0.1), trained with MAE.",
                code,
            )
        ]

    # -- scoring ------------------------------------------------------------------------------------------
    def curve_panels(self) -> list[tuple[str, str, bool]]:
        return [
            ("curve", "validation MAE (measured by the station)", True),
            ("train_curve", "training loss (reported by the run)", True),
        ]

    def summary(self, scored: list[dict[str, Any]]) -> tuple[float, dict[str, float | None], list[str]]:
        picked = [s["held_out"] for s in scored] if self.external_mode else scored
        mae = float(np.mean([s["mae"] for s in picked]))
        names = TEST_METRICS if self.external_mode else METRICS
        metrics: dict[str, float | None] = {
            name: float(np.mean([s["metrics"][name] for s in picked])) for name in names
        }
        refs = self.dataset.references()
        lines = [
            "Naive predictors on the validation windows (MAE, lower is better): "
            + ", ".join(f"{name.replace('_', ' ')} {ref['mae']:.6f}" for name, ref in refs.items())
        ]
        if self.external_mode:
            val = float(np.mean([s["mae"] for s in scored]))
            lines.insert(
                0, f"Scored on the test split, at the epoch each trial's validation MAE picked (val MAE {val:.6f})."
            )
        return -mae, metrics, lines


def horizon_result(by_step: np.ndarray, split: str, prefix: str) -> dict[str, Any]:
    """What `measure` returns for one split's MAE per forecast step."""
    mae = float(by_step.mean())
    metrics = {f"{prefix}_MAE_{h}": float(by_step[h - 1]) for h in HORIZONS_REPORTED}
    line = f"{split} MAE {mae:.6f} (horizon 1: {by_step[0]:.4f}, 32: {by_step[-1]:.4f})"
    return {"score": -mae, "metric": round(mae, 6), "mae": mae, "metrics": metrics, "line": line}


SPEC = """# Neural Activity Forecasting

Forecast whole-brain neural activity: from the last **4 frames** of every neuron's activity,
predict the next **32 frames** of every neuron (the ZAPBench setting).

## Data
{data}

Inside a run the training split is in `{target}/` (read-only): `train_data.npy` (frames x
neurons, float32) and `train_condition_labels.npy` (the experimental condition of each frame).
A window is 36 consecutive frames of one condition: 4 inputs, 32 targets. The validation split
is the station's: no run sees it, and neither does anything else of yours. The test split is
held out and never reachable.

## What to submit
`submission.py` with hooks; the station's harness owns the training loop (it is in the
read-only package `station_jax/`, which you may read: `station_jax/forecast.py`).
- `create_network(hparams)` (required): an object with `init(rng, x)` and
  `apply(params, x, training=False)` mapping x of shape (batch, 4, neurons) to (batch, 32, neurons).
  A Flax `linen` Module works as it is (BatchNorm statistics and a `dropout` RNG are handled).
  The harness exports `apply(variables, x, training=False)` for one window with `jax.export`;
  the station runs that export, one window per call. It must be plain JAX: host callbacks
  (`jax.pure_callback`, `jax.debug.print`), custom calls other than `jnp.linalg`'s, or more than
  1 MiB of constants embedded in the code are refused (keep what you learn in the parameters).
- `compute_loss(predictions, targets, params, x)` (optional; default: mean absolute error).
- `create_optimizer(learning_rate)` (optional; default: `optax.adam(learning_rate, eps=1e-8)`).
- `_define_hyperparameters()` (optional): a dict; plain values are fixed, and
  `station_jax.hooks.choice([...])`, `uniform(a, b)`, `loguniform(a, b)`, `randint(a, b)` are drawn
  once per trial. `learning_rate` (default 1e-3) is passed to `create_optimizer`.
- `complete(params, opt_state, info)` (optional): called with the last parameters at the end
  (the station picks the best epoch itself and does not tell the run).
- `BASE_SEED` (default 0) and `BATCH_SIZE` (default {batch}).
Defining your own training loop, or changing the harness's functions, is refused.

## How it is trained and scored
{trials} trials with seeds `BASE_SEED + trial`, in parallel, each with {budget:g} minutes of
training: shuffled training windows each epoch, at most {epochs} epochs. After each epoch the
harness hands the parameters to the station, which measures them on the validation windows in
a sandbox of its own (your code does not run there: only the exported network, one window at a
time) and stops the trial after {patience} epochs without a better validation MAE; the best
epoch counts. A quick check (build, one forward pass, one training step, the export, on the
CPU) runs first. Every trial counts: one that crashes, diverges or runs out of time before the
station measured any of its epochs leaves the evaluation without a score (epochs measured
before a failure still count). What a run prints or returns about itself (epochs, seconds,
training loss) is shown as its own report. A submission that defines `test()` runs it instead
(no score), for probing.

## Score
Mean absolute error over every scored validation window and neuron, at the best epoch.
**Score = −(mean validation MAE over the trials)**: higher is better. Secondary: `Val_MAE_1`, `Val_MAE_4`, `Val_MAE_8`, `Val_MAE_16`, `Val_MAE_32`, the MAE at
those forecast steps.

The bar to clear, on this validation split (MAE, lower is better): copying the last input frame
scores {persistence:.6f}, the mean of the 4 input frames {context_mean:.6f}, each neuron's
training mean {train_mean:.6f}. A model worse than these has learnt nothing useful; the details
of every result repeat them.
"""
