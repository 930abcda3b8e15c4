"""What each `station` command does: the functions the parser built in cli.py calls (the reader
commands are in readers_cli.py), and the live progress line of `run` and `replay`.

Light to import, like cli.py: each command imports the heavy modules (pydantic config, rich, the
engine, the rooms) it needs when it runs."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from station.core.run_lock import is_running, run_lock
from station.core.store import Store
from station.core.terminal_text import clean

if TYPE_CHECKING:
    from station.apps.world import Station
    from station.core.config import StationConfig
    from station.core.engine import Engine, Progress
    from station.core.room import Room


class CliError(Exception):
    pass


class StatusLine:
    """A live one-line progress display (rewritten in place on a terminal, one line a tick otherwise)."""

    RECENT_TICKS = 20  # failures are counted over this many ticks

    def __init__(self, station: Any = None, stream: Any = sys.stderr) -> None:
        self.stream, self.tty = stream, stream.isatty()
        self.start, self.turns = time.monotonic(), 0
        research = station is not None and "research" in station.ctx.rooms
        self.store = station.store if research else None  # read in the engine's thread, between units
        self.world = station.store if station is not None else None
        self._evals, self._evals_at = "", -1.0

    def __call__(self, p: Progress) -> None:
        if p.kind == "turn":
            self.turns += 1
        elapsed = time.monotonic() - self.start
        if p.kind == "wait":
            if self.tty:
                self.stream.write(f"\r\x1b[Ktick {p.tick:>5} | {p.note}")
                self.stream.flush()
            return
        rate = self.turns / elapsed if elapsed > 0 else 0.0
        where = f"{p.agent} in {p.room}" if p.agent else f"tick {p.tick} finished"
        line = (
            f"tick {p.tick:>5} | {where:<36} | {self.turns} turns, {rate:6.1f} turns/s | {elapsed:7.1f}s"
            + self._evaluations(p.tick, fresh=p.kind == "tick")
            + (self._endpoints() if p.kind == "tick" else "")
        )
        if self.tty:
            self.stream.write("\r\x1b[K" + line)
            self.stream.flush()
        elif p.kind == "tick":
            self.stream.write(line + "\n")

    def _evaluations(self, tick: int, *, fresh: bool) -> str:
        """Evaluation counts, refreshed at most once a second (they take a few queries), and at the end
        of each tick (`fresh`): the line a tick leaves says what was delivered in it."""
        if self.store is None:
            return ""
        if fresh or time.monotonic() - self._evals_at >= 1.0:
            from rooms.research import states

            self._evals_at = time.monotonic()
            c = states.counts(self.store, live=True, recent_ticks=self.RECENT_TICKS, tick=tick)
            # the outcomes no author is charged for are named only when there are some: they need the operator
            faults = (f", {c['scorer_failed']} scorer failures" if c["scorer_failed"] else "") + (
                f", {c['system_failed']} not run (system errors)" if c["system_failed"] else ""
            )
            self._evals = (
                f" | evals: {c['running']} running, {c['queued']} queued, "
                f"{c['failed']} failed{faults} in {self.RECENT_TICKS} ticks"
            )
        return self._evals

    def _endpoints(self) -> str:
        """The models whose calls go to a backup endpoint now (`backups:`), at the end of a tick."""
        if self.world is None:
            return ""
        from station.apps.report import endpoint_name, endpoints

        away = [e for e in endpoints(self.world) if e["endpoint"]]
        return "".join(f" | {e['model']} on {endpoint_name(e['endpoint'])}" for e in away)

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")


# -- commands ---------------------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> int:
    from station.apps.task_checks import check_folder_tasks, remember_checks
    from station.apps.world import Station
    from station.core.config import load_config

    config = load_config(args.config)
    passed = check_folder_tasks(config, Path(args.dir), "nothing was created", _say_to(sys.stdout))
    station = Station.create(args.dir, config)
    try:
        remember_checks(station.dir, passed)
        print(f"created station '{config.name}' at {args.dir} with {len(station.agents.active())} agents")
        _prepare(station, sys.stdout)
    finally:
        station.close()
    return 0


def _prepare(station: Station, stream: IO[str], warm_up: bool = False) -> None:
    """The research tasks' data and bounds, built before the first tick, one line per step
    (`warm_up`: and their scorers, in the process that runs the station)."""
    try:
        station.prepare_tasks(lambda step: print(step, file=stream, flush=True), warm_up)
    except ValueError as err:
        raise CliError(str(err)) from None


def _say_to(stream: IO[str]) -> Callable[[str], None]:
    return lambda line: print(line, file=stream, flush=True)


def cmd_run(args: argparse.Namespace, stagnation_multistart: Any = None) -> int:
    """`stagnation_multistart`: the module that runs a multistart when a task stagnates
    (station/apps/stagnation_multistart.py), given by cli.py (it imports this module, not this it)."""
    from station.apps.task_checks import check_folder_tasks, remember_checks
    from station.apps.world import Station
    from station.core.config import load_config
    from station.core.engine import Engine
    from station.core.runlog import station_log

    directory = Path(args.dir)
    if stagnation_multistart and not args.no_multistart and (directory / stagnation_multistart.FOLDER).is_dir():
        with run_lock(directory):  # a multistart's swap cut short may have left DIR without its station.db
            stagnation_multistart.finish_swap(directory)
    if Store.exists(directory):
        if args.config:
            print(
                f"resuming the existing station at {directory} (its stored config is used; "
                f"{args.config} is ignored: change a setting with `station set {directory} KEY VALUE`, "
                "e.g. agents.0.model.name)",
                file=sys.stderr,
            )
    elif args.config:
        config = load_config(args.config)
        passed = check_folder_tasks(config, directory, "nothing was created", _say_to(sys.stderr))
        Station.create(directory, config).close()
        remember_checks(directory, passed)
    else:
        raise CliError(f"no station at {directory}; give a config file to create one")
    with run_lock(directory), station_log(directory) as terminal:
        until = args.until_tick
        while True:  # once, or again after each multistart at stagnation (its chosen branch is DIR then)
            station = Station.open(directory)
            try:
                # a folder changed since its last check (or never checked) is checked again before any tick
                refusal = "the station did not run and is unchanged"
                remember_checks(directory, check_folder_tasks(station.config, directory, refusal, _say_to(terminal)))
                if args.ticks is not None:  # counted from the first tick, whatever multistarts come between
                    until, args.ticks = station.ctx.tick + args.ticks - 1, None
                at_stagnation = _at_stagnation(station, args, stagnation_multistart)
                tick = stagnation_multistart.pending(directory) if at_stagnation else None
                if tick is None:
                    _prepare(station, terminal, warm_up=True)
                    engine = Engine(station, on_progress=StatusLine(station, stream=terminal))
                    watch = stagnation_multistart.Watch(engine, until) if at_stagnation else None
                    if watch is not None:
                        engine.on_progress = watch
                    code = _drive(engine, station, None, until)
                    if watch is None or watch.fired is None or code:
                        return code
                    tick = watch.fired
            finally:
                station.close()  # stops the evaluator: runs in flight are killed and run again on resume
            assert at_stagnation is not None  # only a multistart at stagnation comes here
            if stagnation_multistart.run_at(directory, tick, at_stagnation):
                return 1


def _at_stagnation(station: Station, args: argparse.Namespace, stagnation_multistart: Any) -> StationConfig | None:
    """The station's config when it runs a multistart at stagnation (multistart.on_stagnation), else None."""
    from station.core.config import MultistartConfig

    if not stagnation_multistart or args.no_multistart:
        return None
    if not station.config.section(MultistartConfig).on_stagnation:
        return None
    stagnation_multistart.check(station.config)
    return station.config


