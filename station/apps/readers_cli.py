"""The reader commands `station papers`, `paper`, `thread` and `evaluations`: their arguments, and the
functions that run them. Light to import, so that building the `station` parser stays fast; the queries and the
rendering (rich, the rooms, the world) are in readers.py and imported when a command runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from station.apps.reader_choices import PAPER_STATES, ROOMS


def cmd_papers(args: argparse.Namespace) -> int:
    from station.apps.readers import list_papers, render_papers
    from station.apps.report import Terminal
    from station.apps.world import Station

    station = Station.open_to_read(args.dir)
    try:
        data = list_papers(
            station.store, include_unpublished=args.all, status=args.status, limit=args.limit, offset=args.offset or 0
        )
    finally:
        station.close()
    data.update(filtered=args.status is not None, limit=args.limit, offset=args.offset or 0)
    render_papers(data, Terminal())
    return 0


def cmd_paper(args: argparse.Namespace) -> int:
    from station.apps.readers import get_paper, get_submission, parse_paper_id, render_paper, render_submission
    from station.apps.report import Terminal
    from station.apps.world import Station

    kind, number = parse_paper_id(args.id, args.submission)
    station = Station.open_to_read(args.dir)
    try:
        if kind == "paper":
            paper = get_paper(station.store, number)
        else:
            sub = get_submission(station.store, number)
    finally:
        station.close()
    if kind == "paper":
        render_paper(paper, Terminal())
    else:
        render_submission(sub, Terminal())
    return 0


def cmd_thread(args: argparse.Namespace) -> int:
    from station.apps.readers import get_thread, render_thread
    from station.apps.report import Terminal
    from station.apps.world import Station

    station = Station.open_to_read(args.dir)
    try:
        thread = get_thread(
            station.store, args.room, args.id, lineage=args.lineage, limit=args.limit, offset=args.offset or 0
        )
    finally:
        station.close()
    render_thread(thread, Terminal())
    return 0


def cmd_evaluations(args: argparse.Namespace) -> int:
    from rooms.research.tasks import tasks_of
    from station.apps.readers import list_evaluations, render_evaluations
    from station.apps.report import Terminal
    from station.apps.world import Station
    from station.core.run_lock import is_running

    station = Station.open_to_read(args.dir)
    try:
        data = list_evaluations(
            station.store,
            tasks_of(station.ctx),
            task=args.task,
            sort=args.sort,
            limit=args.limit,
            offset=args.offset or 0,
            running=is_running(Path(args.dir)),
        )
    finally:
        station.close()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        render_evaluations(data, Terminal())
    return 0


def add_page_arguments(parser: argparse.ArgumentParser, what: str, limit: int, offset_default: str = "0") -> None:
    """--limit and --offset of a command that lists one page of `what` (a last line says how to see more)."""
    parser.add_argument(
        "--limit", type=int, default=limit, metavar="N", help=f"show at most N {what} (default {limit})"
    )
    parser.add_argument("--offset", type=int, metavar="K", help=f"skip the first K {what} (default: {offset_default})")


def add_reader_commands(sub: Any) -> None:
    """Register `papers`, `paper`, `thread` and `evaluations` on the `station` command's subparsers."""
    s = sub.add_parser("papers", help="the Archive's papers (and with --all the unpublished submissions)")
    s.add_argument("dir")
    s.add_argument("--all", action="store_true", help="also list submissions that were not published")
    s.add_argument(
        "--status", choices=PAPER_STATES, help="only submissions with this status (accepted = the published papers)"
    )
    add_page_arguments(s, "papers and submissions", 100)
    s.set_defaults(fn=cmd_papers)

    s = sub.add_parser("paper", help="one Archive paper with its review and replies (s:N: a submission)")
    s.add_argument("dir")
    s.add_argument("id", nargs="?", help="the paper's number in the Archive, or s:N for submission N")
    s.add_argument("--submission", type=int, metavar="N", help="show submission N and its reviewer dialogue")
    s.set_defaults(fn=cmd_paper)

    s = sub.add_parser("thread", help="one capsule thread: forum, mail, private note or paper")
    s.add_argument("dir")
    s.add_argument("id", type=int, help="the capsule's number in its room")
    s.add_argument("--room", choices=tuple(ROOMS), default="public", help="which room (default: public, the forum)")
    s.add_argument("--lineage", help="for private notes: whose (needed when several lineages have that number)")
    add_page_arguments(s, "messages", 50)
    s.set_defaults(fn=cmd_thread)

    s = sub.add_parser("evaluations", help="the research evaluations: author, status, score (--json for scripts)")
    s.add_argument("dir")
    s.add_argument("--task", metavar="N", help="only task N's evaluations")
    s.add_argument(
        "--sort",
        choices=("tick", "score"),
        default="tick",
        help="tick: in the order they were submitted (default); score: as the leaderboard ranks them, best first",
    )
    add_page_arguments(s, "evaluations", 100)
    s.add_argument("--json", action="store_true", help="the page as JSON, with raw scores and metrics")
    s.set_defaults(fn=cmd_evaluations)
