#!/usr/bin/env python3
"""Build a long station for the web viewer's benchmark: the real engine, scripted agents, then synthetic research.

Usage: scripts/build_station.py --ticks 5000 --out DIR [--config configs/social_demo.yaml] [--evaluations 3000]
       [--seed 20240611]

What is REAL (made by the engine, exactly as `station run` makes it):
  - every tick, turn, prompt, reply, recorded input, event, message and agent record: the station is
    created with `Station.create(DIR, config)` and run with `Engine(...).run(until_tick=TICKS)`, with the
    scripted offline agents of the config (social_demo.yaml: 5 agents living 20 ticks, so 5,000 ticks hold
    about 25,000 turns, ~1,250 lives and many lineages), plus one agent with a 300-tick life (the
    paper's), so that one dialogue holds about 300 turns;
  - births, deaths, respawns, ascensions and lineages; papers and their peer reviews (the scripted
    reviewer), forum threads, mail, private notes, the Common Room, tests, tips, backups.
  Nothing in the engine is shortened or skipped.

What is SYNTHETIC (inserted after the run, never produced by the engine):
  - the research data. During the run the config has NO research task, so there is no Research Counter
    and the scripted agents never submit (a real submission runs a sandboxed evaluation, which would make
    the build take hours). After the run the stored config gets a research task (circle packing, n = 26,
    no baselines; or the tasks of --config, if it has any), the station is reopened so that the research
    room's and its hooks' migrations create their tables, and --evaluations rows are inserted:
      * `evaluations` (+ `evaluation_tags`, through the research store's own `insert_evaluation`), each by a
        real recursive agent (name, session, lineage) alive at its submission tick; ticks spread over the
        whole history; titles, tags, abstracts and code (the repository's real circle-packing programs,
        with varied constants) varied by kind (grid, hexagonal rows, optimiser);
      * results filled in as the evaluation hook fills them: ~86% finished, with scores that improve over
        the run (best about 1.9 at the start, 2.635 at the end) plus noise; ~10% failed and ~4% timed
        out, with score NULL and an error; finished_tick one or two ticks after submission;
      * one `evaluation_versions` row each (version 1, source 'author'); its input_key names
        `synthetic/evaluation/<id>/1`, an input that does not exist (no runs were made).
    No events, messages or notifications are written for them (agents never saw these results), and no
    stagnation state.
  A `build.json` file in DIR records the build's parameters and summary (the benchmark reuses DIR when it
  is present).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from evaluators.programs import program  # noqa: E402
from rooms.research.config import ResearchConfig, TaskConfig  # noqa: E402
from rooms.research.store import insert_evaluation  # noqa: E402
from rooms.research.tasks import tasks_of  # noqa: E402
from station.apps.world import Station  # noqa: E402
from station.core.agents import Agent  # noqa: E402
from station.core.config import AgentSpec, StationConfig, load_config  # noqa: E402
from station.core.engine import Engine  # noqa: E402
from station.core.engine import Progress as EngineProgress  # noqa: E402
from station.core.store import DB_NAME, Store, StoreError, dumps  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "social_demo.yaml"
MARKER = "build.json"
DEFAULT_TASK = TaskConfig(evaluator="circle_packing", params={"n": 26}, baselines=False)
STDERR = Console(stderr=True)

# The synthetic leaderboard: where the best score starts and ends, and how results are spread.
FIRST_BEST, LAST_BEST = 1.9, 2.635
FAILED, TIMED_OUT = 0.10, 0.04
ERRORS = [
    "NameError: name 'np' is not defined",
    "AttributeError: module 'numpy' has no attribute 'zeroes'. Did you mean: 'zeros'?",
    "Verification failed: circles 4 and 17 overlap (distance 0.1893 < sum of radii 0.1894).",
    "Verification failed: circle 9 leaves the unit square (x + r = 1.0000003).",
    "Verification failed: construct_packing() must return a pair (centers, radii); got None.",
    "ValueError: operands could not be broadcast together with shapes (26,2) (25,2)",
    "ModuleNotFoundError: No module named 'shapely'",
    "IndexError: index 26 is out of bounds for axis 0 with size 26",
    "scipy.optimize: Positive directional derivative for linesearch (exit mode 8); radii left negative",
]
ADJECTIVES = ["Refined", "Greedy", "Annealed", "Perturbed", "Symmetric", "Staggered", "Layered", "Jittered",
              "Relaxed", "Tightened", "Multi-start", "Seeded", "Shrink-wrapped", "Boundary-first", "Corner-anchored"]
METHODS = ["SLSQP", "basin hopping", "simulated annealing", "a penalty method", "L-BFGS-B on a barrier",
           "trust-region constraints", "coordinate descent", "a linear program for the radii"]


# -- the engine run ------------------------------------------------------------------------------
def run_engine(station: Station, ticks: int, console: Console) -> tuple[float, int]:
    """Run the real engine to `ticks` with a live progress bar; returns (seconds, turns run now)."""
    start_tick = station.ctx.tick
    started = time.perf_counter()
    turns = 0
    first_turn = station.store.scalar("SELECT MAX(id) FROM turns") or 0
    every = max(1, ticks // 20)
    columns = [TextColumn("[bold]engine"), BarColumn(), TextColumn("tick"), MofNCompleteColumn(),
               TextColumn("{task.fields[turns]:,} turns · {task.fields[rate]:.0f} turns/s · {task.fields[agents]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=False, refresh_per_second=4) as bar:
        task = bar.add_task("engine", total=ticks, completed=start_tick - 1, turns=0, rate=0.0, agents="")

        def on_progress(p: EngineProgress) -> None:
            nonlocal turns
            if p.kind != "tick":
                return
            turns = (station.store.scalar("SELECT MAX(id) FROM turns") or 0) - first_turn
            spent = max(1e-9, time.perf_counter() - started)
            live = station.store.scalar("SELECT COUNT(*) FROM agents WHERE state='active'")
            bar.update(task, completed=min(ticks, p.tick), turns=turns, rate=turns / spent, agents=f"{live} alive")
            if not console.is_terminal and p.tick % every == 0:  # a log file: a plain line now and then
                eta = (ticks - p.tick) * spent / max(1, p.tick - start_tick + 1)
                console.print(f"tick {p.tick:,}/{ticks:,} · {turns:,} turns · {turns / spent:.0f} turns/s · "
                              f"{live} alive · {spent:.0f} s elapsed · ETA {eta:.0f} s", highlight=False)

        engine = Engine(station, on_progress=on_progress)
        why = engine.run(until_tick=ticks)
        turns = (station.store.scalar("SELECT MAX(id) FROM turns") or 0) - first_turn
        bar.update(task, completed=min(ticks, station.ctx.tick - 1), turns=turns,
                   rate=turns / max(1e-9, time.perf_counter() - started), agents=why)
    return time.perf_counter() - started, turns


def research_config(base: StationConfig) -> ResearchConfig:
    """The research section stored after the run: the config's own tasks, or circle packing n = 26."""
    research = base.research.model_copy(deep=True)
    if not research.tasks:
        research.tasks = [DEFAULT_TASK.model_copy()]
    for task in research.tasks:
        task.baselines = False  # System baselines would need real evaluations
    return research


