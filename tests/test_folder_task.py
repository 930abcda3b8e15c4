"""Research tasks from folders (docs/tasks.md), run as users run them: real sandboxed runs, real files.

A task folder holds its statement, its settings, its trusted scorer and its data; a submission runs
in one sandbox and the scorer in another. These tests check what a task author and an operator
would notice: clear errors for a broken folder, the same scores as the built-in circle packing,
hostile submissions that reach nothing, and broken scorers that charge nobody.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest
import yaml

from evaluators.base import ScorerFailure, create_task
from evaluators.circle_packing import CirclePacking
from evaluators.folder.layout import TaskFolderError, read_folder
from rooms.research.config import ResearchConfig
from rooms.research.standalone import evaluate
from station.core.config import ConfigError, load_config, parse_config
from station.executors import LocalExecutor

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "tasks"
SECRET = "the-hidden-answer-7d1f3a"


@pytest.fixture(scope="module")
def executor():
    ex = LocalExecutor()
    yield ex
    ex.close()


@pytest.fixture()
def place(tmp_path: Path):
    """Where task folders go: under /srv when it can be written (outside the dirs every sandbox
    masks anyway, so that hiding the task folder is really tested), else a temp dir."""
    root = Path(tempfile.mkdtemp(prefix="station-folder-test-", dir="/srv" if os.access("/srv", os.W_OK) else None))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def write_folder(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def folder_task(root: Path, executor: LocalExecutor):
    """A FolderTask and an executor that hides its folder, as a station builds them."""
    task = create_task("folder", {"path": str(root)})
    return task, LocalExecutor(hide=task.private_paths()) if executor.mode != "process" else executor


# -- reading a folder ----------------------------------------------------------------------------
def test_a_folder_without_a_scorer_says_what_a_task_folder_holds(tmp_path: Path) -> None:
    (tmp_path / "task.md").write_text("# T\n")
    with pytest.raises(TaskFolderError, match="neither evaluate.py .* nor evaluator.py"):
        read_folder(tmp_path)
    with pytest.raises(TaskFolderError, match="does not exist"):
        read_folder(tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("task_yaml", "words"),
    [
        ("titel: x\n", "titel: unknown key"),
        ("resources: {timeout_s: -1}\n", "resources.timeout_s"),
        ("submission: {mode: shell}\n", "submission.mode"),
        ("submission: {filename: ../x.py}\n", "plain Python file name"),
        ("metrics: {loss: '%%'}\n", "not a number format"),
        ("title: [unclosed\n", "not valid YAML"),
        ("- a list\n", "must be a mapping"),
    ],
)
def test_a_bad_task_yaml_names_the_key_and_the_problem(place: Path, task_yaml: str, words: str) -> None:
    tmp_path = place
    write_folder(tmp_path, {"task.md": "# T\n", "evaluate.py": "def evaluate(v, c):\n    return 1.0\n"})
    (tmp_path / "task.yaml").write_text(task_yaml)
    with pytest.raises(TaskFolderError, match="task.yaml") as err:
        read_folder(tmp_path)
    assert words in str(err.value)


def test_a_native_folder_needs_its_statement(place: Path) -> None:
    tmp_path = place
    write_folder(tmp_path, {"task.yaml": "title: T\n", "evaluate.py": "def evaluate(v, c):\n    return 1.0\n"})
    with pytest.raises(TaskFolderError, match="has no task.md"):
        read_folder(tmp_path)


def test_baseline_headers_give_title_tags_and_abstract(place: Path) -> None:
    tmp_path = place
    write_folder(
        tmp_path,
        {
            "task.md": "# Squares\n",
            "task.yaml": "{}\n",
            "evaluate.py": "def evaluate(v, c):\n    return 1.0\n",
            "baselines/b_plain.py": "def main():\n    return 1\n",
            "baselines/a_described.py": "# title: Greedy start\n# tags: greedy, simple\n"
            "# abstract: Picks the best move\n#   at each step.\nimport math\n",
        },
    )
    folder = read_folder(tmp_path)
    assert folder.settings.title == "Squares"  # from task.md's first heading
    first, second = folder.baselines
    assert (first.title, first.tags, first.abstract) == ("Greedy start", ("greedy", "simple"), "Picks the best move at each step.")
    assert second.title == "b plain" and second.tags == ("baseline",)


def test_the_config_takes_a_folder_relative_to_the_config_file(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "circle_packing_n26", tmp_path / "tasks" / "cp")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "station.yaml").write_text("research:\n  tasks:\n    - folder: ../tasks/cp\n")
    config = load_config(tmp_path / "conf" / "station.yaml")
    assert config.section(ResearchConfig).tasks[0].folder == str((tmp_path / "tasks" / "cp").resolve())
    for bad, words in [
        ({"folder": "x", "evaluator": "circle_packing"}, "either evaluator"),
        ({}, "either evaluator"),
        ({"folder": "x", "params": {"n": 3}}, "takes no params"),
    ]:
        with pytest.raises(ConfigError, match=words):
            parse_config({"research": {"tasks": [bad]}}, "test")


def test_a_folder_the_sandbox_cannot_read_is_refused_with_the_fix(place: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("runs read the folder as this user: nothing to refuse")
    root = write_folder(place, {"task.md": "# T\n", "evaluate.py": "def evaluate(r, c):\n    return 1.0\n",
                                "private/labels.csv": "1,2\n"})
    os.chmod(root / "private", 0o700)
    with pytest.raises(TaskFolderError, match=r"cannot read parts of .*: private\. .*chmod -R o\+rX"):
        read_folder(root)


# -- the same scores as the built-in circle packing ------------------------------------------------
def best_packing_program() -> str:
    data = json.loads((ROOT / "data" / "circle_packing" / "best_n26.json").read_text())  # see data/README.md
    return (
        "import numpy as np\n\n\ndef construct_packing():\n"
        f"    centers = np.array({data['centers']}, dtype=float)\n"
        f"    radii = np.array({data['radii']}, dtype=float)\n"
        "    return centers, radii\n"
    )


def comparison_programs() -> dict[str, str]:
    from evaluators.programs import program

    builtin = CirclePacking(26)
    best = best_packing_program()
    overlapping = best.replace("    return centers, radii", "    radii[np.argmax(radii)] += 1e-12\n    return centers, radii")
    # 26 circles touching exactly in float64 (tests/test_circle_packing.py explains the dyadic layout)
    tangent = (
        "import numpy as np\n\n\ndef construct_packing():\n    R = 3 / 32\n    k = R * (1 + 2 * np.arange(5))\n"
        "    centers = np.array([(x, y) for y in k for x in k] + [(31 / 32, 1 / 32)])\n"
        "    radii = np.array([R] * 25 + [1 / 32])\n    return centers, radii\n"
    )
    one_ulp = tangent.replace("    return centers, radii", "    centers[0, 0] = np.nextafter(centers[0, 0], 0.0)\n    return centers, radii")
    return {
        "exactly tangent circles": tangent,
        "exactly tangent, one centre one ulp over the side": one_ulp,
        "the task's example (grid)": builtin.example_code(),
        "ring baseline": builtin.baselines()[0].code,
        "hexagonal rows": program("hex", 26),
        "best known packing": best,
        "best packing, largest radius + 1e-12": overlapping,
    }


def test_the_example_folder_scores_exactly_as_the_built_in_task(executor) -> None:
    builtin = CirclePacking(26)
    folder, folder_executor = folder_task(EXAMPLES / "circle_packing_n26", executor)
    rows = {}
    for name, code in comparison_programs().items():
        ours = evaluate(builtin, code, executor)
        theirs = evaluate(folder, code, folder_executor)
        rows[name] = (ours["score"], theirs["score"])
        assert ours["success"] == theirs["success"], (name, ours, theirs)
        assert ours["score"] == theirs["score"], name  # bit for bit, not approximately
    assert rows["best known packing"][0] > 2.6359
    assert rows["best packing, largest radius + 1e-12"] == (None, None)
    assert rows["exactly tangent circles"] == (2.375, 2.375)
    assert rows["exactly tangent, one centre one ulp over the side"] == (None, None)
    print("\n".join(f"{name}: {a!r} / {b!r}" for name, (a, b) in rows.items()))


# -- hostile submissions ------------------------------------------------------------------------
HOSTILE_TASK = {
    "task.md": "# Guess the secret\nReturn the secret.\n",
    "task.yaml": "submission: {entry: main}\nscorer: {timeout_s: 30}\n",
    "private/secret.txt": SECRET,
    "data/public.txt": "public data",
    "evaluate.py": """
        import json

        def evaluate(returned, context):
            secret = (context["private_dir"] / "secret.txt").read_text()
            outputs = context["outputs_dir"]
            answer = outputs / "answer.txt"
            shown = answer.read_text() if answer.is_file() else ""
            reached = secret in json.dumps(returned, default=str) or secret in shown
            return {
                "score": 1.0 if reached else 0.0,
                "metrics": {
                    "answer_file": float(answer.exists()),
                    "late_file": float((outputs / "late.txt").exists()),
                    "files_seen": float(len(list(outputs.rglob("*")))),
                },
                "details": json.dumps(returned, default=str),
            }
    """,
}


def hostile_submission(folder: Path) -> str:
    return textwrap.dedent(f"""
        import os, subprocess, sys, time

        FOLDER = {str(folder)!r}

        def attempt(what):
            try:
                return what()
            except Exception as err:
                return type(err).__name__

        def main():
            found = {{}}
            found["private"] = attempt(lambda: open(FOLDER + "/private/secret.txt").read())
            found["listing"] = attempt(lambda: os.listdir(FOLDER))
            found["scorer_source"] = attempt(lambda: open(FOLDER + "/evaluate.py").read())
            sys.path.insert(0, FOLDER)
            found["import_scorer"] = attempt(lambda: __import__("evaluate").__file__)
            found["data"] = attempt(lambda: open("data/public.txt").read())
            found["task_mount"] = attempt(lambda: os.listdir("task"))
            # links the scorer might follow into its own private files
            os.symlink(FOLDER + "/private/secret.txt", "outputs/answer.txt")
            os.symlink("../task/private", "outputs/private")
            # a process that writes into the outputs once this run has ended
            subprocess.Popen([sys.executable, "-c",
                "import os, time\\n"
                "parent = os.getppid()\\n"
                "while os.getppid() == parent: time.sleep(0.02)\\n"
                "for _ in range(200):\\n"
                "    open('outputs/late.txt', 'w').write('late')\\n"
                "    time.sleep(0.05)\\n"], start_new_session=True)
            return found
    """)


def test_a_hostile_submission_reaches_neither_the_private_data_nor_the_scorer(executor, place: Path) -> None:
    if executor.mode == "process":
        pytest.skip("the sandbox runs without namespaces here: nothing can be hidden")
    root = write_folder(place, HOSTILE_TASK)
    task, folder_executor = folder_task(root, executor)
    result = evaluate(task, hostile_submission(root), folder_executor)
    assert result["success"], result
    found = json.loads(result["details"])
    assert SECRET not in json.dumps(found)
    assert found["private"] == "FileNotFoundError" and found["listing"] == "FileNotFoundError"  # not in a run at all
    assert found["scorer_source"] == "FileNotFoundError" and found["import_scorer"] == "ModuleNotFoundError"
    assert found["data"] == "public data"  # data/ is the one part a submission sees
    assert found["task_mount"] == "FileNotFoundError"
    assert result["score"] == 0.0
    assert result["metrics"] == {"answer_file": 0.0, "late_file": 0.0, "files_seen": 0.0}


def test_outputs_files_are_handed_over_as_regular_files_only(executor, place: Path) -> None:
    files = dict(HOSTILE_TASK)
    files["task.yaml"] = "submission: {mode: command, entry: python submission.py}\n"
    root = write_folder(place, files)
    task, folder_executor = folder_task(root, executor)
    code = "import os\nos.makedirs('outputs/deep/er')\nopen('outputs/deep/er/x.txt', 'w').write('x')\n"
    code += "open('outputs/answer.txt', 'w').write('my guess')\n"
    result = evaluate(task, code, folder_executor)
    assert result["success"], result
    assert result["metrics"]["answer_file"] == 1.0 and result["metrics"]["files_seen"] == 4.0  # 2 dirs, 2 files
    assert json.loads(result["details"]).endswith("/outputs")  # a command's scorer is given the outputs dir


# -- broken scorers --------------------------------------------------------------------------------
BROKEN_SCORERS = {
    "crash": "def evaluate(returned, context):\n    return 1 / 0\n",
    "hang": "import time\n\ndef evaluate(returned, context):\n    time.sleep(3600)\n",
    "nan": "def evaluate(returned, context):\n    return {'score': float('nan')}\n",
    "no score": "def evaluate(returned, context):\n    return {'metrics': {'a': 1.0}}\n",
    "import error": "import not_a_module_anywhere\n\ndef evaluate(returned, context):\n    return 1.0\n",
}


@pytest.mark.parametrize("kind", list(BROKEN_SCORERS))
def test_a_broken_scorer_is_the_task_s_failure_not_the_submission_s(executor, place: Path, kind: str) -> None:
    root = write_folder(place, {"task.md": "# T\n", "task.yaml": "scorer: {timeout_s: 2}\n"})
    (root / "evaluate.py").write_text(BROKEN_SCORERS[kind])
    task, folder_executor = folder_task(root, executor)
    result = evaluate(task, "def main():\n    print('the submission ran')\n    return 1\n", folder_executor)
    assert result["status"] == "scorer_error" and not result["success"] and result["score"] is None
    assert result["error"].startswith("the task's scorer")
    assert "the submission ran" in result["stdout"]  # the submission's own logs are kept
    words = {"crash": "ZeroDivisionError", "hang": "timed out", "nan": "nan", "no score": "None",
             "import error": "not_a_module_anywhere"}[kind]
    assert words in result["error"]


def test_a_scorer_rejects_a_submission_with_value_error(executor, place: Path) -> None:
    root = write_folder(place, {
        "task.md": "# T\n", "task.yaml": "{}\n",
        "evaluate.py": "def evaluate(returned, context):\n    if returned != 42:\n"
                       "        raise ValueError(f'expected 42, got {returned!r}')\n    return 42.0\n",
    })
    task, folder_executor = folder_task(root, executor)
    wrong = evaluate(task, "def main():\n    return 41\n", folder_executor)
    assert wrong["status"] == "invalid" and wrong["details"] == "Rejected by the task's scorer: expected 42, got 41"
    right = evaluate(task, "def main():\n    return 42\n", folder_executor)
    assert right["success"] and right["score"] == 42.0


def test_lower_is_better_is_shown_negated_with_the_raw_value_as_a_metric(executor, place: Path) -> None:
    root = write_folder(place, {
        "task.md": "# T\n", "task.yaml": "higher_is_better: false\nscore_name: loss\n",
        "evaluate.py": "def evaluate(returned, context):\n    return {'score': float(returned)}\n",
    })
    task, folder_executor = folder_task(root, executor)
    result = evaluate(task, "def main():\n    return 0.25\n", folder_executor)
    assert result["score"] == -0.25 and result["metrics"] == {"loss": 0.25}
    assert "minus the loss" in task.spec()


def test_a_scorer_failure_raises_scorer_failure_from_execute(executor, place: Path) -> None:
    root = write_folder(place, {"task.md": "# T\n", "evaluate.py": "def evaluate(r, c):\n    raise KeyError('x')\n"})
    task, folder_executor = folder_task(root, executor)
    with pytest.raises(ScorerFailure, match="KeyError"):
        task.execute(folder_executor, "def main():\n    return 1\n", mounts=[], label="t")


# -- the OpenEvolve format ---------------------------------------------------------------------------
def test_an_openevolve_folder_runs_unchanged(executor) -> None:
    task, folder_executor = folder_task(EXAMPLES / "openevolve_function_minimization", executor)
    assert task.folder.format == "openevolve" and task.folder.cascade.thresholds == (0.5,)
    assert "global minimum" in task.spec() and "combined_score" in task.spec()
    (initial,) = task.baselines()
    assert "EVOLVE-BLOCK-START" in initial.code
    exact = initial.code.replace("    return search_algorithm()", "    return -1.70408284, 0.67750781, evaluate_function(-1.70408284, 0.67750781)")
    result = evaluate(task, exact, folder_executor)
    assert result["success"], result
    assert math.isclose(result["score"], 1.0, abs_tol=1e-6)
    assert set(result["metrics"]) == {"value_score", "distance_score", "reliability_score", "combined_score"}
    # far from the minimum: stage 1 scores below the threshold, so stage 2 never runs
    far = initial.code.replace("    return search_algorithm()", "    return 4.9, 4.9, evaluate_function(4.9, 4.9)")
    low = evaluate(task, far, folder_executor)
    assert low["success"] and low["score"] < 0.5


def test_an_openevolve_program_that_crashes_is_the_program_s_crash(executor) -> None:
    task, folder_executor = folder_task(EXAMPLES / "openevolve_function_minimization", executor)
    lying = "import numpy as np\ndef evaluate_function(x, y):\n    return 0.0\ndef run_search():\n    return 0, 0, -5.0\n"
    rejected = evaluate(task, lying, folder_executor)
    assert rejected["status"] == "invalid" and "reported -5.0" in rejected["details"]
    # an evaluator that lets the program's exception through: the program crashed (the debugger may help)
    root = Path(tempfile.mkdtemp())
    os.chmod(root, 0o755)
    try:
        write_folder(root, {
            "initial_program.py": "def run():\n    return 1\n",
            "evaluator.py": "import importlib.util\n\ndef evaluate(path):\n"
                            "    spec = importlib.util.spec_from_file_location('p', path)\n"
                            "    m = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(m)\n"
                            "    return {'combined_score': m.run()}\n",
        })
        task, folder_executor = folder_task(root, executor)
        crashed = evaluate(task, "def run():\n    return 1 / 0\n", folder_executor)
        assert crashed["status"] == "error" and "ZeroDivisionError" in crashed["error"]
        assert "program.py" in crashed["traceback"]
    finally:
        shutil.rmtree(root)


def test_the_readme_shows_the_shipped_minimal_folder_whole() -> None:
    import re

    readme = (ROOT / "README.md").read_text()
    shown = dict(re.findall(r"^`tasks/line_fit/([^`]+)`:\n```\w*\n(.*?)```$", readme, re.MULTILINE | re.DOTALL))
    shipped = {str(p.relative_to(EXAMPLES / "line_fit")): p.read_text()
               for p in sorted((EXAMPLES / "line_fit").rglob("*")) if p.is_file() and "__pycache__" not in p.parts}
    assert shown == shipped


# -- `station task check` ----------------------------------------------------------------------------
def test_task_check_prints_baseline_scores_and_what_agents_read(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "station.apps.cli", "task", "check", "examples/tasks/circle_packing_n26"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Ring Pattern Baseline: 1.95" in done.stderr
    assert done.stdout.startswith("# Circle Packing in a Unit Square (n = 26)")
    assert "1200 s of wall-clock time" in done.stdout
    for example in ("line_fit", "openevolve_function_minimization"):
        done = subprocess.run([sys.executable, "-m", "station.apps.cli", "task", "check", f"examples/tasks/{example}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "baselines:" in done.stderr, done.stderr
        if example == "line_fit":
            assert "Mean of the training y: -36.8031" in done.stderr
    broken = tmp_path / "broken"
    write_folder(broken, {"task.md": "# T\n", "task.yaml": "resources: {cpu: 2}\n", "evaluate.py": "x = 1\n"})
    done = subprocess.run([sys.executable, "-m", "station.apps.cli", "task", "check", str(broken)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "resources.cpu: unknown key" in done.stderr


# -- in a station, as a user runs it -------------------------------------------------------------------
def station_cli(*args: str, cwd: Path, timeout: float = 900):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "station.apps.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_scripted_station_researches_a_folder_task_named_relative_to_its_config(tmp_path: Path) -> None:
    from helpers import read

    shutil.copytree(EXAMPLES / "circle_packing_n26", tmp_path / "project" / "tasks" / "cp")
    settings = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    settings["research"]["tasks"] = [{"folder": "tasks/cp", "timeout_s": 120}]
    (tmp_path / "project" / "station.yaml").write_text(yaml.safe_dump(settings))
    (tmp_path / "elsewhere").mkdir()
    # by tick 6: the baseline and three agents' square grids (submitted at tick 5), all scored; later
    # ticks add hexagonal rows and optimised packings, more evaluations on the same path
    ran = station_cli("run", "../project/station.yaml", "--dir", "st", "--until-tick", "6", cwd=tmp_path / "elsewhere")
    assert ran.returncode == 0, ran.stderr[-3000:]
    directory = tmp_path / "elsewhere" / "st"
    rows = read(directory, "SELECT author, status, score, title FROM evaluations ORDER BY id")
    system = [r for r in rows if r[0] == "System"]
    assert [(r[3], r[1]) for r in system] == [("Ring Pattern Baseline", "finished")]
    assert round(system[0][2], 5) == 1.95296
    scored = [r for r in rows if r[0] != "System" and r[1] == "finished"]
    assert len(scored) >= 2 and all(r[2] > 0 for r in scored), rows
    status = station_cli("status", "st", cwd=tmp_path / "elsewhere")
    assert f"{len([r for r in rows if r[1] == 'finished'])} finished" in status.stdout
    assert "best on task 1:" in status.stdout
    # agents read the statement with the contract the station adds
    assert read(directory, "SELECT COUNT(*) FROM turns WHERE prompt LIKE '%How submissions run and are scored%'")[0][0]


def test_a_crashing_scorer_in_a_station_alerts_the_operator_and_charges_nobody(tmp_path: Path) -> None:
    from helpers import act, read, reply, yaml_block

    write_folder(tmp_path / "task", {
        "task.md": "# Broken scorer\nReturn a number.\n",
        "task.yaml": "scorer: {timeout_s: 30}\n",
        "evaluate.py": "def evaluate(returned, context):\n    return {'score': 1.0 / (returned - returned)}\n",
    })
    os.chmod(tmp_path / "task", 0o755)
    body = "\n".join(f"{k}: {json.dumps(v)}" for k, v in {
        "title": "A number", "tags": "numbers", "abstract": "Returns 3.",
        "content": "def main():\n    print('submission ran')\n    return 3\n"}.items())
    replies = [reply(act("goto research"), act("submit 1"), yaml_block(body))] + ["Waiting."] * 10
    (tmp_path / "agent.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in replies))
    settings = {"name": "broken-scorer", "seed": 5, "engine": {"backup_every_ticks": 0},
                "agents": [{"count": 1, "kind": "recursive", "lineage": "Spiro",
                            "model": {"provider": "replay", "name": "replay-broken", "replay_file": "agent.jsonl"}}],
                "lifecycle": {"maturity_ticks": 0}, "notifications": {"tips_every_ticks": 0},
                "research": {"tasks": [{"folder": "task"}], "executor": {"max_parallel": 1}, "wait_ticks": 1}}
    (tmp_path / "station.yaml").write_text(yaml.safe_dump(settings))
    ran = station_cli("run", "station.yaml", "--dir", "st", "--until-tick", "4", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    directory = tmp_path / "st"
    assert read(directory, "SELECT status, score FROM evaluations") == [("scorer_failed", None)]
    assert read(directory, "SELECT MAX(tick) FROM turns") == [(4,)]  # the station ran on
    (message,) = [m[0] for m in read(directory, "SELECT text FROM messages WHERE kind='evaluation'")]
    assert "could not be scored" in message and "not of your code" in message and "submission ran" in message
    alerts = [json.loads(p[0]) for p in read(directory, "SELECT payload FROM events WHERE kind='operator_alert'")]
    assert len(alerts) == 1 and alerts[0]["problem"] == "the task's scorer failed"
    assert "ZeroDivisionError" in alerts[0]["error"]
    status = station_cli("status", "st", cwd=tmp_path)
    assert "1 not scored (the task's scorer failed)" in status.stdout
    assert "the scorer of task 1 failed on #1: the task's scorer failed: ZeroDivisionError" in status.stdout
    runs = read(directory, "SELECT COUNT(*) FROM evaluation_versions")
    assert runs == [(1,)]  # the debugger did not try to "fix" code that was never wrong
    from helpers import web_client

    from station.apps.web.app import create_app

    page = web_client(create_app(directory)).get("/").text
    assert "The scorer of task 1 failed on" in page and "ZeroDivisionError" in page and "not charged" in page
