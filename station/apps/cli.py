"""The `station` command: create, run, inspect, replay and operate stations."""

# This module builds the parser and runs a command line: it maps each command and its arguments to a
# function of cli_commands.py (or readers_cli.py), and turns the errors a command may end in into one line.
from __future__ import annotations

import argparse
import errno
import os
import sqlite3
import sys
from functools import partial
from pathlib import Path
from typing import Any

# Only light modules here: `station --help` and argument errors must answer at once. Each command
# imports the heavy ones (pydantic config, rich, the engine, the rooms) it needs.
from station.apps import stagnation_multistart
from station.apps.cli_commands import (
    CliError,
    cmd_agents,
    cmd_backup,
    cmd_dialogue,
    cmd_doctor,
    cmd_evaluate,
    cmd_export,
    cmd_init,
    cmd_operator,
    cmd_parse,
    cmd_replay,
    cmd_run,
    cmd_serve,
    cmd_set,
    cmd_spawn,
    cmd_status,
    cmd_task_check,
)
from station.apps.external_cli import add_external_command
from station.apps.multistart import add_multistart_command
from station.apps.readers_cli import add_page_arguments, add_reader_commands
from station.apps.study_cli import add_study_command
from station.apps.verify_cli import add_verify_command
from station.core.run_lock import StationBusy
from station.core.store import DB_NAME, StoreError, damaged
from station.core.terminal_text import clean


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="station", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    _add_station_commands(sub)
    add_reader_commands(sub)
    _add_tool_commands(sub)
    add_external_command(sub)
    add_verify_command(sub)
    add_study_command(sub)
    add_multistart_command(sub)
    _add_change_commands(sub)
    s = sub.add_parser("parse", help="print the actions found in agent replies (files or stdin) as JSON")
    s.add_argument("files", nargs="*")
    s.set_defaults(fn=cmd_parse)
    _add_operator_commands(sub)
    return p


def _add_station_commands(sub: Any) -> None:
    """Creating and running a station, and reading its state."""
    s = sub.add_parser("init", help="create a station directory from a config file")
    s.add_argument("config")
    s.add_argument("--dir", required=True)
    s.set_defaults(fn=cmd_init)

    s = sub.add_parser("run", help="run a station (creating it from CONFIG if needed), resumable")
    s.add_argument("config", nargs="?")
    s.add_argument("--dir", required=True)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--ticks", type=int, help="run this many ticks (counting the current one)")
    g.add_argument("--until-tick", type=int, help="run until this tick has finished")
    s.add_argument(
        "--no-multistart",
        action="store_true",
        help="start no multistart when a task stagnates, whatever multistart.on_stagnation says (a branch runs so)",
    )
    s.set_defaults(fn=partial(cmd_run, stagnation_multistart=stagnation_multistart))

    s = sub.add_parser("status", help="tick, state, agents and counts")
    s.add_argument("dir")
    s.add_argument("--json", action="store_true", help="the stable machine-readable shape (see docs/status.md)")
    s.set_defaults(fn=cmd_status)

    s = sub.add_parser("agents", help="the agents, their rooms, ages and lineages")
    s.add_argument("dir")
    s.add_argument("--all", action="store_true", help="include agents who left")
    add_page_arguments(s, "agents", 100)
    s.set_defaults(fn=cmd_agents)

    s = sub.add_parser("dialogue", help="an agent's turns, readable in a terminal")
    s.add_argument("dir")
    s.add_argument("agent")
    s.add_argument("--tick", type=int, help="only this tick")
    s.add_argument("--full", action="store_true", help="show whole prompts, not just their changes")
    add_page_arguments(s, "turns", 20, offset_default="the latest turns")
    s.set_defaults(fn=cmd_dialogue)


def _add_tool_commands(sub: Any) -> None:
    """Copies of a station, a submission run on its own, the web viewer and its export, the doctor."""
    s = sub.add_parser("replay", help="re-execute a station's recorded inputs into a new directory (a fork)")
    s.add_argument("source")
    s.add_argument("out")
    s.add_argument("--until-tick", type=int, help="stop after this tick (fork point)")
    s.add_argument(
        "--branch-seed",
        type=int,
        help="make the copy a branch: its models sample with this seed (default: the source's)",
    )
    s.set_defaults(fn=cmd_replay)

    s = sub.add_parser("backup", help="a consistent copy of the station database (safe while it runs)")
    s.add_argument("dir")
    s.add_argument("out")
    s.set_defaults(fn=cmd_backup)

    s = sub.add_parser("evaluate", help="run one submission through a task's evaluator in the sandbox")
    s.add_argument(
        "task", help="a station config file, a task folder, or a task name with parameters (circle_packing:n=32)"
    )
    s.add_argument("submission", help="the submission's Python file")
    s.add_argument("--task-id", help="with a config file: which of its tasks (default 1)")
    s.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="with a task name: where to run it (a config file brings its own)",
    )
    s.add_argument("--timeout", type=float, help="override the task's time limit (seconds)")
    s.add_argument("--json", action="store_true", help="print the whole result as JSON")
    s.set_defaults(fn=cmd_evaluate)

    s = sub.add_parser("task", help="work with task folders (docs/tasks.md)")
    task_sub = s.add_subparsers(dest="task_command", required=True, metavar="check")
    t = task_sub.add_parser(
        "check", help="check a task folder: its files, its scorer, its baselines' scores, and what agents read"
    )
    t.add_argument("folder")
    t.add_argument("--executor", choices=("local", "ray"), default="local", help="where to run the baselines")
    t.add_argument("--no-baselines", action="store_true", help="only read and check the files")
    t.set_defaults(fn=cmd_task_check)

    s = sub.add_parser(
        "serve", help="the web viewer and operator console of a station (open the login address it prints)"
    )
    s.add_argument("dir")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    s.add_argument("--port", type=int, default=8470)
    s.add_argument(
        "--token",
        help="a lasting operator token, at least 16 characters, for the login form and scripts' X-Station-Token "
        "header (required off loopback; better STATION_WEB_TOKEN: a command line is visible to other accounts)",
    )
    s.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests for this host name or address (repeatable; loopback names and "
        "the bound address always are)",
    )
    s.add_argument(
        "--public-read",
        action="store_true",
        help="let anyone who reaches the server read the pages without a login (operating still needs it)",
    )
    s.add_argument("--run", action="store_true", help="also run the station (pause and resume it from the page)")
    s.set_defaults(fn=cmd_serve)

    s = sub.add_parser("export", help="the whole station as a static HTML site, readable from disk")
    s.add_argument("dir")
    s.add_argument("--out", required=True, help="a new (or empty) folder for the site")
    s.add_argument("--force", action="store_true", help="replace the site of an earlier export in --out")
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("doctor", help="check each configured model's key and endpoint, and say what works")
    s.add_argument("target", help="a config file or a station directory")
    s.add_argument("--call", action="store_true", help="also send each model one tiny prompt (costs a little)")
    s.set_defaults(fn=cmd_doctor)


