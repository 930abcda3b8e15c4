#!/usr/bin/env python3
"""The shipped baselines of the simulated tasks on the old data and on keyed data (issue 50).

The simulated datasets (forecasting, RNA, Sokoban) used to be drawn from the public seed; they are
now drawn from seeds keyed by the data root's secret (evaluators/secret.py), so every station draws
its own. This scores each task's shipped baselines (evaluators/<task>/baselines, in the real sandbox,
CPU, small sizes and budgets counted in epochs or environment steps) and each task's reference
predictors (the bars its statement quotes) on three draws of the same parameters, seed 0: the old
unkeyed draw, and the keyed draws of two fixed keys, A and B. One sees whether the baselines'
ranking and spread hold when the data are drawn anew.

    scripts/bench_keyed_baselines.py [--tasks forecasting,rna_modelling,sokoban] [--scale N] [--root DIR] [--json FILE]

Every dataset is built under --root (a temporary folder by default). Higher is better in every
column: forecasting scores are -MAE, RNA the mean of the seven metrics (each also shown), Sokoban %
of levels solved. `--scale N` multiplies the training budgets (epochs, environment steps) by N: at
scale 1 (minutes in all) the baselines are barely trained.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from evaluators.base import create_task  # noqa: E402
from evaluators.forecasting.dataset import ForecastDataset  # noqa: E402
from evaluators.rna.beacon import METRIC_KEYS  # noqa: E402
from evaluators.rna.dataset import RnaData  # noqa: E402
from evaluators.secret import fingerprint, read_key, use_key  # noqa: E402
from evaluators.sokoban.dataset import LevelSet  # noqa: E402
from rooms.research.standalone import evaluate  # noqa: E402
from station.core.config import ExecutorConfig  # noqa: E402
from station.executors import create_executor  # noqa: E402

# small sizes and budgets counted in epochs or steps, as the tests use them: minutes on a laptop's CPU
SETTINGS: dict[str, dict[str, Any]] = {
    "forecasting": {"size": "small", "trials": 2, "max_epochs": 3, "patience": 2, "grace_s": 240},
    "rna_modelling": {"size": "small", "max_epochs": 3, "patience": 2, "grace_s": 240},
    "sokoban": {
        "grid": 5,
        "boxes": 1,
        "train_levels": 300,
        "eval_levels": 200,
        "max_steps": 30,
        "n_envs": 16,
        "unroll": 8,
        "env_steps": 20_000,
        "trials": 2,
        "grace_s": 240,
    },
}
ENV = {"forecasting": "STATION_FORECAST_DATA", "rna_modelling": "STATION_RNA_DATA", "sokoban": "STATION_SOKOBAN_DATA"}
DRAWS = ("old (seed 0, unkeyed)", "key A", "key B")


def unkeyed(task: Any, root: Path) -> None:
    """Give `task` the old draw of its parameters: the public seed, given to the simulator directly."""
    params = task.kind
    if params == "forecasting":
        task.dataset = ForecastDataset(root, size=task.dataset.size, seed=task.dataset.seed, unkeyed=True)
    elif params == "rna_modelling":
        task.data = RnaData(root, size=task.data.size, seed=task.data.seed, unkeyed=True)
    else:
        old = task.levels
        task.levels = LevelSet(
            root, grid=old.grid, boxes=old.boxes, train=old.n_train, eval=old.n_eval, seed=old.seed, unkeyed=True
        )


def references(task: Any) -> dict[str, float]:
    """The task's own bars, on its data (higher is better)."""
    if task.kind == "forecasting":
        return {f"{name} (reference)": -entry["mae"] for name, entry in task.dataset.references().items()}
    if task.kind == "rna_modelling":
        return {"constant predictor (reference)": float(np.mean(list(task.data.references().values())))}
    return {"random policy (reference)": 100.0 * task.levels.random_solve_rate(task.max_steps)}


def scaled(kind: str, scale: int) -> dict[str, Any]:
    """The task's bench settings with its training budget (epochs or environment steps) times `scale`."""
    settings = dict(SETTINGS[kind])
    budget = "env_steps" if kind == "sokoban" else "max_epochs"
    settings[budget] *= scale
    settings["trial_budget_s"] = 600.0 * scale  # the budget that counts is epochs or steps; time only guards
    return settings


def score_draw(kind: str, root: Path, old: bool, scale: int, say: Callable[[str], None]) -> dict[str, float]:
    os.environ[ENV[kind]] = str(root)
    task = create_task(kind, scaled(kind, scale))
    if old:
        unkeyed(task, root)
    scores = references(task)
    executor = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())
    try:
        for baseline in task.baselines():
            began = time.monotonic()
            result = evaluate(task, baseline.code, executor)
            scores[baseline.title] = result["score"] if result.get("success") else float("nan")
            if kind == "rna_modelling":  # its score is a mean of seven metrics on 80 sequences each: show them
                scores |= {f"{baseline.title}: {key}": result["metrics"].get(key, float("nan")) for key in METRIC_KEYS}
            say(f"  {baseline.title}: {scores[baseline.title]!r} ({time.monotonic() - began:.0f} s)")
    finally:
        executor.close()
    return scores


def bench_keys(root: Path) -> dict[str, Path]:
    """Two fixed keys (so the table can be made again), as key files a user would share."""
    files = {}
    for name in ("A", "B"):
        files[name] = root / f"key-{name}"
        files[name].write_text(hashlib.sha256(f"bench_keyed_baselines key {name}".encode()).hexdigest() + "\n")
    return files


def table(rows: dict[tuple[str, str], list[float]]) -> str:
    lines = ["| task | baseline | " + " | ".join(DRAWS) + " |", "|---|---|" + "---:|" * len(DRAWS)]
    for (kind, name), values in rows.items():
        lines.append(f"| {kind} | {name} | " + " | ".join(f"{v:.4f}" for v in values) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(SETTINGS), help="comma-separated, of " + ", ".join(SETTINGS))
    parser.add_argument("--scale", type=int, default=1, help="multiply the training budgets by this")
    parser.add_argument("--root", type=Path, help="where the datasets are built (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the scores here")
    args = parser.parse_args()
    kinds = [k for k in args.tasks.split(",") if k]
    unknown = [k for k in kinds if k not in SETTINGS]
    if unknown:
        raise SystemExit(f"error: unknown task {unknown[0]!r}; choose from {', '.join(SETTINGS)}")
    base = args.root or Path(tempfile.mkdtemp(prefix="bench-keyed-"))
    keys = bench_keys(base)
    say = lambda line: print(line, file=sys.stderr, flush=True)
    rows: dict[tuple[str, str], list[float]] = {}
    for kind in kinds:
        for column, draw in enumerate(DRAWS):
            root = base / kind / ("old" if column == 0 else draw[-1])
            if column:
                use_key(root, keys[draw[-1]])
            say(f"{kind}, {draw}" + (f" (key {fingerprint(read_key(keys[draw[-1]]))})" if column else "") + " ...")
            for name, value in score_draw(kind, root, column == 0, args.scale, say).items():
                rows.setdefault((kind, name), [float("nan")] * len(DRAWS))[column] = value
    print(table(rows))
    if args.json:
        args.json.write_text(
            json.dumps([{"task": k, "baseline": n, **dict(zip(DRAWS, v))} for (k, n), v in rows.items()])
        )


if __name__ == "__main__":
    main()
