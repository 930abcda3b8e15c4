"""The README's quick start, run the way a newcomer runs it: from the repository root, with the
relative directory the README names, through the installed `station` command, looking at what a
newcomer looks at (`station status`: were the evaluations scored?).

Every other test builds its station in an absolute temporary path; this one would have caught a
demo whose every evaluation failed because its directory was relative.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
STATION = ROOT / ".venv" / "bin" / "station"
TICKS = 20  # enough for evaluations (the first optimised ones at 14), papers (at 10) and a lineage; the
# README's own run is 100 ticks
CITED_EVALUATION = re.compile(r"\bevaluation\s+#?(\d+)", re.IGNORECASE)


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def shell_lines() -> list[str]:
    """Every command of the README's shell blocks, without its trailing comment."""
    lines = []
    for block in code_blocks("sh"):
        for line in block.splitlines():
            command = line.split("  #")[0].strip()
            if command and not command.startswith("#"):
                lines.append(command)
    return lines


def run(command: list[str] | str, timeout: int = 600) -> subprocess.CompletedProcess:
    args = shlex.split(command) if isinstance(command, str) else command
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def demo_dir() -> str:
    """`make run` as the README says, with fewer ticks and a directory of its own (relative, like runs/demo)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    relative = f"runs/test-front-door-{uuid.uuid4().hex[:8]}"
    try:
        made = run(["make", "run", f"DIR={relative}", f"TICKS={TICKS}"])
        assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-4000:]
        yield relative
    finally:
        shutil.rmtree(ROOT / relative, ignore_errors=True)


def test_the_quick_start_scores_evaluations_and_says_so(demo_dir: str) -> None:
    shown = run([str(STATION), "status", demo_dir, "--json"])
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    submissions = status["counts"]["submissions"]
    assert submissions["failed"] == 0 and submissions["timed_out"] == 0, submissions
    assert submissions["finished"] > 0, submissions
    assert status["state"] == "stopped" and submissions["running"] == 0

    db = sqlite3.connect(ROOT / demo_dir / "station.db")
    baseline = db.execute("SELECT MAX(score) FROM evaluations WHERE author = 'System' AND status = 'finished'").fetchone()[0]
    best = status["counts"]["research_best"]["1"]
    assert baseline is not None and best["score"] > baseline, (best, baseline)
    assert best["author"] != "System"

    text = run([str(STATION), "status", demo_dir]).stdout
    assert f"{submissions['finished']} finished" in text and "0 failed" in text


def test_papers_cite_only_evaluations_that_exist(demo_dir: str) -> None:
    db = sqlite3.connect(ROOT / demo_dir / "station.db")
    existing = {row[0] for row in db.execute("SELECT id FROM evaluations")}
    papers = [row[0] for row in db.execute(
        "SELECT m.content FROM capsule_messages m JOIN capsules c ON c.id = m.capsule "
        "WHERE c.room = 'archive' AND m.k = 1")]
    cited = {int(n) for paper in papers for n in CITED_EVALUATION.findall(paper)}
    assert cited <= existing, f"papers cite evaluations that never existed: {sorted(cited - existing)}"


def test_the_read_it_commands_work_as_written(demo_dir: str) -> None:
    """The three commands after "Read it", with the README's runs/demo replaced by this run's directory."""
    quick_start = code_blocks("sh")[1]
    commands = [line.split("  #")[0].strip() for line in quick_start.splitlines() if line.strip()]
    assert len(commands) == 3 and all("runs/demo" in c for c in commands), commands
    for command in commands:
        done = run(command.replace("runs/demo", demo_dir))
        assert done.returncode == 0, (command, done.stderr[-2000:])
        assert done.stdout.strip(), command


def test_every_readme_command_parses_and_every_named_config_is_valid() -> None:
    subcommands = set()
    for line in shell_lines():
        words = shlex.split(line)
        if words[0] in ("station", ".venv/bin/station") and len(words) > 1:
            subcommands.add(words[1])
    assert {"status", "agents", "dialogue", "serve", "export", "evaluate"} <= subcommands
    for sub in sorted(subcommands):
        shown = run([str(STATION), sub, "--help"], timeout=60)
        assert shown.returncode == 0, (sub, shown.stderr)

    from station.core.config import load_config

    named = set(re.findall(r"configs/[\w.-]+\.ya?ml", README.read_text(encoding="utf-8")))
    named |= set(re.findall(r"configs/[\w.-]+\.ya?ml", (ROOT / "Makefile").read_text(encoding="utf-8")))
    assert "configs/demo.yaml" in named
    for name in sorted(named):
        assert (ROOT / name).is_file(), f"the README names {name}, which is not in the repository"
        load_config(ROOT / name)  # raises with the key's path on a bad value


def test_readme_links_point_at_files_in_the_repository() -> None:
    # what code blocks show is file content (a task folder's own data/...), not a link
    text = re.sub(r"```.*?```", "", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    targets = re.findall(r"\]\(([^)#\s]+)\)", text) + re.findall(r"`((?:\.\./|docs/|data/|configs/)[\w./-]+)`", text)
    for target in targets:
        if target.startswith(("http://", "https://")):
            continue
        path = (ROOT / target).resolve()
        assert path.is_relative_to(ROOT), f"the README points outside the repository: {target}"
        assert path.exists(), f"the README points at {target}, which a clone does not have"


def test_a_checkout_and_interpreter_under_tmp_evaluate_a_submission(tmp_path_factory) -> None:
    """Every sandboxed run has a private /tmp, which must not hide a checkout or a virtual
    environment that lives under /tmp: the interpreter and the code are shown read-only."""
    import sys
    import sysconfig
    import tempfile

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    base = Path(tempfile.mkdtemp(prefix="station-tmp-checkout-", dir="/tmp"))
    try:
        clone = base / "clone"
        cloned = run(["git", "clone", "-q", "--shared", str(ROOT), str(clone)], timeout=120)
        assert cloned.returncode == 0, cloned.stderr
        venv = base / "venv"  # an interpreter under /tmp that uses this environment's packages
        made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
        assert made.returncode == 0, made.stderr
        site = next((venv / "lib").glob("python3*/site-packages"))
        (site / "station-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        submission = base / "grid.py"
        submission.write_text(
            "import numpy as np\n\ndef construct_packing():\n"
            "    k = np.arange(4)\n    c = np.array([(x, y) for y in (k + 0.5) / 4 for x in (k + 0.5) / 4])\n"
            "    return c, np.full(16, 0.125)\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        for target in ("circle_packing:n=16", "examples/tasks/line_fit"):
            code = submission if target.startswith("circle") else clone / "examples/tasks/line_fit/baselines/mean.py"
            done = subprocess.run([str(venv / "bin" / "python"), "-m", "station.apps.cli", "evaluate", target, str(code)],
                                  cwd=clone, capture_output=True, text=True, timeout=300, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "status:    ok" in done.stdout, done.stdout  # `-m station.apps.cli` from the clone runs the clone's code
    finally:
        shutil.rmtree(base, ignore_errors=True)
