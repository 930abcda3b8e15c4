"""The 7 RNA datasets on disk, made once and then reused, in one folder hidden from every run:
`input/<dataset>/{train,val}.csv` is the station's copy (it measures against these labels),
`train/<dataset>/train.csv` the training split alone (hard links; the only data a training run
sees, mounted read-only), `scoring/<dataset>/input_0.npy` the validation sequences one-hot and
padded (N, max_seq_len, 4) float32, what the station's scoring sandbox maps the network over (no
labels), and `private/` each `<dataset>/test.csv` and `dataset.json`.

The source is the seeded synthetic sample (simulate.py, written in BEACON's layout first) or a
folder of the real BEACON files (`path`). The sample's seeds are keyed by the data root's secret
(evaluators/secret.py), a stream per dataset and split, and the folder is named by a keyed digest:
a run holding the simulator and the training split can neither find the seeds nor read seed or
size from the folder's name. Both sources go through the same reader (real_data.py), and the
station writes every split again in one plain form: a header `sequence,<label names>`, the
sequence in upper case, the labels as numbers.

    python -m evaluators.rna.dataset [--size default] [--seed 0] [--path DIR] [--write-sample DIR]

prepares one ahead of time and prints its description and the constant predictor's metrics;
--write-sample writes the synthetic sample (keyed by this data root's secret) in BEACON's layout
into DIR instead.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from evaluators.jaxtrain.station_jax.rna import encode, one_hot, read_split

from ..cache import build_once
from ..secret import SECRET_FILE, folder_name, keyed_seed, read_key, secret_dir, station_secret
from .beacon import BY_NAME, DATASETS, RnaDataset
from .metrics import constant_metric
from .real_data import Split, read_dataset
from .simulate import SIZES, StreamSeeds, write_beacon_folder

GENERATOR = "sim-v1"
SCORING_CHUNK = 4096  # sequences one-hot encoded at a time, when the scorer's inputs are written


def data_root() -> Path:
    return Path(os.environ.get("STATION_RNA_DATA") or Path.home() / ".cache" / "station" / "rna")


class RnaData:
    def __init__(
        self,
        root: Path | str,
        *,
        size: str = "default",
        seed: int = 0,
        path: Path | str | None = None,
        unkeyed: bool = False,
    ) -> None:
        """`unkeyed`: draw with the public `seed` directly, as before draws were keyed (for measuring
        against the old data and for the red-team tests; no task parameter reaches it)."""
        self.size, self.seed = size, seed
        self.secret_dir: Path | None = None  # the key's folder, when the sample is keyed
        if path is not None:
            self.source: Path | None = Path(path).expanduser().resolve()
            if not self.source.is_dir():
                raise ValueError(f"rna: no folder {self.source}")
            digest = hashlib.sha256(str(self.source).encode()).hexdigest()[:10]
            key, self.name = f"beacon-{self.source.name}-{digest}", f"BEACON files from {self.source}"
        else:
            if size not in SIZES:
                raise ValueError(f"rna: size must be one of {sorted(SIZES)}, got {size!r}")
            self.source, self.name = None, f"Synthetic sample ({size})"
            if unkeyed:
                key = f"unkeyed-{GENERATOR}-{size}-seed{seed}"
            else:  # the key is read again when the sample is drawn: this object (pickled to scorers) holds none
                secret = station_secret(Path(root))
                key, self.secret_dir = folder_name(secret, GENERATOR, size, seed), secret_dir(Path(root))
        self.dir = Path(root) / key
        self.input_dir, self.private_dir = self.dir / "input", self.dir / "private"
        self.train_dir, self.scoring_root = self.dir / "train", self.dir / "scoring"
        self._info: dict[str, Any] | None = None
        self._labels: dict[tuple[str, str], np.ndarray] = {}

    # -- on disk --------------------------------------------------------------------------------
    def ready(self) -> bool:
        # dataset.json is moved into place last, so it marks a finished build
        return (
            (self.private_dir / "dataset.json").exists()
            and all((self.input_dir / d.name / f"{split}.csv").exists() for d in DATASETS for split in ("train", "val"))
            and all((self.train_dir / d.name / "train.csv").exists() for d in DATASETS)
            and all((self.scoring_dir(d.name) / "input_0.npy").exists() for d in DATASETS)
        )

    def scoring_dir(self, name: str) -> Path:
        """The folder the station's scorer sees for dataset `name`: `input_0.npy`, no labels."""
        return self.scoring_root / name

    def external_scoring_dir(self, name: str) -> Path:
        """The scorer's folder for the external evaluation: the validation sequences, then the test
        ones (`input_0.npy`, no labels), made on first use from the private test split."""
        folder = self.dir / "scoring-val-test" / name

        def build(building: Path) -> None:
            dataset = BY_NAME[name]
            sequences = [
                sequence
                for split in ("val", "test")
                for sequence in read_split(str(self.split_file(name, split)), dataset.task_type)[0]
            ]
            write_scoring_inputs(building / "ready", sequences, self.max_seq_len(name))
            for path in (building / "ready", building / "ready" / "input_0.npy"):
                path.chmod(0o755 if path.is_dir() else 0o644)
            (building / "ready").replace(folder / "ready")

        self.split_file(name, "test")  # a clear error when there is no test split
        build_once(folder, lambda: (folder / "ready" / "input_0.npy").exists(), build)
        return folder / "ready"

    def split_file(self, name: str, split: str) -> Path:
        """The station's copy of one split of a dataset (test from `private/`); ValueError when absent."""
        self.ensure()
        path = (self.private_dir if split == "test" else self.input_dir) / name / f"{split}.csv"
        if not path.exists():
            raise ValueError(f"rna: {self.name} has no {split} split for {name}")
        return path

    def ensure(self) -> RnaData:
        build_once(self.dir, self.ready, self._build)
        return self

    def _build(self, building: Path) -> None:
        streams = (
            keyed_streams(read_key(self.secret_dir / SECRET_FILE), self.size, self.seed) if self.secret_dir else None
        )
        source = self.source or write_beacon_folder(building / "beacon", self.seed, self.size, streams)
        info: dict[str, Any] = {
            "source": str(self.source) if self.source else "synthetic",
            "generator": None if self.source else GENERATOR,
            "size": None if self.source else self.size,
            "seed": None if self.source else self.seed,
            "datasets": {},
        }
        for dataset in DATASETS:
            folder, splits = read_dataset(source, dataset)
            for split, data in splits.items():
                target = building / ("private" if split == "test" else "input") / dataset.name
                target.mkdir(parents=True, exist_ok=True)
                write_split(target / f"{split}.csv", dataset, data)
            info["datasets"][dataset.name] = summarise(dataset, folder, splits)
            (building / "train" / dataset.name).mkdir(parents=True)
            _link_or_copy(
                building / "input" / dataset.name / "train.csv", building / "train" / dataset.name / "train.csv"
            )
            length = info["datasets"][dataset.name]["max_seq_len"]
            write_scoring_inputs(building / "scoring" / dataset.name, splits["val"].sequences, length)
        (building / "private" / "dataset.json").write_text(json.dumps(info, indent=2))
        for name in ("input", "train", "scoring"):
            for path in (building / name).rglob("*"):
                path.chmod(0o755 if path.is_dir() else 0o644)
            (building / name).chmod(0o755)
        for name in ("input", "train", "scoring", "private"):
            shutil.rmtree(self.dir / name, ignore_errors=True)
            (building / name).replace(self.dir / name)

    def labels(self, name: str, split: str = "val") -> np.ndarray:
        """The station's own copy of a split's labels (test from `private/`), as the harness reads them."""
        if (name, split) not in self._labels:
            path = self.split_file(name, split)
            self._labels[(name, split)] = read_split(str(path), BY_NAME[name].task_type)[1]
        return self._labels[(name, split)]

    # -- description ----------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        if self._info is None:
            self.ensure()
            self._info = json.loads((self.private_dir / "dataset.json").read_text())
        return self._info

    def max_seq_len(self, name: str) -> int:
        return int(self.info()["datasets"][name]["max_seq_len"])

    def trial_datasets(self) -> list[dict[str, Any]]:
        """Per trial (in DATASETS order): what the harness needs to train that dataset."""
        return [d.settings(self.max_seq_len(d.name)) for d in DATASETS]

    def references(self) -> dict[str, float]:
        """Each dataset's validation metric of a constant predictor fitted on train (the train mean,
        the label frequencies, the most common class): what a network must beat."""
        return {d.name: constant_metric(d, self.labels(d.name, "train"), self.labels(d.name)) for d in DATASETS}

    def describe(self) -> str:
        """A markdown table for agents: the datasets, their sizes and lengths."""
        info = self.info()["datasets"]
        rows = [
            "| trial | dataset | BEACON folder | task type | output | metric | train | val | max length |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for n, d in enumerate(DATASETS):
            entry = info[d.name]
            shape = "(B,)" if d.task_type == "regression" else f"(B, {d.d_output})"
            rows.append(
                f"| {n} | {d.name} | {d.beacon} | {d.task_type} | {shape} | {d.metric} | "
                f"{entry['rows']['train']:,} | {entry['rows']['val']:,} | {entry['max_seq_len']} |"
            )
        kind = (
            "a synthetic sample made by the station (learnable signal of the real kinds: composition, "
            "motifs, position-specific effects, plus noise)"
            if self.source is None
            else "the BEACON benchmark's files"
        )
        return f"**Data**: {kind}.\n\n" + "\n".join(rows)


def keyed_streams(secret: bytes, size: str, seed: int) -> StreamSeeds:
    """The simulator's seeds, keyed: each dataset's parameters by (seed, dataset), shared by every
    size as in the public draw, and each split's rows by (size, seed, dataset, split)."""

    def stream(folder: str, name: str) -> int:
        if name == "params":
            return keyed_seed(secret, GENERATOR, seed, folder, name)
        return keyed_seed(secret, GENERATOR, size, seed, folder, name)

    return stream


def write_split(path: Path, dataset: RnaDataset, split: Split) -> None:
    """One split in the station's plain form (what runs read, and the scorer through read_split)."""
    labels = split.labels.reshape(len(split.labels), -1)
    whole = dataset.task_type in ("multiclass_classification", "multilabel_classification")
    with open(path, "w", newline="", encoding="ascii") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["sequence", *dataset.label_names])
        for sequence, row in zip(split.sequences, labels):
            writer.writerow([sequence, *(str(int(v)) if whole else repr(float(v)) for v in row)])


