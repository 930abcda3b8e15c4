"""The study page (behaviour over a window of ticks, and station.study's measures of it), the lists
of records its counts count, and the idea-flow tree of an evaluation."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from station.apps.web import study
from station.apps.web.site import MAX_ID, Site, site_of
from station.apps.web.study_cache import Answer, Failed

# station.study's pages import pandas, networkx and scikit-learn when first asked for (0.5 s), not when
# the server starts: `station serve` and `station export` start as fast as before for other pages.

router = APIRouter()


def _tick(value: int | None) -> int | None:
    return value if value is None or abs(value) < MAX_ID else None


@router.get("/study", response_class=HTMLResponse)
def study_page(
    request: Request,
    first: int | None = None,
    last: int | None = None,
    agent: tuple[str, ...] | None = Query(None),  # repeated: ?agent=A&agent=B
) -> HTMLResponse:
    site = site_of(request)
    chosen = [name[:200] for name in (agent or [])[:50]]  # the address is typed by anyone: keep it small
    return site.show(request, "study.html", **study.study(site.reader.db(), _tick(first), _tick(last), chosen or None))


@router.get("/study/measures", response_class=HTMLResponse)
def measures_page(
    request: Request,
    first: int | None = None,
    last: int | None = None,
    window: int | None = None,
    kind: tuple[str, ...] | None = Query(None),  # the network's edge kinds, repeated
) -> HTMLResponse:
    """station.study's measures of a window of ticks (by default the study page's)."""
    from station.apps.web import study_measures

    site = site_of(request)
    db = site.reader.db()
    low, high = study.window(db, _tick(first), _tick(last))
    low = study.bounded(db, low, high) if first is None else low  # the study page's default window
    width = window if window is not None and 0 < window < MAX_ID else None
    kinds = [k for k in (kind or [])[:20] if k in study_measures.EDGE_KINDS]
    measures = study_measures.measures(site.reader.dir, db, low, high, width, kinds, wait=site.static_export)
    return site.show(request, "study_measures.html", first=low, last=high, **measures)


def _tables(site: Site, first: int | None, last: int | None) -> tuple[int, int, Answer]:
    """The list's window as the study page chooses it (a missing end: the page's default), and a
    study whose tables cover it."""
    from station.apps.web import study_measures

    low, high = study.window(site.reader.db(), _tick(first), _tick(last))
    found = study_measures.tables_of(site.reader.dir, site.reader.db(), low, high, wait=site.static_export)
    return low, high, found


def _waiting(request: Request, site: Site, found: Answer, what: str) -> HTMLResponse | None:
    """The page that stands in for a list whose study is not there yet (or failed), else None."""
    if isinstance(found.value, Failed):
        return site.show(request, "error.html", 500, title="Study failed", message=found.value.error)
    if found.value is None:
        again = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return site.show(request, "study_waiting.html", what=what, computing=found.computing, again=again)
    return None


def _page(page: int) -> int:
    return page if 0 < page < MAX_ID else 1


@router.get("/study/edges", response_class=HTMLResponse)
def study_edges(
    request: Request, first: int | None = None, last: int | None = None, kind: str = "", agent: str = "", page: int = 1
) -> HTMLResponse:
    """The acts of a window, of one kind and by or towards one agent if asked."""
    from station.apps.web import study_lists, study_measures

    site = site_of(request)
    low, high, found = _tables(site, first, last)
    waiting = _waiting(request, site, found, f"the acts of ticks {low}–{high}")
    if waiting is not None:
        return waiting
    kind = kind if kind in study_measures.EDGE_KINDS else ""
    agent = agent[:200]
    listed = study_lists.edge_rows(found.value.edges, low, high, kind, agent, _page(page))
    keep = study_measures.link("", first=low, last=high, kind=kind, agent=agent).lstrip("?") + "&"
    return site.show(request, "study_edges.html", first=low, last=high, kind=kind, agent=agent, keep=keep, **listed)


@router.get("/study/lives", response_class=HTMLResponse)
def study_lives(request: Request, first: int | None = None, last: int | None = None, page: int = 1) -> HTMLResponse:
    """The lives alive at some tick of a window."""
    from station.apps.web import study_lists, study_measures

    site = site_of(request)
    low, high, found = _tables(site, first, last)
    waiting = _waiting(request, site, found, f"the lives of ticks {low}–{high}")
    if waiting is not None:
        return waiting
    listed = study_lists.life_rows(found.value.lives, low, high, _page(page))
    keep = study_measures.link("", first=low, last=high).lstrip("?") + "&"
    return site.show(request, "study_lives.html", first=low, last=high, keep=keep, **listed)


@router.get("/study/texts", response_class=HTMLResponse)
def study_texts(
    request: Request, first: int | None = None, last: int | None = None, kind: str = "", page: int = 1
) -> HTMLResponse:
    """The texts written in a window, of one kind if asked."""
    from station.apps.web import study_lists, study_measures

    site = site_of(request)
    low, high, found = _tables(site, first, last)
    waiting = _waiting(request, site, found, f"the texts of ticks {low}–{high}")
    if waiting is not None:
        return waiting
    kind = kind[:40]
    listed = study_lists.text_rows(found.value.texts, low, high, kind, _page(page))
    keep = study_measures.link("", first=low, last=high, kind=kind).lstrip("?") + "&"
    return site.show(request, "study_texts.html", first=low, last=high, kind=kind, keep=keep, **listed)


@router.get("/study/ideas/{evaluation_id}", response_class=HTMLResponse)
def idea_tree(request: Request, evaluation_id: int) -> HTMLResponse:
    """The build-on tree of an evaluation: its ancestors to the root and its descendants."""
    from station.apps.web import study_ideas

    site = site_of(request)
    if not 0 < evaluation_id < MAX_ID:
        return site.not_found(request, f"No evaluation #{evaluation_id}.")
    found = study_ideas.trees_of(site.reader.dir, site.reader.db(), wait=site.static_export)
    waiting = _waiting(request, site, found, "the build-on trees of the station's evaluations")
    if waiting is not None:
        return waiting
    tree: dict[str, Any] | None = study_ideas.tree(found.value, evaluation_id)
    if tree is None:
        return site.not_found(request, f"No evaluation #{evaluation_id}.")
    return site.show(request, "study_ideas.html", evaluation_id=evaluation_id, **tree)
