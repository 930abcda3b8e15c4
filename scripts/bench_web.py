#!/usr/bin/env python3
"""Server time of every page of the web viewer on a long station (target: each under 300 ms).

Usage: scripts/bench_web.py [--station DIR] [--ticks 5000] [--repeats 5] [--target-ms 300]
       [--profile] [--profile-url URL ...]

Without --station (or when DIR holds no station yet) a station is built with
scripts/build_station.py (the real engine with scripted agents, plus synthetic research rows) and
cached under runs/bench-<ticks>, so a second run reuses it.

Each page is fetched in-process with fastapi's TestClient (no network): server time is the wall time
of `client.get(url)`. One warm-up call (its time is shown as "first ms": it includes opening the
station in a fresh server thread, or building the search index), then --repeats timed calls, reported
as median and max. The concrete URLs are chosen from the station's data (the agent with the most
turns, the paper with the most messages, the biggest forum thread and mail, the best evaluation).
Pages over the target are profiled (cProfile, and the time of each SQL statement on the viewer's
read-only connection); --profile profiles every page, --profile-url the given ones.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sqlite3
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fastapi.routing  # noqa: E402
from build_station import DEFAULT_CONFIG, build_station  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from station.apps.web.app import create_app  # noqa: E402
from station.core.store import DB_NAME, Store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TURN_MARK = 'class="turn"'  # one per turn shown in a dialogue page
TURNS_PER_PAGE = 20  # station/apps/web/data.py; only used to pick page numbers (the HTML is counted)
console = Console(width=None if sys.stdout.isatty() else 200)


# -- the station -------------------------------------------------------------------------------
def ensure_station(station: str | None, ticks: int, evaluations: int) -> Path:
    """A given station is used as it is; the cache under runs/ only once its build has finished."""
    target = Path(station) if station else ROOT / "runs" / f"bench-{ticks}"
    if Store.exists(target) and (station or (target / "build.json").exists()):
        console.print(f"using the station at {target}")
        return target
    console.print(f"building a {ticks:,}-tick station at {target} (kept for later runs)")
    summary = build_station(target, ticks, DEFAULT_CONFIG, evaluations, console=console)
    console.print(f"built in {summary['build seconds']:.0f} s")
    return target


# -- the pages ---------------------------------------------------------------------------------
def q(db: sqlite3.Connection, sql: str, params: tuple = ()) -> Any:
    try:
        return db.execute(sql, params).fetchone()
    except sqlite3.OperationalError:  # a table this station lacks
        return None


def pick_pages(directory: Path) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """(label, url) of each page to time, and facts about the dialogue used."""
    db = sqlite3.connect(f"file:{directory / DB_NAME}?mode=ro", uri=True)
    pages: list[tuple[str, str]] = [("overview", "/"), ("agents index", "/agents"),
                                    ("agents index, one lineage's ended", "/agents?lineage=Arete&state=ended&page=2")]
    info: dict[str, Any] = {}
    busiest = q(db, "SELECT session, COUNT(*) AS n, MIN(tick), MAX(tick) FROM turns GROUP BY session "
                    "ORDER BY n DESC, session LIMIT 1")
    if busiest:
        session, total, first, last = busiest
        # The session's latest record: the recursive agent if the guest ascended.
        name = q(db, "SELECT name FROM agents WHERE session=? ORDER BY kind='recursive' DESC, name LIMIT 1",
                 (session,))[0]
        n_pages = max(1, -(-total // TURNS_PER_PAGE))
        url = f"/agents/{quote(name)}"
        info.update(agent=name, session=session, turns=total, pages=n_pages)
        pages += [("dialogue, latest page", url), ("dialogue, first page", f"{url}?page=1"),
                  ("dialogue, middle page", f"{url}?page={max(1, (n_pages + 1) // 2)}"),
                  ("dialogue, jump to tick", f"{url}?tick={(first + last) // 2}")]
    pages.append(("papers", "/papers"))
    paper = q(db, "SELECT c.number, COUNT(m.k) AS n FROM capsules c JOIN capsule_messages m ON m.capsule=c.id "
                  "WHERE c.room='archive' AND c.deleted=0 GROUP BY c.id ORDER BY n DESC, c.number LIMIT 1")
    if paper:
        pages.append((f"paper ({paper[1]} messages)", f"/papers/{paper[0]}"))
    pages.append(("forum", "/forum"))
    writer = q(db, "SELECT author FROM capsule_messages GROUP BY author ORDER BY COUNT(*) DESC LIMIT 1")
    if writer:
        pages.append(("forum, one writer's threads, longest", f"/forum?writer={quote(writer[0])}&sort=longest"))
    thread = q(db, "SELECT c.id, COUNT(m.k) AS n FROM capsules c JOIN capsule_messages m ON m.capsule=c.id "
                   "WHERE c.room='public_memory' AND c.deleted=0 GROUP BY c.id "
                   "ORDER BY n DESC, c.id LIMIT 1")
    if thread:
        pages.append((f"forum thread ({thread[1]} messages)", f"/forum/{thread[0]}"))
    pages.append(("mail", "/mail"))
    mail = q(db, "SELECT c.id, COUNT(m.k) AS n FROM capsules c JOIN capsule_messages m ON m.capsule=c.id "
                 "WHERE c.room='mail' AND c.deleted=0 GROUP BY c.id ORDER BY n DESC, c.id LIMIT 1")
    if mail:
        pages.append((f"mail thread ({mail[1]} messages)", f"/mail/{mail[0]}"))
    pages.append(("papers, every submission", "/papers?show=all"))
    submission = q(db, "SELECT id FROM paper_submissions ORDER BY length(content) DESC LIMIT 1")
    if submission:
        pages.append(("paper submission (longest)", f"/submissions/{submission[0]}"))
    pages.append(("research (leaderboard + plots)", "/research"))
    lineage = q(db, "SELECT lineage FROM evaluations WHERE lineage IS NOT NULL GROUP BY lineage "
                    "ORDER BY COUNT(*) DESC LIMIT 1")
    if lineage:
        pages.append(("research, one lineage by score", f"/research?lineage={quote(lineage[0])}&sort=score"))
    pages.append(("research, a tick window, newest", "/research?from=1000&to=3000&sort=newest&page=2"))
    pages.append(("evaluation queue", "/research/queue"))
    evaluation = q(db, "SELECT id FROM evaluations ORDER BY score IS NULL, score DESC, id LIMIT 1")
    if evaluation:
        pages.append(("evaluation (best)", f"/research/{evaluation[0]}"))
        pages.append(("evaluation diff (best)", f"/research/{evaluation[0]}/diff"))
    pages.append(("overview, every event", "/?events=all"))
    pages += [("lineages", "/lineages"), ("operator", "/operator"), ("api/live", "/api/live")]
    db.close()
    return pages, info


OPTIONAL = [("search 'codex'", "/search?q=codex"), ("study", "/study")]


# -- timing ------------------------------------------------------------------------------------
def timed_get(client: TestClient, url: str) -> tuple[float, Any]:
    began = time.perf_counter()
    response = client.get(url)
    return (time.perf_counter() - began) * 1000, response


def measure(client: TestClient, label: str, url: str, repeats: int) -> dict[str, Any]:
    first, response = timed_get(client, url)
    samples = []
    for _ in range(repeats):
        ms, response = timed_get(client, url)
        samples.append(ms)
    return {"label": label, "url": url, "first": first, "median": statistics.median(samples),
            "max": max(samples), "bytes": len(response.content), "status": response.status_code,
            "html": response.text}


# -- profiling ---------------------------------------------------------------------------------
class TimedCursor:
    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class TimedConnection:
    """The viewer's connection, with every statement run and fetched at once and timed."""

    def __init__(self, db: sqlite3.Connection, log: dict[str, list[float]]) -> None:
        self._db, self._log = db, log

    def execute(self, sql: str, params: Any = ()) -> TimedCursor:
        began = time.perf_counter()
        rows = self._db.execute(sql, params).fetchall()
        self._log[" ".join(sql.split())].append((time.perf_counter() - began) * 1000)
        return TimedCursor(rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


@contextmanager
def profiled_endpoints(prof: cProfile.Profile) -> Iterator[None]:
    """Run sync endpoints under `prof` (they run in a worker thread, which a profiler of this thread misses).

    The endpoint renders its template before it returns, so this covers the SQL and the templates.
    """
    original = fastapi.routing.run_in_threadpool

    async def run(func: Any, *args: Any, **kwargs: Any) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            prof.enable()
            try:
                return func(*a, **k)
            finally:
                prof.disable()
        return await original(call, *args, **kwargs)

    fastapi.routing.run_in_threadpool = run  # type: ignore[assignment]
    try:
        yield
    finally:
        fastapi.routing.run_in_threadpool = original  # type: ignore[assignment]


def profile(app: Any, client: TestClient, url: str, top: int = 22) -> None:
    reader = app.state.reader
    original = reader.db
    log: dict[str, list[float]] = defaultdict(list)
    reader.db = lambda: TimedConnection(original(), log)  # type: ignore[method-assign]
    prof = cProfile.Profile()
    try:
        client.get(url)  # warm (this thread's station and connection)
        log.clear()
        with profiled_endpoints(prof):
            began = time.perf_counter()
            client.get(url)
            total = (time.perf_counter() - began) * 1000
    finally:
        reader.db = original  # type: ignore[method-assign]
    console.rule(f"profile of {url} ({total:.0f} ms under cProfile)")
    sql_ms = sum(sum(v) for v in log.values())
    console.print(f"SQL on the viewer's read-only connection: {sum(len(v) for v in log.values())} statements, "
                  f"{sql_ms:.1f} ms in all; the slowest:")
    for sql, times in sorted(log.items(), key=lambda kv: -sum(kv[1]))[:8]:
        console.print(f"  {sum(times):8.1f} ms  x{len(times):<3} {sql[:160]}", markup=False, highlight=False)
    for order, count in (("cumulative", top), ("tottime", 12)):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).strip_dirs().sort_stats(order).print_stats(count)
        body = out.getvalue()
        body = body[body.index("ncalls"):] if "ncalls" in body else body
        console.print(f"[bold]endpoint, by {order} time:[/bold]")
        console.print(body.rstrip(), markup=False, highlight=False)