def write_scoring_inputs(folder: Path, sequences: list[str], length: int) -> None:
    """`input_0.npy`: the sequences as the network sees them, one-hot (N, length, 4) float32 and
    zero-padded on the right, written in chunks (bounded memory on the real files)."""
    folder.mkdir(parents=True)
    out = np.lib.format.open_memmap(
        folder / "input_0.npy", mode="w+", dtype=np.float32, shape=(len(sequences), length, 4)
    )
    for first in range(0, len(sequences), SCORING_CHUNK):
        out[first : first + SCORING_CHUNK] = one_hot(encode(sequences[first : first + SCORING_CHUNK], length))
    out.flush()
    del out


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def summarise(dataset: RnaDataset, folder: Path, splits: dict[str, Split]) -> dict[str, Any]:
    lengths = [len(s) for name in ("train", "val") for s in splits[name].sequences]
    train = splits["train"].labels
    summary: dict[str, Any] = {
        "folder": folder.name,
        "rows": {name: len(splits[name].sequences) if name in splits else 0 for name in ("train", "val", "test")},
        "max_seq_len": max(lengths),
        "min_seq_len": min(lengths),
    }
    if dataset.task_type == "multiclass_classification":
        summary["train_class_counts"] = np.bincount(train, minlength=dataset.d_output).tolist()
    else:
        summary["train_label_mean"] = np.atleast_1d(train.mean(axis=0)).round(6).tolist()
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description="Prepare the RNA modelling datasets.")
    parser.add_argument("--size", default="default", choices=sorted(SIZES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--path", help="a folder of BEACON files instead of the synthetic sample")
    parser.add_argument("--write-sample", metavar="DIR", help="write the synthetic sample in BEACON's layout to DIR")
    args = parser.parse_args()
    if args.write_sample:  # keyed by this data root's secret, as the station draws it
        streams = keyed_streams(station_secret(data_root()), args.size, args.seed)
        print(f"wrote {write_beacon_folder(Path(args.write_sample), args.seed, args.size, streams)}")
        return
    data = RnaData(data_root(), size=args.size, seed=args.seed, path=args.path)
    print(f"preparing {data.name} in {data.dir} ...", flush=True)
    start = time.perf_counter()
    data.ensure()
    print(f"ready ({time.perf_counter() - start:.1f} s)\n\n{data.describe()}\n", flush=True)
    references = data.references()
    print("constant predictor (validation): " + ", ".join(f"{k} {v:.4f}" for k, v in references.items()))
    print(f"mean {np.mean(list(references.values())):.4f}")


if __name__ == "__main__":
    main()