def add_research_task(directory: Path, config: StationConfig) -> StationConfig:
    """Store a config with the research task; opening the station then migrates the research tables."""
    final = config.model_copy(update={"research": research_config(config)}, deep=True)
    store = Store(directory)
    try:
        with store.transaction():
            store.set_meta("config", final.model_dump(mode="json"))
    finally:
        store.close()
    return final


# -- synthetic evaluations -----------------------------------------------------------------------
def best_at(progress: float) -> float:
    """The frontier of the synthetic leaderboard: fast early gains, then a slow approach to the record."""
    shape = (1 - math.exp(-3.5 * progress)) / (1 - math.exp(-3.5))
    return FIRST_BEST + (LAST_BEST - FIRST_BEST) * shape


def _kind_for(score: float) -> str:
    return "grid" if score < 2.25 else ("hex" if score < 2.56 else "optimized")


def _submission(kind: str, rng: random.Random, n: int) -> dict[str, Any]:
    """Title, tags, abstract and code of one submission, varied around the scripted agents' three programs."""
    adjective, method = rng.choice(ADJECTIVES), rng.choice(METHODS)
    if kind == "grid":
        rows = rng.randint(4, 7)
        title = rng.choice([f"Square grid of {n} equal circles", f"{adjective} {rows}-row grid for {n} circles",
                            f"Grid baseline with {rows} rows, border gaps closed"])
        tags = rng.sample(["grid", "baseline", "equal-radii", "reference", "layout"], k=rng.randint(1, 3))
        abstract = (f"Equal circles on a {rows}-row grid that holds all {n}, then each radius grown until it "
                    f"touches a neighbour or a wall. A reference point for {method}.")
        code = program("grid", n)
    elif kind == "hex":
        title = rng.choice([f"Hexagonal rows for {n} circles", f"{adjective} hexagonal rows, radii by LP",
                            f"Staggered rows ({rng.randint(4, 7)} rows) with a linear program for the radii"])
        tags = rng.sample(["hexagonal", "layout", "linear-program", "rows", "staggered", "lp"], k=rng.randint(1, 4))
        abstract = ("Circles on staggered rows, with the radii chosen by a linear program that maximises their "
                    f"sum; row counts and offsets searched exhaustively, then polished with {method}.")
        code = program("hex", n)
    else:
        starts, hops, seed = rng.randint(2, 6), rng.choice([8, 16]), rng.randrange(10_000)  # the ladder's range
        title = rng.choice([
            f"Optimised centres and radii: {starts} starts, {hops} perturbation rounds (seed {seed})",
            f"{adjective} optimiser with {method} ({starts} starts)",
            f"{adjective} layout: {hops} rounds of {method} from the best known start",
        ])
        tags = rng.sample(["optimization", "slsqp", "restarts", "basin-hopping", "annealing", "perturbation",
                           "symmetry", "local-search"], k=rng.randint(2, 5))
        abstract = (f"Maximise the sum of radii over centres and radii with {method} from {starts} random starts and "
                    f"{hops} rounds of perturbing the best layout, then shrink radii just enough to satisfy every "
                    "constraint exactly." + (" Starts are biased towards the corners." if rng.random() < 0.3 else ""))
        code = program("optimized", n, STARTS=starts, HOPS=hops, SEED=seed)
    return {"title": title, "tags": tags, "abstract": abstract, "code": code}


