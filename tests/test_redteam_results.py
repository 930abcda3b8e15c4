"""Red team: nothing a submission returns can make the station's process grow, and a malformed
result is the submission's failure, not the scorer's.

- A result that refers to one small `.npy` file thousands of times (the loader counted its bytes
  once) became, in the station's own process, a 1 GB packing or embedding: refused now by the
  loader, and the station's peak memory stays flat.
- Batch integration's trusted side did not bound the embedding's width (only the driver inside the
  sandbox did, which a submission can skip).
- Each wrongly typed or missing field of a batch-integration result is a rejection charged to the
  submission, never `scorer_error`.
- Scoring runs in a process of its own with a memory and a time limit: a scorer that exhausts either
  on a submission's result ends that evaluation only, and an honest result beside it scores as before.
- A station that dies while scoring a result does not score it again on every resume.

Results are forged through the real sandbox (the submission writes its own result.json and .npy
files and exits, skipping the harness) where the loader is under test; the others are the values
the loader hands to the scorer. Needs root and unshare for the sandbox ones.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import shared_task_data
from helpers import act, read, reply, yaml_block

from evaluators.base import Verdict, create_task
from evaluators.circle_packing import CirclePacking
from rooms.research.worker import SCORING_DEATH_LIMIT, run_payload
from station.core.config import ExecutorConfig
from station.core.run_types import RunResult
from station.executors import create_executor

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20


# -- the station's peak memory --------------------------------------------------------------------------
def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux)


def peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def grown_mb(make: Any) -> tuple[Any, float]:
    """`make()`'s value and how far the station's (this process's) peak memory rose above its memory before."""
    before = rss_mb()
    reset_peak()
    made = make()
    return made, peak_mb() - before


@pytest.fixture(scope="module")
def executor() -> Iterator[Any]:
    made = create_executor(ExecutorConfig(kind="local"))
    if getattr(made, "mode", None) != "namespaces":
        made.close()
        pytest.skip("the sandbox does not run in namespaces mode here (needs root and unshare)")
    yield made
    made.close()


def forged(array: str, value: Any) -> str:
    """A submission that writes its own result as it is imported (before any driver the task appends
    runs): 0.npy built by `array`, the manifest's `value`; then it exits."""
    return textwrap.dedent(f"""
        import json, os
        import numpy as np

        np.save("../out/0.npy", {array}, allow_pickle=False)
        json.dump({{"status": "ok", "value": {value!r}}}, open("../out/result.json", "w"))
        os._exit(0)
    """)


def evaluate(executor: Any, task: Any, code: str) -> dict[str, Any]:
    """What the evaluation worker does with a submission: its sandboxed run, then run_payload."""
    result = executor.run(task.run_spec(code, mounts=[], label="redteam-results"))
    return run_payload(task, result, executor.name)


# -- one array, referred to thousands of times --------------------------------------------------------
def test_a_packing_that_refers_to_one_array_a_thousand_times_is_refused_and_the_station_stays_flat(executor):
    task = create_task("circle_packing", {"n": 26})
    row = {"npy": 0}  # 1 MB of float64; 1,000 rows of it would be 1 GB in whoever stacks them
    code = forged("np.full(MB // 8, 0.01)".replace("MB", str(MB)), [[row] * 1000, row])
    payload, grown = grown_mb(lambda: evaluate(executor, task, code))
    assert grown < 150, f"the station grew by {grown:.0f} MB"
    assert payload["status"] == "error" and "Result refused" in payload["error"], payload


def test_an_embedding_that_refers_to_one_row_per_cell_is_refused_and_the_station_stays_flat(executor, scrna):
    n = scrna.dataset.n_cells  # 2,000: one 125,000-wide float32 row each would be 1 GB
    code = forged("np.full(125_000, 0.5, dtype=np.float32)", {"dict": {"n_obs": n, "X_emb": [{"npy": 0}] * n}})
    payload, grown = grown_mb(lambda: evaluate(executor, scrna, code))
    assert grown < 150, f"the station grew by {grown:.0f} MB"
    assert payload["status"] == "error" and "Result refused" in payload["error"], payload


def test_circle_packing_counts_a_packing_before_it_builds_it():
    """The task's own bound, whatever the loader let through: its scorer builds nothing from a value
    holding more numbers than n circles need (here, 1,000 references to one 1 MB row)."""
    task = CirclePacking(n=26)
    row = np.full(MB // 8, 0.01)
    verdict, grown = grown_mb(lambda: task.score(RunResult(status="ok", value=[[row] * 1000, row])))
    assert grown < 100, f"the scorer grew by {grown:.0f} MB"
    assert not verdict.success and "centers holds more than 208 numbers" in verdict.details, verdict.details


# -- batch integration: every field checked on the trusted side ----------------------------------------
@pytest.fixture(scope="module")
def scrna(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with shared_task_data(tmp_path_factory, "scrna"):
        task = create_task(
            "batch_integration", {"size": "small", "seed": 0, "memory_mb": 8192, "normalisation": "openproblems"}
        )
        task.dataset.ensure()
        yield task


def graph(n: int, **changed: Any) -> dict[str, Any]:
    """A well-formed kNN graph's parts (each cell its next neighbour), with `changed` parts replaced."""
    parts: dict[str, Any] = {}
    for name in ("connectivities", "distances"):
        parts[f"{name}_data"] = np.ones(n, np.float32)
        parts[f"{name}_indices"] = (np.arange(n, dtype=np.int64) + 1) % n
        parts[f"{name}_indptr"] = np.arange(n + 1, dtype=np.int64)
    return {**parts, **changed}


def emb(n: int, width: int = 8, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(n, width)).astype(dtype)


MALFORMED = {
    "a dict for X_emb": lambda n: {"n_obs": n, "X_emb": {"a": 1}},
    "nested lists for X_emb": lambda n: {"n_obs": n, "X_emb": [[0.0, 1.0]] * n},
    "a 1-d X_emb": lambda n: {"n_obs": n, "X_emb": np.zeros(n, np.float32)},
    "a complex X_emb": lambda n: {"n_obs": n, "X_emb": emb(n).astype(np.complex64)},
    "a bool X_emb": lambda n: {"n_obs": n, "X_emb": emb(n) > 0},
    "an X_emb 6,000 wide": lambda n: {"n_obs": n, "X_emb": np.zeros((n, 6000), np.float32)},
    "an X_emb with too few cells": lambda n: {"n_obs": n, "X_emb": emb(n - 1)},
    "a NaN in X_emb": lambda n: {"n_obs": n, "X_emb": np.where(np.eye(n, 8) > 0, np.nan, 0.5).astype(np.float32)},
    "connectivities without distances": lambda n: {
        "n_obs": n,
        **{k: v for k, v in graph(n).items() if k.startswith("connectivities")},
    },
    "a 0-d indptr": lambda n: graph(n, connectivities_indptr=np.array(0)) | {"n_obs": n},
    "a float indptr": lambda n: graph(n, distances_indptr=np.arange(n + 1, dtype=np.float64)) | {"n_obs": n},
    "indices as a list": lambda n: graph(n, distances_indices=list(range(n))) | {"n_obs": n},
    "data and indices of different lengths": lambda n: (
        graph(n, connectivities_data=np.ones(n - 1, np.float32)) | {"n_obs": n}
    ),
    "an indptr one short": lambda n: graph(n, connectivities_indptr=np.arange(n, dtype=np.int64)) | {"n_obs": n},
    "an index out of range": lambda n: graph(n, distances_indices=np.full(n, n + 5, np.int64)) | {"n_obs": n},
    "a negative weight": lambda n: graph(n, connectivities_data=-np.ones(n, np.float32)) | {"n_obs": n},
    "n_obs as text": lambda n: {"n_obs": str(n), "X_emb": emb(n)},
    "no n_obs": lambda n: {"X_emb": emb(n)},
    "n_obs as an array": lambda n: {"n_obs": np.array([n]), "X_emb": emb(n)},
    "uns_neighbors as an array": lambda n: graph(n, uns_neighbors=np.ones(3)) | {"n_obs": n, "X_emb": emb(n)},
    "test_mode as an array": lambda n: {"test_mode": np.ones(3), "n_obs": n},
    "contract_error as a list": lambda n: {"contract_error": ["no"], "n_obs": n},
    "corrected counts 1-d": lambda n: {"n_obs": n, "X_emb": emb(n), "corrected_counts": np.ones(n, np.float32)},
    "corrected counts' width as a float": lambda n: {
        "n_obs": n,
        "X_emb": emb(n),
        "corrected_counts_n_genes": 3.5,
        "corrected_counts_data": np.ones(1, np.float32),
        "corrected_counts_indices": np.zeros(1, np.int32),
        "corrected_counts_indptr": np.r_[0, np.ones(n, np.int64)],
    },
    "neither an embedding nor a graph": lambda n: {"n_obs": n, "uns_neighbors": True},
}


@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_each_malformed_field_of_a_batch_integration_result_is_charged_to_the_submission(scrna, case):
    value = MALFORMED[case](scrna.dataset.n_cells)
    payload = run_payload(scrna, RunResult(status="ok", value=value), "test")
    assert payload["status"] == "invalid", (case, payload["status"], payload["error"], payload["details"])
    assert payload["details"].startswith("ERROR: ") and "\n" not in payload["details"], payload["details"]


def test_a_forged_dict_for_x_emb_through_the_sandbox_is_the_submissions_failure(executor, scrna):
    value = {"dict": {"n_obs": scrna.dataset.n_cells, "X_emb": {"dict": {"rows": {"npy": 0}}}}}
    payload = evaluate(executor, scrna, forged("np.zeros(3)", value))
    assert payload["status"] == "invalid" and payload["details"] == "ERROR: X_emb must be an array, got dict", payload


# -- a scorer that exhausts its memory or its time -------------------------------------------------------
class GreedyPacking(CirclePacking):
    """Circle packing whose scorer costs what the result asks for: {"allocate_mb": m} or {"spin": True}
    (a scorer whose cost a submission sizes), {"die": True} (its process ends mid-scoring), else a packing."""

    scorer_memory_mb = 768
    scorer_timeout_s = 5.0

    def score(self, result: RunResult) -> Verdict:
        value = result.value
        if isinstance(value, dict) and "allocate_mb" in value:
            np.ones(value["allocate_mb"] * MB // 8).sum()
        if isinstance(value, dict) and value.get("spin"):
            while True:
                pass
        if isinstance(value, dict) and value.get("die"):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().score(result)


HONEST = [[[0.25, 0.5], [0.75, 0.5]], [0.25, 0.25]]


@pytest.mark.parametrize(
    "value, why",
    [
        ({"allocate_mb": 4096}, "ran out of its memory limit of 768 MB"),
        ({"spin": True}, "took longer than its limit of 5 seconds"),
        ({"die": True}, "was killed by SIGKILL"),
    ],
    ids=["memory", "time", "death"],
)
def test_a_scorer_that_exhausts_its_limits_ends_that_evaluation_only(value, why):
    task = GreedyPacking(n=2)
    before = run_payload(task, RunResult(status="ok", value=HONEST), "test")
    (payload, grown) = grown_mb(lambda: run_payload(task, RunResult(status="ok", value=value), "test"))
    assert payload["status"] == "invalid" and why in payload["details"], payload
    assert grown < 100, f"the station grew by {grown:.0f} MB"
    after = run_payload(task, RunResult(status="ok", value=HONEST), "test")
    assert before["status"] == after["status"] == "ok" and before["score"] == after["score"] == 0.5


class KeyLookingPacking(CirclePacking):
    """Circle packing whose scorer reports, as its details, the secrets its process can see."""

    def score(self, result: RunResult) -> Verdict:
        seen = sorted(name for name in os.environ if "KEY" in name or "TOKEN" in name)
        return Verdict(True, 1.0, details=json.dumps(seen))


def test_the_scoring_process_holds_no_api_key_nor_token(monkeypatch):
    """It reads what a submission returned: a bug there must find no key to take."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-redteam")
    monkeypatch.setenv("STATION_WEB_TOKEN", "0123456789abcdef0123")
    payload = run_payload(KeyLookingPacking(n=2), RunResult(status="ok", value=HONEST), "test")
    assert payload["status"] == "ok" and json.loads(payload["details"]) == [], payload["details"]


# -- a station that dies while scoring ---------------------------------------------------------------
class StationKillingPacking(CirclePacking):
    """Circle packing whose scoring kills the station's process (as the kernel's OOM killer would
    when a scorer grew in it): the pid is the station's, given in the environment."""

    def score(self, result: RunResult) -> Verdict:
        os.kill(int(os.environ["REDTEAM_STATION_PID"]), signal.SIGKILL)
        time.sleep(30)
        return super().score(result)


STATION_SCRIPT = """
import os, sys
sys.path[:0] = [{root!r}, {tests!r}]
os.environ["REDTEAM_STATION_PID"] = str(os.getpid())
from evaluators.base import register
from test_redteam_results import StationKillingPacking
register("station_killing_packing")(StationKillingPacking)
from station.apps.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_station_that_dies_while_scoring_does_not_score_that_result_again_on_every_resume(tmp_path):
    code = "def construct_packing():\n    return [[0.25, 0.5], [0.75, 0.5]], [0.25, 0.25]\n"
    body = "\n".join(
        f"{k}: {json.dumps(v)}"
        for k, v in {"title": "Two circles", "tags": "crash", "abstract": "Two equal circles.", "content": code}.items()
    )
    replies = [reply(act("goto research"), act("submit 1"), yaml_block(body))] + ["Waiting."] * 60
    (tmp_path / "agent.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in replies))
    config = {
        "name": "scoring-deaths",
        "seed": 3,
        "agents": [
            {
                "count": 1,
                "kind": "recursive",
                "lineage": "Spiro",
                "model": {"provider": "replay", "name": "replay-spiro", "replay_file": str(tmp_path / "agent.jsonl")},
            }
        ],
        "lifecycle": {"maturity_ticks": 0},
        "notifications": {"tips_every_ticks": 0},
        "engine": {"backup_every_ticks": 0},
        "research": {
            "tasks": [
                {"evaluator": "station_killing_packing", "params": {"n": 2}, "baselines": False, "timeout_s": 30}
            ],
            "executor": {"max_parallel": 1},
            "wait_ticks": 3,
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    script = tmp_path / "run_station.py"
    script.write_text(STATION_SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests")))
    directory = tmp_path / "st"
    first = ["run", str(tmp_path / "config.yaml"), "--dir", str(directory), "--until-tick", "6"]
    deaths, ends = 0, []
    for attempt in range(SCORING_DEATH_LIMIT + 2):
        args = first if attempt == 0 else ["run", "--dir", str(directory), "--until-tick", "6"]
        ran = subprocess.run(
            [sys.executable, str(script), *args], cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        ends.append(ran.returncode)
        if ran.returncode == -signal.SIGKILL:
            deaths += 1
            continue
        assert ran.returncode == 0, ran.stderr[-3000:]
        break
    assert deaths == SCORING_DEATH_LIMIT, ends
    rows = read(directory, "SELECT status, details FROM evaluations")
    assert len(rows) == 1 and rows[0][0] == "failed", rows
    assert f"the station stopped {SCORING_DEATH_LIMIT} times while scoring this result" in rows[0][1], rows


# -- a training run's own words --------------------------------------------------------------------------
SOKOBAN = {
    "grid": 5,
    "boxes": 1,
    "train_levels": 300,
    "eval_levels": 40,
    "max_steps": 30,
    "n_envs": 16,
    "unroll": 8,
    "env_steps": 4000,
    "trials": 1,
    "trial_budget_s": 600,
    "grace_s": 120,
}


@pytest.fixture(scope="module")
def sokoban(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with shared_task_data(tmp_path_factory, "sokoban"):
        task = create_task("sokoban", SOKOBAN)
        task.levels.ensure()
        yield task


def test_what_a_training_run_reports_of_itself_cannot_break_or_swell_the_scorer(sokoban):
    """A trial's `reported` is what the run wrote (it may skip the harness): arrays where numbers
    belong, a megabyte of text. It is shown as the run's claim; it never fails the scorer."""
    idle = np.zeros((len(sokoban.levels.ensure().eval_levels()), sokoban.max_steps), np.int8)
    best = sokoban.measure(0, {"output_0": idle})  # what the station measured of the trial's policy
    reported = {
        "seed": np.arange(3),
        "hparams": {"lr": np.ones(3), "net": object.__name__},
        "device": np.array([1.0, 2.0]),
        "epochs": "x" * (1 << 20),
        "train_curve": np.ones((5, 2)),
        "contract_error": np.ones(2),
        "stop": {"deep": [[[[[[[[1]]]]]]]]},
    }
    trial = {
        "trial": 0,
        "status": "ok",
        "seed": reported["seed"],
        "reported": reported,
        "station": {
            "checkpoints": 1,
            "curve": [best["metric"]],
            "best_checkpoint": 1,
            "best": best,
            "stop": "max-epochs",
            "failure": None,
            "notes": [],
        },
    }
    payload = run_payload(sokoban, RunResult(status="ok", value={"trials": [trial]}), "test")
    assert payload["status"] == "ok" and payload["success"], (payload["status"], payload["error"])
    assert len(payload["details"]) <= 20_100, len(payload["details"])
    json.dumps(payload, allow_nan=False)  # recorded as plain JSON
    for forged in ({"test_mode": np.ones(2)}, {"contract_error": np.ones(2)}, {"contract_error": "no " * 10**6}):
        payload = run_payload(sokoban, RunResult(status="ok", value=forged), "test")
        assert payload["status"] == "invalid" and len(payload["details"]) < 3000, (forged, payload["status"])


class WarmedPacking(CirclePacking):
    """Circle packing whose warm-up says where it ran."""

    def warm_up(self, say: Any) -> None:
        say(f"warmed in {os.getpid()}")


def test_the_scorer_is_warmed_up_in_its_scoring_process_and_that_process_scores():
    from evaluators import scoring_process

    task, said = WarmedPacking(n=2), []
    scoring_process.warm_up(task, said.append)
    (warmed,) = said
    assert warmed != f"warmed in {os.getpid()}", "warmed in the station's own process"
    (kept,) = scoring_process.POOL.idle[task]
    assert warmed == f"warmed in {kept.proc.pid}"
    # an evaluation thread scores with it and ends: the process outlives that thread, kept warm
    scored: list[dict[str, Any]] = []
    thread = threading.Thread(
        target=lambda: scored.append(run_payload(task, RunResult(status="ok", value=HONEST), "t"))
    )
    thread.start()
    thread.join()
    assert scored[0]["score"] == 0.5
    time.sleep(0.5)
    assert scoring_process.POOL.idle[task] == [kept] and kept.alive()
    scoring_process.close([task])
    assert kept.proc.poll() is not None
