"""The Archive's papers and the submissions behind them."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from station.apps.reader_choices import PAPER_STATES
from station.apps.web import data
from station.apps.web.site import MAX_ID, site_of

router = APIRouter()


@router.get("/papers", response_class=HTMLResponse)
def papers(request: Request, show_: str = Query("", alias="show")) -> HTMLResponse:
    """The published papers; ?show=all (or a status) lists the submissions, published or not."""
    site = site_of(request)
    db = site.reader.db()
    wanted = show_ if show_ in ("all", *PAPER_STATES) else ""
    listed = data.submissions(db, None if wanted == "all" else wanted) if wanted else []
    return site.show(
        request,
        "papers.html",
        papers=data.papers(db) if not wanted else [],
        submissions=listed,
        shown=wanted,
        counts=data.submission_counts(db),
    )


@router.get("/submissions/{sid}", response_class=HTMLResponse)
def submission(request: Request, sid: int) -> HTMLResponse:
    site = site_of(request)
    found = data.submission(site.reader.db(), sid) if 0 < sid < MAX_ID else None
    if found is None:
        return site.not_found(request, f"No paper submission {sid}.")
    return site.show(request, "submission.html", sub=found)


@router.get("/papers/{number}", response_class=HTMLResponse)
def paper(request: Request, number: int) -> HTMLResponse:
    site = site_of(request)
    db = site.reader.db()
    found = data.capsule(db, "archive", number) if 0 < number < MAX_ID else None
    if found is None or found["deleted"]:
        return site.not_found(request, f"No paper {number} in the Archive.")
    review = [m for m in found["messages"] if m["author"] == data.REVIEWER_NAME]
    rest = [m for m in found["messages"][1:] if m["author"] != data.REVIEWER_NAME]
    return site.show(
        request,
        "paper.html",
        paper=found,
        body=found["messages"][0],
        review=review,
        replies=rest,
        submission_id=data.submission_of_paper(db, number),
        cited=data.cited_evaluations(db, f"{found['abstract'] or ''}\n{found['messages'][0]['content']}"),
    )
