"""Red team: task folders, attacked as a hostile submission (or a careless author) would.

- a scorer made to fail on purpose (huge numbers: OverflowError), which used to be "not your
  fault, nothing counts against you", repeatably and for free;
- an OpenEvolve program that patches the scorer's own module to lead the board with 1e9, or
  ends the evaluator's run on purpose to get a free scorer failure;
- private answers reachable through a symlinked private/ or a git repository's object store;
- a scorer that cannot even be imported passing `station task check` because there are no baselines.

Real sandboxed runs, real folders, the real command line.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_folder_task

from evaluators.base import create_task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "tasks"
SECRET = "the-answer-is-4f2c9e71"


@pytest.fixture()
def place() -> Iterator[Path]:
    """A task folder's home outside the test's temp dir (under /srv when it can be written), so that
    what a run can reach of it is really tested."""
    root = Path(tempfile.mkdtemp(prefix="station-redteam-", dir="/srv" if os.access("/srv", os.W_OK) else None))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        os.chmod(path, 0o644)
    for folder in (root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())):
        os.chmod(folder, 0o755)
    return root


def task_check(folder: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "station.apps.cli", "task", "check", str(folder), *more],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


# -- a scorer made to fail on purpose ------------------------------------------------------------------
@pytest.mark.parametrize("returned", ["[1e200, 1e200]", "[10 ** 400, 1.0]", "[float('nan'), 1.0]", "[1e300, 0]"])
def test_huge_predictions_are_rejected_not_a_free_scorer_failure(returned: str) -> None:
    """The README's line_fit scorer used to overflow on [1e200, 1e200]: a scorer failure that
    charged nobody. Now the submission is rejected, and that counts against it."""
    result = run_folder_task(EXAMPLES / "line_fit", f"def predict():\n    return {returned}\n")
    assert result["status"] == "invalid", result
    assert "Rejected by the task's scorer" in result["details"] and "between -1e+06 and 1e+06" in result["details"]


NAIVE_SCORERS = {
    "python floats": "def evaluate(returned, context):\n    return sum(x ** 2 for x in returned)\n",
    "numpy, errors raised": (
        "import numpy as np\n\ndef evaluate(returned, context):\n"
        "    with np.errstate(all='raise'):\n        return float(np.exp(np.asarray(returned, dtype=float)).sum())\n"
    ),
}


@pytest.mark.parametrize("kind", sorted(NAIVE_SCORERS))
def test_arithmetic_overflow_while_scoring_is_the_submission_s_fault(place: Path, kind: str) -> None:
    """Decided: numbers too large for the scorer's arithmetic (OverflowError, FloatingPointError)
    come from the values being scored, so the driver rejects the submission even when the scorer
    forgot to check them. Honest values still score."""
    folder = write(place, {"task.md": "# Squares\n", "evaluate.py": NAIVE_SCORERS[kind]})
    result = run_folder_task(folder, "def main():\n    return [1e200, 3.0]\n" if kind == "python floats"
                             else "def main():\n    return [1000.0, 1.0]\n")
    assert result["status"] == "invalid", result
    assert "could not compute with the values given" in result["details"]
    assert run_folder_task(folder, "def main():\n    return [1.0, 2.0]\n")["status"] == "ok"


def _example_scorer(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / name / "evaluate.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the shipped folder
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    finally:
        sys.dont_write_bytecode = before
    return module


HOSTILE_VALUES: list[Any] = [
    None, 1e200, "abc", {"a": 1}, [], [None, None], ["1", "x"], [[1.0], [2.0]], [True, False],
    [1e200, 1e200], [-1e308, 1e308], [10**400, 1], [float("nan"), 1.0], [float("inf"), 1.0],
    ([[0.5, 0.5]] * 26, [1e200] * 26), ([[1e200, 1e200]] * 26, [0.01] * 26), ([[0.5, 0.5]] * 26, [10**400] * 26),
    ([[float("nan"), 0.5]] * 26, [0.01] * 26), ([[0.5, 0.5]] * 26, [-0.01] * 26), ([[0.5, 0.5]] * 26, [1e-320] * 26),
    ([[0.5]] * 26, [0.01] * 26), (["a"] * 26, [0.01] * 26), ([[0.5, 0.5]] * 25, [0.01] * 25), (1, 2),
]


@pytest.mark.parametrize("name", ["line_fit", "circle_packing_n26"])
def test_the_shipped_scorers_answer_any_value_with_a_score_or_a_rejection(name: str) -> None:
    """Whatever a submission returns, a shipped scorer gives a finite score or raises ValueError:
    never another exception, which would be charged to the task."""
    scorer = _example_scorer(name)
    folder = EXAMPLES / name
    context = {"task_dir": folder, "private_dir": folder / "private", "data_dir": folder / "data", "mode": "function"}
    for value in HOSTILE_VALUES:
        try:
            answer = scorer.evaluate(value, context)
        except ValueError:
            continue
        score = answer["score"] if isinstance(answer, dict) else answer
        assert isinstance(score, float) and math.isfinite(score), (value, answer)


# -- OpenEvolve: patching the scorer, failing the evaluator on purpose ------------------------------------
EXACT = "    return -1.70408284, 0.67750781, evaluate_function(-1.70408284, 0.67750781)"


def openevolve_program(prelude: str) -> str:
    initial = (EXAMPLES / "openevolve_function_minimization" / "initial_program.py").read_text()
    return prelude + "\n" + initial.replace("    return search_algorithm()", EXACT)


PATCHES = {
    # the attack as it was: the driver's own scoring function replaced
    "the scorer's score": """
        import sys
        sys.modules["station_scorer"]._score = lambda *args, **kwargs: 1e9
    """,
    # what is left to a program in the evaluator's process: changing the metrics handed back
    "the metrics handed back": """
        import sys
        sys.modules["station_scorer"]._plain = lambda value: 1e9
    """,
    "the evaluator's measurements": """
        import sys
        sys.modules["evaluator"]._scores = lambda trials: {"combined_score": 1e9}
    """,
}


@pytest.mark.parametrize("patched", sorted(PATCHES))
def test_patching_the_scorer_or_the_evaluator_does_not_lead_the_board(patched: str) -> None:
    """The program used to replace station_scorer._score and lead the board with 1e9; the station
    then computed the score outside the run, and refused metrics forged outside the task's
    score_range. Now the program runs apart from its evaluator (tests/test_redteam_evolve.py):
    neither module is in its process, and the evaluator reports the program's KeyError."""
    forged = run_folder_task(EXAMPLES / "openevolve_function_minimization", openevolve_program(textwrap.dedent(PATCHES[patched])))
    honest = run_folder_task(EXAMPLES / "openevolve_function_minimization", openevolve_program(""))
    assert honest["status"] == "ok" and math.isclose(honest["score"], 1.0, abs_tol=1e-6)
    assert forged["score"] is None or forged["score"] <= honest["score"], forged
    assert forged["status"] == "invalid" and "KeyError" in forged["details"], forged