def _authors(store: Store, last_tick: int) -> list[tuple[int, int, Agent]]:
    """(first tick, last tick, agent) of every recursive agent: the ones who may submit research."""
    out = []
    for row in store.all("SELECT data FROM agents WHERE lineage IS NOT NULL ORDER BY session, name"):
        agent = Agent.from_json(row["data"])
        first = agent.ascend_tick or agent.birth_tick
        out.append((first, agent.exit_tick if agent.exit_tick is not None else last_tick, agent))
    return out


def add_synthetic_evaluations(station: Station, count: int, seed: int) -> dict[str, int]:
    """Insert `count` finished/failed/timed-out circle-packing evaluations by real agents (see the docstring)."""
    if count <= 0:
        return {}
    store = station.store
    rng = random.Random(seed)
    last_tick = station.ctx.tick - 1
    authors = _authors(store, last_tick)
    if not authors:
        raise SystemExit("no recursive agents in the station: nobody could have submitted research")
    task_id = next(iter(tasks_of(station.ctx)), "1")
    n = int(station.config.section(ResearchConfig).tasks[0].params.get("n", 26)) if station.config.section(ResearchConfig).tasks else 26
    start = min(first for first, _, _ in authors)  # the first ascension: nobody could submit before
    ticks = sorted(rng.randint(start, max(start, last_tick - 2)) for _ in range(count))
    statuses: dict[str, int] = {}
    with store.transaction():
        for tick in ticks:
            alive = [a for first, end, a in authors if first <= tick <= end]
            if not alive:  # a gap with no recursive agent alive: the one who left last
                alive = [max((t for t in authors if t[1] <= tick), key=lambda t: t[1])[2]]
            agent = rng.choice(alive)
            roll = rng.random()
            status = "failed" if roll < FAILED else ("timed_out" if roll < FAILED + TIMED_OUT else "finished")
            frontier = best_at(tick / max(1, last_tick))
            gap = rng.expovariate(1 / 0.06) if rng.random() < 0.8 else rng.uniform(0.1, 0.6)
            score = round(min(LAST_BEST, frontier - gap + rng.gauss(0, 0.002)), 9)
            kind = _kind_for(score) if status == "finished" else rng.choice(["grid", "hex", "optimized", "optimized"])
            sub = _submission(kind, rng, n)
            number = insert_evaluation(store, task=task_id, author=agent.name, session=agent.session,
                                       lineage=agent.lineage, tick=tick, title=sub["title"], tags=sub["tags"],
                                       abstract=sub["abstract"], code=sub["code"])
            delivered = min(last_tick, tick + rng.choice([1, 1, 2]))
            seconds = rng.uniform(0.4, 90.0)
            if status == "finished":
                error, details, version_status = None, f"Valid packing of {n} circles; sum of radii = {score:.6f}", "ok"
                stdout = "".join(f"start {i}: sum of radii {score - rng.uniform(0, 0.05):.6f}\n"
                                 for i in range(rng.randint(1, 8))) + f"best: {score:.6f} ({seconds:.1f} s)\n"
                stderr = ""
            elif status == "failed":
                score, error = None, rng.choice(ERRORS)
                details = error if error.startswith("Verification") else ""
                version_status = "invalid" if error.startswith("Verification") else "error"
                stdout = f"start 0: sum of radii {frontier - 0.1:.6f}\n" if rng.random() < 0.5 else ""
                stderr = "" if error.startswith("Verification") else \
                    f"Traceback (most recent call last):\n  File \"submission.py\", line {rng.randint(5, 120)}, " \
                    f"in construct_packing\n{error}\n"
            else:
                score, error, details, version_status = None, "Timed out after 1200 s", "", "timeout"
                stdout = "".join(f"start {i}: sum of radii {frontier - rng.uniform(0, 0.1):.6f}\n"
                                 for i in range(rng.randint(0, 5)))
                stderr = ""
            store.execute(
                "UPDATE evaluations SET status=?, score=?, sort_key=?, metrics=?, details=?, error=?, "
                "reported_version=1, stdout=?, stderr=?, finished_tick=? WHERE id=?",
                (status, score, dumps([score]) if score is not None else None, dumps({}), details, error,
                 stdout, stderr, delivered, number))
            store.execute(
                "INSERT INTO evaluation_versions(evaluation, version, source, code, status, score, error, input_key) "
                "VALUES(?,?,?,?,?,?,?,?)",
                (number, 1, "author", sub["code"], version_status, score, error, f"synthetic/evaluation/{number}/1"))
            statuses[status] = statuses.get(status, 0) + 1
    return statuses


