#!/usr/bin/env python3
"""Engine overhead per turn with scripted agents, at 100, 1,000 and 5,000 ticks of history.

For each history size a demo station (5 scripted agents, short lives, so the history holds
many generations) is run to that tick; then the next 250 turns are timed one by one.
"engine" excludes the time spent inside the scripted model itself.  Prints a table.
Usage: scripts/bench_engine.py [--sizes 100 1000 5000] [--turns 250]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from station.config import load_config  # noqa: E402
from station.engine import Engine  # noqa: E402
from station.models.scripted import ScriptedModel  # noqa: E402
from station.world import Station  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--turns", type=int, default=250)
    args = ap.parse_args()

    model_time = [0.0]
    original = ScriptedModel.complete

    def timed(self, *a, **k):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        try:
            return original(self, *a, **k)
        finally:
            model_time[0] += time.perf_counter() - began

    ScriptedModel.complete = timed  # type: ignore[method-assign]
    config = load_config(ROOT / "configs" / "demo.yaml")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sorted(args.sizes):
            station = Station.create(Path(tmp) / f"h{size}", config)
            engine = Engine(station)
            began = time.perf_counter()
            last_report = 0.0
            while station.ctx.tick <= size:
                engine.step()
                if time.perf_counter() - last_report > 0.5:
                    last_report = time.perf_counter()
                    print(f"\rbuilding history: tick {station.ctx.tick}/{size}", end="", file=sys.stderr)
            build = time.perf_counter() - began
            totals, engine_only = [], []
            while len(totals) < args.turns:
                model_time[0] = 0.0
                t0 = time.perf_counter()
                turns_before = station.store.scalar("SELECT COUNT(*) FROM turns")
                engine.step()
                elapsed = time.perf_counter() - t0
                if station.store.scalar("SELECT COUNT(*) FROM turns") > turns_before:  # a real turn
                    totals.append(elapsed * 1000)
                    engine_only.append((elapsed - model_time[0]) * 1000)
            turns = station.store.scalar("SELECT COUNT(*) FROM turns")
            db_mb = (Path(station.dir) / "station.db").stat().st_size / 1e6
            rows.append((size, turns, db_mb, build, statistics.median(engine_only),
                         statistics.quantiles(engine_only, n=10)[-1], statistics.median(totals)))
            station.close()
            print("\r" + " " * 60 + "\r", end="", file=sys.stderr)
    print("| history (ticks) | turns stored | db MB | build s | engine median ms/turn | engine p90 ms | "
          "with scripted model median ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size, turns, db_mb, build, med, p90, total in rows:
        print(f"| {size:,} | {turns:,} | {db_mb:.1f} | {build:.1f} | {med:.2f} | {p90:.2f} | {total:.2f} |")
    base = rows[0][4]
    print(f"\nratio of the largest history's median to the smallest's: {rows[-1][4] / base:.2f}x "
          "(target: within 2x; median target: under 5 ms)")


if __name__ == "__main__":
    main()
