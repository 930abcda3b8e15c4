"""`station multistart`: several branches from one start, run a few ticks each, one chosen by a rule.

    DIR/multistart.json   the ledger: each branch's state (pending, forked, running, done), the choice, why
    DIR/start/            the start, when SOURCE is a config (a new station)
    DIR/branches/N/       branch N: a fork of the start (`station replay`) with branch seed N, run K ticks
    DIR/branches/N.log    what its `station run` said
    DIR/station/          the chosen branch, copied once chosen (the branches stay as they are)

Every step is recorded in the ledger (written whole or not at all) after it is done, and each can be
done again from its start, so a multistart killed at any moment resumes where it was when it is run
again: a fork cut short is made again, a branch's run resumes from its own last committed turn (as
`station run` does), and a finished branch is never run again.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from station.apps.cli_commands import CliError, replay
from station.apps.multistart_ray import RayBranch, start_on_ray
from station.apps.multistart_spend import Spent, cap_reached, carry, spent
from station.core.run_lock import StationBusy, is_running, run_lock
from station.core.store import Store
from station.core.terminal_text import clean

if TYPE_CHECKING:  # `station --help` imports no pydantic
    from station.core.config import BudgetConfig

LEDGER = "multistart.json"
POLL_S = 0.2  # how often the branches' processes are looked at
BranchRun = subprocess.Popen[bytes] | RayBranch  # a branch's `station run`: a local process or a Ray task


def add_multistart_command(sub: Any) -> None:
    s = sub.add_parser(
        "multistart", help="run N branches of one start for K ticks, choose one by a rule and install it (resumable)"
    )
    s.add_argument(
        "source", help="a config file (a new station is the start) or a station directory (its current tick)"
    )
    s.add_argument("--branches", type=int, required=True, metavar="N", help="how many branches")
    s.add_argument("--ticks", type=int, required=True, metavar="K", help="ticks each branch runs")
    s.add_argument("--parallel", type=int, default=1, metavar="P", help="branches run at once (default 1)")
    s.add_argument(
        "--on",
        choices=("local", "ray"),
        default="local",
        help="where the branches run: local processes (default) or Ray tasks on the cluster of the config's "
        "research.executor (the folder must be at the same path on its nodes)",
    )
    s.add_argument("--out", required=True, metavar="DIR", help="the multistart's folder (new, or one to resume)")
    s.add_argument(
        "--choose",
        default="best-score",
        metavar="RULE",
        help="best-score (the best score of the first task; a tie goes to the lower branch), metric:NAME "
        "(a summary metric of `station study`, higher is better, e.g. metric:acts) or admin (the administrator "
        "model reads interviews of each branch's agents and chooses: config multistart.administrator)",
    )
    s.set_defaults(fn=cmd_multistart)


# -- choosing -----------------------------------------------------------------------------------
@dataclass
class Branch:
    """What the table shows of a branch, and what the rules read."""

    number: int
    tick: int
    best_score: float | None
    evaluations: int
    spend_usd: float
    directory: Path


Rule = Callable[[list[Branch], str], tuple[int, str, dict[int, float | None]]]


def best_score(branches: list[Branch], _: str) -> tuple[int, str, dict[int, float | None]]:
    values = {b.number: b.best_score for b in branches}
    scored = [b for b in branches if b.best_score is not None]
    if not scored:
        return branches[0].number, "no branch has a delivered score of the first task: the lowest branch", values
    chosen = max(scored, key=lambda b: (b.best_score, -b.number))
    return chosen.number, f"the best score of the first task: {chosen.best_score:.6g}", values


def summary_metric(branches: list[Branch], name: str) -> tuple[int, str, dict[int, float | None]]:
    from station.study import load

    values: dict[int, float | None] = {}
    for b in branches:
        summary = load(b.directory).metrics()["summary"]
        found = summary[summary["metric"] == name]["value"]
        if found.empty:
            names = ", ".join(summary["metric"].astype(str))
            raise CliError(f"--choose metric:{name}: `station study` has no such summary metric; one of {names}")
        value = float(found.iloc[0])
        values[b.number] = None if value != value else value  # NaN: the metric says nothing here
    known = [b for b in branches if values[b.number] is not None]
    if not known:
        return branches[0].number, f"no branch has a value of {name}: the lowest branch", values
    chosen = max(known, key=lambda b: (values[b.number], -b.number))
    return chosen.number, f"the highest {name}: {values[chosen.number]:.6g}", values


# The rules by name (`metric:NAME` passes NAME).
def administrator(branches: list[Branch], argument: str) -> tuple[int, str, dict[int, float | None]]:
    from station.apps.multistart_admin import administrator_choice  # models and rooms: not for `--help`

    return administrator_choice(branches, argument)


RULES: dict[str, Rule] = {"best-score": best_score, "metric": summary_metric, "admin": administrator}


def parse_rule(text: str) -> tuple[str, str]:
    name, _, argument = text.partition(":")
    if name not in RULES or (name == "metric") != bool(argument):
        raise CliError(
            f"--choose {text!r}: give best-score or metric:NAME (a summary metric, e.g. metric:acts), or admin"
        )
    return name, argument


# -- the ledger ---------------------------------------------------------------------------------
def write_ledger(out: Path, ledger: dict[str, Any]) -> None:
    """Written whole or not at all: a new file, flushed to disk, renamed over the old one."""
    part = out / f".{LEDGER}.part"
    with open(part, "w", encoding="utf-8") as handle:
        json.dump(ledger, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(part, out / LEDGER)


def read_ledger(out: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((out / LEDGER).read_text(encoding="utf-8"))
        return data
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as err:
        raise CliError(f"{out / LEDGER} cannot be read ({err}); it is not a multistart's ledger") from None


def new_ledger(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    source = Path(args.source)
    if source.is_file():
        start, from_tick = "start", 0  # a new station: at tick 1, none complete
    elif Store.exists(source):
        start, from_tick = str(source.resolve()), _tick(source) - 1  # absolute: `out / start` is the start
    else:
        raise CliError(f"{source}: neither a config file nor a station directory")
    if out.exists() and any(out.iterdir()):
        raise CliError(f"{out} is not empty and holds no multistart; choose a new folder for --out")
    return {
        "source": str(source),
        "start": start,
        "branches": args.branches,
        "ticks": args.ticks,
        "from_tick": from_tick,
        "until_tick": from_tick + args.ticks,
        "branch": {str(n): {"state": "pending", "branch_seed": n} for n in range(1, args.branches + 1)},
        "choice": None,
        "installed": False,
    }


def check_same(ledger: dict[str, Any], args: argparse.Namespace, out: Path) -> None:
    asked = {"source": str(Path(args.source)), "branches": args.branches, "ticks": args.ticks}
    differ = [f"{key} {ledger[key]} (asked {value})" for key, value in asked.items() if ledger[key] != value]
    if differ:
        raise CliError(
            f"{out} holds a multistart with other settings: {'; '.join(differ)}; run it with those, or use a new --out"
        )


# -- the command --------------------------------------------------------------------------------
def cmd_multistart(args: argparse.Namespace) -> int:
    for name in ("branches", "ticks", "parallel"):
        if getattr(args, name) < 1:
            raise CliError(f"--{name} must be at least 1 (got {getattr(args, name)})")
    rule = parse_rule(args.choose)
    out = Path(args.out)
    ledger = read_ledger(out) if out.is_dir() else None
    if ledger is None:
        ledger = new_ledger(args, out)
        out.mkdir(parents=True, exist_ok=True)
    else:
        check_same(ledger, args, out)
    ledger["on"] = args.on  # where its branches run from now on (each resumes from its own last turn)
    try:
        with run_lock(out):  # one multistart per folder (run.lock, as a station's)
            return _multistart(out, ledger, args, rule)
    except StationBusy:
        raise CliError(f"a multistart in {out} is already running in another process") from None


def _multistart(out: Path, ledger: dict[str, Any], args: argparse.Namespace, rule: tuple[str, str]) -> int:
    write_ledger(out, ledger)
    start = out / ledger["start"]
    if ledger["start"] == "start" and not Store.exists(start):
        _create_start(Path(ledger["source"]), start)
    (out / "branches").mkdir(exist_ok=True)
    if "start_spend" not in ledger:  # counted once against the caps, whatever the branches spend
        ledger["start_spend"] = asdict(spent(start))
        write_ledger(out, ledger)
    for number, entry in ledger["branch"].items():
        if entry["state"] == "pending":
            _fork(start, out, number, ledger)
    branches = [int(n) for n in ledger["branch"]]
    if not _run_branches(out, ledger, args.parallel):
        return 1
    start_usd = ledger["start_spend"]["usd"]  # each branch carries the start's spend: the table shows its own
    rows = [replace(row, spend_usd=row.spend_usd - start_usd) for row in map(_branch_row, repeat(out), branches)]
    _choose(out, ledger, rows, rule)
    _install(out, ledger)
    return 0


def _create_start(config_file: Path, start: Path) -> None:
    from station.apps.task_checks import check_folder_tasks, remember_checks
    from station.apps.world import Station
    from station.core.config import load_config

    config = load_config(config_file)
    passed = check_folder_tasks(config, start, "nothing was created", lambda line: print(line, file=sys.stderr))
    Station.create(start, config).close()  # whole or not at all
    remember_checks(start, passed)


def _fork(start: Path, out: Path, number: str, ledger: dict[str, Any]) -> None:
    """Branch `number`: the start replayed into a new directory, with its branch seed. It is made under a
    temporary name and renamed when complete, so a fork cut short is simply made again."""
    final = out / "branches" / number
    if not Store.exists(final):
        building = out / "branches" / f".{number}.forking"
        shutil.rmtree(building, ignore_errors=True)
        with open(out / "branches" / f"{number}.log", "a", encoding="utf-8") as log:
            with contextlib.redirect_stdout(log):
                replay(start, building, ledger["from_tick"], ledger["branch"][number]["branch_seed"])
        carry(building, Spent(**ledger["start_spend"]))  # a replay spends nothing: its caps count the start's
        os.rename(building, final)
    ledger["branch"][number]["state"] = "forked"
    write_ledger(out, ledger)
    print(f"branch {number}: forked from {start} at tick {ledger['from_tick']} (branch seed {number})")


def _tick(directory: Path) -> int:
    store = Store(directory)
    try:
        return int(store.get_meta("tick"))
    finally:
        store.close()


def _die_with_parent() -> None:
    """In a branch's process before it starts: it is killed when the multistart dies (Linux), so that a
    multistart killed and started again never finds its branches still running."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _run_branches(out: Path, ledger: dict[str, Any], parallel: int) -> bool:
    """Run every branch not done to the multistart's last tick, at most `parallel` at once, each as
    a `station run` process, until all are done or their spend together reaches a station cap (then
    they are stopped, the ledger says why, and the choice is made among them as they are: see
    multistart_spend.py). False when one failed (the others run on; run again to retry it)."""
    caps = _start_caps(out / ledger["start"])
    waiting = [n for n, entry in ledger["branch"].items() if entry["state"] != "done"]
    running: dict[str, BranchRun] = {}
    failed = False
    reached = ledger.get("cap_reached") or cap_reached(caps, _total_spend(out, ledger))
    try:
        while (waiting or running) and not reached:
            while waiting and len(running) < parallel:
                number = waiting.pop(0)
                running[number] = _start_branch(out, number, ledger)
            time.sleep(POLL_S)
            reached = cap_reached(caps, _total_spend(out, ledger))
            for number, process in list(running.items()):
                if process.poll() is None:
                    continue
                del running[number]
                reached = reached or _paused_at_cap(out, number, process.returncode)
                if not reached:
                    failed |= not _branch_ended(out, number, ledger, process.returncode)
        if reached:
            _stop_at_cap(out, ledger, reached, running)
    except KeyboardInterrupt:
        for process in running.values():  # a local one got it from the terminal too; a Ray task's run gets it so
            process.send_signal(signal.SIGINT)
        for process in running.values():
            process.wait()  # each commits its turn in flight and stops
        print(f"interrupted; `station multistart` with the same arguments resumes ({out / LEDGER})", file=sys.stderr)
        return False
    return not failed


