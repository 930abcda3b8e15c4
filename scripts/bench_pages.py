#!/usr/bin/env python3
"""Time every page and reader command a user looks at, on a big station (target: each under 300 ms).

Usage: scripts/bench_pages.py [--station DIR] [--agents 1000] [--ticks 10000] [--repeats 3] [--target-ms 300]
       [--export-pages 200] [--only SUBSTRING ...] [--profile]

Without --station the station is made by scripts/make_big_station.py (cached under
runs/big-<agents>x<ticks>, so a second run reuses it). Web pages are fetched in-process through the real
app, logged in as the operator is (fastapi's TestClient); CLI commands run in-process through
`station.apps.cli.main` with their output captured. Each is run once to warm up, then --repeats times: the
table shows the median and the largest time, and "rows": the table rows and list items of a page, the
lines of a command's output. `station export` is timed over its first --export-pages pages (ms per page
and the growth of the process's peak memory). --profile prints a cProfile of every entry over the target.

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import re
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # noqa: E402
from make_big_station import make_big_station  # noqa: E402

from station.apps import cli  # noqa: E402
from station.apps.web.app import create_app  # noqa: E402
from station.apps.web.export import export  # noqa: E402
from station.core.store import DB_NAME  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"<tr[ >]|<li[ >]")


def q(db: sqlite3.Connection, sql: str, params: tuple = ()) -> Any:
    try:
        row = db.execute(sql, params).fetchone()
    except sqlite3.OperationalError:  # a table this station lacks
        return None
    return row[0] if row else None


def pick(directory: Path) -> tuple[list[tuple[str, str]], list[tuple[str, list[str]]]]:
    """(label, url) of the pages and (label, argv) of the commands to time, chosen from the station's data."""
    db = sqlite3.connect(f"file:{directory / DB_NAME}?mode=ro", uri=True)
    d = str(directory)
    living = q(db, "SELECT name FROM agents WHERE state='active' ORDER BY position DESC LIMIT 1")
    old = q(db, "SELECT name FROM agents WHERE state='ended' AND kind='recursive' ORDER BY position LIMIT 1")
    lineage = q(db, "SELECT lineage FROM agents WHERE lineage IS NOT NULL GROUP BY lineage ORDER BY COUNT(*) DESC")
    last = q(db, "SELECT MAX(tick) FROM turns") or 1
    paper = q(db, "SELECT number FROM capsules WHERE room='archive' AND deleted=0 ORDER BY number DESC LIMIT 1")
    thread = q(db, "SELECT number FROM capsules WHERE room='public_memory' ORDER BY message_count DESC LIMIT 1")
    mail = q(db, "SELECT number FROM capsules WHERE room='mail' ORDER BY message_count DESC LIMIT 1")
    evaluation = q(db, "SELECT MAX(id) FROM evaluations")
    submission = q(db, "SELECT MAX(id) FROM paper_submissions")
    db.close()
    pages = [
        ("overview", "/"),
        ("overview, every event", "/?events=all"),
        ("agents index", "/agents"),
        ("agents index, page 40", "/agents?page=40"),
        ("agents index, active", "/agents?state=active"),
        ("agents index, one lineage", f"/agents?lineage={quote(lineage or '')}"),
        ("agent, living (latest page)", f"/agents/{quote(living or '')}"),
        ("agent, long ended", f"/agents/{quote(old or '')}?page=1"),
        ("agent, new turns (live)", f"/agents/{quote(living or '')}/turns?after={last - 5}"),
        ("study (default window)", "/study"),
        ("study, whole history", f"/study?first=1&last={last}"),
        ("study, an old window", "/study?first=2000&last=2500"),
        ("lineages", "/lineages"),
        ("lineages, page 20", "/lineages?page=20"),
        ("operator", "/operator"),
        ("api/live", "/api/live"),
        ("papers", "/papers"),
        ("papers, every submission", "/papers?show=all"),
        ("paper", f"/papers/{paper}"),
        ("submission", f"/submissions/{submission}"),
        ("forum", "/forum"),
        ("forum thread (longest)", f"/forum/{thread}"),
        ("mail", "/mail"),
        ("mail thread (longest)", f"/mail/{mail}"),
        ("research", "/research"),
        ("research queue", "/research/queue"),
        ("evaluation", f"/research/{evaluation}"),
        ("evaluation diff", f"/research/{evaluation}/diff"),
    ]
    commands = [
        ("station status", ["status", d]),
        ("station status --json", ["status", d, "--json"]),
        ("station agents", ["agents", d]),
        ("station agents --all", ["agents", d, "--all"]),
        ("station agents --all --offset 40000", ["agents", d, "--all", "--offset", "40000"]),
        ("station dialogue (living)", ["dialogue", d, living or ""]),
        ("station papers", ["papers", d]),
        ("station papers --all", ["papers", d, "--all"]),
        ("station paper", ["paper", d, str(paper)]),
        ("station thread", ["thread", d, str(thread)]),
    ]
    return pages, commands