def _drive(engine: Engine, station: Station, ticks: int | None, until: int | None) -> int:
    from station.apps import report
    from station.core.engine import StationPaused

    def request_stop(signum: int, frame: Any) -> None:
        engine.stop.set()  # the turn in flight finishes and commits first

    old = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    status = engine.on_progress
    pause_file = station.dir / report.PAUSE_FILE
    pause_file.unlink(missing_ok=True)
    try:
        why = engine.run(ticks=ticks, until_tick=until)
    except StationPaused as err:
        pause_file.write_text(f"{err}\n", encoding="utf-8")
        print(f"\nstation paused at tick {station.ctx.tick}: {clean(str(err))}", file=sys.stderr)
        return 3
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        done = getattr(status, "done", None)  # a StatusLine's, also through a multistart's Watch
        if done is not None:
            done()
    print(f"{why}; the station is at tick {station.ctx.tick} ({station.dir})")
    if "research" in station.ctx.rooms:
        _say_what_evaluations_wait(station, interrupted=engine.stop.is_set())
    return 0


def _say_what_evaluations_wait(station: Station, *, interrupted: bool) -> None:
    from rooms.research import states, views

    done = views.delivered_counts(station.store.db)
    print(
        f"evaluations: {done.get('finished', 0)} finished, {done.get('failed', 0)} failed, "
        f"{done.get('timed_out', 0)} timed out"
        + (f", {done['scorer_failed']} not scored (the task's scorer failed)" if done.get("scorer_failed") else "")
        + (f", {done['system_failed']} not run (system errors)" if done.get("system_failed") else "")
        + " (`station status` and the web viewer show each one)"
    )
    for task, health in sorted(states.scorer_health(station.store).items()):
        if health["failing"]:
            print(
                clean(
                    f"the scorer of task {task} fails: {health['recent_failed']} of its last {health['recent']} "
                    f"evaluations ({health['failed']} in all; the last: {health['last_error']}); the authors "
                    "were not charged: mend the task"
                )
            )
    for failure in states.recent_system_failures(station.store)[:3]:
        print(clean(f"evaluation #{failure['id']} was not run: {failure['error']}"))
    found = states.open_evaluations(station.store, live=True)
    if interrupted:  # a run cut short by Ctrl-C loses its progress: say which
        for e in found:
            if e.state == "running":
                print(
                    f"evaluation #{e.id} is running ({e.elapsed_s:.0f} s): it is stopped now and runs again from "
                    "the start when the station runs again"
                )
    if found:
        print(
            f"{len(found)} evaluation(s) not delivered yet ({', '.join(f'#{e.id}' for e in found)}); "
            "they go on when the station runs again"
        )