# -- summary ------------------------------------------------------------------------------------
def summarize(station: Station) -> dict[str, Any]:
    store = station.store

    def count(sql: str) -> int:
        try:
            return int(store.scalar(sql) or 0)
        except Exception:  # noqa: BLE001 - a table this station does not have
            return 0

    d = Path(station.dir)
    db_bytes = sum((d / f"{DB_NAME}{suffix}").stat().st_size for suffix in ("", "-wal")
                   if (d / f"{DB_NAME}{suffix}").exists())
    backups = sum(p.stat().st_size for p in (d / "backups").glob("*.db")) if (d / "backups").exists() else 0
    return {
        "ticks": station.ctx.tick - 1,
        "turns": count("SELECT COUNT(*) FROM turns"),
        "agents": count("SELECT COUNT(*) FROM agents"),
        "sessions": count("SELECT COUNT(DISTINCT session) FROM agents"),
        "lineages": count("SELECT COUNT(DISTINCT lineage) FROM agents WHERE lineage IS NOT NULL"),
        "most turns of one session": count("SELECT MAX(c) FROM (SELECT COUNT(*) c FROM turns GROUP BY session)"),
        "papers": count("SELECT COUNT(*) FROM capsules WHERE room='archive'"),
        "forum threads": count("SELECT COUNT(*) FROM capsules WHERE room='public_memory'"),
        "mails": count("SELECT COUNT(*) FROM capsules WHERE room='mail'"),
        "private notes": count("SELECT COUNT(*) FROM capsules WHERE room='private_memory'"),
        "capsule messages": count("SELECT COUNT(*) FROM capsule_messages"),
        "common room messages": count("SELECT COUNT(*) FROM common_messages"),
        "events": count("SELECT COUNT(*) FROM events"),
        "recorded inputs": count("SELECT COUNT(*) FROM inputs"),
        "evaluations": count("SELECT COUNT(*) FROM evaluations"),
        "database MB": round(db_bytes / 1e6, 1),
        "backups MB": round(backups / 1e6, 1),
    }


