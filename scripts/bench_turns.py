#!/usr/bin/env python3
"""Seconds per tick with real SDK clients, sequential versus concurrent turns.

Five agents (two on Gemini, one on the OpenAI Responses API, one on Chat Completions, one on
Claude) talk to the loopback provider server of the tests, which answers every request after
a simulated latency (default 1 s). Each reply is one plain action (a walk between rooms), so
a tick is exactly one model call per agent. After a warm-up tick, N ticks are timed in each
mode. "model wait" is the time the engine spent waiting for answers on its critical path (the
sum of call latencies when sequential, the slowest call of each tick when concurrent); the
rest of the wall time is engine overhead: prompts, SQLite, SDK parsing.

Targets (issue 5): concurrent under 1.5 s per tick, sequential about 5 s.
Usage: scripts/bench_turns.py [--latency 1.0] [--ticks 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the loopback provider server and the remote world

from provider_server import Answer, ProviderServer, Request  # noqa: E402
from remote_world import KEY_ENV, remote_config  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from station.apps.world import Station  # noqa: E402
from station.core.config import parse_config  # noqa: E402
from station.core.engine import Engine, Progress  # noqa: E402

ROOMS = ["misc", "lobby", "common", "public"]
STDERR = Console(stderr=True)


def wanderer(request: Request) -> Answer:
    """One walk per reply, so no turn starts a multi-step exchange (codex, tests)."""
    turn = sum(1 for m in request.messages if m["role"] == "assistant")
    room = ROOMS[(turn + len(request.model)) % len(ROOMS)]
    return Answer(f"I look around.\n/execute_action{{goto {room}}}", output_tokens=20)


def run_mode(server: ProviderServer, mode: str, ticks: int, workdir: Path) -> dict[str, float]:
    directory = workdir / mode
    Station.create(directory, parse_config(remote_config(server, turns=mode, name=f"bench-{mode}"))).close()
    station = Station.open(directory)

    def show(p: Progress) -> None:
        if p.kind == "turn" and sys.stderr.isatty():
            sys.stderr.write(f"\r\x1b[K{mode}: tick {p.tick}, {p.agent} done")

    engine = Engine(station, on_progress=show)
    server.latency_s = 0.0
    engine.run(until_tick=1)  # warm-up: SDK clients and connections
    server.latency_s = LATENCY
    began = time.perf_counter()
    engine.run(until_tick=1 + ticks)
    wall = time.perf_counter() - began
    STDERR.print(f"\r{mode}: {ticks} ticks in {wall:.1f} s")
    rows = station.store.all("SELECT tick, latency_s FROM inputs WHERE kind='reply' AND tick>1")
    per_tick: dict[int, list[float]] = {}
    for r in rows:
        per_tick.setdefault(r["tick"], []).append(r["latency_s"] or 0.0)
    wait = sum(max(v) if mode == "concurrent" else sum(v) for v in per_tick.values())
    calls = len(rows)
    station.close()
    return {"tick_s": wall / ticks, "wait_s": wait / ticks, "calls": calls / ticks,
            "overhead": max(0.0, wall - wait) / wall,
            "latency": statistics.median(v for vs in per_tick.values() for v in vs)}


def main() -> None:
    global LATENCY
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=1.0, help="simulated seconds per model call")
    parser.add_argument("--ticks", type=int, default=5, help="timed ticks per mode")
    args = parser.parse_args()
    LATENCY = args.latency
    os.environ.update(KEY_ENV)
    results = {}
    with ProviderServer(wanderer) as server, tempfile.TemporaryDirectory() as tmp:
        for mode in ("sequential", "concurrent"):
            results[mode] = run_mode(server, mode, args.ticks, Path(tmp))
    table = Table(title=f"5 agents, 3 providers, {args.latency:g} s simulated latency, {args.ticks} ticks per mode")
    for column in ("mode", "s per tick", "model calls per tick", "median call (s)", "model wait per tick (s)",
                   "engine overhead share"):
        table.add_column(column, justify="right")
    for mode, r in results.items():
        table.add_row(mode, f"{r['tick_s']:.2f}", f"{r['calls']:.1f}", f"{r['latency']:.3f}", f"{r['wait_s']:.2f}",
                      f"{r['overhead']:.1%}")
    Console().print(table)
    target = results["concurrent"]["tick_s"] < 1.5
    Console().print(f"concurrent under 1.5 s per tick: {'yes' if target else 'NO'}; "
                    f"speed-up {results['sequential']['tick_s'] / results['concurrent']['tick_s']:.1f}x")


LATENCY = 1.0

if __name__ == "__main__":
    main()