def _start_caps(start: Path) -> BudgetConfig:
    from station.core.config import parse_config

    store = Store(start)
    try:
        return parse_config(store.get_meta("config"), f"{start}/station.db", stored=True).budget
    finally:
        store.close()


def _total_spend(out: Path, ledger: dict[str, Any]) -> Spent:
    """The start's spend once, plus each branch's own (what it spent beyond the start's, which it carries)."""
    start = Spent(**ledger["start_spend"])
    return sum((spent(out / "branches" / n) - start for n in ledger["branch"]), start)


def _paused_at_cap(out: Path, number: str, code: int) -> str | None:
    """A branch's own Ledger paused it (exit 3) before a call would cross a station cap: the branches
    together have reached it too, since each carries the start's spend."""
    from station.apps.report import PAUSE_FILE

    pause = out / "branches" / number / PAUSE_FILE
    why = pause.read_text(encoding="utf-8").strip() if code == 3 and pause.exists() else ""
    return f"branch {number} paused at a station cap: {why}" if "budget.station_" in why else None


def _stop_at_cap(out: Path, ledger: dict[str, Any], reached: str, running: dict[str, BranchRun]) -> None:
    """Stop the running branches as `station pause` would (each commits its turn in flight), record why
    (before, so that a multistart killed meanwhile never runs a branch again), and go on to the choice."""
    ledger["cap_reached"] = reached
    write_ledger(out, ledger)
    for process in running.values():
        process.send_signal(signal.SIGINT)
    for process in running.values():
        process.wait()
    for entry in ledger["branch"].values():
        if entry["state"] != "done":
            entry["state"] = "stopped"
    write_ledger(out, ledger)
    print(
        clean(
            f"{reached}; the branches were stopped and one is chosen among them as they are. The installed "
            "station counts every branch's spend: raise the cap there (station set DIR budget.station_usd "
            "AMOUNT) to run it on"
        ),
        file=sys.stderr,
    )


