#!/usr/bin/env python3
"""The batch-integration task end to end on this machine: each baseline is run in the real
sandbox on the training data, then scored; prints the time of each step and of each metric,
and the raw and normalized metrics with the primary score of every baseline (normalized with the
control methods' bounds on this data; the score under OpenProblems' fixed bounds, the paper's
scale, is shown as well).

The first run generates the dataset and computes the control methods' bounds (cached in
~/.cache/station/scrna, or $STATION_SCRNA_DATA).
Usage: scripts/bench_scrna.py [--size default|small] [--seed 0]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from evaluators.base import create_task  # noqa: E402
from evaluators.scrna.normalisation import openproblems_bounds  # noqa: E402
from evaluators.scrna.task import LABELS, METRICS, normalise  # noqa: E402
from station.core.config import ExecutorConfig  # noqa: E402
from station.executors import create_executor  # noqa: E402

OUT = Console()
ERR = Console(stderr=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="default", choices=("default", "small"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    task = create_task("batch_integration", {"size": args.size, "seed": args.seed, "normalisation": "controls"})
    dataset = task.dataset
    with ERR.status("preparing the dataset (generated on first use) ..."):
        began = time.perf_counter()
        dataset.ensure()
        prepared = time.perf_counter() - began
    with ERR.status("normalization bounds from the control methods (computed once) ..."):
        began = time.perf_counter()
        bounds = dataset.bounds()
        bounded = time.perf_counter() - began
    OUT.print(f"{dataset.name}: {dataset.n_cells:,} cells; data ready in {prepared:.1f} s, bounds in {bounded:.1f} s")
    executor = create_executor(ExecutorConfig(kind="local"), hide=task.private_paths())
    rows, timing_rows = [], []
    try:
        for baseline in task.baselines():
            with ERR.status(f"running {baseline.title} in the sandbox ..."):
                began = time.perf_counter()
                result = executor.run(task.run_spec(baseline.code, mounts=[], label="bench-scrna"))
                ran = time.perf_counter() - began
            if result.status != "ok":
                OUT.print(f"[red]{baseline.title}: {result.status} {result.error}[/]\n{result.stderr[-2000:]}")
                continue
            with ERR.status(f"scoring {baseline.title} ..."):
                timings: dict[str, float] = {}
                began = time.perf_counter()
                raw, problems = dataset.score_arrays(result.value, timings=timings)
                scored = time.perf_counter() - began
            normal = normalise(raw, bounds)
            rows.append((baseline.title, raw, normal, sum(normal.values()) / len(normal), problems))
            timing_rows.append((baseline.title, ran, scored, timings))
    finally:
        executor.close()

    table = Table(title="Metrics on the training data: normalized (raw)")
    table.add_column("metric")
    for title, *_ in rows:
        table.add_column(title, justify="right")
    for metric in METRICS:
        table.add_row(LABELS[metric], *[f"{normal[metric]:.3f} ({raw.get(metric, float('nan')):.4f})"
                                        for _, raw, normal, _, _ in rows])
    table.add_row("[bold]score[/]", *[f"[bold]{score:.4f}[/]" for *_, score, _ in rows])
    paper = [sum(normalise(raw, openproblems_bounds()).values()) / len(METRICS) for _, raw, *_ in rows]
    table.add_row("[bold]score, OpenProblems bounds[/]", *[f"[bold]{score:.4f}[/]" for score in paper])
    OUT.print(table)
    timing = Table(title="Seconds per step")
    timing.add_column("step")
    for title, *_ in timing_rows:
        timing.add_column(title, justify="right")
    timing.add_row("run in the sandbox", *[f"{ran:.1f}" for _, ran, _, _ in timing_rows])
    timing.add_row("scoring, in all", *[f"{scored:.1f}" for _, _, scored, _ in timing_rows])
    for step in sorted({k for *_, t in timing_rows for k in t}):
        timing.add_row(f"  {step}", *[f"{t.get(step, 0.0):.2f}" for *_, t in timing_rows])
    timing.add_row("[bold]whole evaluation[/]", *[f"[bold]{ran + scored:.1f}[/]" for _, ran, scored, _ in timing_rows])
    OUT.print(timing)
    for title, *_, problems in rows:
        for metric, why in problems.items():
            OUT.print(f"{title}: {metric} not computed: {why}")


if __name__ == "__main__":
    main()