# -- main --------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--station", help="station directory (built there if it holds no station)")
    ap.add_argument("--ticks", type=int, default=5000, help="ticks of a station built by this script")
    ap.add_argument("--evaluations", type=int, default=3000, help="synthetic evaluations of a built station")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--target-ms", type=float, default=300.0)
    ap.add_argument("--profile", action="store_true", help="profile every page, not only the slow ones")
    ap.add_argument("--profile-url", nargs="*", default=[], help="also profile these URLs")
    args = ap.parse_args()

    directory = ensure_station(args.station, args.ticks, args.evaluations)
    built = directory / "build.json"
    facts = json.loads(built.read_text()) if built.exists() else {}
    pages, info = pick_pages(directory)
    app = create_app(directory)
    results = []
    with TestClient(app) as client:
        client.get(app.state.login.address())  # every page needs a login, as in a browser
        for label, url in OPTIONAL:
            if client.get(url).status_code == 200:
                pages.append((label, url))
        with console.status("timing pages") as status:
            for label, url in pages:
                status.update(f"timing {url}")
                results.append(measure(client, label, url, args.repeats))

        size = (directory / DB_NAME).stat().st_size / 1e6
        title = (f"web viewer, {directory}: {facts.get('ticks', '?'):,} ticks, {facts.get('turns', '?'):,} turns, "
                 f"{facts.get('agents', '?'):,} agents, db {size:.0f} MB; {args.repeats} repeats after one warm-up")
        table = Table(title=title)
        for column, justify in [("page", "left"), ("url", "left"), ("median ms", "right"), ("max ms", "right"),
                                ("first ms", "right"), ("bytes", "right"), ("status", "right")]:
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        slow = []
        for r in results:
            over = r["median"] > args.target_ms or r["max"] > args.target_ms
            if over:
                slow.append(r)
            style = "red" if over else None
            status_text = str(r["status"]) if r["status"] == 200 else f"[yellow]{r['status']}[/yellow]"
            table.add_row(r["label"], r["url"], f"{r['median']:.1f}", f"{r['max']:.1f}", f"{r['first']:.1f}",
                          f"{r['bytes']:,}", status_text, style=style)
        console.print(table)

        dialogue = [r for r in results if r["label"].startswith("dialogue")]
        if info:
            console.print(f"dialogue of {info['agent']} (session {info['session']}): {info['turns']} turns in all, "
                          f"{info['pages']} page(s) of {TURNS_PER_PAGE}; turns loaded per page: "
                          + ", ".join(f"{r['label'].split(', ')[1]} {r['html'].count(TURN_MARK)}"
                                      for r in dialogue))
        not_ok = [r for r in results if r["status"] != 200]
        if not_ok:
            console.print("[yellow]not 200:[/yellow] " + ", ".join(f"{r['url']} ({r['status']})" for r in not_ok))
        verdict = "no" if slow else "yes"
        console.print(f"all pages under {args.target_ms:.0f} ms: {verdict}")

        wanted = [r["url"] for r in (results if args.profile else slow)] + list(args.profile_url)
        for url in dict.fromkeys(wanted):
            profile(app, client, url)


if __name__ == "__main__":
    main()