def cmd_status(args: argparse.Namespace) -> int:
    from station.apps import report
    from station.apps.world import Station

    station = Station.open_to_read(args.dir)
    try:
        data = report.status(station, running=is_running(Path(args.dir)))
    finally:
        station.close()
    print(json.dumps(data, indent=2) if args.json else report.status_text(data))
    return 0


def open_core_to_read(directory: str) -> Store:
    """The station's database for a command that reads only the engine's own tables (agents, turns):
    no room is built or imported, which a call of `station agents` or `dialogue` would otherwise pay."""
    from station.core.store import CORE_MIGRATIONS

    store = Store(directory)
    try:
        store.migrate("station", CORE_MIGRATIONS)  # as Station.open_to_read: an older station reads the same
    except BaseException:
        store.close()
        raise
    return store


def cmd_agents(args: argparse.Namespace) -> int:
    from station.apps import report

    store = open_core_to_read(args.dir)
    try:
        table = report.agents_table(store, include_ended=args.all, limit=args.limit, offset=args.offset or 0)
    finally:
        store.close()
    print(table, end="")  # it ends in a newline
    return 0


def cmd_dialogue(args: argparse.Namespace) -> int:
    from station.apps import report

    store = open_core_to_read(args.dir)
    try:
        report.print_dialogue(
            store,
            args.agent,
            tick=args.tick,
            full=args.full,
            limit=args.limit,
            offset=args.offset,
            console=report.Terminal(),
        )
    finally:
        store.close()
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    code, until = replay(Path(args.source), Path(args.out), args.until_tick, args.branch_seed, StatusLine())
    print(
        f"replayed {args.source} up to tick {until} into {args.out}; `station run --dir {args.out}` continues it on its own"
    )
    return code


def replay(
    source_dir: Path, out: Path, until_tick: int | None, branch_seed: int | None, on_progress: Any = None
) -> tuple[int, int]:
    """Re-execute `source_dir`'s recorded inputs into the new directory `out` up to `until_tick` (its
    last complete tick by default): a fork. `branch_seed`: the fork's (default: the source's, so that
    a replay of a branch continues as the branch would). Returns the run's exit code and the tick."""
    from station.apps.world import Station
    from station.core.config import parse_config
    from station.core.context import ReplayDiverged
    from station.core.engine import Engine

    source = Store(source_dir)
    if Store.exists(out):
        raise CliError(f"{out} already holds a station; replay needs a new directory")
    # The config the source began with: its `station set`s are recorded operator commands, applied again below.
    config_data = source.get_meta("initial_config") or source.get_meta("config")
    config = parse_config(config_data, f"{source_dir}/station.db", stored=True)
    seed = source.get_meta("branch_seed") if branch_seed is None else branch_seed
    station = Station.create(out, config, recorded=True, branch_seed=seed)
    last_complete = source.get_meta("tick") - 1
    until = min(until_tick, last_complete) if until_tick is not None else last_complete
    engine = Engine(station, replay_source=source, on_progress=on_progress)
    with run_lock(out):
        try:
            code = _drive(engine, station, None, until)
        except ReplayDiverged as err:
            raise CliError(f"replay diverged: {err}") from None
        finally:
            station.close()
            source.close()
    return code, until


