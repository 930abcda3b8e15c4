#!/usr/bin/env python3
"""Time and peak memory of a station's study: load(), each metric family, and writing its files.

Usage: scripts/bench_study.py [DIR] [--cores 2] [--window N] [--no-write]

DIR defaults to /tmp/big, the big station of issue 53's goal (1,000 agents, 10,000 ticks), made with

    .venv/bin/python scripts/make_big_station.py --out /tmp/big

(about a minute and 3 GB of disk). The goal: the whole analysis (load and every metric) in under a minute
on 2 cores, in bounded memory. The process keeps to --cores CPUs (default 2, as the goal's machine), so a
bigger machine does not flatter the numbers.

Each phase's peak memory is the process's resident high-water mark (VmHWM), reset before the phase where
Linux allows it (/proc/self/clear_refs); without the reset a phase's peak is the peak so far.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GOAL_SECONDS = 60.0


def cpu_seconds() -> float:
    """User and system CPU time of this process, every thread together."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_mb() -> float:
    """The resident high-water mark of this process (VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> bool:
    """Start a new high-water mark at the current resident size (False where Linux refuses)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class Phases:
    """Seconds and peak memory of consecutive phases, each closed when the next one starts."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float, float]] = []
        self.name: str | None = None
        self.began = self.cpu = 0.0
        self.resets = True

    def start(self, name: str | None) -> None:
        now, cpu = time.perf_counter(), cpu_seconds()
        if self.name is not None:
            self.rows.append((self.name, now - self.began, cpu - self.cpu, peak_mb()))
            print(row(*self.rows[-1]), flush=True)  # as it ends: a slow phase shows where the time goes
        self.name, self.began, self.cpu = name, now, cpu
        self.resets = reset_peak() and self.resets

    def progress(self, prefix: str) -> object:
        """A study progress callback that opens a phase at each new step."""

        def report(step: str, done: int, total: int) -> None:
            if step != "done" and f"{prefix}{step}" != self.name:
                self.start(f"{prefix}{step}")

        return report


def row(name: str, seconds: float, cpu: float, peak: float) -> str:
    return f"{name:<40} {seconds:>8.1f} {cpu:>8.1f} {peak:>9.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", nargs="?", default="/tmp/big")
    parser.add_argument("--cores", type=int, default=2, help="CPUs the process may use (default 2)")
    parser.add_argument("--window", type=int, help="ticks per window (default: the study's own)")
    parser.add_argument("--no-write", action="store_true", help="leave out writing the files")
    args = parser.parse_args()
    directory = Path(args.dir)
    if not (directory / "station.db").is_file():
        print(f"bench_study: no station at {directory}; make one with scripts/make_big_station.py --out {directory}")
        return 2
    cpus = sorted(os.sched_getaffinity(0))[: args.cores]
    os.sched_setaffinity(0, cpus)
    from station.study import load
    from station.study.output import write_study

    print(f"{'phase':<40} {'seconds':>8} {'CPU s':>8} {'peak MB':>9}", flush=True)
    phases = Phases()
    began = time.perf_counter()
    study = load(directory, window=args.window, progress=phases.progress("load: "))
    metrics = study.metrics(progress=phases.progress("metrics: "))
    phases.start(None)
    analysis = time.perf_counter() - began
    analysis_cpu = sum(cpu for _, _, cpu, _ in phases.rows)
    analysis_peak = max(peak for _, _, _, peak in phases.rows)
    print(row("analysis (load + metrics)", analysis, analysis_cpu, analysis_peak), flush=True)
    if not args.no_write:
        with tempfile.TemporaryDirectory(prefix="bench-study-") as folder:
            phases.start("write (Parquet, CSV, GraphML)")
            write_study(study, Path(folder), progress=None)
            phases.start(None)
    print()
    print(f"study of {directory}: ticks {study.first_tick}-{study.last_tick}, windows of {study.window} ticks")
    sizes = {name: len(df) for name, df in study.tables().items()}
    print("rows: " + ", ".join(f"{name} {n:,}" for name, n in sizes.items()))
    print(f"summary rows {len(metrics['summary'])}; CPUs used: {len(cpus)} ({os.cpu_count()} on the machine)")
    verdict = "met" if analysis < GOAL_SECONDS else "NOT met"
    print(f"goal: analysis under {GOAL_SECONDS:.0f} s on {args.cores} cores, memory bounded: {verdict}")
    if os.getloadavg()[0] > len(cpus):  # other work shared the CPUs: the wall time says more of it than of us
        print(f"(load average {os.getloadavg()[0]:.1f} on {len(cpus)} CPUs: on an idle machine expect about the CPU s)")
    if not phases.resets:
        print("(Linux refused to reset the high-water mark: each peak is the peak so far)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
