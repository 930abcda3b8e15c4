"""One forecasting dataset on disk, made once and then reused: `input/` holds the train and val
splits (the station's copy), `train/` the training split alone (hard links; the only data a
training run sees, mounted read-only), `private/` the test split, `dataset.json`, and
REFERENCES_FILE with the naive predictors' scores, and `scored-*/` the frames and windows that
the station's scoring sandbox reads. The whole folder is hidden from runs.

Scored windows follow ZAPBench: the first window of a condition in the validation (test) split
takes its 4 context frames from the end of that condition in the training (validation) split, so
every frame of a scored split is a forecast target, the first ones included.

The arrays are simulated (`simulate.py`) or taken from a folder of real ZAPBench arrays laid out
as the reference preprocessing writes them (`--path DIR`). A simulated recording is drawn from a
seed keyed by the data root's secret (evaluators/secret.py): its splits are one recording cut in
time, so its one seed decides every split, and a run holding the simulator and the training split
cannot find it. The folder's name is a keyed digest as well: it says nothing of seed or size.

    python -m evaluators.forecasting.dataset [--size default|small] [--seed 0] [--path DIR]

prepares one ahead of time and prints its description and the reference scores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from evaluators.jaxtrain.station_jax.windows import (
    CONTEXT,
    HORIZON,
    HORIZONS_REPORTED,
    gather,
    mae_by_horizon,
    window_starts,
)

from ..cache import build_once, exclusive
from ..secret import folder_name, keyed_seed, secret_dir, station_secret
from .simulate import SIZES, SPLIT_FRACTIONS, SPLITS, simulate

GENERATOR = "sim-v1"
TRAIN_FILES = ("train_data.npy", "train_condition_labels.npy")
INPUT_FILES = (*TRAIN_FILES, "val_data.npy", "val_condition_labels.npy")
TEST_FILES = ("test_data.npy", "test_condition_labels.npy")
PREDICTORS = ("persistence", "context_mean", "train_mean")
REFERENCES_FILE = "references-v2.json"  # v2: on windows that take their context from the training split
CHUNK_BYTES = 64 << 20  # memory bound for one chunk of frames or windows (71,721 neurons fit)


def data_root() -> Path:
    return Path(os.environ.get("STATION_FORECAST_DATA") or Path.home() / ".cache" / "station" / "forecasting")


class ForecastDataset:
    def __init__(
        self,
        root: Path | str,
        *,
        size: str = "default",
        seed: int = 0,
        path: Path | str | None = None,
        split: str = "default",
        unkeyed: bool = False,
    ) -> None:
        """`unkeyed`: draw with the public `seed` directly, as before draws were keyed (for measuring
        against the old data and for the red-team tests; no task parameter reaches it)."""
        if split not in SPLIT_FRACTIONS:
            raise ValueError(f"forecasting: split must be one of {sorted(SPLIT_FRACTIONS)}, got {split!r}")
        self.size, self.seed, self.split = size, seed, split
        self.secret_dir: Path | None = None
        if path is not None:
            self.source: Path | None = Path(path).expanduser().resolve()
            if not self.source.is_dir():
                raise ValueError(f"forecasting: no folder {self.source}")
            digest = hashlib.sha256(str(self.source).encode()).hexdigest()[:10]
            key, self.name = f"zapbench-{self.source.name}-{digest}", f"ZAPBench arrays from {self.source}"
        else:
            if size not in SIZES:
                raise ValueError(f"forecasting: size must be one of {sorted(SIZES)}, got {size!r}")
            self.source = None
            self.name = f"Simulated dataset ({size}{'' if split == 'default' else f', {split} split'})"
            if unkeyed:
                self.recording_seed, key = seed, f"unkeyed-{GENERATOR}-{size}-seed{seed}-{split}"
            else:  # one seed for the whole recording (both ways of cutting it share it), given by the key only
                secret = station_secret(Path(root))
                self.recording_seed = keyed_seed(secret, GENERATOR, size, seed, "recording")
                key, self.secret_dir = folder_name(secret, GENERATOR, size, seed, split), secret_dir(Path(root))
        self.dir = Path(root) / key
        self.input_dir, self.private_dir = self.dir / "input", self.dir / "private"
        self.train_dir = self.dir / "train"
        self._info: dict[str, Any] | None = None

    # -- on disk --------------------------------------------------------------------------------
    def ready(self) -> bool:
        # dataset.json is moved into place last, so it marks a finished build
        return (
            (self.private_dir / "dataset.json").exists()
            and all((self.input_dir / f).exists() for f in INPUT_FILES)
            and all((self.train_dir / f).exists() for f in TRAIN_FILES)
        )

    def ensure(self) -> ForecastDataset:
        build_once(self.dir, self.ready, self._build)
        return self

    def _build(self, building: Path) -> None:
        (building / "input").mkdir()
        (building / "private").mkdir()
        if self.source is not None:
            info = import_arrays(self.source, building / "input", building / "private")
        else:
            info = self._simulate(building / "input", building / "private")
        info.update(summarise(building / "input", building / "private"))
        (building / "private" / "dataset.json").write_text(json.dumps(info, indent=2))
        for file in INPUT_FILES:
            (building / "input" / file).chmod(0o644)
        (building / "input").chmod(0o755)
        (building / "train").mkdir(mode=0o755)
        for file in TRAIN_FILES:
            _link_or_copy(building / "input" / file, building / "train" / file)
        for folder in (self.input_dir, self.private_dir, self.train_dir):
            shutil.rmtree(folder, ignore_errors=True)
        for name in ("input", "private", "train"):
            (building / name).replace(self.dir / name)

    def scored_windows(self, splits: tuple[str, ...] = ("val",)) -> Path:
        """The folder the station's scorer reads for `splits` (val, or val and test): `frames.npy`
        (float32, the frames windows are cut from: each split's, with each condition's context
        before it, see `with_preceding_context`), `starts.npy` (every window's first frame) and
        `group.npy` (the index in `splits` of each window's split). Made once per set of splits."""
        if not splits or any(split not in ("val", "test") for split in splits):
            raise ValueError(f"forecasting scores the val and test splits, not {splits!r}")
        folder = self.dir / f"scored-{'-'.join(splits)}"

        def build(building: Path) -> None:
            plans = [self.split_with_context(split) for split in splits]
            total = sum(len(labels) for _, labels in plans)
            out = np.lib.format.open_memmap(
                building / "frames.npy", mode="w+", dtype=np.float32, shape=(total, self.n_neurons)
            )
            starts, groups, row = [], [], 0
            for group, (pieces, labels) in enumerate(plans):
                first = row
                for data, rows in pieces:
                    per_chunk = max(1, CHUNK_BYTES // (data.shape[1] * 4))
                    for i in range(0, len(rows), per_chunk):
                        part = rows[i : i + per_chunk]
                        out[row : row + len(part)] = data[part]
                        row += len(part)
                found = window_starts(labels) + first  # per split: no window crosses into the next
                starts.append(found)
                groups.append(np.full(len(found), group, dtype=np.int64))
            out.flush()
            del out
            np.save(building / "starts.npy", np.concatenate(starts).astype(np.int64))
            np.save(building / "group.npy", np.concatenate(groups))
            for path in building.iterdir():
                path.chmod(0o644)
            building.chmod(0o755)
            shutil.rmtree(folder / "ready", ignore_errors=True)
            building.replace(folder / "ready")

        self.ensure()
        build_once(folder, lambda: (folder / "ready" / "group.npy").exists(), build)
        return folder / "ready"

    def split_with_context(self, split: str) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
        """`with_preceding_context` for one scored split: val takes its context from train, test
        from val (or train, for a condition val does not hold)."""
        earlier = {"val": ("train",), "test": ("val", "train")}[split]
        data, labels = self.load(split)
        return with_preceding_context(data, labels, [self.load(name) for name in earlier])

    def _simulate(self, input_dir: Path, private_dir: Path) -> dict[str, Any]:
        arrays = simulate(self.recording_seed, **SIZES[self.size], split=self.split)
        for split in SPLITS:
            folder = private_dir if split == "test" else input_dir
            np.save(folder / f"{split}_data.npy", arrays[f"{split}_data"])
            np.save(folder / f"{split}_condition_labels.npy", arrays[f"{split}_condition_labels"])
        return {"source": "simulated", "generator": GENERATOR, "size": self.size, "seed": self.seed}

    def load(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(data memory-mapped read-only, labels) of one split; test comes from `private/`."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.ensure()
        folder = self.private_dir if split == "test" else self.input_dir
        if not (folder / f"{split}_data.npy").exists():
            raise ValueError(f"forecasting: {self.name} has no {split} split")
        return (np.load(folder / f"{split}_data.npy", mmap_mode="r"), np.load(folder / f"{split}_condition_labels.npy"))

    # -- description ----------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        if self._info is None:
            self.ensure()
            self._info = json.loads((self.private_dir / "dataset.json").read_text())
        return self._info

    @property
    def n_neurons(self) -> int:
        return int(self.info()["n_neurons"])

    @property
    def frames(self) -> dict[str, int]:
        return dict(self.info()["frames"])

    def describe(self) -> str:
        """A markdown paragraph for agents: what the arrays are and how big."""
        info = self.info()
        frames, windows, low_high = info["frames"], info["windows"], info["value_range"]["train"]
        kind = (
            "simulated whole-brain calcium activity (a larval-zebrafish-like recurrent network "
            "driven through a sequence of experimental conditions)"
            if self.source is None
            else "whole-brain calcium activity from ZAPBench"
        )
        test = ""
        if frames["test"]:
            unseen = len(info["held_out_conditions"])
            test = f" The hidden test split has {frames['test']:,} frames" + (
                f", including {unseen} condition{'s' * (unseen > 1)} absent from train and val." if unseen else "."
            )
        return (
            f"**Data**: {kind}, {info['n_neurons']:,} neurons, normalised per neuron (train values "
            f"from {low_high[0]:.2f} to {low_high[1]:.2f}, mostly within [0, 1]). `train_data.npy` is "
            f"({frames['train']:,}, {info['n_neurons']:,}) float32 and `train_condition_labels.npy` gives "
            f"each frame's experimental condition (int; {len(info['conditions']['train'])} conditions). "
            f"The validation split ({frames['val']:,} frames) is the station's: training runs never see it. "
            f"A forecast sees {CONTEXT} consecutive frames and predicts the next {HORIZON}; a training window "
            f"never crosses a change of condition or the end of the split, which leaves {windows['train']:,} "
            f"of them. As in ZAPBench, a validation window may take its {CONTEXT} input frames from the end of "
            f"the same condition's training frames, so every validation frame is forecast: "
            f"{self.scored_window_count():,} validation windows.{test}"
        )

    # -- reference scores -------------------------------------------------------------------------
    def references(self) -> dict[str, Any]:
        """Validation MAE of the naive predictors, on the windows the station scores, computed
        once and kept in REFERENCES_FILE."""
        path = self.private_dir / REFERENCES_FILE
        if not path.exists():
            folder = self.scored_windows(("val",))
            with exclusive(self.dir):
                if not path.exists():
                    train, _ = self.load("train")
                    frames = np.load(folder / "frames.npy", mmap_mode="r")
                    scores = reference_scores(train, frames, np.load(folder / "starts.npy"))
                    partial = path.with_suffix(".partial")
                    partial.write_text(json.dumps(scores, indent=2))
                    partial.replace(path)
        return json.loads(path.read_text())

    def scored_window_count(self) -> int:
        return len(np.load(self.scored_windows(("val",)) / "starts.npy"))


def with_preceding_context(
    data: np.ndarray, labels: np.ndarray, earlier: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """The frames a scored split's windows are cut from, ZAPBench's way: the first block of each
    condition is preceded by the last CONTEXT frames of that condition in the nearest `earlier`
    split (data, labels) that holds it, so that the split's own first frames are forecast targets
    too; a condition no earlier split holds (a held-out one) starts without context. Returns the
    pieces in order, as (array, row indices), and the labels of the frames they make."""
    labels = np.asarray(labels)
    cuts = np.flatnonzero(labels[1:] != labels[:-1]) + 1
    pieces: list[tuple[np.ndarray, np.ndarray]] = []
    made: list[np.ndarray] = []
    seen: set[int] = set()
    for first, end in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(labels)]])):
        if first >= end:
            continue
        condition = int(labels[first])
        if condition not in seen:  # a later block of the same condition does not follow its end in time
            seen.add(condition)
            for before, before_labels in earlier:
                rows = np.flatnonzero(np.asarray(before_labels) == condition)[-CONTEXT:]
                if len(rows):
                    pieces.append((before, rows))
                    made.append(np.full(len(rows), condition, dtype=np.int64))
                    break
        pieces.append((data, np.arange(first, end)))
        made.append(labels[first:end].astype(np.int64))
    return pieces, (np.concatenate(made) if made else np.zeros(0, dtype=np.int64))


def reference_scores(train_data: np.ndarray, frames: np.ndarray, starts: np.ndarray) -> dict[str, Any]:
    """MAE over the windows of `frames` at `starts` (the scored validation windows) of: `persistence` (the last input frame, repeated),
    `context_mean` (each neuron's mean over the input frames, repeated) and `train_mean` (each
    neuron's mean over the training frames). Per predictor: `mae` (over all steps), `horizons`
    (the steps of HORIZONS_REPORTED, keyed "1", "4", ...), `by_step` (all steps) and `windows`.
    Computed in chunks of windows, so memory stays bounded."""
    if not len(starts):
        raise ValueError(f"the validation split has no window of {CONTEXT + HORIZON} frames within one condition")
    train_mean = column_stats(train_data)["mean"].astype(np.float32)
    per_chunk = max(1, CHUNK_BYTES // ((CONTEXT + HORIZON) * frames.shape[1] * 8))
    sums = {name: np.zeros(HORIZON) for name in PREDICTORS}
    for first in range(0, len(starts), per_chunk):
        x, y = gather(frames, starts[first : first + per_chunk])
        predictions = {
            "persistence": x[:, -1:],
            "context_mean": x.mean(axis=1, keepdims=True),
            "train_mean": train_mean[None, None],
        }
        for name, pred in predictions.items():
            sums[name] += mae_by_horizon(np.broadcast_to(pred, y.shape), y) * len(y)
    scores: dict[str, Any] = {}
    for name, total in sums.items():
        curve = total / len(starts)
        scores[name] = {
            "mae": float(curve.mean()),
            "windows": int(len(starts)),
            "horizons": {str(h): float(curve[h - 1]) for h in HORIZONS_REPORTED},
            "by_step": [float(v) for v in curve],
        }
    return scores


def reference_table(scores: dict[str, Any]) -> str:
    """The reference scores as a markdown table."""
    head = "| predictor | overall | " + " | ".join(f"h={h}" for h in HORIZONS_REPORTED) + " |"
    rows = [head, "|---" * (len(HORIZONS_REPORTED) + 2) + "|"]
    for name, entry in scores.items():
        cells = [f"{entry['mae']:.4f}"] + [f"{entry['horizons'][str(h)]:.4f}" for h in HORIZONS_REPORTED]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# -- arrays on disk ---------------------------------------------------------------------------------
def column_stats(data: np.ndarray) -> dict[str, Any]:
    """Per-neuron mean and the overall min, max and NaN/inf count, reading `data` in row chunks."""
    rows = max(1, CHUNK_BYTES // (data.shape[1] * 8))
    total, low, high, bad = np.zeros(data.shape[1]), np.inf, -np.inf, 0
    for first in range(0, data.shape[0], rows):
        chunk = np.asarray(data[first : first + rows], dtype=np.float64)
        finite = np.isfinite(chunk)
        bad += int(finite.size - finite.sum())
        if bad:
            continue
        total += chunk.sum(axis=0)
        low, high = min(low, float(chunk.min())), max(high, float(chunk.max()))
    return {"mean": total / max(data.shape[0], 1), "min": low, "max": high, "nonfinite": bad}


def summarise(input_dir: Path, private_dir: Path) -> dict[str, Any]:
    """Sizes, conditions, window counts and value ranges of the built splits."""
    info: dict[str, Any] = {"frames": {}, "conditions": {}, "windows": {}, "value_range": {}}
    for split in SPLITS:
        folder = private_dir if split == "test" else input_dir
        if not (folder / f"{split}_data.npy").exists():
            info["frames"][split], info["conditions"][split], info["windows"][split] = 0, [], 0
            continue
        data = np.load(folder / f"{split}_data.npy", mmap_mode="r")
        labels = np.load(folder / f"{split}_condition_labels.npy")
        stats = column_stats(data)
        info["n_neurons"] = int(data.shape[1])
        info["frames"][split] = int(data.shape[0])
        info["conditions"][split] = [int(c) for c in np.unique(labels)]
        info["windows"][split] = int(len(window_starts(labels)))
        info["value_range"][split] = [stats["min"], stats["max"]]
    seen = set(info["conditions"]["train"]) | set(info["conditions"]["val"])
    info["held_out_conditions"] = [c for c in info["conditions"]["test"] if c not in seen]
    return info


def import_arrays(source: Path, input_dir: Path, private_dir: Path) -> dict[str, Any]:
    """Check a folder of ZAPBench arrays and place them: train and val into `input_dir`, test
    (optional) into `private_dir`. Raises ValueError naming the offending file."""
    splits = ["train", "val"]
    test_present = [(source / f).exists() for f in TEST_FILES]
    if any(test_present):
        if not all(test_present):
            missing = TEST_FILES[test_present.index(False)]
            raise ValueError(f"forecasting: {source / missing} is missing (the test split needs both files)")
        splits.append("test")
    n_neurons = None
    for split in splits:
        data_file, label_file = source / f"{split}_data.npy", source / f"{split}_condition_labels.npy"
        data, labels = _open(data_file), _open(label_file)
        if data.ndim != 2 or 0 in data.shape:
            raise ValueError(
                f"forecasting: {data_file} must be a non-empty (frames, neurons) array, got shape {data.shape}"
            )
        if not np.issubdtype(data.dtype, np.floating):
            raise ValueError(f"forecasting: {data_file} must hold floating-point values, got {data.dtype}")
        if labels.ndim != 1 or labels.shape[0] != data.shape[0]:
            raise ValueError(
                f"forecasting: {label_file} must be one label per frame of {data_file.name} "
                f"({data.shape[0]} frames), got shape {labels.shape}"
            )
        if n_neurons is not None and data.shape[1] != n_neurons:
            raise ValueError(f"forecasting: {data_file} has {data.shape[1]} neurons; train_data.npy has {n_neurons}")
        n_neurons = data.shape[1]
        bad = column_stats(data)["nonfinite"]
        if bad:
            raise ValueError(f"forecasting: {data_file} has {bad:,} NaN or infinite values")
        labels = _integer_labels(labels, label_file)
        if split != "test" and not len(window_starts(labels)):
            raise ValueError(
                f"forecasting: {label_file} leaves no window of {CONTEXT + HORIZON} frames within one condition"
            )
        folder = private_dir if split == "test" else input_dir
        _place(data_file, data, folder / data_file.name)
        np.save(folder / label_file.name, labels)
    return {"source": str(source)}


def _open(file: Path) -> np.ndarray:
    if not file.exists():
        raise ValueError(f"forecasting: {file} is missing")
    try:
        return np.load(file, mmap_mode="r")  # checks read chunks; 71,721-neuron arrays stay on disk
    except (OSError, ValueError) as err:
        raise ValueError(f"forecasting: {file} is not a readable .npy array ({err})") from None


def _integer_labels(labels: np.ndarray, file: Path) -> np.ndarray:
    labels = np.asarray(labels)
    if np.issubdtype(labels.dtype, np.integer):
        return labels.astype(np.int64)
    if np.issubdtype(labels.dtype, np.floating) and np.isfinite(labels).all() and (labels == np.round(labels)).all():
        return labels.astype(np.int64)
    raise ValueError(f"forecasting: {file} must hold integer condition ids, got {labels.dtype}")


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
        target.chmod(0o644)


def _place(source: Path, data: np.ndarray, target: Path) -> None:
    """Hard-link (same file system, already float32 and mode 0644, so the chmod later changes
    nothing of the user's file), else copy, converting to float32 in row chunks if needed."""
    if data.dtype == np.float32:
        if source.stat().st_mode & 0o777 == 0o644:
            try:
                os.link(source, target)
                return
            except OSError:
                pass
        shutil.copyfile(source, target)
        return
    out = np.lib.format.open_memmap(target, mode="w+", dtype=np.float32, shape=data.shape)
    rows = max(1, CHUNK_BYTES // (data.shape[1] * 8))
    for first in range(0, data.shape[0], rows):
        out[first : first + rows] = data[first : first + rows]
    out.flush()
    del out


def main() -> None:
    parser = argparse.ArgumentParser(description="Prepare a forecasting dataset and its reference scores.")
    parser.add_argument("--size", default="default", choices=sorted(SIZES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--path", help="a folder of ZAPBench arrays instead of the simulation")
    args = parser.parse_args()
    dataset = ForecastDataset(data_root(), size=args.size, seed=args.seed, path=args.path)
    print(f"preparing {dataset.name} in {dataset.dir} ...", flush=True)
    start = time.perf_counter()
    dataset.ensure()
    print(f"ready ({time.perf_counter() - start:.1f} s)\n\n{dataset.describe()}\n", flush=True)
    print("reference scores (validation MAE) ...", flush=True)
    print(reference_table(dataset.references()))


if __name__ == "__main__":
    main()
