"""The RNA modelling task: its metrics against hand-computed values (and sklearn/scipy), the one-hot
encoding, the seeded synthetic sample with its train-only folder and the scorer's inputs, the
reader of BEACON's files with its errors, the station's measurement of the scorer's outputs, what
each run is given (train-only data, the exchange folder), the exported network giving one
sequence's outputs as the batched network does, the padded last batch that never enters the
loss, and, through the real sandbox, the baseline scored end to end from the config (as the
one-stage harness scored it; it beats a constant predictor), a wrong output shape refused at the
check, and the validation and test splits out of every run's reach. Budgets are epochs, never
the clock. Attacks on the score: tests/test_redteam_rna.py."""
from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_task_data

from evaluators.base import create_task
from evaluators.jaxtrain.station_jax import rna as harness
from evaluators.rna import metrics as station_metrics
from evaluators.rna import play
from evaluators.rna.beacon import DATASETS, METRIC_KEYS
from evaluators.rna.dataset import RnaData
from evaluators.rna.metrics import constant_predictions
from evaluators.rna.real_data import read_split_file
from evaluators.rna.simulate import SIZES, simulate, write_beacon_folder
from rooms.research.config import ResearchConfig
from station.core.config import ExecutorConfig
from station.core.run_types import RunResult
from station.executors import create_executor

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "rna_modelling.yaml"
# the config's baseline at 2 epochs, scored by the station (two-stage) on the tests' keyed data and
# measured twice alike; on the old seed-0 data the one-stage harness scored 0.3490891840760297 and the
# two-stage score matched it within 0.002 (the name stayed: what it checks is unchanged)
ONE_STAGE_SCORE = 0.36743410132607757
SMALL = {"size": "small", "max_epochs": 2, "patience": 2, "grace_s": 120}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with shared_task_data(tmp_path_factory, "rna") as root:
        yield root


@pytest.fixture(scope="module")
def local(cache: Path):
    task = create_task("rna_modelling", SMALL)
    executor = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())
    yield executor
    executor.close()


# -- metrics ---------------------------------------------------------------------------------------------------
def test_metrics_match_hand_computed_values() -> None:
    # R²: mean 7/3, SS_tot 42/9, SS_res 1
    assert station_metrics.r2(np.array([1.0, 2, 3]), np.array([1.0, 2, 4])) == pytest.approx(1 - 9 / 42)
    assert math.isnan(station_metrics.r2(np.array([1.0, 2]), np.array([3.0, 3])))
    # Spearman with a tie: ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4) -> 4.5 / sqrt(4.5 * 5)
    assert station_metrics.spearman(np.array([1.0, 2, 2, 3]), np.array([1.0, 3, 2, 4])) == pytest.approx(4.5 / math.sqrt(22.5))
    assert station_metrics.spearman(np.full(4, 0.3), np.array([1.0, 3, 2, 4])) == 0.0  # a constant ranks nothing
    assert station_metrics.average_ranks(np.array([3.0, 1, 3, 2])).tolist() == [3.5, 1.0, 3.5, 2.0]
    # AUC: 3 of the 4 positive-negative pairs are ordered right; a tie counts one half
    assert station_metrics.auc_roc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == pytest.approx(0.75)
    assert station_metrics.auc_roc(np.array([0.5, 0.5, 0.2, 0.9]), np.array([1, 0, 0, 1])) == pytest.approx(3.5 / 4)
    assert math.isnan(station_metrics.auc_roc(np.array([0.1, 0.2]), np.array([1, 1])))
    scores = np.array([[0.1, 0.9], [0.4, 0.2], [0.35, 0.5], [0.8, 0.1]])
    labels = np.array([[0, 1], [0, 1], [1, 1], [1, 1]])  # label 2 has a single value: skipped
    assert station_metrics.macro_auc_roc(scores, labels) == pytest.approx(0.75)
    assert station_metrics.accuracy(np.array([[0.1, 2.0], [3.0, 1.0], [0.0, 1.0]]), np.array([1, 0, 0])) == pytest.approx(2 / 3)
    # PRS: the mean of the per-output R²
    pred, target = np.array([[1.0, 0.0], [2.0, 1.0], [3.0, 1.0]]), np.array([[1.0, 0.0], [2.0, 1.0], [4.0, 2.0]])
    assert station_metrics.metric_value("r2", pred, target) == pytest.approx((1 - 9 / 42 + 1 - 1 / 2) / 2)  # SS 1/2


