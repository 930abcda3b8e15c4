"""Reading the 7 datasets from a folder in BEACON's layout, with errors that name the file and line.

    DIR/<dataset>/train.csv, val.csv and (optionally) test.csv

where <dataset> is our name or BEACON's (APA or Isoform, CRI-Off or CRISPROffTarget, ...; see
beacon.py). A file is CSV, with or without a header row (a first row none of whose cells is a
number is the header). With a header:
- the sequence is the column `seq` or `sequence`; else, if there are columns `sgrna` and
  `target` (BEACON's CRI-Off), the two concatenated, sgRNA first; else the first named column;
- the labels are the dataset's own BEACON columns when all are present (APA:
  `proximal_isoform_proportion`; PRS: `ON`, `OFF`, `ON_OFF`); else the column `label` (or
  `labels`); else every other named column, in order. Unnamed columns (pandas' index) are ignored.
Without a header the first column is the sequence (the first two when both hold letters, as
CRI-Off's sgRNA and target), and the other columns are the labels. A label cell holds one number
or a list of them ("[0, 1, 0]", "0 1 0" or "0,1,0"), so a multi-output dataset may use one column
or several. Letters are case-insensitive; U and T are the same channel.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluators.jaxtrain.station_jax.rna import ALPHABET

from .beacon import RnaDataset

SEQUENCE_COLUMNS = ("seq", "sequence")
PAIR_COLUMNS = ("sgrna", "target")
LABEL_COLUMNS = ("label", "labels")
REQUIRED_SPLITS = ("train", "val")
SEPARATORS = re.compile(r"[,;\s]+")


@dataclass
class Split:
    sequences: list[str]  # upper case
    labels: np.ndarray  # (N,) float64 for one output, (N, k) for several, (N,) int64 classes


@dataclass(frozen=True)
class Layout:
    sequence: tuple[int, ...]  # columns concatenated into the sequence
    labels: tuple[int, ...]  # columns holding the label values, in order
    width: int  # cells every row has (as many as the first)


def dataset_folder(root: Path, dataset: RnaDataset) -> Path:
    """root/<our name> or root/<BEACON's name>, whichever exists (both: an error)."""
    present = [root / name for name in (dataset.name, dataset.beacon) if (root / name).is_dir()]
    if not present:
        raise ValueError(f"rna: {root} has no folder for {dataset.name}: expected {dataset.name}/ or {dataset.beacon}/")
    if len(present) == 2 and present[0].resolve() != present[1].resolve():
        raise ValueError(f"rna: {root} has both {dataset.name}/ and {dataset.beacon}/ for {dataset.name}; keep one")
    return present[0]


def read_dataset(root: Path, dataset: RnaDataset) -> tuple[Path, dict[str, Split]]:
    """(the folder used, its splits): train and val (required) and test (when present)."""
    folder = dataset_folder(root, dataset)
    splits = {}
    for split in ("train", "val", "test"):
        path = folder / f"{split}.csv"
        if split not in REQUIRED_SPLITS and not path.exists():
            continue
        splits[split] = read_split_file(path, dataset)
    check_scorable(dataset, splits["val"], folder / "val.csv")
    return folder, splits


def read_split_file(path: Path, dataset: RnaDataset) -> Split:
    if not path.is_file():
        raise ValueError(f"rna: {path} is missing")
    sequences: list[str] = []
    values: list[list[float]] = []
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        layout: Layout | None = None
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue  # blank lines
            where = f"rna: {path}, line {reader.line_num}"
            if layout is None:
                if is_header(row):
                    layout = header_layout(row, dataset, where)
                    continue
                layout = positional_layout(row, dataset, where)
            if len(row) != layout.width:
                raise ValueError(f"{where}: {len(row)} fields, but {layout.width} in the first row")
            sequences.append(parse_sequence("".join(row[i].strip() for i in layout.sequence), where))
            values.append(parse_labels([row[i] for i in layout.labels], dataset, where))
    if not sequences:
        raise ValueError(f"rna: {path} holds no sequences")
    array = np.asarray(values, dtype=np.float64)
    if dataset.task_type == "multiclass_classification":
        return Split(sequences, array[:, 0].astype(np.int64))
    return Split(sequences, array[:, 0] if dataset.n_labels == 1 else array)


# -- which columns are what ---------------------------------------------------------------------------------
def is_header(row: list[str]) -> bool:
    """A first row none of whose cells is a number (or a list of numbers) names the columns."""
    return not any(_numbers(cell) is not None for cell in row)


