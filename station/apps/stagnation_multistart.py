"""A multistart when a research task stagnates (config `multistart.on_stagnation`, off by default).

When a task enters Stagnation (a `stagnation_history` row, made at the start of tick T), `station run`
stops before any turn of T, runs `station multistart` from the station at T (its last complete tick,
T-1, is the fork point) into DIR/multistarts/tick-T, and installs the chosen branch AS the station:
DIR's files go to DIR/multistarts/tick-T/before (the station as it was, still a station anyone can
open), the chosen branch's files come into DIR, and the run goes on. Once per episode: only the entry
into Stagnation starts one (Deep Stagnation and its new code names do not), so a task must be
Healthy again before it can start another.

The multistarts live inside the station directory (as its backups do): DIR stays a station (its
station.db is the one installed), and the branches and the archived station travel with it. Each
step is recorded in the multistart's ledger and can be done again, so a `station run` killed at any
moment resumes where it was when run again: the multistart resumes (no branch runs twice), and a swap
cut short finishes (each file is moved once; the ledger says which way).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from station.apps.cli_commands import CliError
from station.apps.multistart import cmd_multistart, new_ledger, parse_rule, read_ledger, write_ledger
from station.core.store import Store

if TYPE_CHECKING:  # `station --help` imports no pydantic
    from station.core.config import StationConfig

FOLDER = "multistarts"
ARCHIVE = "before"  # DIR/multistarts/tick-T/before: the station as it was when the task stagnated
STAYS = {FOLDER, "run.lock", "station.log"}  # DIR's own: the lock is held, the run's log goes on


def check(config: StationConfig) -> None:
    """A bad rule is refused before the station runs, naming the key."""
    from station.core.config import MultistartConfig

    if config.section(MultistartConfig).on_stagnation:
        try:
            parse_rule(config.section(MultistartConfig).choose)
        except CliError as err:
            raise CliError(f"multistart.choose: {err}") from None


def entered_stagnation(store: Store, tick: int) -> list[str]:
    """The research tasks that entered Stagnation at the start of `tick`."""
    if not store.one("SELECT 1 FROM sqlite_master WHERE name='stagnation_history'"):
        return []
    rows = store.all("SELECT task FROM stagnation_history WHERE status='Stagnation' AND tick=? ORDER BY id", (tick,))
    return [row["task"] for row in rows]


def pending(directory: Path) -> int | None:
    """The tick whose multistart is due before the station runs: one begun and not finished, or a
    stagnation at the current tick that no turn has followed yet (the run stopped right after it)."""
    store = Store(directory)
    try:
        tick = int(store.get_meta("tick"))
        begun = directory / FOLDER / f"tick-{tick}"
        if (begun / "multistart.json").exists():
            return tick
        if store.one("SELECT 1 FROM turns WHERE tick=?", (tick,)):
            return None
        return tick if entered_stagnation(store, tick) else None
    finally:
        store.close()


def finish_swap(directory: Path) -> None:
    """A swap cut short (DIR may hold no station.db meanwhile) is finished before anything else."""
    for ledger_file in sorted((directory / FOLDER).glob("tick-*/multistart.json")):
        ledger = read_ledger(ledger_file.parent)
        if ledger is not None and ledger.get("swap") in ("archiving", "moving in"):
            _swap(directory, ledger_file.parent, ledger)


def run_at(directory: Path, tick: int, config: StationConfig) -> int:
    """The multistart from the station at `tick` (resumed if begun), then its choice installed as DIR."""
    from station.core.config import MultistartConfig

    out = directory / FOLDER / f"tick-{tick}"
    ledger = read_ledger(out) if out.is_dir() else None
    if ledger is None or ledger.get("swap") is None:
        settings = config.section(MultistartConfig)
        print(
            f"stagnation at tick {tick}: a multistart of {settings.branches} branches x {settings.ticks} ticks "
            f"in {out} (multistart.on_stagnation)"
        )
        args = argparse.Namespace(
            source=str(directory.resolve()),
            branches=settings.branches,
            ticks=settings.ticks,
            parallel=settings.parallel,
            on="local",  # the branches as local processes, beside the station's own run
            out=str(out),
            choose=settings.choose,
        )
        if ledger is None:  # made here to say where the chosen branch goes
            out.mkdir(parents=True, exist_ok=True)
            write_ledger(out, {**new_ledger(args, out), "into": args.source})
        code = cmd_multistart(args)
        if code:
            print(f"the multistart in {out} did not finish; `station run` again resumes it", file=sys.stderr)
            return code
        ledger = read_ledger(out)
        assert ledger is not None  # written by the multistart
    _swap(directory, out, ledger)
    return 0


def _swap(directory: Path, out: Path, ledger: dict[str, Any]) -> None:
    """DIR's files to out/before, then the chosen branch's (out/station) into DIR. Each half moves what
    is left to move, and the ledger says which half is under way, so a swap cut short finishes."""
    archive, chosen = out / ARCHIVE, out / "station"
    if ledger.get("swap") is None:
        ledger["swap"] = "archiving"
        write_ledger(out, ledger)
    if ledger["swap"] == "archiving":
        archive.mkdir(exist_ok=True)
        _move_all(directory, archive)
        ledger["swap"] = "moving in"
        write_ledger(out, ledger)
    if ledger["swap"] == "moving in":
        if chosen.exists():
            _move_all(chosen, directory)
        ledger["swap"] = "done"
        write_ledger(out, ledger)
        print(
            f"branch {ledger['choice']['branch']} is the station now ({directory}); the station as it was at "
            f"tick {ledger['from_tick'] + 1} is in {archive}"
        )


def _move_all(source: Path, target: Path) -> None:
    for entry in sorted(source.iterdir()):
        if entry.name not in STAYS:
            os.rename(entry, target / entry.name)


class Watch:
    """The run's progress display, which also stops the run after a tick at whose start a task entered
    Stagnation (before any turn of the new tick), when the run would go on past it. One small query a
    tick, in the app, not on the engine's turn path."""

    def __init__(self, engine: Any, until: int | None) -> None:
        self.engine, self.status, self.until = engine, engine.on_progress, until
        self.fired: int | None = None

    def __call__(self, progress: Any) -> None:
        self.status(progress)
        tick = self.engine.ctx.tick
        if progress.kind == "tick" and (self.until is None or tick <= self.until):
            if entered_stagnation(self.engine.store, tick):
                self.fired = tick
                self.engine.stop.set()  # the loop stops before the next unit: no turn of this tick

    def done(self) -> None:
        getattr(self.status, "done", lambda: None)()
