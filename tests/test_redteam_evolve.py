"""Red team: an OpenEvolve or ShinkaEvolve program attacks the evaluator that scores it (issue 51).

The evaluator loads the program itself. When the two shared a process, a program that changed only
its EVOLVE block read the evaluator's answer through `sys.modules` (a perfect score), or swapped
the `__code__` of the evaluator's validation function for "always valid" (a score above the honest
maximum). The program now runs apart, as the run's companion: the evaluator gets a stand-in module
whose functions call into the program's own process, with plain data crossing between them.

Real sandboxed runs, real folders (tests/data/evolve_redteam), and the evaluators called directly
here as the formats' own frameworks call them, for the honest scores.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from evaluators.base import create_task
from rooms.research.standalone import evaluate
from station.executors import LocalExecutor

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ROOT / "tests" / "data" / "evolve_redteam"
COMPAT = ROOT / "evaluators" / "folder" / "compat"
MODULE_STATE = FOLDERS / "openevolve_module_state"
VALIDATOR = FOLDERS / "shinka_validator"


def run_task(folder: Path, code: str) -> dict[str, Any]:
    task = create_task("folder", {"path": str(folder)})
    executor = LocalExecutor(hide=task.private_paths())
    try:
        return evaluate(task, code, executor)
    finally:
        executor.close()


def in_block(folder: Path, initial: str, block: str) -> str:
    """The folder's initial program with only its EVOLVE block replaced by `block`."""
    code = (folder / initial).read_text()
    head, rest = code.split("# EVOLVE-BLOCK-START\n")
    _, tail = rest.split("# EVOLVE-BLOCK-END\n")
    return f"{head}# EVOLVE-BLOCK-START\n{block}\n# EVOLVE-BLOCK-END\n{tail}"


def oracle(path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The folder's evaluator imported here, as its framework imports it."""
    monkeypatch.syspath_prepend(str(COMPAT))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    spec = importlib.util.spec_from_file_location(f"oracle_{path.parent.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


READ_THE_ANSWER = '''
import sys


def guess():
    """Whatever module holds the evaluator's hidden numbers: its answer, handed back as the guess."""
    for module in list(sys.modules.values()):
        hidden = getattr(module, "_HIDDEN", None)
        if isinstance(hidden, list) and len(hidden) == 8:
            return list(hidden)
    return [0.5] * 8
'''


def test_an_openevolve_program_cannot_read_its_evaluator_s_module_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to read `_HIDDEN` from the evaluator's module and score 1.0 (honest: 0.6396)."""
    honest = run_task(MODULE_STATE, (MODULE_STATE / "initial_program.py").read_text())
    program = tmp_path / "initial.py"
    program.write_text((MODULE_STATE / "initial_program.py").read_text())
    expected = oracle(MODULE_STATE / "evaluator.py", monkeypatch).evaluate(str(program))["combined_score"]
    assert honest["status"] == "ok" and honest["score"] == expected, honest
    attacked = run_task(MODULE_STATE, in_block(MODULE_STATE, "initial_program.py", READ_THE_ANSWER))
    assert attacked["status"] == "ok", attacked
    assert attacked["score"] == honest["score"], attacked  # the guess fell back to the honest one


ALWAYS_VALID = '''
def weights():
    """Rewrite the evaluator's validate_fn wherever it is found, then hand back more than is valid."""
    import sys

    def always_valid(result):
        return True, None

    for module in list(sys.modules.values()):
        check = getattr(module, "validate_fn", None)
        if callable(check) and hasattr(check, "__code__"):
            check.__code__ = always_valid.__code__
    return [1.0, 1.0, 0.99]
'''


def test_a_shinka_program_cannot_rewrite_its_evaluator_s_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to make validate_fn "always valid" and score 2.99 where 1 is the honest maximum."""
    honest = run_task(VALIDATOR, (VALIDATOR / "initial.py").read_text())
    program = tmp_path / "initial.py"
    program.write_text((VALIDATOR / "initial.py").read_text())
    metrics, correct, _ = oracle(VALIDATOR / "evaluate.py", monkeypatch).main(str(program), str(tmp_path / "out"))
    assert correct and honest["status"] == "ok" and honest["score"] == metrics["combined_score"], honest
    attacked = run_task(VALIDATOR, in_block(VALIDATOR, "initial.py", ALWAYS_VALID))
    assert attacked["score"] is None or attacked["score"] <= 1.0, attacked
    assert attacked["status"] == "invalid" and "more than 1" in attacked["details"], attacked
