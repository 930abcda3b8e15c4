"""The 7 sequence-level datasets of BEACON that the RNA modelling task trains on, in trial order.

Each has our short name (the spec's, used for folders, secondary metrics and trial order) and
the folder name of BEACON's release; the loader accepts either. The column names are those of
BEACON's CSV files as the reference station read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

METRIC_LABELS = {"r2": "R2", "spearman": "Spearman", "auc_roc": "AUC-ROC", "accuracy": "Accuracy"}
MODIFICATIONS = ("hAm", "hCm", "hGm", "hUm", "hm1A", "hm5C", "hm5U", "hm6A", "hm6Am", "hm7G", "hPsi", "Atol")
N_NCRNA_FAMILIES = 13


@dataclass(frozen=True)
class RnaDataset:
    name: str  # APA, CRI-Off, ...
    beacon: str  # the folder in BEACON's release
    task_type: str  # regression, multilabel_regression, multilabel_classification, multiclass_classification
    d_output: int  # the network's outputs per sequence
    metric: str  # r2, spearman, auc_roc, accuracy
    label_names: tuple[str, ...]  # the label columns the station writes
    beacon_labels: tuple[str, ...]  # BEACON's own label columns, tried first when reading its files
    about: str

    @property
    def metric_key(self) -> str:
        """The secondary metric's name, e.g. APA_R2."""
        return f"{self.name}_{METRIC_LABELS[self.metric]}"

    @property
    def n_labels(self) -> int:
        """Label values per row in the files (a class id for multiclass classification)."""
        return 1 if self.task_type == "multiclass_classification" else self.d_output

    def settings(self, max_seq_len: int) -> dict[str, Any]:
        """What the harness needs to train it (and passes on to create_network in hparams)."""
        return {
            "name": self.name,
            "task_type": self.task_type,
            "d_output": self.d_output,
            "metric": self.metric,
            "level": "sequence",
            "max_seq_len": max_seq_len,
        }


DATASETS: tuple[RnaDataset, ...] = (
    RnaDataset(
        "APA", "Isoform", "regression", 1, "r2", ("label",), ("proximal_isoform_proportion",),
        "alternative polyadenylation: the share of the proximal isoform produced from a 3' UTR variant",
    ),
    RnaDataset(
        "CRI-Off", "CRISPROffTarget", "regression", 1, "spearman", ("label",), ("label",),
        "CRISPR off-target cleavage: sgRNA and target DNA concatenated (sgRNA first)",
    ),
    RnaDataset(
        "Modif", "Modification", "multilabel_classification", 12, "auc_roc", MODIFICATIONS, ("label",),
        "RNA modification sites: which of 12 modifications occur at the centre of the sequence",
    ),
    RnaDataset(
        "CRI-On", "CRISPROnTarget", "regression", 1, "spearman", ("label",), ("label",),
        "CRISPR on-target efficiency of a guide (with its PAM)",
    ),
    RnaDataset(
        "PRS", "ProgrammableRNASwitches", "multilabel_regression", 3, "r2", ("ON", "OFF", "ON_OFF"),
        ("ON", "OFF", "ON_OFF"),
        "programmable RNA (toehold) switches: ON level, OFF level and their difference",
    ),
    RnaDataset(
        "MRL", "MeanRibosomeLoading", "regression", 1, "r2", ("label",), ("label",),
        "mean ribosome loading of a 5' UTR variant",
    ),
    RnaDataset(
        "ncRNA", "NoncodingRNAFamily", "multiclass_classification", 13, "accuracy", ("label",), ("label",),
        "non-coding RNA family (13 families; the label is the family's index 0..12)",
    ),
)  # fmt: skip
BY_NAME = {d.name: d for d in DATASETS}
METRIC_KEYS = tuple(d.metric_key for d in DATASETS)