def header_layout(header: list[str], dataset: RnaDataset, where: str) -> Layout:
    names = [cell.strip() for cell in header]
    lower = [name.lower() for name in names]
    named = [i for i, name in enumerate(names) if name and not name.startswith("Unnamed:")]
    if not named:
        raise ValueError(f"{where}: the header names no column")
    sequence: tuple[int, ...]
    if any(name in lower for name in SEQUENCE_COLUMNS):
        sequence = (next(lower.index(name) for name in SEQUENCE_COLUMNS if name in lower),)
    elif all(name in lower for name in PAIR_COLUMNS):
        sequence = tuple(lower.index(name) for name in PAIR_COLUMNS)
    else:
        sequence = (named[0],)
    labels: tuple[int, ...]
    if all(name in names for name in dataset.beacon_labels):
        labels = tuple(names.index(name) for name in dataset.beacon_labels)
    elif any(name in lower for name in LABEL_COLUMNS):
        labels = (next(lower.index(name) for name in LABEL_COLUMNS if name in lower),)
    else:
        labels = tuple(i for i in named if i not in sequence)
    if not labels:
        raise ValueError(f"{where}: no label column (name it 'label', or put the labels after the sequence)")
    return Layout(sequence, labels, len(header))


def positional_layout(row: list[str], dataset: RnaDataset, where: str) -> Layout:
    """No header: the sequence first (two sequence columns when the second holds letters too)."""
    if len(row) < 2:
        raise ValueError(f"{where}: a row needs a sequence and at least one label")
    pair = len(row) >= 3 and _numbers(row[1]) is None
    sequence = (0, 1) if pair else (0,)
    return Layout(sequence, tuple(range(len(sequence), len(row))), len(row))


# -- cells --------------------------------------------------------------------------------------------------
def parse_sequence(text: str, where: str) -> str:
    sequence = text.upper()
    if not sequence:
        raise ValueError(f"{where}: the sequence is empty")
    if not set(sequence) <= ALPHABET:
        position, letter = next((i, c) for i, c in enumerate(sequence, start=1) if c not in ALPHABET)
        raise ValueError(
            f"{where}: {letter!r} at position {position} of the sequence is not a nucleotide "
            "(A, C, G, T/U, the IUPAC codes R Y S W K M B D H V, or N/X)"
        )
    return sequence


def parse_labels(cells: list[str], dataset: RnaDataset, where: str) -> list[float]:
    values: list[float] = []
    for cell in cells:
        numbers = _numbers(cell)
        if numbers is None:
            raise ValueError(f"{where}: the label {cell.strip()!r} is not a number (or a list of numbers)")
        values.extend(numbers)
    if len(values) != dataset.n_labels:
        raise ValueError(f"{where}: {dataset.name} needs {dataset.n_labels} label value(s), found {len(values)}")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"{where}: the labels hold NaN or infinite values")
    if dataset.task_type == "multiclass_classification" and not (
        values[0] == int(values[0]) and 0 <= values[0] < dataset.d_output
    ):
        raise ValueError(f"{where}: the class must be an integer from 0 to {dataset.d_output - 1}, got {values[0]:g}")
    if dataset.task_type == "multilabel_classification" and any(v not in (0.0, 1.0) for v in values):
        raise ValueError(f"{where}: {dataset.name}'s labels must each be 0 or 1")
    return values


def _numbers(cell: str) -> list[float] | None:
    """The number(s) in a cell ("0.5", "[0, 1]", "0 1"), or None when it holds anything else."""
    text = cell.strip().strip("[]()").strip()
    if not text:
        return None
    try:
        return [float(part) for part in SEPARATORS.split(text) if part]
    except ValueError:
        return None


def check_scorable(dataset: RnaDataset, split: Split, path: Path) -> None:
    """The validation split must make the dataset's metric defined."""
    labels = split.labels.reshape(len(split.labels), -1)
    if dataset.metric in ("r2", "spearman"):
        flat = [k for k in range(labels.shape[1]) if np.all(labels[:, k] == labels[0, k])]
        if flat:
            raise ValueError(
                f"rna: {path}: every row has the same value of label {flat[0] + 1}, so {dataset.metric} is undefined"
            )
    if dataset.metric == "auc_roc" and not any(0 < labels[:, k].sum() < len(labels) for k in range(labels.shape[1])):
        raise ValueError(f"rna: {path}: no label has both values 0 and 1, so AUC-ROC is undefined")
