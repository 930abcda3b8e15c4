"""The data of the forecasting task: the simulator (determinism, layout, the ZAPBench-like split,
forecastable structure), the window logic shared with runs, the dataset on disk (what runs may
see, reuse, reference scores) and the loader for real ZAPBench arrays. Small sizes only."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evaluators.forecasting.dataset import (
    INPUT_FILES,
    REFERENCES_FILE,
    TEST_FILES,
    TRAIN_FILES,
    ForecastDataset,
    data_root,
    reference_scores,
)
from evaluators.forecasting.simulate import SIZES, SPLIT_FRACTIONS, simulate
from evaluators.jaxtrain.station_jax.windows import (
    CONTEXT,
    HORIZON,
    HORIZONS_REPORTED,
    gather,
    mae_by_horizon,
    window_starts,
)
from rooms.research.config import ResearchConfig

FRACTIONS = SPLIT_FRACTIONS["default"]
SMALL = SIZES["small"]
ARRAYS = [f"{split}_{part}" for split in ("train", "val", "test") for part in ("data", "condition_labels")]


@pytest.fixture(scope="module")
def sim() -> dict[str, np.ndarray]:
    return simulate(0, **SMALL)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> ForecastDataset:
    return ForecastDataset(tmp_path_factory.mktemp("forecast"), size="small", seed=0).ensure()


@pytest.fixture(scope="module")
def drawn(built: ForecastDataset) -> dict[str, np.ndarray]:
    """The recording the keyed dataset holds: the simulator, given the seed only the key gives."""
    return simulate(built.recording_seed, **SMALL)


def _brute_force_starts(labels: np.ndarray, length: int) -> list[int]:
    return [s for s in range(len(labels) - length + 1) if len(set(labels[s:s + length].tolist())) == 1]


def _fit_linear(train: np.ndarray, train_labels: np.ndarray) -> np.ndarray:
    """Per-neuron least squares from the 4 input frames (and a bias) to each of the 32 targets:
    coefficients (N, CONTEXT + 1, HORIZON)."""
    x, y = gather(train, window_starts(train_labels))
    features = np.concatenate([x.transpose(0, 2, 1), np.ones((len(x), x.shape[2], 1), np.float32)], axis=2)
    gram = np.einsum("bnf,bng->nfg", features, features, dtype=np.float64)
    cross = np.einsum("bnf,bhn->nfh", features, y, dtype=np.float64)
    return np.linalg.solve(gram + 1e-6 * np.eye(CONTEXT + 1), cross)


def _predict_linear(coef: np.ndarray, x: np.ndarray) -> np.ndarray:
    features = np.concatenate([x.transpose(0, 2, 1), np.ones((len(x), x.shape[2], 1), np.float32)], axis=2)
    return np.einsum("bnf,nfh->bhn", features, coef)


# -- the simulator ---------------------------------------------------------------------------------
def test_same_seed_same_data_other_seed_other_data(sim):
    again = simulate(0, **SMALL)
    for key in sim:
        assert np.array_equal(sim[key], again[key]), key
    other = simulate(1, **SMALL)
    assert not np.allclose(sim["train_data"], other["train_data"])


def test_shapes_dtypes_and_value_range(sim):
    conditions, per = 6, SMALL["frames_per_condition"]
    n_train, n_val = round(FRACTIONS[0] * per), round(FRACTIONS[1] * per)
    expected = {"train": 5 * n_train, "val": 5 * n_val, "test": 5 * (per - n_train - n_val) + per}
    assert sim["data"].shape == (conditions * per, SMALL["n_neurons"])
    for split, frames in expected.items():
        data, labels = sim[f"{split}_data"], sim[f"{split}_condition_labels"]
        assert data.shape == (frames, SMALL["n_neurons"]) and data.dtype == np.float32
        assert labels.shape == (frames,) and labels.dtype == np.int64
        assert np.isfinite(data).all()
    low, high = np.percentile(sim["train_data"], [1, 99])
    assert -0.05 < low < 0.1 and 0.9 < high < 1.05  # normalised per neuron, like ZAPBench traces
    assert SIZES["default"]["n_neurons"] == 512


def test_splits_are_contiguous_pieces_of_each_condition(sim):
    held_out = 5
    for split in ("train", "val", "test"):
        labels = sim[f"{split}_condition_labels"]
        assert np.all(np.diff(labels) >= 0)  # one block per condition, in recording order
    for condition in range(6):
        pieces = [sim[f"{split}_data"][sim[f"{split}_condition_labels"] == condition]
                  for split in ("train", "val", "test")]
        block = sim["data"][sim["condition_labels"] == condition]
        assert np.array_equal(np.concatenate(pieces), block)  # train, then val, then test, in time order
        if condition == held_out:
            assert len(pieces[0]) == len(pieces[1]) == 0 and len(pieces[2]) == len(block)
        else:
            assert [len(p) for p in pieces] == [round(f * len(block)) for f in FRACTIONS]


def test_the_official_split_is_zapbenchs_70_10_20_of_each_condition():
    official = simulate(0, **SMALL, split="official")
    per = SMALL["frames_per_condition"]
    for condition in range(5):  # the last condition is held out whole, as ZAPBench holds out one
        sizes = [int((official[f"{split}_condition_labels"] == condition).sum()) for split in ("train", "val", "test")]
        assert sizes == [round(0.7 * per), round(0.1 * per), per - round(0.7 * per) - round(0.1 * per)]
    default = simulate(0, **SMALL)
    assert np.array_equal(official["data"], default["data"])  # the same recording, cut differently
    with pytest.raises(ValueError, match="split must be one of"):
        simulate(0, **SMALL, split="random")


# -- windows ---------------------------------------------------------------------------------------
def test_window_starts_by_hand():
    labels = np.array([0] * 5 + [1] * 3 + [0] * 4)
    assert window_starts(labels, context=2, horizon=2).tolist() == [0, 1, 8]
    assert window_starts(labels, context=3, horizon=2).tolist() == [0]
    assert window_starts(np.zeros(CONTEXT + HORIZON - 1, int)).size == 0
    assert window_starts(np.zeros(CONTEXT + HORIZON, int)).tolist() == [0]
    assert window_starts(np.zeros(3, int), context=2, horizon=2).dtype == np.int64
    with pytest.raises(ValueError):
        window_starts(np.zeros((4, 2), int))


def test_no_window_crosses_a_condition_boundary(sim):
    rng = np.random.default_rng(0)
    labels = np.repeat(rng.integers(0, 3, size=40), rng.integers(1, 80, size=40))
    starts = window_starts(labels)
    assert starts.tolist() == _brute_force_starts(labels, CONTEXT + HORIZON)
    labels = sim["train_condition_labels"]
    starts = window_starts(labels)
    assert len(starts) == 5 * (len(labels) // 5 - CONTEXT - HORIZON + 1)
    spans = labels[starts[:, None] + np.arange(CONTEXT + HORIZON)]
    assert (spans == spans[:, :1]).all()


def test_gather_returns_the_right_frames(tmp_path):
    data = (np.arange(60)[:, None] * 100 + np.arange(3)[None]).astype(np.float32)  # value = 100 * frame + neuron
    np.save(tmp_path / "d.npy", data)
    mapped = np.load(tmp_path / "d.npy", mmap_mode="r")
    starts = np.array([0, 7, 60 - CONTEXT - HORIZON])
    for source in (data, mapped):
        x, y = gather(source, starts)
        assert x.shape == (3, CONTEXT, 3) and y.shape == (3, HORIZON, 3) and x.dtype == y.dtype == np.float32
        for b, s in enumerate(starts):
            assert np.array_equal(x[b], data[s:s + CONTEXT])
            assert np.array_equal(y[b], data[s + CONTEXT:s + CONTEXT + HORIZON])
    with pytest.raises(ValueError):
        gather(data, np.array([60 - CONTEXT - HORIZON + 1]))


def test_mae_by_horizon():
    target = np.zeros((2, 3, 4), np.float32)
    pred = np.ones_like(target) * np.array([0.5, -1.0, 2.0], np.float32)[None, :, None]
    assert np.allclose(mae_by_horizon(pred, target), [0.5, 1.0, 2.0])
    assert mae_by_horizon(pred, target).dtype == np.float64
    with pytest.raises(ValueError):
        mae_by_horizon(pred, target[:, :2])
    assert HORIZONS_REPORTED[-1] == HORIZON


# -- the dataset on disk ---------------------------------------------------------------------------
def test_dataset_layout_hides_test(built, drawn):
    assert sorted(p.name for p in built.input_dir.iterdir()) == sorted(INPUT_FILES)
    assert not any("test" in p.name for p in built.input_dir.rglob("*"))
    assert {"test_data.npy", "test_condition_labels.npy", "dataset.json"} <= {p.name for p in built.private_dir.iterdir()}
    assert built.input_dir.stat().st_mode & 0o777 == 0o755
    for file in INPUT_FILES:
        assert (built.input_dir / file).stat().st_mode & 0o777 == 0o644
    for key in ARRAYS:
        split = key.split("_")[0]
        folder = built.private_dir if split == "test" else built.input_dir
        assert np.array_equal(np.load(folder / f"{key}.npy"), drawn[key]), key
    info = built.info()
    assert built.n_neurons == SMALL["n_neurons"]
    assert built.frames == {s: len(drawn[f"{s}_data"]) for s in ("train", "val", "test")}
    assert info["held_out_conditions"] == [5] and info["conditions"]["train"] == [0, 1, 2, 3, 4]
    assert info["windows"]["val"] == len(window_starts(drawn["val_condition_labels"]))
    text = built.describe()
    assert f"{SMALL['n_neurons']:,} neurons" in text and f"{info['windows']['train']:,}" in text


def test_training_runs_get_a_folder_with_the_training_split_only(built, drawn):
    assert sorted(p.name for p in built.train_dir.iterdir()) == sorted(TRAIN_FILES)
    assert built.train_dir.stat().st_mode & 0o777 == 0o755
    for file in TRAIN_FILES:
        assert np.array_equal(np.load(built.train_dir / file), drawn[file.removesuffix(".npy")]), file


def zapbench_windows(sim, split: str) -> np.ndarray:
    """Every (4 + 32)-frame window ZAPBench scores on `split`, built here from the raw arrays: per
    condition, the split's frames preceded by that condition's last 4 frames in the nearest
    earlier split holding it (val: train; test: val, else train). Shape (windows, 36, neurons)."""
    earlier = {"val": ["train"], "test": ["val", "train"]}[split]
    data, labels = sim[f"{split}_data"], sim[f"{split}_condition_labels"]
    windows = []
    for condition in dict.fromkeys(labels.tolist()):
        own = data[labels == condition]
        before = next((sim[f"{e}_data"][sim[f"{e}_condition_labels"] == condition][-CONTEXT:] for e in earlier
                       if (sim[f"{e}_condition_labels"] == condition).any()), own[:0])
        frames = np.concatenate([before, own])
        windows += [frames[s:s + CONTEXT + HORIZON] for s in range(len(frames) - CONTEXT - HORIZON + 1)]
    return np.stack(windows)


@pytest.mark.parametrize("splits", [("val",), ("val", "test")])
def test_the_scorer_cuts_the_windows_zapbench_scores(built, drawn, splits):
    """Validation windows take their context from the end of the training split and test windows
    from the end of validation, so every frame of a scored split is a target, its first ones too."""
    folder = built.scored_windows(splits)
    assert sorted(p.name for p in folder.iterdir()) == ["frames.npy", "group.npy", "starts.npy"]
    frames, starts, group = (np.load(folder / f"{name}.npy") for name in ("frames", "starts", "group"))
    for index, split in enumerate(splits):
        x, y = gather(frames, starts[group == index])
        expected = zapbench_windows(drawn, split)
        assert np.array_equal(np.concatenate([x, y], axis=1), expected), split
        first = drawn[f"{split}_condition_labels"] == drawn[f"{split}_condition_labels"][0]
        assert np.array_equal(y[0, 0], drawn[f"{split}_data"][first][0])  # the split's first frame is forecast
    assert built.scored_windows(splits) == folder  # made once
    assert len(starts) > len(window_starts(drawn["val_condition_labels"]))
    with pytest.raises(ValueError, match="scores the val and test splits"):
        built.scored_windows(("train",))


def test_building_twice_reuses(built):
    before = {f: (built.input_dir / f).stat().st_mtime_ns for f in INPUT_FILES}
    again = ForecastDataset(built.dir.parent, size="small", seed=0)
    assert again.ready() and again.dir == built.dir
    again.ensure()
    assert {f: (again.input_dir / f).stat().st_mtime_ns for f in INPUT_FILES} == before
    assert not (built.dir / "building").exists()


def test_data_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("STATION_FORECAST_DATA", str(tmp_path))
    assert data_root() == tmp_path
    with pytest.raises(ValueError):
        ForecastDataset(tmp_path, size="huge")


def test_reference_scores(built, drawn):
    refs = built.references()
    assert json.loads((built.private_dir / REFERENCES_FILE).read_text()) == refs
    scores = refs  # predictor -> {mae, horizons, by_step, windows}
    assert set(scores) == {"persistence", "context_mean", "train_mean"}
    # the chunked computation agrees with a direct one, on the windows ZAPBench scores
    windows = zapbench_windows(drawn, "val")
    x, y = windows[:, :CONTEXT], windows[:, CONTEXT:]
    direct = mae_by_horizon(np.repeat(x[:, -1:], HORIZON, axis=1), y)
    assert np.allclose(scores["persistence"]["by_step"], direct)
    assert scores["persistence"]["mae"] == pytest.approx(direct.mean())
    assert scores["persistence"]["windows"] == len(x)
    assert list(scores["persistence"]["horizons"]) == [str(h) for h in HORIZONS_REPORTED]
    # short horizons: the last frame is far better than a neuron's average
    assert scores["persistence"]["horizons"]["1"] < 0.5 * scores["train_mean"]["horizons"]["1"]
    # long horizons are hard: the error of persistence grows quickly with the step
    assert scores["persistence"]["horizons"]["32"] > 1.8 * scores["persistence"]["horizons"]["1"]


def test_a_linear_forecaster_beats_persistence(sim):
    coef = _fit_linear(sim["train_data"], sim["train_condition_labels"])
    x, y = gather(sim["val_data"], window_starts(sim["val_condition_labels"]))
    linear = mae_by_horizon(_predict_linear(coef, x), y)
    persistence = mae_by_horizon(np.repeat(x[:, -1:], HORIZON, axis=1), y)
    assert linear.mean() < 0.95 * persistence.mean()  # the data carry learnable structure
    assert linear[0] < persistence[0]


# -- real ZAPBench arrays ----------------------------------------------------------------------------
def _write_zapbench(folder, sim, *, test=True):
    folder.mkdir(exist_ok=True)
    for key in ARRAYS:
        if test or not key.startswith("test"):
            np.save(folder / f"{key}.npy", sim[key])
    return folder


def test_zapbench_folder_loads(tmp_path, sim):
    source = _write_zapbench(tmp_path / "zap", sim)
    dataset = ForecastDataset(tmp_path / "cache", path=source).ensure()
    assert sorted(p.name for p in dataset.input_dir.iterdir()) == sorted(INPUT_FILES)
    for key in ARRAYS:
        data, labels = dataset.load(key.split("_")[0])
        assert np.array_equal(labels if key.endswith("labels") else data, sim[key]), key
    assert {f for f in TEST_FILES} <= {p.name for p in dataset.private_dir.iterdir()}
    assert dataset.info()["held_out_conditions"] == [5]
    assert "ZAPBench" in dataset.describe()
    folder = dataset.scored_windows()
    frames, starts = np.load(folder / "frames.npy"), np.load(folder / "starts.npy")
    assert dataset.references() == json.loads(json.dumps(reference_scores(sim["train_data"], frames, starts)))


def test_zapbench_folder_without_test_and_with_other_dtypes(tmp_path, sim):
    source = _write_zapbench(tmp_path / "zap", sim, test=False)
    np.save(source / "train_data.npy", sim["train_data"].astype(np.float64))
    np.save(source / "val_condition_labels.npy", sim["val_condition_labels"].astype(np.float32))
    dataset = ForecastDataset(tmp_path / "cache", path=source).ensure()
    data, labels = dataset.load("train")
    assert data.dtype == np.float32 and np.array_equal(data, sim["train_data"])
    assert dataset.load("val")[1].dtype == np.int64
    assert dataset.frames["test"] == 0 and not any(dataset.private_dir.glob("test_*"))
    with pytest.raises(ValueError, match="no test split"):
        dataset.load("test")


BAD_INPUTS = {
    "missing file": ("val_data.npy", None, "val_data.npy is missing"),
    "wrong ndim": ("train_data.npy", lambda s: s["train_data"][:, 0], "train_data.npy must be a non-empty"),
    "neuron counts": ("val_data.npy", lambda s: s["val_data"][:, :10], "val_data.npy has 10 neurons"),
    "labels length": ("train_condition_labels.npy", lambda s: s["train_condition_labels"][:-1],
                      "train_condition_labels.npy must be one label per frame"),
    "NaN": ("train_data.npy", lambda s: np.where(np.arange(len(s["train_data"]))[:, None] == 3, np.nan,
                                                  s["train_data"]).astype(np.float32), "has 64 NaN"),
    "test half missing": ("test_condition_labels.npy", None, "test_condition_labels.npy is missing"),
    "labels not integer": ("val_condition_labels.npy", lambda s: s["val_condition_labels"] + 0.5,
                           "must hold integer condition ids"),
    "no windows": ("train_condition_labels.npy", lambda s: np.arange(len(s["train_condition_labels"])),
                   "leaves no window"),
    "not npy": ("val_data.npy", "text", "not a readable .npy"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_zapbench_folders_give_clear_errors(tmp_path, sim, case):
    file, change, message = BAD_INPUTS[case]
    source = _write_zapbench(tmp_path / "zap", sim)
    if change is None:
        (source / file).unlink()
    elif change == "text":
        (source / file).write_text("not an array")
    else:
        np.save(source / file, change(sim))
    dataset = ForecastDataset(tmp_path / "cache", path=source)
    with pytest.raises(ValueError, match=message):
        dataset.ensure()
    assert not dataset.ready() and not (dataset.dir / "building").exists()
    with pytest.raises(ValueError, match="no folder"):
        ForecastDataset(tmp_path / "cache", path=tmp_path / "nowhere")


def test_the_paper_settings_config_gives_the_official_split_batch_8_and_states_the_bar(tmp_path, monkeypatch):
    from evaluators.base import create_task
    from station.core.config import load_config

    monkeypatch.setenv("STATION_FORECAST_DATA", str(tmp_path))
    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "forecasting_gpu.yaml")
    params = config.section(ResearchConfig).tasks[0].params
    assert params["split"] == "official" and params["batch_size"] == 8
    task = create_task("forecasting", params)
    assert task.trial_settings()["default_batch"] == 8
    spec = task.spec()
    refs = task.dataset.references()
    assert f"copying the last input frame\nscores {refs['persistence']['mae']:.6f}" in spec
    assert f"the mean of the 4 input frames {refs['context_mean']['mae']:.6f}" in spec
    assert "`BATCH_SIZE` (default 8)" in spec
    assert "official split" in task.dataset.name
