"""RNA modelling (spec research §3.5): one network design trained on the 7 sequence-level BEACON datasets.

Agents supply hooks (`create_network`, optionally `create_optimizer`, `_define_hyperparameters`,
`complete`, `BASE_SEED`, `BATCH_SIZE`); the loss is fixed per task type. One evaluation is the
check run (the network for every dataset, one step each) and then 7 trials, trial n training
dataset n. Each trial returns its best epoch's validation predictions, and the station measures
each dataset's metric from them against its own labels. Score: the mean of the 7 metrics; with a
dataset missing (its trial crashed, timed out or returned unusable predictions) there is no
score (n.a.), and the details list what happened to each. Test splits stay in the private folder.

The trials are 7 datasets rather than 7 seeds, so this task states its own verdict (`score`)
instead of JaxTrainingTask's summary over seeds.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np

from station.run_types import RunResult

from ..base import Baseline, Verdict, register
from ..jaxtrain.task import JaxTrainingTask
from .beacon import DATASETS, METRIC_KEYS, RnaDataset
from .dataset import RnaData, data_root
from .metrics import measure
from .play import submission as scripted_play


@register("rna_modelling")
class RnaModelling(JaxTrainingTask):
    title = "RNA Modelling"
    description = "Design one network for 7 RNA sequence tasks (BEACON): regression, multilabel and multiclass."
    harness_module = "rna"
    data_target = "task_data/rna"
    display_precision = 4
    metric_formats = {name: ".4f" for name in METRIC_KEYS}

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

    # -- data ----------------------------------------------------------------------------------------------
    def data_dir(self) -> Path:
        return self.data.ensure().input_dir

    def private_paths(self) -> list[Path]:
        return [self.data.private_dir]

    def trial_settings(self) -> dict[str, Any]:
        return {"max_epochs": self.max_epochs, "patience": self.patience, "datasets": self.data.trial_datasets()}

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
    def measure_trial(self, dataset: RnaDataset, value: dict[str, Any]) -> tuple[float, str]:
        """(the metric, one line of details) of one trial's result; ValueError when it does not hold up."""
        if value.get("dataset") != dataset.name:
            raise ValueError(f"it reports dataset {value.get('dataset')!r}, but trained {dataset.name}")
        metric = measure(dataset, value.get("val_pred"), self.data.labels(dataset.name))
        line = (
            f"{dataset.metric} {metric:.4f}; best epoch {value.get('best_epoch')} of {value.get('epochs')}, "
            f"stopped by {value.get('stop')}, {value.get('seconds')} s on {', '.join(value.get('device') or ['?'])}"
        )
        return metric, line

    # trial n trains dataset n: the details and the figure name the dataset
    def trial_head(self, n: int, trial: dict[str, Any]) -> str:
        seed = f", seed {trial['seed']})" if trial.get("seed") is not None else ")"
        return f"{DATASETS[n].name} (trial {trial['trial']}{seed}"

    def judge_trial(self, n: int, value: dict[str, Any]) -> dict[str, Any]:
        dataset = DATASETS[n]
        metric, line = self.measure_trial(dataset, value)
        return {
            "metric": metric,
            "key": dataset.metric_key,
            "line": line,
            "label": f"{dataset.name} ({dataset.metric})",
        }

    def curve_panels(self) -> list[tuple[str, str, bool]]:
        return [("curve", "validation metric (each dataset's own)", False), ("train_curve", "training loss", True)]

    def score(self, result: RunResult) -> Verdict:
        found = self.read_trials(result, count=len(DATASETS))
        if isinstance(found, Verdict):
            return found
        value, trials = found
        scored, lines = self.judge_trials(trials)
        metrics: dict[str, float | None] = dict.fromkeys(METRIC_KEYS)
        metrics.update({one["key"]: one["metric"] for one in scored})
        used = [one["value"] for one in scored]
        figure = self.figure(scored)
        references = self.data.references()
        lines.append(
            f"A constant predictor (train mean, label frequencies, most common class) scores "
            f"{np.mean(list(references.values())):.4f}: "
            + ", ".join(f"{name} {metric:.4f}" for name, metric in references.items())
        )
        lines += self.gpu_warning(value, used)
        missing = [d.name for d in DATASETS if metrics[d.metric_key] is None]
        if missing:
            head = f"No score: {len(missing)} of {len(DATASETS)} datasets have no metric ({', '.join(missing)})."
            return Verdict(False, details="\n".join([head, *lines]), metrics=metrics, figure=figure)
        score = float(np.mean([metrics[key] for key in METRIC_KEYS]))
        hparams = json.dumps(used[0].get("hparams", {}), sort_keys=True)
        head = f"Mean of the 7 validation metrics: {score:.{self.display_precision}f}"
        details = "\n".join([head, *lines, f"Hyperparameters (APA): {hparams}"])
        return Verdict(True, score, details, metrics=metrics, figure=figure)


SPEC = """# RNA Modelling

Design **one network architecture** for RNA sequences and train it on the 7 sequence-level
datasets of the BEACON benchmark: regression, multilabel regression, multilabel classification
and multiclass classification. The same `create_network` builds the model for each dataset
from the hyperparameters it is given.

## Data
{data}

Inside a run the data are in `{target}/<dataset>/train.csv` and `val.csv` (read-only): a header
`sequence,<label names>`, then one row per sequence. Labels: `label` for one target (a class
index 0..12 for ncRNA), `ON,OFF,ON_OFF` for PRS, the 12 modification names (0/1) for Modif. The
test splits are held out and never reachable.

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
- `create_optimizer(learning_rate)` (optional; default: `optax.adamw(learning_rate, weight_decay=0.01)`).
- `_define_hyperparameters()` (optional): a dict over the defaults `learning_rate` 1e-3,
  `hidden_dim` 512, `dropout` 0.1; plain values are fixed, and `station_jax.hooks.choice([...])`,
  `uniform(a, b)`, `loguniform(a, b)`, `randint(a, b)` are drawn once per trial.
- `complete(params, opt_state, info)` (optional): called with the best parameters of each trial.
- `BASE_SEED` (default 0) and `BATCH_SIZE` (default 64).
**The loss is fixed** and cannot be overridden: mean squared error for regression and multilabel
regression, sigmoid binary cross-entropy for multilabel classification, softmax cross-entropy for
multiclass classification. Defining your own loss or training loop, or changing the harness's
functions, is refused.

## How it is trained
A quick check first (on the CPU): the network is built for all 7 datasets, its output shape is
checked and one training step is taken on each. Then 7 trials in parallel, trial n training
dataset n (table above) with seed `BASE_SEED + crc32(dataset name) % 1000`, each with
{budget:g} minutes of training: shuffled batches each epoch (the last, partial batch is padded
with rows that carry no weight in the loss), at most {epochs} epochs, early stopping after
{patience} epochs without a better validation metric; the best epoch is kept. A trial whose loss
becomes NaN, that crashes or that runs out of time is reported. A submission that defines
`test()` runs it instead (no score), for probing.

## Score
Each trial's best-epoch predictions on the validation split are scored by the station against
its own labels: R² (APA, MRL; PRS: the mean over ON, OFF, ON_OFF), Spearman (CRI-Off, CRI-On; a
constant prediction counts 0), macro AUC-ROC (Modif; a label with a single value in the
validation split is skipped), accuracy (ncRNA). **Score = the mean of the 7 metrics**: higher is
better; if any dataset has no metric, the evaluation has no score. Secondary: {metrics}.
The details compare with a constant predictor.
"""