def cmd_backup(args: argparse.Namespace) -> int:
    store = Store(args.dir)
    target = Path(args.out)
    if target.exists():
        raise CliError(f"{target} exists; choose a new file")
    store.backup(target)
    print(
        f"backed up {args.dir} (tick {store.get_meta('tick')}) to {target}; "
        f"restore by putting it in a new directory as station.db"
    )
    return 0


def cmd_parse(args: argparse.Namespace) -> int:
    from station.core.actions import parse_actions

    def read(name: str) -> str:
        try:
            return Path(name).read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            raise CliError(f"cannot read {name}: {err.strerror or err}") from None

    sources = [(name, read(name)) for name in args.files] or [("-", sys.stdin.read())]
    for name, text in sources:
        actions = [a.to_json() for a in parse_actions(text)]
        print(json.dumps({"file": name, "actions": actions}, ensure_ascii=False))
    return 0


def cmd_operator(args: argparse.Namespace) -> int:
    from station.core import commands

    store = Store(args.dir)
    if args.op == "pause" and not is_running(Path(args.dir)):
        raise CliError(f"station {args.dir} is not running; there is nothing to pause")
    command: dict[str, Any] = {"op": args.op}
    if args.op == "message":
        command.update(to=args.to, text=args.text)
    elif args.op == "answer":
        command.update(request=args.request, text=args.text)
    elif args.op == "end_agent":
        command.update(agent=args.agent)
    commands.validate(command)
    # reads the store only: fine while the station runs
    commands.check_target(store, command, _rooms_answering(store) if args.op == "answer" else ())
    number = commands.queue(store, command)
    print(f"operator command #{number} ({args.op}) queued; it takes effect {_when(args.dir)}")
    return 0


def _rooms_answering(store: Store) -> list[type[Room]]:
    """The station's room classes, which say whose operator request an answer is (importing every room:
    only `answer` needs them)."""
    from station.apps import endpoints
    from station.apps.world import station_room_classes

    return station_room_classes(endpoints.stored_config(store))


def cmd_set(args: argparse.Namespace) -> int:
    """Change a safe config value or a model setting of a station (applied between turns if it is running)."""
    from station.apps import endpoints
    from station.apps.world import check_room_set
    from station.core import commands

    store = Store(args.dir)
    command = commands.set_command(store, args.key, args.value)
    try:
        check_room_set(endpoints.stored_config(store), args.key, command.get("value"))
    except ValueError as err:
        raise CliError(str(err)) from None
    for line in endpoints.check_set(
        endpoints.stored_config(store), args.key, command.get("value"), allow=args.allow_new_endpoint
    ):  # no key may go somewhere new unasked
        print(line, file=sys.stderr)
    number = commands.queue(store, command)
    print(f"{args.key} = {command['value']!r} queued as operator command #{number}; it takes effect {_when(args.dir)}")
    return 0


def cmd_spawn(args: argparse.Namespace) -> int:
    """Add one agent (an `agents:` entry) to a station; it acts from the next turn."""
    import yaml

    from station.apps import endpoints
    from station.core import commands
    from station.core.config import beside

    text = args.spec
    source = Path("spec.yaml")  # a spec given inline: its paths are relative to the working directory
    try:  # the spec itself, or a file holding it
        if Path(text).is_file():
            source, text = Path(text), Path(text).read_text(encoding="utf-8")
    except OSError:  # a long YAML text is no file name
        pass
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise CliError(f"the agent spec is not valid YAML: {err}") from None
    if not isinstance(spec, dict):
        raise CliError("the agent spec must be a mapping, like an entry of agents: in a config")
    model = spec.get("model")
    if isinstance(model, dict) and isinstance(model.get("replay_file"), str):  # as in a config file: beside it
        spec["model"] = {**model, "replay_file": beside(source, model["replay_file"])}
    command = commands.validate({"op": "spawn", "agent": spec})
    store = Store(args.dir)
    for line in endpoints.check_spawn(endpoints.stored_config(store), spec, allow=args.allow_new_endpoint):
        print(line, file=sys.stderr)
    number = commands.queue(store, command)
    print(f"operator command #{number} (spawn) queued; it takes effect {_when(args.dir)}")
    return 0


