#!/usr/bin/env python3
"""Engine cost per turn, seconds per tick, memory and database growth by population (10 to 1,000 agents).

The world is the open station (configs/open_station.yaml) without its research room (sandbox
runs are bench_eval.py's business and would swamp a small machine), `turns: concurrent`, with N
agents. Every population runs in fresh processes, so one size's memory does not bleed into the
next; each run warms up (default one tick), then `--ticks` ticks are timed.

- engine ms/turn (scripted): N offline scripted agents (codex, test, ascension, then roaming:
  notes, mail, reflection, ...). Wall time minus the time any model call was in flight, per turn:
  the engine alone (prompts, actions, SQLite), no SDK. A small population is timed on fresh
  stations until `--min-turns` turns (default 300) and the median taken, so that ten turns on a
  busy machine do not decide the acceptance ratio, which is taken on this column. Beside it, the
  engine's CPU time per turn (the process's, minus the model calls' own): on a shared machine,
  where other processes stretch the wall time, that is the figure to compare.
- ms/turn with SDKs: N agents on real SDK clients (Anthropic, OpenAI Responses and Chat, Gemini)
  talking to the loopback provider server of the tests, which runs in processes of its own
  (`--server-processes`, sharing one port) and answers at once with one walk between rooms (no
  multi-step exchanges). Wall time per turn: the engine
  plus the SDKs' request building, HTTP and parsing (the server works in its own process, but on
  a small machine it shares the cores).
- s per tick at 1 s latency: the same station after the server starts taking `--latency` seconds
  per answer; with concurrent turns a tick should last about one call, plus the engine's overhead.
- peak RSS: the engine process of each run (ru_maxrss), with its request processes' peaks added
  (`--request-processes`); the server's process not included.
- DB growth per tick: station.db after minus before the timed ticks (the WAL checkpointed both
  times, outside the timing), in the scripted run.

Targets (issue 30): engine ms/turn at the largest population within 2x of the smallest; at 1,000
agents under 2 s per tick at 1 s latency and peak RSS under 2 GB.
Usage: scripts/bench_scale.py [--sizes 10 100 300 1000] [--ticks 3] [--warmup 1] [--latency 1.0]
       [--min-turns 300] [--quick] [--no-sdk] [--turns concurrent|sequential]
Prints a markdown table on stdout and a live progress line on stderr. With one warm-up tick the
scripted agents are timed while they take the entry test and ascend; `--warmup 5` times them
roaming the rooms instead.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the loopback provider server and its model endpoints

import yaml  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402

OPEN_STATION = ROOT / "configs" / "open_station.yaml"
WANDER_ROOMS = ["misc", "lobby", "mail", "reflect"]  # open to newcomers
RESULT, PROGRESS = "@result ", "@progress "
STDERR = Console(stderr=True)
RATIO_TARGET, TICK_TARGET_S, RSS_TARGET_MB = 2.0, 2.0, 2048


# -- the world ------------------------------------------------------------------------------------
def open_station(agents: list[dict[str, Any]], turns: str) -> dict[str, Any]:
    data = yaml.safe_load(OPEN_STATION.read_text())
    data.pop("research")
    data.update(name="bench-scale", turns=turns, agents=agents)
    return data


def split(n: int, parts: int) -> list[int]:
    return [n // parts + (i < n % parts) for i in range(parts)]


# -- the loopback provider, in its own process ------------------------------------------------------
def wanderer(request: Any) -> Any:
    """One walk per reply (as bench_turns.py), so no turn starts a multi-step exchange."""
    from provider_server import Answer

    turn = sum(1 for m in request.messages if m["role"] == "assistant")
    room = WANDER_ROOMS[(turn + len(request.model)) % len(WANDER_ROOMS)]
    return Answer(f"I look around.\n/execute_action{{goto {room}}}", output_tokens=20)


def serve(port: int) -> None:
    """A server process: prints its URL, then obeys `latency SECONDS` lines on stdin until EOF, and
    then prints how many requests it answered. Several such processes share one port (SO_REUSEPORT),
    so that, as a provider, the server is not one interpreter answering a thousand calls in turn.
    (Its listen backlog takes a thousand agents connecting at once: see provider_server.py.)"""
    from provider_server import ProviderServer

    with ProviderServer(wanderer, port=port, share_port=True) as server:
        print(server.url, flush=True)
        for line in sys.stdin:
            server.latency_s = float(line.split()[1])
            print("ok", flush=True)
        print(len(server.requests), flush=True)


class LoopbackServer:
    """The SDK run's handle on the server processes (it has the `url` and `openai_url` of a ProviderServer)."""

    def __init__(self, processes: int) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        port = 0
        for _ in range(processes):
            proc = subprocess.Popen(
                [sys.executable, __file__, "--serve", "--port", str(port)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            self.procs.append(proc)
            url = self._line(proc)
            if not url.startswith("http://"):
                self.close()
                raise RuntimeError(f"the provider server did not start (exit {proc.wait()})")
            self.url, port = url, int(url.rsplit(":", 1)[1])
        self.openai_url = self.url + "/v1"

    @staticmethod
    def _line(proc: subprocess.Popen[str]) -> str:
        assert proc.stdout is not None
        return proc.stdout.readline().strip()

    def set_latency(self, seconds: float) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(f"latency {seconds}\n")
            proc.stdin.flush()
            if self._line(proc) != "ok":
                raise RuntimeError("the provider server stopped answering")

    def close(self) -> list[int]:
        """Stop the processes; the requests each answered (how the kernel spread the load)."""
        answered = []
        for proc in self.procs:
            if proc.stdin is not None:
                proc.stdin.close()
            count = self._line(proc) if proc.poll() is None else ""
            answered.append(int(count) if count.isdigit() else -1)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return answered


# -- one measured run (in a child process) ------------------------------------------------------------
class ModelClock:
    """Wall time during which at least one model call is in flight (concurrent calls overlap), and
    the CPU time the calls used (each thread's own)."""

    def __init__(self, classes: list[type]) -> None:
        self.busy = self.cpu = 0.0
        self._in_flight = 0
        self._since = 0.0
        self._lock = threading.Lock()
        for cls in classes:
            self._wrap(cls)

    def _wrap(self, cls: type) -> None:
        original = cls.complete  # type: ignore[attr-defined]
        clock = self

        def timed(model: Any, *args: Any, **kwargs: Any) -> Any:
            clock._enter()
            cpu = time.thread_time()
            try:
                return original(model, *args, **kwargs)
            finally:
                clock._leave(time.thread_time() - cpu)

        cls.complete = timed  # type: ignore[attr-defined]

    def _enter(self) -> None:
        with self._lock:
            if self._in_flight == 0:
                self._since = time.perf_counter()
            self._in_flight += 1

    def _leave(self, cpu: float) -> None:
        with self._lock:
            self.cpu += cpu
            self._in_flight -= 1
            if self._in_flight == 0:
                self.busy += time.perf_counter() - self._since


class Tally:
    """Turns done out of those expected, told to the parent as progress lines on stderr."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.phase = total, 0, ""

    def show(self, phase: str | None = None) -> None:
        self.phase = phase or self.phase
        sys.stderr.write(f"{PROGRESS}{self.done} {self.total} {self.phase}\n")
        sys.stderr.flush()


class Run:
    """A station built from `config` in `directory`, stepped tick by tick."""

    def __init__(self, directory: Path, config: dict[str, Any], tally: Tally) -> None:
        from station.apps.world import Station
        from station.core.config import parse_config
        from station.core.engine import Engine

        self.station = Station.create(directory, parse_config(config, "bench_scale"))
        self.tally = tally
        self.engine = Engine(self.station, on_progress=self._progress)

    def _progress(self, p: Any) -> None:
        if p.kind == "turn":
            self.tally.done += 1
            self.tally.show()

    def ticks(self, n: int, phase: str) -> tuple[float, float, int]:
        """Run n ticks; (wall seconds, CPU seconds of this process, turns taken)."""
        self.tally.show(phase)
        first = self.station.ctx.tick
        began, cpu = time.perf_counter(), time.process_time()
        self.engine.run(until_tick=first + n - 1)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
        turns = self.station.store.scalar("SELECT COUNT(*) FROM turns WHERE tick>=?", (first,))
        return wall, cpu, turns

    def db_bytes(self) -> int:
        self.station.store.all("PRAGMA wal_checkpoint(TRUNCATE)")
        return sum(p.stat().st_size for p in self.station.dir.glob("station.db*"))

    def close(self) -> None:
        self.station.close()


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def measure_scripted(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from station.models.scripted import ScriptedModel
    from station.models.scripted_debugger import ScriptedDebugger
    from station.models.scripted_grader import ScriptedGrader
    from station.models.scripted_reviewer import ScriptedReviewer

    clock = ModelClock([ScriptedModel, ScriptedGrader, ScriptedReviewer, ScriptedDebugger])
    config = open_station([{"count": n, "model": {"provider": "scripted", "name": "scripted-newcomer"}}], args.turns)
    runs = max(1, math.ceil(args.min_turns / (n * args.ticks)))  # a small station is timed on fresh copies
    tally = Tally(runs * n * (args.warmup + args.ticks))
    engine_ms, engine_cpu_ms, model_ms, grown = [], [], [], []
    for i in range(runs):
        run = Run(tmp / f"station-{i}", config, tally)
        run.ticks(args.warmup, f"run {i + 1} of {runs}, warm-up")
        before = run.db_bytes()
        clock.busy = clock.cpu = 0.0
        wall, cpu, turns = run.ticks(args.ticks, f"run {i + 1} of {runs}, timed")
        engine_ms.append((wall - clock.busy) * 1000 / turns)
        engine_cpu_ms.append((cpu - clock.cpu) * 1000 / turns)
        model_ms.append(clock.busy * 1000 / turns)
        grown.append(run.db_bytes() - before)
        run.close()
    return {
        "engine_ms": statistics.median(engine_ms),
        "engine_cpu_ms": statistics.median(engine_cpu_ms),
        "model_ms": statistics.median(model_ms),
        "runs": runs,
        "turns": turns,
        "db_kb_per_tick": statistics.median(grown) / 1024 / args.ticks,
        "rss_mb": peak_rss_mb(),
    }


def measure_sdk(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from remote_world import AGENT_MODELS, KEY_ENV, PRICES, endpoint

    os.environ.update(KEY_ENV)
    server = LoopbackServer(args.server_processes)
    try:
        counts = split(n, len(AGENT_MODELS))
        # a population's worth of calls in flight on each endpoint (the default bound is 100)
        models = [{**endpoint(server, m), "max_in_flight": n} for m in AGENT_MODELS]  # type: ignore[arg-type]
        agents = [{"count": k, "model": m} for k, m in zip(counts, models) if k]
        config = {**open_station(agents, args.turns), "prices": PRICES}
        config.setdefault("engine", {})["request_processes"] = args.request_processes
        run = Run(tmp / "station", config, Tally(n * (args.warmup + 2 * args.ticks)))
        server.set_latency(0.0)
        run.ticks(args.warmup, "warm-up")  # SDK clients made, connections open
        wall0, _, turns0 = run.ticks(args.ticks, "timed, no latency")
        server.set_latency(args.latency)
        wall1, _, _ = run.ticks(args.ticks, f"timed, {args.latency:g} s latency")
        workers_mb = request_processes_peak_mb(run.station)
        run.close()
    finally:
        answered = server.close()
    rss = peak_rss_mb()
    return {
        "sdk_ms": wall0 * 1000 / turns0,
        "tick_s": wall1 / args.ticks,
        "rss_mb": rss + workers_mb,
        "server_requests": answered,
    }


def request_processes_peak_mb(station: Any) -> float:
    """The request processes' peak resident memory, added up (they belong to the station)."""
    processes = station.ctx.models.processes
    total = 0.0
    for worker in processes._workers if processes is not None else []:
        if worker is not None:
            status = Path(f"/proc/{worker.process.pid}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 1024
    return total


def child(kind: str, n: int, args: argparse.Namespace) -> None:
    measure = measure_scripted if kind == "scripted" else measure_sdk
    with tempfile.TemporaryDirectory(prefix=f"bench-scale-{kind}-{n}-") as tmp:
        result = measure(n, args, Path(tmp))
    print(RESULT + json.dumps(result), flush=True)


# -- the parent: one child per population and kind ------------------------------------------------------
def run_child(kind: str, n: int, args: argparse.Namespace, update: Callable[[int, int, str], None]) -> dict[str, Any]:
    flags = (
        f"--child {kind} --agents {n} --ticks {args.ticks} --warmup {args.warmup} --latency {args.latency} "
        f"--request-processes {args.request_processes} --server-processes {args.server_processes}"
    )
    command = [sys.executable, __file__, *flags.split(), "--min-turns", str(args.min_turns), "--turns", args.turns]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    errors: list[str] = []
    try:
        for line in proc.stderr:
            if line.startswith(PROGRESS):
                done, total, phase = line[len(PROGRESS) :].rstrip("\n").split(" ", 2)
                update(int(done), int(total), phase)
            else:
                errors.append(line)
        out = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    results = [line[len(RESULT) :] for line in out.splitlines() if line.startswith(RESULT)]
    if proc.returncode != 0 or not results:
        tail = "".join(errors[-20:])
        raise SystemExit(f"the {kind} run with {n} agents failed (exit {proc.returncode}):\n{tail}")
    return json.loads(results[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 300, 1000], help="populations to measure")
    ap.add_argument("--ticks", type=int, default=3, help="timed ticks per run")
    ap.add_argument("--warmup", type=int, default=1, help="ticks run before the timing starts")
    ap.add_argument("--latency", type=float, default=1.0, help="the loopback server's seconds per answer")
    ap.add_argument("--min-turns", type=int, default=300, help="scripted: time fresh stations until this many turns")
    ap.add_argument("--turns", choices=["concurrent", "sequential"], default="concurrent")
    ap.add_argument(
        "--request-processes",
        type=int,
        default=0,
        help="SDK runs: engine.request_processes (processes that send the model calls; 0: the engine's own)",
    )
    ap.add_argument(
        "--server-processes",
        type=int,
        default=max(1, (os.cpu_count() or 1) // 4),
        help="SDK runs: processes of the loopback provider, sharing its port (default: a quarter of the CPUs)",
    )
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="CI-sized: 10 and 100 agents, 2 timed ticks")
    ap.add_argument("--no-sdk", action="store_true", help="only the scripted runs (no SDK clients, no server)")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", choices=["scripted", "sdk"], help=argparse.SUPPRESS)
    ap.add_argument("--agents", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve(args.port)
    if args.child:
        return child(args.child, args.agents, args)
    if args.quick:
        args.sizes, args.ticks = [10, 100], 2
    if min(args.sizes) < 1 or args.ticks < 1 or args.warmup < 1:
        ap.error("--sizes, --ticks and --warmup must be at least 1")
    sizes = sorted(set(args.sizes))
    kinds = ["scripted"] if args.no_sdk else ["scripted", "sdk"]

    began = time.perf_counter()
    rows: dict[int, dict[str, Any]] = {}
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("turns"),
        TimeElapsedColumn(),
        console=STDERR,
        transient=True,
    ) as bar:
        for n in sizes:
            rows[n] = {}
            for kind in kinds:
                label = f"{n:,} agents, {'scripted' if kind == 'scripted' else 'SDK clients'}"
                task = bar.add_task(label, total=None)

                def update(done: int, total: int, phase: str, task: Any = task, label: str = label) -> None:
                    bar.update(task, completed=done, total=total, description=f"{label}: {phase}")

                result = run_child(kind, n, args, update)
                bar.remove_task(task)
                rows[n][kind] = result
                summary = (
                    f"engine {result['engine_ms']:.2f} ms/turn"
                    if kind == "scripted"
                    else f"{result['sdk_ms']:.2f} ms/turn, {result['tick_s']:.2f} s/tick at {args.latency:g} s"
                )
                STDERR.print(f"{label}: {summary}, peak RSS {result['rss_mb']:.0f} MB")
    print_table(rows, sizes, args)
    print(f"\ntotal run time: {time.perf_counter() - began:.0f} s")


def print_table(rows: dict[int, dict[str, Any]], sizes: list[int], args: argparse.Namespace) -> None:
    sdk = not args.no_sdk
    print(
        f"**Population scale** — open station (no research room), `turns: {args.turns}`, {args.warmup} warm-up "
        f"tick(s), {args.ticks} timed tick(s) per run; {os.cpu_count()} CPUs, Python {platform.python_version()}"
        + (
            f"; SDK runs with {args.request_processes} request process(es) and {args.server_processes} "
            "loopback server process(es)"
            if sdk
            else ""
        )
        + ".\n"
    )
    head = ["agents", "engine ms/turn (scripted)", "engine CPU ms/turn", "scripted model ms/turn", "stations timed"]
    if sdk:
        head += ["ms/turn with SDKs (zero latency)", f"s per tick at {args.latency:g} s latency"]
    head += ["peak RSS MB (scripted" + (" / SDKs)" if sdk else ")"), "DB growth per tick (KB)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    for n in sizes:
        s = rows[n]["scripted"]
        cells = [f"{n:,}", f"{s['engine_ms']:.2f}", f"{s['engine_cpu_ms']:.2f}", f"{s['model_ms']:.2f}", str(s["runs"])]
        rss = f"{s['rss_mb']:.0f}"
        if sdk:
            r = rows[n]["sdk"]
            cells += [f"{r['sdk_ms']:.2f}", f"{r['tick_s']:.2f}"]
            rss += f" / {r['rss_mb']:.0f}"
        cells += [rss, f"{s['db_kb_per_tick']:.0f}"]
        print("| " + " | ".join(cells) + " |")
    small, large = sizes[0], sizes[-1]
    if large > small:
        ratio = rows[large]["scripted"]["engine_ms"] / rows[small]["scripted"]["engine_ms"]
        cpu_ratio = rows[large]["scripted"]["engine_cpu_ms"] / rows[small]["scripted"]["engine_cpu_ms"]
        ok = "yes" if ratio <= RATIO_TARGET else "**NO**"
        print(
            f"\nengine ms/turn at {large:,} agents over {small:,} agents: {ratio:.2f}x "
            f"(target: within {RATIO_TARGET:g}x): {ok}; in CPU time: {cpu_ratio:.2f}x"
        )
    if sdk:
        spread = rows[large]["sdk"]["server_requests"]
        print(f"requests answered by each server process at {large:,} agents: {spread}")
        tick = rows[large]["sdk"]["tick_s"]
        print(
            f"s per tick at {large:,} agents and {args.latency:g} s latency: {tick:.2f} "
            f"(target at 1,000 agents and 1 s: under {TICK_TARGET_S:g} s): {'yes' if tick < TICK_TARGET_S else '**NO**'}"
        )
    rss = max(r["rss_mb"] for r in rows[large].values())
    print(
        f"peak RSS at {large:,} agents: {rss:.0f} MB (target at 1,000 agents: under {RSS_TARGET_MB} MB): "
        f"{'yes' if rss < RSS_TARGET_MB else '**NO**'}"
    )


if __name__ == "__main__":
    main()