def rows_in(html: str) -> int:
    return len(ROW.findall(html))


def timed(fn: Callable[[], Any], repeats: int, label: str = "") -> tuple[list[float], Any]:
    began = time.perf_counter()
    fn()  # warm-up: this thread's connection, the page cache
    print(f"{label}: {(time.perf_counter() - began) * 1000:.0f} ms (warm-up)", file=sys.stderr, flush=True)
    samples, result = [], None
    for _ in range(repeats):
        began = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - began) * 1000)
    return samples, result


def run_command(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as stop:  # argparse refused the arguments
            code = int(stop.code or 0)
    return code, out.getvalue() + err.getvalue()


def profile(fn: Callable[[], Any], label: str) -> None:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).strip_dirs().sort_stats("cumulative").print_stats(18)
    print(f"\n### profile: {label}\n```\n{text.getvalue().strip()}\n```")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--station", help="a station directory (default: made by make_big_station.py, cached)")
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--ticks", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--target-ms", type=float, default=300.0)
    ap.add_argument("--export-pages", type=int, default=200, help="pages of `station export` to time (0: none)")
    ap.add_argument("--only", nargs="*", default=[], help="only the entries whose label holds one of these")
    ap.add_argument("--profile", action="store_true", help="profile the entries over the target")
    args = ap.parse_args()

    directory = Path(args.station) if args.station else ROOT / "runs" / f"big-{args.agents}x{args.ticks}"
    if not args.station:
        facts = make_big_station(
            directory, agents=args.agents, ticks=args.ticks, say=lambda line: print(line, file=sys.stderr)
        )
        print(
            f"station: {directory} ({facts['agents']:,} agents, {facts['ticks']:,} ticks, "
            f"{facts['turns']:,} turns, {facts['agent records']:,} agent records, {facts['lineages']:,} lineages, "
            f"{facts['events']:,} events, {facts['evaluations']:,} evaluations, {facts['database MB']:,} MB)\n"
        )
    pages, commands = pick(directory)
    wanted = (lambda label: any(w in label for w in args.only)) if args.only else (lambda label: True)
    results: list[dict[str, Any]] = []
    slow: list[tuple[str, Callable[[], Any]]] = []

    app = create_app(directory)
    with TestClient(app) as client:
        client.get(app.state.login.address())
        for label, url in pages:
            if not wanted(label):
                continue
            fetch = lambda url=url: client.get(url)  # noqa: E731
            samples, response = timed(fetch, args.repeats, label)
            results.append(
                {
                    "what": f"web {label}",
                    "where": url,
                    "samples": samples,
                    "rows": rows_in(response.text),
                    "ok": str(response.status_code),
                }
            )
            if max(samples) > args.target_ms:
                slow.append((f"web {label}", fetch))
    for label, argv in commands:
        if not wanted(label):
            continue
        call = lambda argv=argv: run_command(argv)  # noqa: E731
        samples, (code, text) = timed(call, args.repeats, label)
        results.append(
            {
                "what": label,
                "where": " ".join(argv[:1] + argv[2:]),
                "samples": samples,
                "rows": text.count("\n"),
                "ok": str(code),
            }
        )
        if max(samples) > args.target_ms:
            slow.append((label, call))
    if args.export_pages and wanted("station export"):
        out = Path(tempfile.mkdtemp(prefix="bench-export-"))
        try:
            before = peak_rss_mb()
            began = time.perf_counter()
            written = export(directory, out / "site", limit=args.export_pages)
            spent = (time.perf_counter() - began) * 1000
            results.append(
                {
                    "what": f"station export, first {written} pages (ms per page)",
                    "where": "export",
                    "samples": [spent / max(1, written)],
                    "rows": written,
                    "ok": f"peak RSS +{peak_rss_mb() - before:.0f} MB",
                }
            )
        finally:
            shutil.rmtree(out, ignore_errors=True)

    print("| page or command | address or arguments | median ms | max ms | rows | status |")
    print("|---|---|---:|---:|---:|---|")
    for r in results:
        median, top = statistics.median(r["samples"]), max(r["samples"])
        mark = " **over**" if top > args.target_ms else ""
        print(f"| {r['what']} | `{r['where']}` | {median:.0f}{mark} | {top:.0f} | {r['rows']:,} | {r['ok']} |")
    over = [r["what"] for r in results if max(r["samples"]) > args.target_ms]
    print(
        f"\n{len(results) - len(over)} of {len(results)} under {args.target_ms:.0f} ms"
        + (f"; over: {', '.join(over)}" if over else "")
    )
    if args.profile:
        for label, fn in slow:
            profile(fn, label)


if __name__ == "__main__":
    main()