def _start_branch(out: Path, number: str, ledger: dict[str, Any]) -> BranchRun:
    directory = out / "branches" / number
    if is_running(directory):
        raise CliError(f"branch {number} ({directory}) is being run by another process; stop it, then run this again")
    ledger["branch"][number]["state"] = "running"
    write_ledger(out, ledger)
    log = open(out / "branches" / f"{number}.log", "ab")
    command = [sys.executable, "-m", "station.apps.cli", "run", "--dir", str(directory)]
    command += ["--until-tick", str(ledger["until_tick"]), "--no-multistart"]  # a branch starts no multistart
    print(f"branch {number}: running to tick {ledger['until_tick']}")
    with log:
        if ledger.get("on") == "ray":  # the same run as a Ray task (multistart_ray.py)
            return start_on_ray(directory, out / "branches" / f"{number}.log", command[3:])
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=_die_with_parent)


def _branch_ended(out: Path, number: str, ledger: dict[str, Any], code: int) -> bool:
    tick = _tick(out / "branches" / number)
    if code == 0 and tick > ledger["until_tick"]:
        ledger["branch"][number]["state"] = "done"
        write_ledger(out, ledger)
        print(f"branch {number}: done (tick {ledger['until_tick']})")
        return True
    print(
        f"branch {number}: its run stopped at tick {tick} (exit {code}); see {out / 'branches' / f'{number}.log'}, "
        "then run the same command again",
        file=sys.stderr,
    )
    return False


