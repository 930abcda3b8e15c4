"""The overview, the live updates its pages poll for, and search."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse

from station.apps import report
from station.apps.web import board, branches, data, plots
from station.apps.web import events as feed
from station.apps.web.site import MAX_ID, site_of

router = APIRouter()
LIVE_PARTS = {"alerts": "alerts.html", "evaluations": "open_evaluations.html"}  # refreshed by /api/live
OVERVIEW_DOTS = 300  # dots of the overview's small score plot (besides the records its lines pass through)


@router.get("/", response_class=HTMLResponse)
def overview(request: Request, events: str = "") -> HTMLResponse:
    site = site_of(request)
    station = site.reader.station()
    status = report.status(station, running=site.runner.state().startswith("running"))
    db = site.reader.db()
    every_event = events == "all"  # the turn and tick markers too, else only what matters
    return site.show(
        request,
        "overview.html",
        st=status,
        events=feed.recent(db, everything=every_event),
        every_event=every_event,
        progress=plots.score_plots(board.points(db, board.Filters(), dots=OVERVIEW_DOTS), height=240),
        reviews=data.pending_reviews(db),
        multistart=branches.multistart_of(site.directory),
        shown_agents=data.OVERVIEW_AGENTS,
        **site.alerts(),
    )


@router.get("/api/live")
def live(request: Request, after: int = 0, html: str = "", everything: int = 0) -> JSONResponse:
    """The run's state, new events (only meaningful ones unless `everything`), and the page
    parts named in `html` (LIVE_PARTS) re-rendered."""
    site = site_of(request)
    db = site.reader.db()
    since = after if 0 <= after < MAX_ID else 0
    news = feed.recent(db, 25, since, everything=bool(everything))
    answer = {"tick": data.meta(db, "tick"), **site.runner.describe(), "events": news}
    wanted = [name for name in html.split(",") if name in LIVE_PARTS]
    if wanted:
        context = site.alerts()
        answer["html"] = {name: site.templates.get_template(LIVE_PARTS[name]).render(context) for name in wanted}
    return JSONResponse(answer)


@router.get("/search", response_class=HTMLResponse)
def search(request: Request, q: str = "", page: int = 1) -> HTMLResponse:
    site = site_of(request)
    q = q[:200]
    hits: list[dict[str, Any]] = []
    total = 0
    if q.strip():
        site.index.refresh(site.reader.db())
        hits, total = site.index.search(q, page if 0 < page < 10_000 else 1)
    return site.show(request, "search.html", q=q, hits=hits, total=total, page=max(1, min(page, 10_000)))