def test_metrics_agree_with_sklearn_and_scipy() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    y, p = rng.normal(size=200), rng.normal(size=200)
    p_tied = np.round(p, 1)  # many ties
    assert station_metrics.r2(p, y) == pytest.approx(metrics.r2_score(y, p))
    assert station_metrics.spearman(p_tied, y) == pytest.approx(stats.spearmanr(p_tied, y)[0])
    multi_y, multi_p = rng.normal(size=(100, 3)), rng.normal(size=(100, 3))
    assert station_metrics.metric_value("r2", multi_p, multi_y) == pytest.approx(metrics.r2_score(multi_y, multi_p))
    labels = (rng.random((150, 12)) < 0.3).astype(int)
    scores = np.round(labels + rng.normal(size=(150, 12)), 1)
    assert station_metrics.macro_auc_roc(scores, labels) == pytest.approx(metrics.roc_auc_score(labels, scores, average="macro"))
    classes, logits = rng.integers(0, 13, 90), rng.normal(size=(90, 13))
    assert station_metrics.accuracy(logits, classes) == pytest.approx(metrics.accuracy_score(classes, logits.argmax(1)))


def test_beacons_own_measure_is_computed_beside_the_score_for_the_r2_datasets() -> None:
    """BEACON's scripts report squared Pearson r (APA's on log-odds of the clipped proportions, PRS's
    averaged over its three outputs) where the station, like the paper's evaluator, scores R²."""
    stats = pytest.importorskip("scipy.stats")
    from evaluators.rna.beacon import DATASETS

    by_name = {d.name: d for d in DATASETS}
    rng = np.random.default_rng(5)
    share, guess = rng.uniform(0, 1, 300), np.clip(rng.uniform(0, 1, 300) * 0.5 + 0.25, 0, 1)
    share[:3] = [0.0, 1.0, 0.5]  # clipped before the log-odds

    def logit(x):
        x = np.clip(x, 1e-7, 1 - 1e-7)
        return np.log(x / (1 - x))
    apa = station_metrics.beacon_value(by_name["APA"], guess[:, None], share[:, None])
    assert apa == pytest.approx(stats.pearsonr(logit(guess), logit(share))[0] ** 2)
    assert apa != pytest.approx(station_metrics.metric_value("r2", guess, share))
    y, p = rng.normal(size=(200, 3)), rng.normal(size=(200, 3)) + rng.normal(size=(200, 3))
    expected = np.mean([stats.pearsonr(p[:, k], y[:, k])[0] ** 2 for k in range(3)])
    assert station_metrics.beacon_value(by_name["PRS"], p, y) == pytest.approx(expected)
    assert station_metrics.beacon_value(by_name["MRL"], p[:, :1], y[:, :1]) == pytest.approx(
        stats.pearsonr(p[:, 0], y[:, 0])[0] ** 2)
    assert station_metrics.beacon_value(by_name["CRI-Off"], p[:, :1], y[:, :1]) is None


def test_the_one_hot_encoding() -> None:
    codes = harness.encode(["ACGTU", "RNXB"], 6)
    x = harness.one_hot(codes)
    assert x.shape == (2, 6, 4) and x.dtype == np.float32
    assert x[0, :5].tolist() == [[1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 1, 0, 0], [0, 1, 0, 0]]  # A, T/U, C, G
    assert x[1, 0].tolist() == [0.5, 0, 0, 0.5]  # R = A or G
    assert not x[1, 1:3].any() and not x[0, 5].any() and not x[1, 4:].any()  # N, X and padding
    assert x[1, 3] == pytest.approx([0, 1 / 3, 1 / 3, 1 / 3])  # B = C, G or T


def test_seeds_come_from_a_stable_hash_of_the_dataset() -> None:
    # crc32, the same in every process (Python's hash() of a string is not)
    assert [harness.dataset_seed(0, d.name) for d in DATASETS] == [95, 652, 775, 787, 234, 356, 287]
    assert harness.dataset_seed(100, "APA") == 195