def _branch_row(out: Path, number: int) -> Branch:
    from station.apps import report
    from station.apps.world import Station

    station = Station.open_to_read(out / "branches" / str(number))
    try:
        data = report.status(station, running=False)
    finally:
        station.close()
    counts = data["counts"]
    best = counts.get("research_best", {})
    first = min(best, key=report.natural_order) if best else None
    delivered = sum(v for k, v in counts["submissions"].items() if k not in ("queued", "running", "undelivered"))
    return Branch(
        number, data["tick"] - 1, best[first]["score"] if first else None, delivered, data["spend"]["usd"], station.dir
    )


def _choose(out: Path, ledger: dict[str, Any], rows: list[Branch], rule: tuple[str, str]) -> None:
    name, argument = rule
    asked = name if not argument else f"{name}:{argument}"
    done = ledger["choice"]
    installed = done is not None and (ledger["installed"] or (out / "station").exists())
    if installed and done["rule"] != asked:
        raise CliError(
            f"{out} already chose branch {done['branch']} by {done['rule']} and installed it; use a new --out"
        )
    chosen, why, values = RULES[name](rows, argument)
    if installed:
        chosen, why = done["branch"], done["why"]  # the same rule over the same finished branches
    print(clean(_table(rows, values, asked)))
    from station.apps.multistart_admin import choice_record

    record = choice_record(out) if name == "admin" else {}  # its reports, and what its interviews cost
    ledger["choice"] = {"rule": asked, "branch": chosen, "why": why, **record}
    ledger["spend_usd"] = round(sum(b.spend_usd for b in rows) + record.get("spend_usd", 0.0), 6)
    write_ledger(out, ledger)
    print(f"chosen: branch {chosen} ({why}); every branch's spend together: ${ledger['spend_usd']:.4f}")


