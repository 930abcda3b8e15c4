"""Task folders in OpenEvolve's and ShinkaEvolve's formats run unchanged (docs/tasks.md).

Each folder under tests/data/evolve_formats follows a convention of the upstream examples (see its
README). Every folder goes through `station task check` and `station evaluate` as a user runs them,
and the station's score is checked against the format's own rule, computed here by calling the
folder's evaluator directly, as OpenEvolve or ShinkaEvolve would.
"""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from evaluators.folder.layout import TaskFolderError, evolve_frame, read_folder
from station.apps.cli import main as station

FOLDERS = Path(__file__).parent / "data" / "evolve_formats"
COMPAT = Path(__file__).parents[1] / "evaluators" / "folder" / "compat"
OPENEVOLVE = ["circle_phases", "symbolic_artifacts", "cascade_defaults", "judge_with_data", "sort_error_metric"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = station(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def evaluate(capsys: pytest.CaptureFixture[str], folder: Path, code: str, tmp_path: Path) -> dict[str, Any]:
    program = tmp_path / "try.py"
    program.write_text(code)
    status, out, err = run(capsys, "evaluate", str(folder), str(program), "--json")
    result: dict[str, Any] = json.loads(out)
    assert status == (0 if result["success"] else 1), err
    return result


def initial(folder: Path) -> str:
    return (folder / ("initial.py" if (folder / "initial.py").exists() else "initial_program.py")).read_text()


def load(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The folder's evaluator imported here, as the framework imports it (its folder and the
    framework's helpers on the path)."""
    monkeypatch.syspath_prepend(str(COMPAT))
    monkeypatch.syspath_prepend(str(path.parent))
    for name in [m for m in sys.modules if m == "judge" or m.startswith("judge.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no __pycache__ left in the shipped folder
    spec = importlib.util.spec_from_file_location(f"oracle_{path.parent.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def program_file(tmp_path: Path, code: str) -> str:
    path = tmp_path / "oracle_program.py"
    path.write_text(code)
    return str(path)


@pytest.mark.parametrize("name", OPENEVOLVE)
def test_an_openevolve_folder_checks_and_scores_its_initial_program_as_its_evaluator_does(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = FOLDERS / name
    status, statement, err = run(capsys, "task", "check", str(folder))
    assert status == 0, err
    assert "(openevolve format)" in err and "Initial program:" in err
    result = evaluate(capsys, folder, initial(folder), tmp_path)
    evaluator = load(folder / "evaluator.py", monkeypatch)
    last_stage = read_folder(folder).stages[-1]
    if name == "cascade_defaults":  # stage 1 passes 0.5, stage 2 scores 0 < 0.75: the cascade stops there
        last_stage = "evaluate_stage2"
    expected = getattr(evaluator, last_stage)(program_file(tmp_path, initial(folder)))
    expected = getattr(expected, "metrics", expected)
    assert result["success"] and result["score"] == pytest.approx(expected["combined_score"], abs=1e-12)
    assert statement.startswith("# ")  # what agents read follows the check's report


def test_the_first_phase_config_is_read_and_task_yaml_may_choose_another(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "circle_phases"
    shutil.copytree(FOLDERS / "circle_phases", folder)
    first = read_folder(folder)
    assert first.config_file == "config_phase_1.yaml" and "PHASE ONE" in first.statement
    assert first.stages == ("evaluate_stage1", "evaluate_stage2") and first.cascade.thresholds == (0.5,)
    (folder / "task.yaml").write_text("config: config_phase_2.yaml\n")
    second = read_folder(folder)
    assert "PHASE TWO" in second.statement and second.stages == ("evaluate",)  # its cascade is off
    status, statement, _ = run(capsys, "task", "check", str(folder))
    assert status == 0 and "PHASE TWO" in statement
    (folder / "task.yaml").write_text("config: config_phase_3.yaml\n")
    with pytest.raises(TaskFolderError, match="config_phase_1.yaml, config_phase_2.yaml"):
        read_folder(folder)
    (folder / "task.yaml").unlink()
    (folder / "config_phase_1.yaml").rename(folder / "config_fast.yaml")
    with pytest.raises(TaskFolderError, match=r"several OpenEvolve configs .* task.yaml \(config: NAME\)"):
        read_folder(folder)


def test_without_a_config_the_cascade_is_on_with_openevolve_s_thresholds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = FOLDERS / "cascade_defaults"
    layout = read_folder(folder)
    assert layout.config_file == "" and layout.cascade.enabled and layout.cascade.thresholds == (0.5, 0.75, 0.9)
    assert layout.stages == ("evaluate_stage1", "evaluate_stage2", "evaluate_stage3")
    near = evaluate(capsys, folder, "def estimate_pi():\n    return 3.1\n", tmp_path)
    assert "stage2_ran" in near["metrics"] and "stage3_ran" not in near["metrics"]  # 0.58 < 0.75: stop
    assert near["score"] == pytest.approx(1 - 10 * (math.pi - 3.1))
    close = evaluate(capsys, folder, "def estimate_pi():\n    return 3.14\n", tmp_path)
    assert "stage3_ran" in close["metrics"] and close["score"] == pytest.approx(1 - 100 * (math.pi - 3.14))


def test_metrics_without_combined_score_are_averaged_as_openevolve_does_unless_the_folder_names_its_metric(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "signal"
    shutil.copytree(FOLDERS / "signal_no_combined", folder)
    status, _, err = run(capsys, "task", "check", str(folder))
    assert status == 0, err  # OpenEvolve's rule, said loudly: output_length rules such a board
    assert "warning: Score: the MEAN of the evaluator's numeric metrics overall_score, mse, output_length" in err
    assert "scorer: {metric: NAME}" in err
    (folder / "task.yaml").write_text("scorer:\n  metric: overall_score\n")
    status, statement, err = run(capsys, "task", "check", str(folder))
    assert status == 0, err
    assert "the score is the `overall_score` metric" in statement
    result = evaluate(capsys, folder, initial(folder), tmp_path)
    expected = load(folder / "evaluator.py", monkeypatch).evaluate(program_file(tmp_path, initial(folder)))
    assert result["score"] == pytest.approx(expected["overall_score"], abs=1e-12)
    assert result["metrics"]["output_length"] == 120


def test_evaluation_result_artifacts_are_shown_to_the_author(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = FOLDERS / "symbolic_artifacts"
    fitted = evaluate(capsys, folder, "def predict(x):\n    return x * x + 1.0\n", tmp_path)
    assert fitted["score"] == pytest.approx(1.0) and "### Fit" in fitted["details"]
    broken = evaluate(capsys, folder, "def predict(x):\n    return 1 / 0\n", tmp_path)
    assert broken["success"] and broken["score"] == 0.0
    details = broken["details"]
    assert "## Last execution output" in details and "### Stderr\n```\nZeroDivisionError" in details
    assert "### Failure stage\n```\nprediction" in details and "### Traceback" in details


def test_an_error_metric_rejects_the_program_with_its_message(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = FOLDERS / "sort_error_metric"
    wrong = evaluate(capsys, folder, "def sort_numbers(items):\n    return list(items)\n", tmp_path)
    assert not wrong["success"]
    assert "Rejected by the task's evaluator: the output is not the input in ascending order" in wrong["details"]
    merge = evaluate(capsys, folder, "def sort_numbers(items):\n    return sorted(items)\n", tmp_path)
    assert merge["success"] and merge["score"] > 0.9  # Timsort: about n log n comparisons


def test_a_shinka_folder_runs_unchanged_and_keeps_its_private_metrics_private(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = FOLDERS / "shinka_unit_vector"
    status, statement, err = run(capsys, "task", "check", str(folder))
    assert status == 0, err
    assert "(shinka format)" in err and "main()" in err
    assert "EVOLVE-BLOCK-START" in statement and "Only the code between" in statement
    result = evaluate(capsys, folder, initial(folder), tmp_path)
    results_dir = tmp_path / "oracle_results"
    load(folder / "evaluate.py", monkeypatch).main(program_file(tmp_path, initial(folder)), str(results_dir))
    expected = json.loads((results_dir / "metrics.json").read_text())
    assert json.loads((results_dir / "correct.json").read_text()) == {"correct": True, "error": None}
    assert result["success"] and result["score"] == pytest.approx(expected["combined_score"], abs=1e-12)
    assert result["metrics"]["ratio_n5"] == pytest.approx(math.sin(math.pi / 10) / math.sin(math.pi / 5))
    assert "hidden_margin" not in json.dumps(result)  # ShinkaEvolve's private metrics
    assert "### Feedback\nThe closest pair sets the score" in result["details"]
    best = initial(folder).replace("math.pi * i / n", "2 * math.pi * i / n")
    assert evaluate(capsys, folder, best, tmp_path)["score"] == pytest.approx(1.0)


def test_a_shinka_program_is_judged_by_its_validation_and_must_keep_the_frame(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = FOLDERS / "shinka_unit_vector"
    short = initial(folder).replace("for i in range(n)]", "for i in range(n - 1)]")
    invalid = evaluate(capsys, folder, short, tmp_path)
    assert not invalid["success"] and "run_experiment must return n angles" in invalid["details"]
    forged = initial(folder).replace(
        'return {"n": n, "seed": seed, "angles": angles}',
        'return {"n": n, "seed": seed, "angles": [6.283185307179586 * i / n for i in range(n)]}',
    )
    refused = evaluate(capsys, folder, forged, tmp_path)
    assert not refused["success"] and "outside the EVOLVE-BLOCK-START / EVOLVE-BLOCK-END" in refused["details"]
    assert refused["duration_s"] == 0  # refused before any run


def test_the_frame_is_the_code_outside_the_evolve_blocks() -> None:
    code = "import math\n# EVOLVE-BLOCK-START\ndef f():\n    return 1\n# EVOLVE-BLOCK-END\n\ndef g():\n    return f()\n"
    frame = evolve_frame(code)
    assert frame == "import math\n# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-END\ndef g():\n    return f()"
    changed_inside = code.replace("return 1", "x = 2\n    return x")
    assert evolve_frame(changed_inside.replace("\n\ndef g", "\n\n\ndef g")) == frame  # and a blank line more
    assert evolve_frame(code.replace("return f()", "return 99")) != frame
    assert evolve_frame("def f():\n    return 1\n") == ""  # no blocks: all of it may change
    assert evolve_frame("# EVOLVE-BLOCK-START\nx = 1\n") is None