@pytest.mark.parametrize("ending", [
    "import os\nos._exit(0)\n",
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "exec(compile('raise KeyError(\"the evaluator broke\")', 'evaluator.py', 'exec'))\n",
])
def test_an_openevolve_program_cannot_end_the_evaluator_for_a_free_scorer_failure(ending: str) -> None:
    """Once the evaluator holds the program, whatever ends its run is the program's doing: a crash
    of the program (charged, debuggable), never 'the task's failure, nothing counts against you'.
    Run apart, an exit ends only the program's own process: the evaluator is told so."""
    result = run_folder_task(EXAMPLES / "openevolve_function_minimization", openevolve_program(ending))
    assert result["status"] != "scorer_error", result
    if "KeyError" in ending:  # the example's evaluator turns any exception into an `error` metric
        assert result["status"] == "invalid" and "the evaluator broke" in result["details"], result
    else:
        assert result["status"] == "invalid" and "the program's process ended" in result["details"], result


def test_an_evaluator_that_fails_before_it_has_the_program_is_still_the_task_s_failure(place: Path) -> None:
    folder = write(place, {"initial_program.py": "def run():\n    return 1\n",
                           "evaluator.py": "import not_a_module_anywhere\n\ndef evaluate(path):\n    return {}\n"})
    result = run_folder_task(folder, "def run():\n    return 1\n")
    assert result["status"] == "scorer_error", result


