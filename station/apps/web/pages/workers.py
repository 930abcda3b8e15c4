"""The workers' sessions, turn by turn: the research coder's of an evaluation, the archive surveyor's."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from rooms.research import views as research_views
from station.apps.web import data, worker_sessions
from station.apps.web.site import MAX_ID, site_of

router = APIRouter()


@router.get("/research/{evaluation_id}/coder", response_class=HTMLResponse)
def coder(request: Request, evaluation_id: int, page: int = 1) -> HTMLResponse:
    site = site_of(request)
    db = site.reader.db()
    found = data.evaluation(db, evaluation_id) if 0 < evaluation_id < MAX_ID else None
    if found is None:
        return site.not_found(request, f"No evaluation #{evaluation_id}.")
    if not found.get("instruction") and not worker_sessions.has_coder_session(db, evaluation_id):
        return site.not_found(request, f"Evaluation #{evaluation_id} was submitted as code: no coder worked on it.")
    page = page if abs(page) < MAX_ID else 1
    if worker_sessions.is_command_session(db, evaluation_id):
        command = worker_sessions.command_session(db, evaluation_id, page)
        # the report the CLI left: the evaluation's once applied, its session's end's until then
        report = found.get("coder_report") or (command.end or {}).get("report")
        return site.show(
            request, "coder_session.html", ev=found, command=command, session=command.calls, report=report, keep=""
        )
    session, attempts = worker_sessions.coder_session(db, evaluation_id, page)
    return site.show(
        request,
        "coder_session.html",
        ev=found,
        session=session,
        attempts=attempts,
        report=found.get("coder_report"),
        opening=research_views.coder_opening(db, evaluation_id),
        keep="",
    )


@router.get("/surveys/{number}", response_class=HTMLResponse)
def survey(request: Request, number: int, page: int = 1) -> HTMLResponse:
    site = site_of(request)
    db = site.reader.db()
    found = worker_sessions.survey(db, number) if 0 < number < MAX_ID else None
    if found is None:
        return site.not_found(request, f"No survey #{number}.")
    page = page if abs(page) < MAX_ID else 1
    session, report = worker_sessions.survey_session(db, found, page)
    return site.show(request, "survey_session.html", survey=found, session=session, report=report, keep="")