def build_station(out: str | Path, ticks: int = 5000, config_path: str | Path = DEFAULT_CONFIG,
                  evaluations: int = 3000, seed: int = 20240611, console: Console | None = None) -> dict[str, Any]:
    """Build (or finish building) the station at `out`; returns the summary also written to out/build.json.

    A station left by an interrupted build is run on from where it stopped (the engine resumes from its
    committed state); one whose research data was being added is refused (delete it and build again).
    """
    console = console or STDERR
    out = Path(out)
    marker = out / MARKER
    if marker.exists():
        return json.loads(marker.read_text())
    config = load_config(config_path)
    # One more agent with the paper's 300-tick life, so the dialogue pages are tested on a long life
    # (the demo's agents live 20 ticks; respawned guests get the config's max_age again).
    long_life = AgentSpec(count=1, kind="guest", max_age=300, token_budget=1_000_000,
                          model=config.agents[0].model, note="long-lived (benchmark)")
    run_config = config.model_copy(update={"research": ResearchConfig(), "agents": [*config.agents, long_life]},
                                   deep=True)  # no Research Counter
    began = time.perf_counter()
    resumed_at = None
    if Store.exists(out):
        station = Station.open(out)
        if tasks_of(station.ctx):
            station.close()
            raise StoreError(f"{out} holds an unfinished build whose research data was being added; "
                             "delete it and build again")
        resumed_at = station.ctx.tick
        console.print(f"resuming the build at {out} from tick {resumed_at}")
    else:
        station = Station.create(out, run_config)
    try:
        engine_s, _ = run_engine(station, ticks, console)
    finally:
        station.close()

    began_synthetic = time.perf_counter()
    add_research_task(out, config)
    station = Station.open(out)  # applies the research room's (and its hooks') migrations
    try:
        with console.status(f"inserting {evaluations:,} synthetic evaluations"):
            statuses = add_synthetic_evaluations(station, evaluations, seed)
        station.store.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        summary = summarize(station)
    finally:
        station.close()
    summary.update({
        "engine seconds": round(engine_s, 1),
        "synthetic research seconds": round(time.perf_counter() - began_synthetic, 1),
        "build seconds": round(time.perf_counter() - began, 1),
        "evaluation statuses": statuses,
        **({"resumed at tick (times cover the resumed part)": resumed_at} if resumed_at else {}),
        "config": str(config_path),
        "seed": seed,
        "built": time.strftime("%Y-%m-%d %H:%M:%S"),
    })
    marker.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def print_summary(summary: dict[str, Any], console: Console) -> None:
    table = Table(title="station built", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        if isinstance(value, dict):
            value = ", ".join(f"{v:,} {k}" for k, v in value.items())
        elif isinstance(value, int):
            value = f"{value:,}"
        table.add_row(key, str(value))
    console.print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=5000)
    ap.add_argument("--out", required=True, help="the new station's directory")
    ap.add_argument("--config", default=str(DEFAULT_CONFIG))
    ap.add_argument("--evaluations", type=int, default=3000, help="synthetic research evaluations to add")
    ap.add_argument("--seed", type=int, default=20240611, help="seed of the synthetic research data")
    args = ap.parse_args()
    console = Console()
    if (Path(args.out) / MARKER).exists():
        console.print(f"{args.out} is already built (remove it to build again)")
    summary = build_station(args.out, args.ticks, args.config, args.evaluations, args.seed, console)
    print_summary(summary, console)


if __name__ == "__main__":
    main()