def test_an_openevolve_contract_says_what_is_isolated() -> None:
    spec = create_task("folder", {"path": str(EXAMPLES / "openevolve_function_minimization")}).spec()
    assert "separate sandbox" not in spec and "printing a score changes nothing" not in spec
    for words in ("apart from the evaluator", "cross as plain data only", "counts against your program",
                  "`evaluate_stage1`, then `evaluate_stage2`"):
        assert words in spec, words


# -- private answers elsewhere: a link, a git repository -----------------------------------------------------
READ_ANYWHERE = textwrap.dedent("""
    import os, zlib

    TARGETS = {targets!r}

    def main():
        seen = []
        for target in TARGETS:
            try:
                seen.append(open(target).read())
            except OSError as err:
                seen.append(type(err).__name__)
        for top in TARGETS:  # any git object store on the way to a target
            parts = top.split("/")
            for depth in range(2, len(parts)):
                objects = "/".join(parts[:depth]) + "/.git/objects"
                for root, _, files in os.walk(objects):
                    for name in files:
                        try:
                            seen.append(zlib.decompress(open(os.path.join(root, name), "rb").read()).decode("latin-1"))
                        except Exception:
                            pass
        return seen
""")


ECHO = "def evaluate(returned, context):\n    return {'score': 1.0, 'details': repr(returned)}\n"


def test_a_symlinked_private_folder_is_warned_of_and_unreachable_from_a_submission(place: Path) -> None:
    answers = place / "elsewhere"
    write(answers, {"answer.txt": SECRET})
    folder = write(place / "task", {"task.md": "# Guess\n", "evaluate.py": ECHO})
    (folder / "private").symlink_to(answers)
    checked = task_check(folder, "--no-baselines")
    assert checked.returncode == 0, checked.stderr
    assert "warning: private is a symbolic link" in checked.stderr and "Replace the link" in checked.stderr
    code = READ_ANYWHERE.format(targets=[str(answers / "answer.txt"), str(folder / "private" / "answer.txt")])
    result = run_folder_task(folder, code)
    assert result["status"] == "ok", result
    assert result["details"].startswith("['FileNotFoundError', 'FileNotFoundError'") and SECRET not in str(result)


def test_a_folder_in_a_git_repository_is_warned_of_and_its_objects_are_unreachable(place: Path) -> None:
    repository = place / "repo"
    folder = write(repository / "tasks" / "guess", {
        "task.md": "# Guess\n", "evaluate.py": ECHO, "private/answer.txt": SECRET})
    git = ["git", "-C", str(repository), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "task"], check=True)
    os.chmod(repository, 0o755)
    for root, dirs, files in os.walk(repository / ".git"):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    checked = task_check(folder, "--no-baselines")
    assert checked.returncode == 0, checked.stderr
    assert f"inside the git repository {repository}" in checked.stderr and ".gitignore" in checked.stderr
    # a folder with nothing private (the shipped examples in this repository) is not warned of
    from evaluators.folder.layout import exposure_warnings

    assert exposure_warnings(write(repository / "tasks" / "open", {"task.md": "# Open\n", "evaluate.py": ECHO})) == []
    result = run_folder_task(folder, READ_ANYWHERE.format(targets=[str(folder / "private" / "answer.txt")]))
    assert result["status"] == "ok", result
    assert result["details"] == "['FileNotFoundError']" and SECRET not in str(result)
    # the object store really holds the answer: the attack would find it on a host that shows it
    objects = [p for p in (repository / ".git" / "objects").rglob("*") if p.is_file()]
    import zlib

    assert any(SECRET in zlib.decompress(p.read_bytes()).decode("latin-1") for p in objects if p.parent.name != "pack")