# -- the synthetic sample ---------------------------------------------------------------------------------------
def test_the_sample_is_deterministic_and_in_beacon_layout() -> None:
    first, again, other = simulate(0, "small"), simulate(0, "small"), simulate(1, "small")
    assert first == again and first != other
    assert list(first) == [d.beacon for d in DATASETS]
    headers = {folder: header for folder, (header, _) in first.items()}
    assert headers["CRISPROffTarget"] == ["sgrna", "target", "label"]
    assert headers["ProgrammableRNASwitches"] == ["sequence", "ON", "OFF", "ON_OFF"]
    assert headers["Isoform"] == ["", "seq", "proximal_isoform_proportion"]
    for header, splits in first.values():
        assert [len(splits[s]) for s in ("train", "val", "test")] == list(SIZES["small"])
        assert all(len(row) == len(header) for rows in splits.values() for row in rows)


def test_the_built_sample_has_the_shapes_and_classes_of_the_seven_datasets(cache: Path) -> None:
    data = RnaData(cache, size="default").ensure()
    info = data.info()["datasets"]
    assert [info[d.name]["max_seq_len"] for d in DATASETS] == [186, 46, 101, 23, 148, 100, 100]
    assert all(info[d.name]["rows"] == {"train": 1200, "val": 300, "test": 300} for d in DATASETS)
    modif, prs, ncrna = data.labels("Modif"), data.labels("PRS"), data.labels("ncRNA", "train")
    assert modif.shape == (300, 12) and set(np.unique(modif)) == {0.0, 1.0} and (modif.sum(0) > 0).all()
    assert prs.shape == (300, 3) and ncrna.dtype == np.int64 and set(ncrna) == set(range(13))
    assert data.labels("APA").shape == (300,) and 0 < data.labels("APA").min() < data.labels("APA").max() < 1
    sequences, _ = harness.read_split(str(data.input_dir / "MRL" / "train.csv"), "regression")
    assert 25 <= min(map(len, sequences)) and max(map(len, sequences)) <= 100
    assert any("N" in s for s in sequences)  # ambiguity codes occur, as in real reads
    assert sorted(p.name for p in data.input_dir.iterdir()) == sorted(d.name for d in DATASETS)
    assert not list(data.input_dir.rglob("test*")) and len(list(data.private_dir.rglob("test.csv"))) == 7
    # what the training runs see: the training split alone, the station's own file
    assert sorted(str(p.relative_to(data.train_dir)) for p in data.train_dir.rglob("*") if p.is_file()) == sorted(
        f"{d.name}/train.csv" for d in DATASETS)
    assert (data.train_dir / "MRL" / "train.csv").read_bytes() == (data.input_dir / "MRL" / "train.csv").read_bytes()
    # what the scorer sees: the validation sequences as the network takes them, no labels
    for d in DATASETS:
        assert sorted(p.name for p in data.scoring_dir(d.name).iterdir()) == ["input_0.npy"]
    inputs = np.load(data.scoring_dir("Modif") / "input_0.npy")
    sequences, _ = harness.read_split(str(data.input_dir / "Modif" / "val.csv"), "multilabel_classification")
    assert inputs.shape == (300, 101, 4) and inputs.dtype == np.float32
    assert np.array_equal(inputs, harness.one_hot(harness.encode(sequences, 101)))


# -- BEACON's files ---------------------------------------------------------------------------------------------
def _write(path: Path, rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows)
    return path