def _when(directory: str) -> str:
    return "now" if is_running(Path(directory)) else "when the station next runs"


def cmd_doctor(args: argparse.Namespace) -> int:
    from station.apps.doctor import diagnose, render
    from station.core.config import load_config, parse_config

    target = Path(args.target)
    if target.is_dir():
        config = parse_config(Store(target).get_meta("config"), f"{target}/station.db", stored=True)
    else:
        config = load_config(target)
    findings = diagnose(config, call=args.call)
    print(clean(render(findings)), end="")  # servers' error texts are untrusted
    return 0 if all(f.ok for f in findings) else 1


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from station.apps.web.access import WILDCARDS, check_token
    from station.apps.web.app import create_app
    from station.apps.web.branches import is_multistart
    from station.apps.web.runner import StationRunner

    # An empty STATION_WEB_TOKEN is a token given, and refused: it must not pass for "no token".
    token, source = args.token, "--token"
    if token is None:
        token, source = os.environ.get("STATION_WEB_TOKEN"), "STATION_WEB_TOKEN"
    check_token(token, source)
    base = login_base(args.host, args.port)
    if is_multistart(Path(args.dir)):
        return _serve_multistart(args, token, base)
    runner = StationRunner(args.dir)
    app = create_app(
        args.dir,
        host=args.host,
        token=token,
        runner=runner,
        allow_hosts=args.allow_host,
        public_read=args.public_read,
        announce_login=lambda path: print(
            f"that login address is used up; the next one: {base}{path}", file=sys.stderr
        ),
    )
    if args.run:
        print(runner.resume(), file=sys.stderr)
    print(
        f"serving {args.dir} on http://{args.host}:{args.port}/ (Ctrl-C stops the server"
        + (" and the station, after its turn in flight)" if args.run else ")"),
        file=sys.stderr,
    )
    # Only this terminal sees it: other accounts on the machine reach the port, not the address.
    print(f"log in (the address works once): {base}{app.state.login.address()}", file=sys.stderr)
    if args.host in WILDCARDS and not args.allow_host:
        print(
            "only loopback names are answered until you add, with --allow-host, the name or address "
            "others reach this machine by",
            file=sys.stderr,
        )
    if args.public_read:
        print("--public-read: anyone who can reach the server may read every page", file=sys.stderr)
    try:
        # proxy_headers off: X-Forwarded-For must not choose the client address that wrong tokens count against
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", proxy_headers=False)
    finally:
        runner.pause()
        runner.wait(timeout=600)
    return 0


def _serve_multistart(args: argparse.Namespace, token: str | None, base: str) -> int:
    """`station serve MULTISTART_DIR`: the branches page (web/branches_app.py); its branches are run by
    `station multistart`, not from the page."""
    import uvicorn

    from station.apps.web.branches_app import create_multistart_app

    if args.run:
        raise CliError(f"{args.dir} is a multistart: `station multistart` runs its branches; serve it without --run")
    app = create_multistart_app(
        args.dir,
        host=args.host,
        token=token,
        allow_hosts=args.allow_host,
        public_read=args.public_read,
        announce_login=lambda path: print(
            f"that login address is used up; the next one: {base}{path}", file=sys.stderr
        ),
    )
    print(f"serving the multistart {args.dir} on http://{args.host}:{args.port}/ (Ctrl-C stops it)", file=sys.stderr)
    print(f"log in (the address works once): {base}{app.state.login.address()}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", proxy_headers=False)
    return 0


def login_base(host: str, port: int) -> str:
    """The start of the printed login address: the bound address, or loopback for a wildcard bind."""
    from station.apps.web.access import WILDCARDS

    name = "127.0.0.1" if host in WILDCARDS else host
    return f"http://[{name}]:{port}" if ":" in name else f"http://{name}:{port}"


