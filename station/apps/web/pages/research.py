"""The research board, the evaluation queue, an evaluation and its code's diff."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from station.apps.web import board, data, diff, plots, worker_sessions
from station.apps.web.site import MAX_ID, site_of

router = APIRouter()


@router.get("/research", response_class=HTMLResponse)
def research(request: Request) -> HTMLResponse:
    site = site_of(request)
    db = site.reader.db()
    filters = board.Filters.read(dict(request.query_params))
    return site.show(
        request,
        "research.html",
        f=filters,
        **board.board(db, filters),
        plot=plots.score_plots(board.points(db, filters)),
        external=data.external_results(db),
    )


@router.get("/research/queue", response_class=HTMLResponse)  # before /research/{evaluation_id}
def queue(request: Request) -> HTMLResponse:
    site = site_of(request)
    return site.show(request, "queue.html", failures=data.recent_failures(site.reader.db()), **site.alerts())


@router.get("/research/{evaluation_id}", response_class=HTMLResponse)
def evaluation(request: Request, evaluation_id: int) -> HTMLResponse:
    site = site_of(request)
    db = site.reader.db()
    found = data.evaluation(db, evaluation_id) if 0 < evaluation_id < MAX_ID else None
    if found is None:
        return site.not_found(request, f"No evaluation #{evaluation_id}.")
    return site.show(
        request,
        "evaluation.html",
        ev=found,
        built_on=diff.built_on(db, found),
        cited_by=data.citing_papers(db, evaluation_id),
        later=data.later_work(db, evaluation_id),
        figure=data.figure(db, found),
        external=data.external_results(db, evaluation_id),
        coder=bool(found.get("instruction")) or worker_sessions.has_coder_session(db, evaluation_id),
    )


@router.get("/research/{evaluation_id}/diff", response_class=HTMLResponse)
def evaluation_diff(request: Request, evaluation_id: int, against: int | None = None) -> HTMLResponse:
    """The submission's code against an earlier one (default: the one it built on)."""
    site = site_of(request)
    db = site.reader.db()
    found = data.evaluation(db, evaluation_id) if 0 < evaluation_id < MAX_ID else None
    if found is None:
        return site.not_found(request, f"No evaluation #{evaluation_id}.")
    base = diff.built_on(db, found)
    other_id = against if against is not None and 0 < against < MAX_ID else (base["id"] if base else None)
    other = data.evaluation(db, other_id) if other_id else None
    if against is not None and other is None:
        return site.not_found(request, f"No evaluation #{against} to compare with.")
    lines = diff.unified(other["code"], found["code"], f"#{other['id']}", f"#{found['id']}") if other else []
    return site.show(
        request,
        "diff.html",
        ev=found,
        other=other,
        built_on=base,
        choices=diff.candidates(db, found),
        lines=lines,
        diff_html=diff.diff_html(lines) if other else None,
        added=sum(1 for kind, _ in lines if kind == "add"),
        removed=sum(1 for kind, _ in lines if kind == "del"),
    )