def test_the_reader_takes_beacon_layouts(tmp_path: Path) -> None:
    by_name = {d.name: d for d in DATASETS}
    modif = read_split_file(_write(tmp_path / "m.csv", [
        ["sequence", "label"],
        ["acgurn", "[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]"],  # lower case, an IUPAC code, two labels
        ["GGGG", "0 0 0 0 0 0 0 0 0 0 0 0"],
    ]), by_name["Modif"])
    assert modif.sequences == ["ACGURN", "GGGG"] and modif.labels.shape == (2, 12)
    assert modif.labels[0].nonzero()[0].tolist() == [1, 11]
    no_header = read_split_file(_write(tmp_path / "m2.csv", [["ACGU", *"010000000001"]]), by_name["Modif"])
    assert no_header.labels[0].nonzero()[0].tolist() == [1, 11]
    off = read_split_file(_write(tmp_path / "o.csv", [["sgrna", "target", "label"], ["ACG", "TGG", "0.25"]]),
                          by_name["CRI-Off"])
    assert off.sequences == ["ACGTGG"] and off.labels.tolist() == [0.25]
    apa = read_split_file(_write(tmp_path / "a.csv", [["", "seq", "proximal_isoform_proportion"], ["0", "ACGU", "0.5"]]),
                          by_name["APA"])
    assert apa.sequences == ["ACGU"] and apa.labels.tolist() == [0.5]
    prs = read_split_file(_write(tmp_path / "p.csv", [["sequence", "ON", "OFF", "ON_OFF"], ["ACGU", "0.5", "0.25", "0.25"]]),
                          by_name["PRS"])
    assert prs.labels.tolist() == [[0.5, 0.25, 0.25]]
    family = read_split_file(_write(tmp_path / "n.csv", [["sequence", "label"], ["ACGU", "12"]]), by_name["ncRNA"])
    assert family.labels.dtype == np.int64 and family.labels.tolist() == [12]


def test_a_beacon_folder_is_brought_into_the_stations_form(tmp_path: Path) -> None:
    source = write_beacon_folder(tmp_path / "beacon", seed=0, size="small")
    (source / "CRISPROnTarget").rename(source / "CRI-On")  # our names work as well as BEACON's
    modif = source / "Modification" / "train.csv"
    rows = list(csv.reader(modif.open()))
    rows[1] = ["ACGUYacgu", "[1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]"]
    _write(modif, rows)
    data = RnaData(tmp_path / "cache", path=source).ensure()
    written = list(csv.reader((data.input_dir / "Modif" / "train.csv").open()))
    assert written[0] == ["sequence", "hAm", "hCm", "hGm", "hUm", "hm1A", "hm5C", "hm5U", "hm6A", "hm6Am", "hm7G",
                          "hPsi", "Atol"]
    assert written[1] == ["ACGUYACGU", "1", "0", "0", "0", "0", "0", "0", "0", "0", "1", "0", "0"]
    assert data.info()["datasets"]["CRI-On"]["folder"] == "CRI-On"
    assert data.info()["datasets"]["APA"]["folder"] == "Isoform"
    assert "BEACON files" in data.name and (data.private_dir / "APA" / "test.csv").exists()


def _break(source: Path, case: str) -> None:
    val = source / "MeanRibosomeLoading" / "val.csv"
    rows = list(csv.reader(val.open()))
    if case == "no folder":
        (source / "Isoform").rename(source / "Isoforms")
    elif case == "both names":
        (source / "APA").mkdir()
    elif case == "no file":
        val.unlink()
    elif case == "class range":
        _write(source / "NoncodingRNAFamily" / "train.csv", [["sequence", "label"], ["ACGU", "13"]])
    elif case == "bad letter":
        rows[3][0] = rows[3][0][:4] + "Z" + rows[3][0][5:]
    elif case == "label count":
        rows[2][1] = "[1.0, 2.0]"
    elif case == "fields":
        rows[2].append("2.0")
    elif case == "not a number":
        rows[2][1] = "high"
    elif case == "empty":
        rows = rows[:1]
    elif case == "constant labels":
        rows = [rows[0], *([row[0], "1.0"] for row in rows[1:])]
    if case in ("bad letter", "label count", "fields", "not a number", "empty", "constant labels"):
        _write(val, rows)


