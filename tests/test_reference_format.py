"""Task folders in the reference station's own format (issue 52, item 1; docs/tasks.md, "The
reference station's folders"): both layouts, read and run unchanged, their evaluator judging in the
scorer's sandbox with a stand-in for the reference's `station` package.

The folders under tests/data/reference_formats/ are ours, written in that format: paper_era
(research_tasks.yaml, task_1_evaluator.py, pending_evaluations.yamll, a validate_submission_code),
newer (research_task.md, evaluator.py, baseline.yamll with two baselines, a lower-is-better score
ranked by its sort key, secondary metrics) and newer_command (command mode, a runner in
storage/system)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evaluators.base import create_task
from evaluators.folder.layout import TaskFolderError, read_folder
from rooms.research.standalone import evaluate
from station.executors import LocalExecutor

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ROOT / "tests" / "data" / "reference_formats"


@pytest.fixture(scope="module")
def executor() -> Any:
    ex = LocalExecutor(hide=[FOLDERS])
    yield ex
    ex.close()


def judged(executor: Any, folder: str, code: str, storage: Path | None = None) -> dict[str, Any]:
    return evaluate(create_task("folder", {"path": str(FOLDERS / folder)}), code, executor, storage)


def test_task_check_passes_on_both_layouts_and_the_baselines_score_as_computed_here() -> None:
    sum_times_weights = sum([1, 2, 3]) * (0.5 + 0.25)  # the paper-era baseline's labels and weights
    expected = {
        "paper_era": [f"Three Labels Baseline: {sum_times_weights:g}"],
        "newer": [f"Every Mark Baseline: {len(range(11))}", f"Six Marks Baseline: {len({0, 1, 2, 3, 6, 10})}"],
        "newer_command": ["System Files Stay Read-Only: 7"],  # 7: its write into storage/system was refused
    }
    for folder, lines in expected.items():
        done = subprocess.run([sys.executable, "-m", "station.apps.cli", "task", "check", str(FOLDERS / folder)],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        layout = "paper-era layout" if folder == "paper_era" else "newer layout"
        assert f"(reference format, {layout}: research/" in done.stderr
        for line in lines:
            assert f"  {line}\n" in done.stderr, done.stderr
        assert "__CODER_ONLY" not in done.stdout and "coder only" not in done.stdout
        if folder == "paper_era":
            assert "Limits per run: 120 s of wall-clock time" in done.stdout  # constant_config.yaml's timeout
    assert not (FOLDERS / "newer_command" / "research" / "storage" / "system" / "planted.txt").exists()


def test_function_mode_values_reach_the_evaluator_as_returned(executor: Any) -> None:
    baseline = read_folder(FOLDERS / "paper_era").baselines[0].code  # (int8 array, list of floats, JSON string)
    r = judged(executor, "paper_era", baseline)
    assert r["success"] and r["score"] == 4.5, r
    assert "Valid labels (tuple of int8 array, list, str); timeout setting 120" in r["details"]
    listed = baseline.replace("return np.arange", "return [np.arange").replace('"three"})', '"three"})]')
    r = judged(executor, "paper_era", listed)  # a list is not the tuple the evaluator asks for
    assert not r["success"] and r["score"] is None and r["sort_key"] is None
    assert "Verification failed: expected a 3-tuple, got list" in r["details"]


def test_validate_submission_code_refuses_before_anything_runs(executor: Any, tmp_path: Path) -> None:
    code = (
        "import os\n"
        "os.makedirs('storage/shared', exist_ok=True)\n"
        "open('storage/shared/ran.txt', 'w').write('the submission ran')\n"
        "def make_labels():  # forbidden_marker\n"
        "    return None\n"
    )
    r = judged(executor, "paper_era", code, storage=tmp_path)
    assert not r["success"] and r["score"] is None
    assert r["details"] == "Rejected by the task's evaluator: the source holds the forbidden marker"
    assert (tmp_path / "shared").is_dir() and not (tmp_path / "shared" / "ran.txt").exists()
    r = judged(executor, "paper_era", code.replace("forbidden_marker", "allowed"), storage=tmp_path)
    assert (tmp_path / "shared" / "ran.txt").read_text() == "the submission ran"  # the control: it runs


def test_sort_key_ranks_and_a_failed_evaluation_has_no_score(executor: Any) -> None:
    # the submission also looks for the stand-in `station`: it exists only in the scorer's sandbox
    six = (
        "def construct_ruler():\n"
        "    try:\n"
        "        import station.eval_research.base_evaluator\n"
        "    except ImportError:\n"
        "        return [0, 1, 2, 3, 6, 10]\n"
        "    raise RuntimeError('the stand-in station package is importable here')\n"
    )
    better, worse = judged(executor, "newer", six), judged(executor, "newer", "def construct_ruler():\n"
                                                                        "    return list(range(11))\n")
    assert better["success"] and worse["success"], (better, worse)
    assert (better["score"], worse["score"]) == (6.0, 11.0)  # lower is better here ...
    assert better["sort_key"] == [-6.0] and worse["sort_key"] == [-11.0]  # ... and the key ranks it first
    assert better["metrics"] == {"Marks": 6.0, "Coverage": 1.0} and "Note: lower is better" in better["details"]
    task = create_task("folder", {"path": str(FOLDERS / "newer")})
    assert task.metric_formats == {"Marks": ".0f", "Coverage": ".3f"} and task.display_precision == 1
    assert task.memory_mb == 2048 and task.timeout_s == 90
    gap = judged(executor, "newer", "def construct_ruler():\n    return [0, 1, 2, 10]\n")
    assert not gap["success"] and gap["score"] is None and gap["sort_key"] is None
    missing = sorted(set(range(1, 11)) - {a - b for a in (0, 1, 2, 10) for b in (0, 1, 2, 10)})
    assert f"Verification failed: distances not measured: {missing}" in gap["details"]
    # the station's own `station` is untouched in this process
    import station

    assert Path(station.__file__).parent == ROOT / "station"
    assert "station.eval_research" not in sys.modules and importlib.util.find_spec("station.constants") is None
    assert not any("standin" in entry for entry in sys.path)


def test_an_evaluator_that_breaks_is_a_scorer_failure(executor: Any, tmp_path: Path) -> None:
    folder = shutil.copytree(FOLDERS / "newer", tmp_path / "broken")
    evaluator = folder / "research" / "evaluators" / "evaluator.py"
    evaluator.write_text(evaluator.read_text().replace("        try:\n            marks = self._marks(result)",
                                                       "        try:\n            marks = {}['a bug']"))
    task = create_task("folder", {"path": str(folder)})
    r = evaluate(task, "def construct_ruler():\n    return [0, 1, 2, 3, 6, 10]\n", executor)
    assert r["status"] == "scorer_error" and "the task's evaluator failed: KeyError: 'a bug'" in r["error"], r


def test_constant_config_keys_are_mapped_or_named() -> None:
    notes = create_task("folder", {"path": str(FOLDERS / "paper_era")}).config_notes()  # what task check prints
    assert notes == [
        "constant_config.yaml RESEARCH_EVAL_TIMEOUT = 120 sets resources.timeout_s",
        "constant_config.yaml RESEARCH_EVAL_MAX_TICK = 3 is the station's research.wait_ticks here (one value for "
        "the whole station): set it in the station's config",
        "constant_config.yaml keys ignored (no meaning in this station): CLAUDE_CODE_DEBUG_ENABLED, "
        "RESEARCH_EVAL_MAX_PARALLEL_WORKERS",
    ]


def test_folder_problems_are_one_clear_line(tmp_path: Path) -> None:
    folder = shutil.copytree(FOLDERS / "newer", tmp_path / "bad")
    (folder / "constant_config.yaml").write_text("RESEARCH_EVAL_TIMEOUT: soon\n")
    with pytest.raises(TaskFolderError, match=r"constant_config.yaml: RESEARCH_EVAL_TIMEOUT must be a non-negative"):
        read_folder(folder)
    (folder / "constant_config.yaml").unlink()
    evaluator = folder / "research" / "evaluators" / "evaluator.py"
    evaluator.write_text(evaluator.read_text().replace("return FUNCTION", "return FUNCTION.lower()"))
    with pytest.raises(TaskFolderError, match=r"evaluator.py: get_expected_function_name\(\) returns an expression"):
        read_folder(folder)
    evaluator.unlink()
    with pytest.raises(TaskFolderError, match=r"newer layout\) but has no .*evaluators/evaluator.py"):
        read_folder(folder)


def test_a_paper_era_folder_given_the_newer_task_text_is_read_by_its_evaluator(tmp_path: Path) -> None:
    """The reference's own research_circle_n32 has research_task.md beside task_1_evaluator.py and no
    evaluator.py: read as the paper-era layout, as the reference's older registry reads it."""
    folder = shutil.copytree(FOLDERS / "paper_era", tmp_path / "both")
    (folder / "research" / "research_task.md").write_text("# Research Task: the newer text\n\nSomething else.\n")
    read = read_folder(folder)
    assert read.reference is not None and read.reference.layout == "paper"
    assert read.reference.describe() == (  # what `station task check` says it read
        "paper-era layout: research/research_tasks.yaml, research/evaluators/task_1_evaluator.py, "
        "baselines from research/pending_evaluations.yamll"
    )
    evaluators = folder / "research" / "evaluators"
    shutil.copy(FOLDERS / "newer" / "research" / "evaluators" / "evaluator.py", evaluators / "evaluator.py")
    newer = read_folder(folder).reference
    assert newer is not None and newer.layout == "newer" and newer.title == "the newer text"
    assert newer.describe().startswith("newer layout: research/research_task.md, research/evaluators/evaluator.py")