# -- `station task check` imports the scorer, baselines or not -----------------------------------------------
@pytest.mark.parametrize("scorer, words", [
    ("import not_a_module_anywhere\n\ndef evaluate(r, c):\n    return 1.0\n", "cannot be imported"),
    ("def evaluate(\n", "cannot be imported"),
    ("def score(r, c):\n    return 1.0\n", "evaluate.py defines no evaluate()"),
])
def test_task_check_imports_the_scorer_even_without_baselines(place: Path, scorer: str, words: str) -> None:
    folder = write(place, {"task.md": "# T\n", "evaluate.py": scorer})
    checked = task_check(folder)
    assert checked.returncode == 1, checked.stderr
    assert words in checked.stderr and "no baselines" in checked.stderr


def test_task_check_checks_an_openevolve_evaluator_s_functions(place: Path) -> None:
    folder = write(place, {"initial_program.py": "def run():\n    return 1\n",
                           "evaluator.py": "def evaluate_stage1(path):\n    return {'combined_score': 1.0}\n",
                           "config.yaml": "evaluator: {cascade_evaluation: false}\n"})
    checked = task_check(folder, "--no-baselines")
    assert checked.returncode == 1 and "evaluator.py defines no evaluate()" in checked.stderr, checked.stderr
    (folder / "config.yaml").write_text("evaluator: {cascade_evaluation: true, cascade_thresholds: [0.5]}\n")
    checked = task_check(folder, "--no-baselines")
    assert checked.returncode == 0, checked.stderr
    assert "scorer: evaluator.py imports and defines evaluate_stage1()" in checked.stderr


SHINKA = ROOT / "tests" / "data" / "evolve_formats" / "shinka_unit_vector"
COMPAT = ROOT / "evaluators" / "folder" / "compat"


def test_a_shinka_program_cannot_poison_the_stand_ins_the_task_or_the_next_run(place: Path) -> None:
    """A program that shares the evaluator's process (task.yaml `program_process: shared`) shares its
    sandbox, so it tries what lasts beyond its own run: rewrite the `shinka.core` stand-in every
    evaluator imports, write into the task folder, and leave a perfect metrics.json where the next
    run's results go. All of it is read-only or its own. (Run apart, it sees none of them.)"""
    shutil.copytree(SHINKA, place / "shinka", dirs_exist_ok=True)
    folder = write(place / "shinka", {"task.yaml": "program_process: shared\n"})
    before = {p: p.read_bytes() for p in [*COMPAT.rglob("*.py"), *folder.rglob("*")] if p.is_file()}
    attack = (SHINKA / "initial.py").read_text().replace(
        '    return [math.pi * i / n for i in range(n)]',
        textwrap.indent(textwrap.dedent('''\
            import glob, json, os
            hits, targets = [], glob.glob("compat/**/*.py", recursive=True) + ["task/evaluate.py", "task/initial.py"]
            assert len(targets) >= 7, targets  # the stand-ins are there to be attacked
            for target in targets:
                try:
                    with open(target, "w") as f:
                        f.write("def run_shinka_eval(*a, **k):\\n    return {'combined_score': 1e9}, True, None\\n")
                    hits.append(target)
                except OSError:
                    pass
            os.makedirs("results", exist_ok=True)
            with open("results/metrics.json", "w") as f:
                json.dump({"combined_score": 1e9}, f)  # its own run's folder: overwritten after the runs
            assert not hits, hits
            return [math.pi * i / n for i in range(n)]'''), "    "),
    )
    attacked = run_folder_task(folder, attack)
    assert attacked["success"] and attacked["score"] == pytest.approx(0.5217, abs=1e-3)  # not 1e9
    assert {p: p.read_bytes() for p in before} == before  # nothing on the host changed
    honest = run_folder_task(folder, (SHINKA / "initial.py").read_text())
    assert honest["score"] == attacked["score"]
