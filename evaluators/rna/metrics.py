"""The station's measurement of one dataset: a trial's validation predictions against the station's
own labels, with the dataset's metric. The metric functions themselves (R², Spearman, macro
AUC-ROC, accuracy) live in the harness module, station_jax/rna.py, so that a trial stops early
on exactly the number the station later measures; here they are applied to checked predictions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evaluators.jaxtrain.station_jax.rna import metric_value, output_shapes

from .beacon import RnaDataset


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