def cmd_export(args: argparse.Namespace) -> int:
    from station.apps.web.branches import is_multistart
    from station.apps.web.export import export

    if not (Store.exists(args.dir) or is_multistart(Path(args.dir))):
        raise CliError(f"no station (and no multistart) at {args.dir}")
    tty = sys.stderr.isatty()

    def show(count: int, url: str) -> None:
        if tty:
            sys.stderr.write(f"\r\x1b[K{count} pages · {url[:60]}")

    pages = export(args.dir, args.out, force=args.force, progress=show)
    if tty:
        sys.stderr.write("\n")
    print(f"exported {pages} pages of {args.dir} to {args.out}; open {Path(args.out) / 'index.html'}")
    return 0


def cmd_task_check(args: argparse.Namespace) -> int:
    from evaluators.base import create_task
    from station.apps.task_checks import check_task
    from station.core.config import ExecutorConfig
    from station.executors import create_executor

    task = create_task("folder", {"path": args.folder})  # a TaskFolderError (a ValueError) says what is wrong
    executor = create_executor(ExecutorConfig(kind=args.executor), hide=task.private_paths())
    try:
        check = check_task(
            task,  # type: ignore[arg-type]
            executor,
            baselines=not args.no_baselines,
            twice=True,  # an evaluator that gives one program two scores shows noise as progress: said here
            out=lambda line: print(clean(line), file=sys.stderr),
            step=elapsed_line,
        )
    finally:
        executor.close()
    print("--- what agents read with `read` ---", file=sys.stderr)
    print(task.spec())
    return 1 if check.problems or check.not_run else 0


@contextmanager
def elapsed_line(what: str):
    """A live "what: N s" line on a terminal while a long call runs (nothing when piped)."""
    import threading

    if not sys.stderr.isatty():
        yield
        return
    done, began = threading.Event(), time.monotonic()

    def show() -> None:
        while not done.wait(1.0):
            sys.stderr.write(f"\r{what}: {time.monotonic() - began:.0f} s ")
            sys.stderr.flush()

    thread = threading.Thread(target=show, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        sys.stderr.write("\r\033[K")


def _sandbox_line(result: dict[str, Any]) -> str:
    """The layers of the sandbox the submission really ran in (for an OpenEvolve or ShinkaEvolve
    folder, the evaluator's run and its companion, which ran the program), or that nothing ran."""
    if result["isolation"]:
        return ", ".join(result["isolation"])
    return "nothing ran: the submission was refused before any run" if not result["duration_s"] else "none"


def cmd_evaluate(args: argparse.Namespace) -> int:
    from rooms.research.standalone import evaluate, resolve_task
    from rooms.research.text import clip_log
    from station.apps.report import shown
    from station.core.config import ExecutorConfig
    from station.executors import create_executor

    task, executor_config = resolve_task(args.task, args.task_id)
    if args.timeout is not None:
        task.timeout_s = args.timeout
    path = Path(args.submission)
    try:
        code = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CliError(f"cannot read {path}: {err}") from None
    executor = create_executor(executor_config or ExecutorConfig(kind=args.executor), hide=task.private_paths())
    try:
        print(f"evaluating {path} on '{task.title}' ({executor.describe()}) ...", file=sys.stderr)
        with elapsed_line("evaluating"):
            result = evaluate(task, code, executor)
    finally:
        executor.close()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        score = "n.a." if result["score"] is None else f"{result['score']:.{task.display_precision}f}"
        lines = [
            f"task:      {task.title}",
            f"status:    {result['status']}" + (f" ({result['error']})" if result.get("error") else ""),
            f"score:     {score}",
        ]
        lines += [
            f"  {name}: {shown(value, task.metric_formats.get(name))}"
            for name, value in sorted(result["metrics"].items())
        ]
        lines += [
            f"details:   {result['details'] or '-'}",
            f"duration:  {result['duration_s']:.2f} s",
            f"sandbox:   {_sandbox_line(result)}",
        ]
        for stream in ("stdout", "stderr"):
            text = result[stream] if stream == "stdout" else (result["stderr"] or result.get("traceback") or "")
            if text.strip():
                lines += [f"--- {stream} ---", clip_log(text, 4000).rstrip()]
        print(clean("\n".join(lines)))  # the code's own output: no escape sequences reach the terminal
    return 0 if result["success"] else 1
