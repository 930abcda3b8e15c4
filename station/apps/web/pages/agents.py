"""Everyone who lived: the list, an agent's dialogue (and its live tail), a turn's whole text, the lineages."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from station.apps.web import data, render, worker_sessions
from station.apps.web.site import MAX_ID, site_of

router = APIRouter()


@router.get("/agents", response_class=HTMLResponse)
def agents_index(request: Request, page: int = 1, lineage: str = "", state: str = "", kind: str = "") -> HTMLResponse:
    """Everyone who lived, newest first; filtered by lineage, state and kind from the address."""
    site = site_of(request)
    db = site.reader.db()
    where, params = data.agent_filter(lineage, state, kind)
    total = db.execute(f"SELECT COUNT(*) FROM agents WHERE {where}", params).fetchone()[0]
    pages = max(1, -(-total // data.AGENTS_PER_PAGE))
    page = min(max(1, page), pages) if abs(page) < MAX_ID else 1
    agents = data.agent_summaries(
        db, where, params, limit=data.AGENTS_PER_PAGE, offset=(page - 1) * data.AGENTS_PER_PAGE, newest_first=True
    )
    chosen = {"lineage": lineage, "state": state, "kind": kind}
    return site.show(
        request,
        "agents.html",
        agents=agents,
        page=page,
        pages=pages,
        total=total,
        chosen=chosen,
        keep=urlencode({k: v for k, v in chosen.items() if v}) + "&" if any(chosen.values()) else "",
        lineages=data.recent_lineages(db),
        states=data.AGENT_STATES,
        kinds=data.AGENT_KINDS,
    )


@router.get("/agents/{name}", response_class=HTMLResponse)
def agent_page(request: Request, name: str, page: int = 0, tick: int | None = None) -> HTMLResponse:
    site = site_of(request)
    db = site.reader.db()
    who = data.agent(db, name)
    if who is None:
        return site.not_found(request, f"No agent named {name!r}.")
    if tick is not None and abs(tick) < MAX_ID:
        page = data.page_of_tick(db, who.session, tick)
    page = page if 0 < page < MAX_ID else 10**9  # default: the latest page
    turns, pages = data.dialogue_page(db, who.session, page)
    current = min(page, pages)
    works = data.agent_works(db, who)
    works["surveys"] = worker_sessions.surveys_of(db, works["names"])
    return site.show(request, "agent.html", agent=who, works=works, turns=turns, page=current, pages=pages)


@router.get("/agents/{name}/turns", response_class=HTMLResponse)
def new_turns(request: Request, name: str, after: int = 0) -> HTMLResponse:
    """The agent's turns after a tick, as HTML to append to its open dialogue page (live)."""
    site = site_of(request)
    db = site.reader.db()
    who = data.agent(db, name)
    if who is None or not 0 <= after < MAX_ID:
        return HTMLResponse("", status_code=404)
    turns = data.turns_after(db, who.session, after)
    return site.templates.TemplateResponse(request, "turns.html", {"turns": turns})


@router.get("/turns/{session}/{tick}/{part}", response_class=HTMLResponse)
def turn_text(request: Request, session: int, tick: int, part: str) -> HTMLResponse:
    """The whole of a text a dialogue page shows cut (a runaway reply, a long prompt)."""
    site = site_of(request)
    in_range = 0 <= session < MAX_ID and 0 <= tick < MAX_ID
    text = data.turn_text(site.reader.db(), session, tick, part) if in_range else None
    if text is None:
        return site.not_found(request, "No such turn text.")
    return site.show(request, "turn_text.html", session=session, tick=tick, part=part, text=text)


@router.get("/lineages", response_class=HTMLResponse)
def lineages(request: Request, page: int = 1, lineage: str = "") -> Response:
    """One page of the lineages; ?lineage=NAME: the page that shows that lineage."""
    site = site_of(request)
    db = site.reader.db()
    tick = data.meta(db, "tick")
    if lineage:  # to the address of its page, so that each page has one address (an export saves it once)
        where = data.lineage_page(db, lineage[:200])
        return RedirectResponse(f"/lineages?page={where}#lineage-{quote(lineage[:200])}", status_code=303)
    tree, page, pages = data.lineage_tree(db, tick, page if abs(page) < MAX_ID else 1)
    return site.show(
        request,
        "lineages.html",
        lineages=tree,
        first=1,
        last=tick,
        bar=render.lifespan_bar,
        page=page,
        pages=pages,
        keep="",
    )
