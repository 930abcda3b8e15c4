"""RNA modelling (spec research §3.5): one network design trained on the 7 sequence-level BEACON datasets.

Agents supply hooks (`create_network`, optionally `create_optimizer`, `_define_hyperparameters`,
`complete`, `BASE_SEED`, `BATCH_SIZE`); the loss is fixed per task type. One evaluation is the
check run (the network for every dataset, one step and its export each) and then 7 trials,
trial n training dataset n on its training split only, scored in two stages
(jaxtrain/two_stage.py): each epoch's checkpoint is run by the station's own scorer on the
dataset's validation sequences, one sequence per call of the exported network, and measured
here against the station's labels; early stopping and the best epoch are the station's.
Score: the mean of the 7 metrics at each dataset's best epoch. A dataset without a measured
epoch (its trial crashed, timed out or handed over nothing usable) leaves the evaluation
without a score, and the details say what happened to each: the trials are 7 different
datasets, not 7 seeds, so there is no worst score to put in its place (an R² has no lower
bound). The whole dataset folder is hidden from runs; the test splits are scored only by `station
external` (the paper's external evaluation: 10 seeds, each dataset's test metric at the epoch its
validation metric picked).

This task states its own verdict (`score`) instead of TwoStageTask's summary over seeds.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import numpy as np

from station.core.run_types import RunResult

from ..base import Baseline, ExternalPlan, Verdict, register
from ..jaxtrain.task import learning_curves
from ..jaxtrain.two_stage import ExampleSpec, StopRule, TwoStageTask, curves_reported, reported_line, run_line
from .beacon import DATASETS, METRIC_KEYS
from .dataset import RnaData, data_root
from .metrics import BEACON_NAMES, beacon_value, checked_predictions, measure
from .play import submission as scripted_play

EXTERNAL_SEEDS = 10  # the paper's external evaluation: 10 seeds instead of 1


@register("rna_modelling")
class RnaModelling(TwoStageTask):
    title = "RNA Modelling"
    description = "Design one network for 7 RNA sequence tasks (BEACON): regression, multilabel and multiclass."
    harness_module = "rna"
    data_target = "task_data/rna"
    display_precision = 4
    metric_formats = {name: ".4f" for name in (*METRIC_KEYS, *(f"{d}_BEACON_r2" for d in BEACON_NAMES))}
    # a dataset without a measured epoch fails the evaluation: the trials are 7 datasets, each with
    # its own metric, so no worst value can stand in for one (an R² has no lower bound)
    failed_trial_score = None

    @classmethod
    def scripted_submission(cls, shown_title: str, seen: Any, rng: random.Random) -> dict[str, str] | None:
        return scripted_play(seen, rng)

    def __init__(
        self,
        size: str = "default",
        seed: int = 0,
        path: str | None = None,
        trial_budget_s: float = 300.0,
        max_epochs: int = 100,
        patience: int = 10,
        trial_cpus: float = 1.0,
        gpus_per_trial: float | None = None,
        grace_s: float = 240.0,
        memory_mb: int | None = 6144,
    ) -> None:
        super().__init__(
            trials=len(DATASETS),
            trial_budget_s=trial_budget_s,
            trial_cpus=trial_cpus,
            gpus_per_trial=gpus_per_trial,
            grace_s=grace_s,
            memory_mb=memory_mb,
        )
        if max_epochs < 1 or patience < 1:
            raise ValueError("max_epochs and patience must be at least 1")
        self.max_epochs, self.patience = max_epochs, patience
        self.data = RnaData(data_root(), size=size, seed=seed, path=path)
        self.seed_offset = 0  # the k-th run of the external evaluation trains with seeds k higher

    # -- the paper's external evaluation: each test split, 10 seeds -----------------------------------------
    def external(self, seeds: int | None = None) -> ExternalPlan:
        """One run per seed k (default 10, the paper's), each the 7 trials with seeds k higher,
        scored on each dataset's test split at the epoch its validation metric picked."""
        count = seeds or EXTERNAL_SEEDS
        if not 1 <= count <= 64:
            raise ValueError("seeds must be between 1 and 64")
        for dataset in DATASETS:
            self.data.split_file(dataset.name, "test")  # a clear error before anything runs
        runs = []
        for k in range(count):
            twin = copy.copy(self)
            twin.external_mode, twin.seed_offset = True, k
            runs.append(twin)
        protocol = (
            f"{count} seeds, one run each; every dataset's test split scored at the epoch its validation metric picked"
        )
        return ExternalPlan(tuple(runs), protocol)

    # -- data ----------------------------------------------------------------------------------------------
    def data_dir(self) -> Path:
        return self.data.ensure().train_dir  # the training splits only

    def private_paths(self) -> list[Path]:
        # val, test and the scorer's inputs (runs get theirs through mounts), and the key of the draw
        return [self.data.dir, *filter(None, [self.data.secret_dir])]

    def trial_settings(self) -> dict[str, Any]:
        settings = {"max_epochs": self.max_epochs, "datasets": self.data.trial_datasets()}
        return settings | ({"seed_offset": self.seed_offset} if self.seed_offset else {})

    # -- two-stage scoring: trial n is dataset n -----------------------------------------------------------
    def scoring_dir(self, trial: int) -> Path:
        name = DATASETS[trial].name
        return self.data.external_scoring_dir(name) if self.external_mode else self.data.ensure().scoring_dir(name)

    def example_spec(self, trial: int) -> ExampleSpec:
        """One sequence, one-hot and zero-padded to the dataset's length, as in training (no mask:
        the network sees padding as all-zero positions, as it does in its batches)."""
        dataset = DATASETS[trial]
        return ExampleSpec(
            inputs=[((self.data.max_seq_len(dataset.name), 4), "float32")], outputs=[((dataset.d_output,), "float32")]
        )

    def stop_rule(self, trial: int) -> StopRule:
        return StopRule(self.patience, self.max_epochs, self.trial_budget_s, self.late_allowance_s())

    def measure(self, trial: int, outputs: dict[str, np.ndarray]) -> dict[str, Any]:
        """One checkpoint's validation metric, against the station's own labels (and, in the
        external evaluation, its test metric: the scorer's outputs then hold val rows, then test rows)."""
        dataset = DATASETS[trial]
        labels = self.data.labels(dataset.name)
        pred = outputs.get("output_0")
        if self.external_mode:
            test = self.data.labels(dataset.name, "test")
            if not isinstance(pred, np.ndarray) or len(pred) != len(labels) + len(test):
                raise ValueError(f"{getattr(pred, 'shape', None)} predictions, not {len(labels) + len(test)} rows")
            pred, held_out = pred[: len(labels)], pred[len(labels) :]
        value = measure(dataset, pred, labels)
        beacon = beacon_value(dataset, checked_predictions(dataset, pred, len(labels)), labels)
        shown = f" (BEACON's {BEACON_NAMES[dataset.name]}: {beacon:.4f})" if beacon is not None else ""
        line = f"{dataset.metric} {value:.4f}{shown}"
        measured: dict[str, Any] = {"score": value, "metric": round(value, 6), "metrics": {dataset.metric_key: value}}
        if self.external_mode:  # the epoch is still picked on validation; the test metric rides along
            measured["test"] = measure(dataset, held_out, test)
            beacon = beacon_value(dataset, checked_predictions(dataset, held_out, len(test)), test)
            line += f"; test {dataset.metric} {measured['test']:.4f}"
        return measured | {"line": line, "beacon": beacon}

    # -- what agents read ---------------------------------------------------------------------------------
    def spec(self) -> str:
        return SPEC.format(
            data=self.data.describe(),
            budget=self.trial_budget_s / 60,
            epochs=self.max_epochs,
            patience=self.patience,
            target=self.data_target,
            metrics=", ".join(f"`{key}`" for key in METRIC_KEYS),
        )

    def baselines(self) -> list[Baseline]:
        code = (Path(__file__).parent / "baselines" / "vanilla_mlp.py").read_text(encoding="utf-8")
        return [
            Baseline(
                "Vanilla MLP",
                ("baseline", "mlp"),
                "Dense 512 + ReLU + dropout 0.1 applied to every position's one-hot nucleotide, then a dense "
                "layer to the dataset's outputs, averaged over the positions.",
                code,
            )
        ]

    # -- scoring --------------------------------------------------------------------------------------------
    # trial n trains dataset n: the details and the figure name the dataset
    def trial_head(self, n: int, trial: dict[str, Any]) -> str:
        seed = f", seed {trial['seed']})" if trial.get("seed") is not None else ")"
        return f"{DATASETS[n].name} (trial {trial['trial']}{seed}"

    def curve_panels(self) -> list[tuple[str, str, bool]]:
        return [
            ("curve", "validation metric (each dataset's own, measured by the station)", False),
            ("train_curve", "training loss (reported by the run)", True),
        ]

    def score(self, result: RunResult) -> Verdict:
        found = self.read_trials(result, count=len(DATASETS))
        if isinstance(found, Verdict):
            return found
        value, trials = found
        metrics: dict[str, float | None] = dict.fromkeys(METRIC_KEYS)
        lines, drawn = [], []
        for n, (trial, dataset) in enumerate(zip(trials, DATASETS)):
            head = self.trial_head(n, trial)
            station, reported = trial.get("station") or {}, trial.get("reported") or {}
            ran = run_line(trial, reported)
            best = station.get("best")
            if best is None:
                why = "; ".join(filter(None, [station.get("failure"), ran])) or "no checkpoint could be measured"
                lines.append(f"{head}: no measured checkpoint: {why}")
            else:
                metrics[dataset.metric_key] = best["test"] if self.external_mode else best["score"]
                if best.get("beacon") is not None:  # shown beside the score, never part of it
                    metrics[f"{dataset.name}_BEACON_r2"] = best["beacon"]
                lines.append(
                    f"{head}: {best['line']}; best checkpoint {station['best_checkpoint']} of "
                    f"{station['checkpoints']} (stopped by the station: {station['stop']}). "
                    f"Reported by the run: {reported_line(reported)}" + (f"; {ran}" if ran else "")
                )
                label = f"{dataset.name} ({dataset.metric})"
                drawn.append(
                    {"trial": n, "label": label, "value": {"curve": station["curve"], **curves_reported(reported)}}
                )
            lines += [f"  {note}" for note in station.get("notes") or []]
        figure = learning_curves(self.curve_panels(), drawn, self.curve_x_label)
        references = self.data.references()
        lines.append(
            f"A constant predictor (train mean, label frequencies, most common class) scores "
            f"{np.mean(list(references.values())):.4f}: "
            + ", ".join(f"{name} {metric:.4f}" for name, metric in references.items())
        )
        reported_values = [t.get("reported") or {} for t in trials]
        lines += self.gpu_warning(value, reported_values)
        missing = [d.name for d in DATASETS if metrics[d.metric_key] is None]
        if missing:
            head = (
                f"No score: {len(missing)} of {len(DATASETS)} datasets have no metric ({', '.join(missing)}); "
                "every dataset counts."
            )
            return Verdict(False, details="\n".join([head, *lines]), metrics=metrics, figure=figure)
        score = float(np.mean([metrics[key] for key in METRIC_KEYS]))
        hparams = json.dumps(reported_values[0].get("hparams", {}), sort_keys=True)
        split = "test metrics (at the epoch validation picked)" if self.external_mode else "validation metrics"
        head = f"Mean of the 7 {split}, measured by the station: {score:.{self.display_precision}f}"
        details = "\n".join([head, *lines, f"Hyperparameters (APA, reported by the run): {hparams}"])
        return Verdict(True, score, details, metrics=metrics, figure=figure)


SPEC = """# RNA Modelling

Design **one network architecture** for RNA sequences and train it on the 7 sequence-level
datasets of the BEACON benchmark: regression, multilabel regression, multilabel classification
and multiclass classification. The same `create_network` builds the model for each dataset
from the hyperparameters it is given.

## Data
{data}

Inside a run the training splits are in `{target}/<dataset>/train.csv` (read-only): a header
`sequence,<label names>`, then one row per sequence. Labels: `label` for one target (a class
index 0..12 for ncRNA), `ON,OFF,ON_OFF` for PRS, the 12 modification names (0/1) for Modif. The
validation splits are the station's: no run sees them, and neither does anything else of yours.
The test splits are held out and never reachable.

**Input to the network**: x of shape (batch, max_seq_len, 4), float32, a one-hot over
A, T/U, C, G (channels in that order). IUPAC ambiguity codes share their weight between their
bases (R = A/G gives 0.5 and 0.5); N, X and padding are all zeros. Every sequence of a dataset is
padded on the right to that dataset's max_seq_len (its longest train or val sequence).
`station_jax.rna.one_hot` is the encoder.

## What to submit
`submission.py` with hooks; the station's harness owns the training loop (it is in the
read-only package `station_jax/`, which you may read: `station_jax/rna.py`).
- `create_network(hparams)` (required): an object with `init(rng, x) -> params` and
  `apply(params, x, deterministic=True, rng_key=None)`. A Flax `linen` Module works as it is:
  its `__call__(x, deterministic=True)` gets a `dropout` RNG in training, and collections such as
  BatchNorm statistics are handled. `hparams` holds your hyperparameters and the dataset's facts:
  `dataset`, `d_output`, `task_type` (regression, multilabel_regression,
  multilabel_classification, multiclass_classification), `metric`, `level` ("sequence") and
  `max_seq_len`. The output must be (batch,) or (batch, 1) for regression and
  (batch, d_output) otherwise (logits for the classification tasks).
  The harness exports `apply(variables, x, deterministic=True)` for one sequence (x of shape
  (1, max_seq_len, 4)) with `jax.export`; the station runs that export, one sequence per call.
  It must be plain JAX: host callbacks (`jax.pure_callback`, `jax.debug.print`), custom calls
  other than `jnp.linalg`'s, or more than 1 MiB of constants embedded in the code are refused
  (keep what you learn in the parameters).
- `create_optimizer(learning_rate)` (optional; default: `optax.adamw(learning_rate, weight_decay=0.01)`).
- `_define_hyperparameters()` (optional): a dict over the defaults `learning_rate` 1e-3,
  `hidden_dim` 512, `dropout` 0.1; plain values are fixed, and `station_jax.hooks.choice([...])`,
  `uniform(a, b)`, `loguniform(a, b)`, `randint(a, b)` are drawn once per trial.
- `complete(params, opt_state, info)` (optional): called with the last parameters of each trial
  (the station picks the best epoch itself and does not tell the run).
- `BASE_SEED` (default 0) and `BATCH_SIZE` (default 64).
**The loss is fixed** and cannot be overridden: mean squared error for regression and multilabel
regression, sigmoid binary cross-entropy for multilabel classification, softmax cross-entropy for
multiclass classification. Defining your own loss or training loop, or changing the harness's
functions, is refused.

## How it is trained and scored
A quick check first (on the CPU): the network is built for all 7 datasets, its output shape is
checked, one training step is taken on each and the network is exported. Then 7 trials in
parallel, trial n training dataset n (table above) with seed
`BASE_SEED + crc32(dataset name) % 1000`, each with {budget:g} minutes of training: shuffled
batches each epoch (the last, partial batch is padded with rows that carry no weight in the
loss), at most {epochs} epochs. After each epoch the harness hands the parameters to the
station, which runs them on the dataset's validation sequences in a sandbox of its own (your
code does not run there: only the exported network, one sequence at a time) and stops the trial
after {patience} epochs without a better validation metric; the best epoch counts. A trial that
crashes, diverges or runs out of time before the station measured any of its epochs leaves the
evaluation without a score (epochs measured before a failure still count). What a run prints or
returns about itself (epochs, seconds, training loss) is shown as its own report. A submission
that defines `test()` runs it instead (no score), for probing.

## Score
Each dataset's best epoch, measured by the station on the validation split against its own
labels: R² (APA, MRL; PRS: the mean over ON, OFF, ON_OFF), Spearman (CRI-Off, CRI-On; a constant
prediction counts 0), macro AUC-ROC (Modif; a label with a single value in the validation split
is skipped), accuracy (ncRNA). **Score = the mean of the 7 metrics**: higher is
better; if any dataset has no metric, the evaluation has no score. Secondary: {metrics}.
The details compare with a constant predictor.
"""