BROKEN = {
    "no folder": "has no folder for APA: expected APA/ or Isoform/",
    "both names": "has both APA/ and Isoform/",
    "no file": r"MeanRibosomeLoading/val.csv is missing",
    "bad letter": r"MeanRibosomeLoading/val.csv, line 4: 'Z' at position 5 of the sequence is not a nucleotide",
    "label count": r"MeanRibosomeLoading/val.csv, line 3: MRL needs 1 label value\(s\), found 2",
    "fields": r"MeanRibosomeLoading/val.csv, line 3: 3 fields, but 2 in the first row",
    "not a number": r"val.csv, line 3: the label 'high' is not a number",
    "empty": r"MeanRibosomeLoading/val.csv holds no sequences",
    "class range": r"NoncodingRNAFamily/train.csv, line 2: the class must be an integer from 0 to 12, got 13",
    "constant labels": "every row has the same value of label 1, so r2 is undefined",
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_beacon_folder_gives_a_clear_error(tmp_path: Path, case: str) -> None:
    source = write_beacon_folder(tmp_path / "beacon", seed=0, size="small")
    _break(source, case)
    data = RnaData(tmp_path / "cache", path=source)
    with pytest.raises(ValueError, match=BROKEN[case]):
        data.ensure()
    assert not data.ready() and not (data.dir / "building").exists()
    with pytest.raises(ValueError, match="no folder"):
        RnaData(tmp_path / "cache", path=tmp_path / "nowhere")


# -- the station's measurement of the scorer's outputs ----------------------------------------------------------------
def _perfect(dataset, labels) -> np.ndarray:
    """Outputs as the scorer hands them over, (rows, d_output) float32, matching the labels exactly."""
    pred = np.eye(dataset.d_output)[labels] if dataset.task_type == "multiclass_classification" else labels
    return pred.reshape(len(labels), dataset.d_output).astype(np.float32)


def test_the_station_measures_each_dataset_from_the_scorers_outputs(cache: Path) -> None:
    from evaluators.rna.metrics import BEACON_NAMES

    task = create_task("rna_modelling", SMALL)
    for n, dataset in enumerate(DATASETS):
        labels = task.data.labels(dataset.name)
        measured = task.measure(n, {"output_0": _perfect(dataset, labels)})
        assert measured["score"] == pytest.approx(1.0) and measured["metrics"] == {dataset.metric_key: measured["score"]}
        beacon = f" (BEACON's {BEACON_NAMES[dataset.name]}: 1.0000)" if dataset.name in BEACON_NAMES else ""
        assert measured["line"] == f"{dataset.metric} 1.0000{beacon}"
        assert measured["beacon"] == (pytest.approx(1.0) if beacon else None)
    assert list(METRIC_KEYS) == [
        "APA_R2", "CRI-Off_Spearman", "Modif_AUC-ROC", "CRI-On_Spearman", "PRS_R2", "MRL_R2", "ncRNA_Accuracy"]
    apa = task.data.labels("APA")
    with pytest.raises(ValueError, match=r"predictions of shape \(5, 1\) for APA, expected \(80,\) or \(80, 1\)"):
        task.measure(0, {"output_0": _perfect(DATASETS[0], apa)[:5]})
    with pytest.raises(ValueError, match="NaN or infinite"):
        task.measure(0, {"output_0": np.full((len(apa), 1), np.nan, np.float32)})
    with pytest.raises(ValueError, match="predictions of shape None"):
        task.measure(0, {})


def test_the_external_evaluation_scores_each_test_split_at_the_epoch_validation_picked(cache: Path) -> None:
    """`station external` on RNA: one run per seed (the paper's 10), each training the 7 datasets
    with its seeds k higher; the scorer is shown the validation then the test sequences, and the
    station measures the test rows against the test labels it alone holds."""
    from evaluators.jaxtrain.station_jax.rna import encode, one_hot, read_split

    task = create_task("rna_modelling", SMALL)
    plan = task.external()
    assert len(plan.runs) == 10 and "test split" in plan.protocol
    assert [run.trial_settings().get("seed_offset", 0) for run in plan.runs] == list(range(10))
    assert "seed_offset" not in task.trial_settings() and not task.external_mode  # the station's task is unchanged
    run = plan.runs[3]
    for n, dataset in enumerate(DATASETS):
        val, test = task.data.labels(dataset.name), task.data.labels(dataset.name, "test")
        sequences = [q for split in ("val", "test") for q in read_split(
            str(task.data.split_file(dataset.name, split)), dataset.task_type)[0]]
        shown = np.load(run.scoring_dir(n) / "input_0.npy")
        assert np.array_equal(shown, one_hot(encode(sequences, task.data.max_seq_len(dataset.name))))
        wrong = _perfect(dataset, val)[::-1]  # a poor validation fit beside a perfect test fit
        measured = run.measure(n, {"output_0": np.concatenate([wrong, _perfect(dataset, test)])})
        assert measured["test"] == pytest.approx(1.0) and measured["score"] < 1.0, dataset.name
        assert task.measure(n, {"output_0": _perfect(dataset, val)})["score"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="rows"):
        run.measure(0, {"output_0": _perfect(DATASETS[0], task.data.labels("APA"))})


def test_a_constant_predictor_measures_what_the_details_quote(cache: Path) -> None:
    task = create_task("rna_modelling", SMALL)
    references = task.data.references()
    for n, dataset in enumerate(DATASETS):
        rows = len(task.data.labels(dataset.name))
        pred = constant_predictions(dataset, task.data.labels(dataset.name, "train"), rows)
        outputs = {"output_0": pred.reshape(rows, dataset.d_output).astype(np.float32)}
        assert task.measure(n, outputs)["score"] == pytest.approx(references[dataset.name], abs=1e-6)
    assert references["Modif"] == 0.5 and references["CRI-Off"] == references["CRI-On"] == 0.0


class RecordingExecutor:
    """Records what each run is given; the check passes, each trial returns a report and hands
    over nothing (no export), so the station measures nothing."""

    name = "recording"

    def __init__(self, gpus: int = 0) -> None:
        self.gpus, self.specs = gpus, []

    def gpu_count(self) -> int:
        return self.gpus

    def run(self, spec):
        self.specs.append(spec)
        settings = json.loads(spec.env["STATION_TRIAL"])
        if settings["phase"] == "check":
            return RunResult(status="ok", value={"checked": True})
        return RunResult(status="ok", value={"seed": 7, "epochs": 1, "device": ["cpu"]})


def test_each_trial_is_given_its_dataset_and_the_training_splits_only(cache: Path) -> None:
    task = create_task("rna_modelling", SMALL)
    executor = RecordingExecutor(gpus=1)
    verdict = task.score(task.execute(executor, "x = 1", mounts=[], label="recorded"))
    check, *trials = executor.specs
    assert check.num_gpus == 0 and [s.num_gpus for s in trials] == [1.0] * 7
    settings = sorted((json.loads(s.env["STATION_TRIAL"]) for s in trials), key=lambda s: s["trial"])  # parallel
    assert [s["trial"] for s in settings] == list(range(7)) and {s["exchange"] for s in settings} == {"checkpoints"}
    assert "patience" not in settings[0]  # early stopping is the station's
    assert [d["name"] for d in settings[0]["datasets"]] == [d.name for d in DATASETS]
    assert settings[0]["datasets"][2] == {"name": "Modif", "task_type": "multilabel_classification", "d_output": 12,
                                          "metric": "auc_roc", "level": "sequence", "max_seq_len": 101}
    data = {m.target: m.source for m in trials[0].mounts}["task_data/rna"]
    assert Path(data) == task.data.train_dir
    assert sorted(str(p.relative_to(data)) for p in Path(data).rglob("*.csv")) == sorted(
        f"{d.name}/train.csv" for d in DATASETS)
    # val, test and the scorer's inputs, and the key of the draw: hidden by path too
    assert task.private_paths() == [task.data.dir, task.data.secret_dir]
    # nothing handed over: no metric for any dataset, and the details say why for each
    assert not verdict.success and verdict.score is None
    assert verdict.details.startswith("No score: 7 of 7 datasets have no metric (APA, CRI-Off, Modif, CRI-On, PRS")
    assert "MRL (trial 5, seed 7): no measured checkpoint: the run ended before it exported its apply function" in (
        verdict.details)
    assert "JAX saw only the CPU" in verdict.details  # a GPU was given, the trials named no GPU device


def test_the_exported_network_gives_one_sequences_outputs_as_the_batch_does() -> None:
    """Sequences of different lengths, zero-padded to the dataset's length: the export, called on
    one sequence, gives what the network gives for it inside a batch (here the Vanilla MLP, whose
    mean over positions includes the padding), with the output shape the scorer expects."""
    import jax
    from jax import export

    ns: dict = {}
    exec((ROOT / "evaluators" / "rna" / "baselines" / "vanilla_mlp.py").read_text(), ns)
    for dataset in (DATASETS[0], DATASETS[6]):  # regression (batch,) and 13 logits
        settings = dataset.settings(12)
        model = harness.build(ns["create_network"], {**harness.DEFAULT_HPARAMS, **settings})
        x = harness.one_hot(harness.encode(["ACGU", "GGCAUUNACGRA", "U"], 12))
        variables = model.init(jax.random.PRNGKey(0), x)
        batched = np.asarray(harness.forward(model, variables, x, train=False)[0]).reshape(3, dataset.d_output)
        exported = export.deserialize(bytearray(harness.export_apply(model, variables, settings)))
        assert [tuple(a.shape) for a in exported.out_avals] == [(dataset.d_output,)]
        assert tuple(exported.in_avals[-1].shape) == (12, 4)
        leaves = jax.tree_util.tree_leaves(variables)
        one_by_one = np.stack([np.asarray(exported.call(*leaves, row)[0]) for row in x])
        np.testing.assert_allclose(one_by_one, batched, rtol=1e-5, atol=1e-6)


# -- the harness: the padded last batch carries no weight ---------------------------------------------------------
def test_the_padded_last_batch_never_enters_the_loss() -> None:
    import flax.linen as nn
    import jax
    import optax

    class Tiny(nn.Module):
        @nn.compact
        def __call__(self, x, deterministic=True):
            return nn.Dense(1)(x.reshape(x.shape[0], -1))[:, 0]

    codes = harness.encode(["ACGU", "GGCA", "UUAC"], 4)
    labels = np.array([0.5, -1.0, 2.0], np.float32)
    padded = harness.batch_of(codes, labels, np.arange(3), 5)
    assert padded[2].tolist() == [1, 1, 1, 0, 0] and padded[0].shape == (5, 4, 4)
    model = harness.Model(Tiny())
    variables = model.init(jax.random.PRNGKey(0), padded[0])
    trained, rest = model.split(variables)
    optimizer = optax.sgd(0.0)
    losses = []
    for x, y, weight in (padded, harness.batch_of(codes, labels, np.arange(3), 3)):
        trainer = harness.Trainer(model, optimizer, "regression")
        losses.append(float(trainer.step(trained, rest, optimizer.init(trained), x, y, weight, None)[3]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


# -- the scripted play ---------------------------------------------------------------------------------------------
def test_the_scripted_play_tunes_the_mlp_then_adds_a_convolution() -> None:
    class Seen:
        notes: dict = {}

    seen, rng = Seen(), random.Random(1)
    first, second = play.submission(seen, rng), play.submission(seen, rng)
    assert "Vanilla MLP" in first["title"] and "nn.Dense(self.hidden)(x)" in first["content"]
    assert "Convolutional" in second["title"] and "nn.Conv(self.hidden, kernel_size=(9,))" in second["content"]
    compile(second["content"], "submission.py", "exec")


def test_the_gpu_config_has_the_papers_settings_and_the_spec_states_them(cache: Path) -> None:
    from station.core.config import load_config

    config = load_config(ROOT / "configs" / "rna_modelling_gpu.yaml")
    params = {**config.section(ResearchConfig).tasks[0].params, "size": "small"}  # the paper's budgets on the small sample
    assert (params["max_epochs"], params["patience"], params["trial_budget_s"], params["gpus_per_trial"]) == (
        100, 10, 1800, 1)
    task = create_task("rna_modelling", params)
    assert task.trials == 7 and task.trial_settings()["max_epochs"] == 100
    spec = task.spec()
    flat = " ".join(spec.split())
    assert "each with 30 minutes of training" in flat and "at most 100 epochs." in flat
    assert "stops the trial after 10 epochs without a better validation metric" in flat
    assert "`task_data/rna/<dataset>/train.csv`" in flat and "The validation splits are the station's" in flat
    assert "`BATCH_SIZE` (default 64)" in flat and "| 6 | ncRNA | NoncodingRNAFamily |" in spec
    assert all(f"`{key}`" in spec for key in METRIC_KEYS)


# -- through the real sandbox ----------------------------------------------------------------------------------------
def test_the_baseline_from_the_config_is_scored_end_to_end_and_beats_a_constant(cache: Path) -> None:
    from rooms.research.standalone import evaluate, resolve_task

    task, executor_config = resolve_task(str(CONFIG))
    assert task.kind == "rna_modelling" and task.max_epochs >= 10
    task.max_epochs = 2  # the config's task on the config's data; 2 epochs keep the test short
    code = (ROOT / "evaluators" / "rna" / "baselines" / "vanilla_mlp.py").read_text()
    executor = create_executor(executor_config, hide=task.private_paths())
    try:
        result = evaluate(task, code, executor)
    finally:
        executor.close()
    assert result["status"] == "ok" and result["success"], (result["details"], result["stderr"][-3000:])
    assert set(METRIC_KEYS) <= set(result["metrics"]) and all(math.isfinite(v) for v in result["metrics"].values())
    assert set(result["metrics"]) - set(METRIC_KEYS) == {"APA_BEACON_r2", "PRS_BEACON_r2", "MRL_BEACON_r2"}
    constant = float(np.mean(list(task.data.references().values())))
    assert result["score"] > constant + 0.15, result["details"]
    assert result["metrics"]["Modif_AUC-ROC"] > 0.5 and result["metrics"]["ncRNA_Accuracy"] > 0.15
    assert result["score"] == pytest.approx(ONE_STAGE_SCORE, abs=2e-3)  # two-stage scoring changes nothing honest
    for dataset in DATASETS:
        line = next(line for line in result["details"].splitlines() if line.startswith(f"{dataset.name} (trial "))
        assert "of 2 (stopped by the station: max-epochs). Reported by the run: 2 epochs" in line, line


HEAD = '''import flax.linen as nn
import jax.numpy as jnp


class Two(nn.Module):
    @nn.compact
    def __call__(self, x, deterministic=True):
        return jnp.mean(nn.Dense(2)(x), axis=1)  # (batch, 2) for every dataset


def create_network(hparams):
    return Two()
'''


@pytest.mark.parametrize("extra, message", [
    ("", "for APA (regression, d_output 1) the network must map x of shape (batch, 186, 4) to (batch,) or "
         "(batch, 1); it returned (64, 2) for a batch of 64"),  # the trials' batch: they load its compilation
    ("\n\ndef compute_loss(predictions, targets):\n    return 0.0\n",
     "defines compute_loss(): the loss is fixed by each dataset's task type"),
])
def test_contract_violations_fail_at_the_check(local, extra: str, message: str) -> None:
    task = create_task("rna_modelling", SMALL)
    result = task.execute(local, HEAD + extra, mounts=[], label="test-rna")
    assert result.status == "ok" and "trials" not in result.value  # no trial was started
    verdict = task.score(result)
    assert not verdict.success and message in verdict.details, verdict.details


def test_runs_see_the_training_splits_only(local, cache: Path) -> None:
    task = create_task("rna_modelling", SMALL)
    data = task.data.ensure()
    code = HEAD + f'''

def test():
    import os
    for root, _, files in os.walk("task_data/rna"):
        for name in files:
            print("FILE", os.path.join(root, name))
    for path in ({str(data.private_dir)!r}, {str(data.input_dir / "APA")!r}, {str(data.scoring_dir("APA"))!r}):
        try:
            print("HOST", os.listdir(path))
        except OSError as err:
            print("HOST refused", type(err).__name__)
'''
    result = task.execute(local, code, mounts=[], label="test-rna")
    assert task.score(result).details == "Test mode - no scoring"
    files = sorted(line.split("task_data/rna/")[1] for line in result.stdout.splitlines() if line.startswith("FILE"))
    assert files == sorted(f"{d.name}/train.csv" for d in DATASETS)
    assert result.stdout.count("HOST refused") == 3 and "HOST [" not in result.stdout
    assert (data.private_dir / "APA" / "test.csv").exists() and (data.input_dir / "APA" / "val.csv").exists()