def _add_change_commands(sub: Any) -> None:
    """Operator commands that change a station's config or add an agent."""
    s = sub.add_parser(
        "set",
        help="change a safe config value (budget.*, prices.*, turns, ...) or a model "
        "setting (agents.N.model.name, reviewer.model.base_url, ...) of a station",
    )
    s.add_argument("dir")
    s.add_argument(
        "key",
        help="dotted key, e.g. budget.station_usd, or agents.0.model.name (N: the index of the "
        "agents: entry) and reviewer/grading/debugger.model.F, F one of base_url, name, api, timeout_s, "
        "max_retries, options, context_limit, max_output_tokens",
    )
    s.add_argument("value", help="a YAML value, e.g. 25, null, concurrent")
    s.add_argument(
        "--allow-new-endpoint",
        action="store_true",
        help="accept a model that sends an API key to an endpoint the station's config does not use",
    )
    s.set_defaults(fn=cmd_set)

    s = sub.add_parser("spawn", help="add one agent (an agents: entry as YAML) to a station")
    s.add_argument("dir")
    s.add_argument(
        "spec", help="the agent as YAML, e.g. '{kind: guest, model: {provider: scripted}}', or a file holding it"
    )
    s.add_argument(
        "--allow-new-endpoint",
        action="store_true",
        help="accept a model that sends an API key to an endpoint the station's config does not use",
    )
    s.set_defaults(fn=cmd_spawn)


def _add_operator_commands(sub: Any) -> None:
    """The operator's messages, answers, ends of sessions and pause."""
    for op, helptext in (
        ("message", "send a system message to an agent (or * for all)"),
        ("answer", "answer an agent's External Counter request"),
        ("end_agent", "end an agent's session at its next turn"),
        ("pause", "stop a running station cleanly after the turn in flight"),
    ):
        s = sub.add_parser(op.replace("_", "-"), help=helptext)
        s.add_argument("dir")
        if op == "message":
            s.add_argument("to")
            s.add_argument("text")
        elif op == "answer":
            s.add_argument("request", type=int)
            s.add_argument("text")
        elif op == "end_agent":
            s.add_argument("agent")
        s.set_defaults(fn=cmd_operator, op=op)


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # a reader that went away shows up here, not in a message as Python exits
    except BrokenPipeError:
        # `station status DIR | head -1`: the reader has what it wanted. Stop quietly, as Unix tools do when
        # SIGPIPE ends them (the shell shows 128 + SIGPIPE = 141); stdout goes to devnull so that nothing is
        # left to fail when Python flushes it at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("dir", "source", "out"):  # resolved once: below the CLI nothing depends on the cwd
        if isinstance(getattr(args, name, None), str):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    try:
        return args.fn(args)
    except (
        CliError,
        StationBusy,
        StoreError,
        ValueError,
    ) as err:  # ConfigError, TextsError, CommandError are ValueErrors
        print(f"station: {clean(str(err))}", file=sys.stderr)
        return 2
    except (OSError, sqlite3.DatabaseError) as err:
        line = storage_failure(err, getattr(args, "dir", None))
        if line is None:
            raise
        print(f"station: {line}", file=sys.stderr)
        return 2


def storage_failure(err: BaseException, directory: str | None) -> str | None:
    """One line for what the disk or the database did to a command (None: not such a failure).
    Every turn commits whole or not at all, so such a stop loses nothing that was committed."""
    where = directory or "the station directory"
    if getattr(err, "errno", None) == errno.ENOSPC or "database or disk is full" in str(err):
        return (
            f"the disk holding {where} is full ({err}); free some space and run the same command again: "
            "the station goes on from its last committed turn"
        )
    if isinstance(err, sqlite3.DatabaseError) and not isinstance(err, sqlite3.OperationalError):
        return damaged(Path(where) / DB_NAME, err)
    return None


if __name__ == "__main__":
    sys.exit(main())