def _table(rows: list[Branch], values: dict[int, float | None], rule: str) -> str:
    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.6g}"

    extra = rule.partition(":")[2]
    head = ["branch", "tick", "best score", "evaluations", "spend $", *([extra] if extra else [])]
    lines = [head]
    for b in rows:
        line = [str(b.number), str(b.tick), shown(b.best_score), str(b.evaluations), f"{b.spend_usd:.4f}"]
        lines.append(line + ([shown(values[b.number])] if extra else []))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths)) for line in lines)


def _install(out: Path, ledger: dict[str, Any]) -> None:
    """The chosen branch copied to DIR/station (whole or not at all); the branches stay."""
    from station.apps.multistart_admin import deliver_guidance  # models and rooms: not for `--help`

    final = out / "station"
    chosen = ledger["choice"]["branch"]
    if not ledger["installed"]:
        if final.exists():  # installed, but the ledger was not yet told
            ledger["installed"] = True
        else:
            building = out / ".station.installing"
            shutil.rmtree(building, ignore_errors=True)
            shutil.copytree(out / "branches" / str(chosen), building, ignore=shutil.ignore_patterns("run.lock"))
            deliver_guidance(building, ledger["choice"])  # the administrator's advice, to its agents (admin only)
            start = Spent(**ledger["start_spend"])
            others = [spent(out / "branches" / n) - start for n in ledger["branch"] if n != str(chosen)]
            carry(building, sum(others, Spent()))  # its caps count the branches not chosen too
            os.rename(building, final)
            ledger["installed"] = True
        write_ledger(out, ledger)
    if ledger.get("into"):  # a multistart at stagnation: the copy is moved in as that station next
        print(f"branch {chosen} is chosen: it becomes the station {ledger['into']} ({out / LEDGER})")
    else:
        print(f"branch {chosen} is the station: `station run --dir {final}` runs it on ({out / LEDGER})")
