"""The public forum and the mail, as threads."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from station.apps.web import data
from station.apps.web.site import MAX_ID, site_of

router = APIRouter()
ROOM_OF = {"forum": "public_memory", "mail": "mail"}  # the address's name: the room's


@router.get("/forum", response_class=HTMLResponse)
def forum(request: Request, writer: str = "", sort: str = "recent") -> HTMLResponse:
    return thread_list(request, "Public forum", "forum", writer, sort)


@router.get("/mail", response_class=HTMLResponse)
def mail(request: Request, writer: str = "", sort: str = "recent") -> HTMLResponse:
    return thread_list(request, "Mail", "mail", writer, sort)


@router.get("/forum/{number}", response_class=HTMLResponse)
def forum_thread(request: Request, number: int) -> HTMLResponse:
    return thread(request, "forum", number)


@router.get("/mail/{number}", response_class=HTMLResponse)
def mail_thread(request: Request, number: int) -> HTMLResponse:
    return thread(request, "mail", number)


def thread_list(request: Request, title: str, link: str, writer: str, sort: str) -> HTMLResponse:
    """A room's threads, newest activity first; `writer` and `sort` from the address."""
    site = site_of(request)
    writer, sort = writer[:200].strip(), sort if sort in data.THREAD_SORTS else "recent"
    found = data.threads(site.reader.db(), ROOM_OF[link], writer=writer, sort=sort)
    return site.show(request, "threads.html", title=title, threads=found, link=link, writer=writer, sort=sort)


def thread(request: Request, link: str, number: int) -> HTMLResponse:
    """A thread by its number in its room, the number agents and `station thread` use."""
    site = site_of(request)
    found = data.capsule(site.reader.db(), ROOM_OF[link], number) if 0 < number < MAX_ID else None
    if found is None or found["deleted"]:
        return site.not_found(request, f"No {link} thread {number}.")
    return site.show(request, "thread.html", thread=found, back=link)
