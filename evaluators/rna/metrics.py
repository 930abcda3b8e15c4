"""The station's measurement of one dataset: the validation predictions of a trial's checkpoint
against the station's own labels, with the dataset's metric (R², Spearman, macro AUC-ROC,
accuracy; higher is better). Only the station measures: the training run never sees the
validation split (evaluators/jaxtrain/two_stage.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from evaluators.jaxtrain.station_jax.rna import output_shapes

from .beacon import RnaDataset


# -- metrics (higher is better); all float64 ---------------------------------------------------------------
def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks; tied values share the mean of their ranks (as scipy.stats.rankdata)."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    first_of_tie = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    starts = np.flatnonzero(first_of_tie)  # 0-based positions where each group of ties begins
    ends = np.append(starts[1:], len(values))
    ranks = np.empty(len(values))
    ranks[order] = ((starts + ends + 1) / 2.0)[np.cumsum(first_of_tie) - 1]  # mean of ranks start+1 .. end
    return ranks


def r2(pred: np.ndarray, target: np.ndarray) -> float:
    """Coefficient of determination of one target; NaN when the targets are all equal."""
    pred, target = np.asarray(pred, dtype=np.float64), np.asarray(target, dtype=np.float64)
    total = float(np.sum((target - target.mean()) ** 2))
    return 1.0 - float(np.sum((target - pred) ** 2)) / total if total > 0 else math.nan


def spearman(pred: np.ndarray, target: np.ndarray) -> float:
    """Spearman's rank correlation. A constant prediction carries no ranking: 0 (scipy gives NaN)."""
    a, b = average_ranks(pred), average_ranks(target)
    a, b = a - a.mean(), b - b.mean()
    scale = math.sqrt(float(np.sum(a * a)) * float(np.sum(b * b)))
    return float(np.sum(a * b)) / scale if scale > 0 else 0.0


def auc_roc(score: np.ndarray, label: np.ndarray) -> float:
    """Area under the ROC curve of one binary label (ties count one half); NaN with one class only."""
    label = np.asarray(label) > 0.5
    positives, negatives = int(label.sum()), int((~label).sum())
    if not positives or not negatives:
        return math.nan
    rank_sum = float(average_ranks(score)[label].sum())
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def macro_auc_roc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mean AUC-ROC over the labels; a label with a single value in `labels` is skipped."""
    aucs = [auc_roc(scores[:, k], labels[:, k]) for k in range(labels.shape[1])]
    kept = [a for a in aucs if not math.isnan(a)]
    return float(np.mean(kept)) if kept else math.nan


def accuracy(logits: np.ndarray, classes: np.ndarray) -> float:
    return float(np.mean(np.argmax(logits, axis=1) == np.asarray(classes)))


def metric_value(metric: str, pred: np.ndarray, target: np.ndarray) -> float:
    """The dataset's metric: r2 (the mean over outputs for several), spearman, auc_roc, accuracy."""
    pred = np.asarray(pred, dtype=np.float64)
    if metric == "accuracy":
        return accuracy(pred, target)
    if metric == "auc_roc":
        return macro_auc_roc(pred, target)
    pred = pred.reshape(len(pred), -1)
    target = np.asarray(target, dtype=np.float64).reshape(len(target), -1)
    per_output = r2 if metric == "r2" else spearman
    return float(np.mean([per_output(pred[:, k], target[:, k]) for k in range(target.shape[1])]))


def pearson_r2(pred: np.ndarray, target: np.ndarray) -> float:
    """The squared Pearson correlation of one output; NaN when either side is constant."""
    a = np.asarray(pred, dtype=np.float64) - np.mean(pred)
    b = np.asarray(target, dtype=np.float64) - np.mean(target)
    scale = float(np.sum(a * a)) * float(np.sum(b * b))
    return float(np.sum(a * b)) ** 2 / scale if scale > 0 else math.nan


def log_odds(share: np.ndarray) -> np.ndarray:
    clipped = np.clip(np.asarray(share, dtype=np.float64), 1e-7, 1.0 - 1e-7)
    return np.log(clipped / (1.0 - clipped))


BEACON_NAMES = {"APA": "Pearson r² on log-odds", "PRS": "mean Pearson r² of ON, OFF, ON/OFF", "MRL": "Pearson r²"}


def beacon_value(dataset: RnaDataset, pred: np.ndarray, target: np.ndarray) -> float | None:
    """BEACON's own measure where the station's differs, shown beside the score so that BEACON's tables
    compare: for the R² datasets the squared Pearson correlation (the mean over outputs), APA's on
    log-odds of the clipped proportions. None for the other datasets (their metric is BEACON's)."""
    if dataset.metric != "r2":
        return None
    pred = np.asarray(pred, dtype=np.float64).reshape(len(pred), -1)
    target = np.asarray(target, dtype=np.float64).reshape(len(target), -1)
    if dataset.name == "APA":
        pred, target = log_odds(pred), log_odds(target)
    return float(np.mean([pearson_r2(pred[:, k], target[:, k]) for k in range(target.shape[1])]))


def checked_predictions(dataset: RnaDataset, pred: Any, rows: int) -> np.ndarray:
    """The predictions as float64, or ValueError when they are not one finite row per validation row."""
    allowed, wanted = output_shapes(dataset.settings(0), rows)
    shape = getattr(pred, "shape", None)
    if not isinstance(pred, np.ndarray) or shape not in allowed:
        raise ValueError(
            f"predictions of shape {shape} for {dataset.name}, expected {wanted.replace('batch', str(rows))}"
        )
    if not np.isfinite(pred).all():
        raise ValueError(f"the predictions for {dataset.name} hold NaN or infinite values")
    return pred.astype(np.float64)


def measure(dataset: RnaDataset, pred: Any, labels: np.ndarray) -> float:
    """The dataset's metric of `pred` on `labels` (higher is better); ValueError for bad predictions."""
    value = metric_value(dataset.metric, checked_predictions(dataset, pred, len(labels)), labels)
    if not np.isfinite(value):
        raise ValueError(f"the {dataset.metric} of {dataset.name} is not finite ({value})")
    return value


def constant_predictions(dataset: RnaDataset, train_labels: np.ndarray, rows: int) -> np.ndarray:
    """What a predictor that ignores the sequence does best: the train mean (regression), the label
    frequencies (multilabel classification), the most common class (multiclass)."""
    if dataset.task_type == "multiclass_classification":
        scores = np.zeros((rows, dataset.d_output))
        scores[:, np.bincount(train_labels, minlength=dataset.d_output).argmax()] = 1.0
        return scores
    mean = np.asarray(train_labels, dtype=np.float64).mean(axis=0)
    return np.broadcast_to(mean, (rows, *np.shape(mean))).copy()


def constant_metric(dataset: RnaDataset, train_labels: np.ndarray, val_labels: np.ndarray) -> float:
    return measure(dataset, constant_predictions(dataset, train_labels, len(val_labels)), val_labels)
