"""What every page of one served station shares: its reader, runner, templates, search index and
the login state; and the answers common to all pages (a page, not found, the login page).

The routes (`station/apps/web/pages/`) reach it as `site_of(request)`; `create_app` makes one per app."""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from rooms.research.tasks import tasks_of
from station.apps.web import data, plots, refs, render
from station.apps.web.access import (
    OneTimeLogin,
    Sessions,
    Throttle,
    TooManyTries,
    client_address,
    cookie_name,
    local_path,
    same_secret,
)
from station.apps.web.runner import StationRunner
from station.apps.web.search import SearchIndex
from station.core.store import DB_NAME

HERE = Path(__file__).parent
MAX_ID = 2**62  # larger ids cannot exist (SQLite integers) and get a 404


class Reader:
    """One read-only connection and one opened Station per server thread."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._local = threading.local()

    def db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(f"file:{self.dir / DB_NAME}?mode=ro", uri=True, check_same_thread=False)
            db.row_factory = sqlite3.Row
            self._local.db = db
        return db

    def station(self) -> Any:
        from station.apps.world import Station

        station = getattr(self._local, "station", None)
        if station is None:
            station = Station.open_to_read(self.dir)  # the pages never need the task folders
            self._local.station = station
        station.agents.invalidate()
        return station


def wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


@dataclass
class Site:
    """One served station. `token`: the server's own token (None: loopback with printed logins only);
    `read_locked`: reading needs a login too; `static_export`: pages rendered for `station export`."""

    directory: Path
    runner: StationRunner
    login: OneTimeLogin
    hosts: set[str]
    token: str | None
    read_locked: bool
    static_export: bool
    reader: Reader = field(init=False)
    index: SearchIndex = field(init=False)
    templates: Jinja2Templates = field(init=False)
    throttle: Throttle = field(default_factory=Throttle)
    sessions: Sessions = field(default_factory=Sessions)  # one per login: the login cookie's values

    def __post_init__(self) -> None:
        self.reader, self.index = Reader(self.directory), SearchIndex(self.directory)
        self.templates = Jinja2Templates(directory=HERE / "templates")
        self.templates.env.globals.update(
            markdown=render.markdown,
            linked=lambda text: refs.link_mentions(
                str(render.markdown(text)), refs.existing(self.reader.db(), refs.mentioned(text))
            ),
            worker_report=lambda text: refs.link_mentions(
                str(render.local_markdown(text)), refs.existing(self.reader.db(), refs.mentioned(text))
            ),
            figure_html=plots.figure_html,
            reply_html=render.reply_html,
            plain=render.plain,
            duration=render.duration,
            static_export=self.static_export,
            shown_chars=data.SHOWN_CHARS,
        )

    # -- pages --------------------------------------------------------------------------------
    def show(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        meta = self.reader.db().execute("SELECT value FROM meta WHERE key='config'").fetchone()
        context.setdefault("station_name", json.loads(meta[0]).get("name", "station") if meta else "station")
        live = self.runner.describe()
        context.setdefault("logged_in", not self.static_export and self.logged_in(request))  # the logout button
        return self.templates.TemplateResponse(request, name, {"live": live, **context}, status_code=status)

    def not_found(self, request: Request, what: str) -> HTMLResponse:
        return self.show(request, "error.html", 404, title="Not found", message=what)

    def alerts(self) -> dict[str, Any]:
        """What the overview's banners and list of open evaluations show (also live, through /api/live)."""
        tasks = tasks_of(self.reader.station().ctx)
        watch = data.evaluation_watch(
            self.reader.db(),
            live=self.runner.state().startswith("running"),
            timeouts={tid: task.timeout_s for tid, task in tasks.items()},
            run_started=self.runner.started_at(),
        )
        return {
            "watch": watch,
            "research": bool(tasks),
            "pause_reason": self.runner.pause_reason(),
            "queue_patience": data.QUEUE_PATIENCE,
        }

    # -- who may do what ------------------------------------------------------------------------
    def logged_in(self, request: Request) -> bool:
        """The request carries a live session of this server (its idle time starts again). Not
        throttled: 256 random bits cannot be guessed, and an ended session's cookie (a tab polling
        /api/live) must not lock out its address."""
        return self.sessions.use(request.cookies.get(cookie_name(request), ""))

    def knows_token(self, request: Request) -> bool:
        """Logged in or holding the server's token (not counted: for choosing which page to show)."""
        return self.logged_in(request) or (self.token is not None and same_secret(given_token(request), self.token))

    def authorised(self, request: Request, form_token: str | None) -> bool:
        return self.logged_in(request) or self.tried(request, given_token(request, form_token))

    def tried(self, request: Request, given: str) -> bool:
        """Whether `given` is the server's token; a wrong one counts against the client's address (TooManyTries)."""
        address = client_address(request)
        if not given:
            return False  # nothing was tried
        wait = self.throttle.wait(address)
        if wait > 0:
            raise TooManyTries(wait)  # even a right token waits: otherwise guessing would go on
        if self.token is not None and same_secret(given, self.token):
            self.throttle.succeeded(address)
            return True
        self.throttle.failed(address)
        return False

    def may_read(self, request: Request) -> bool:
        return not self.read_locked or self.authorised(request, None)

    def log_in(self, request: Request, given: str) -> bool:
        """A login with the login address's one-time token or the server's token."""
        return self.login.redeem(given) or self.tried(request, given)

    def go_on(self, request: Request, then: str) -> Response:
        """After a login: on to the page asked for, with a new session's cookie and no token in the address."""
        response = RedirectResponse(local_path(then), status_code=303)
        response.set_cookie(
            cookie_name(request),
            self.sessions.start(),
            max_age=int(self.sessions.max_s),  # the browser forgets it when the server would refuse it
            httponly=True,
            samesite="strict",
        )
        return response

    def log_out(self, request: Request) -> Response:
        """End the request's session (if any): the login page, saying so, and the cookie deleted."""
        self.sessions.end(request.cookies.get(cookie_name(request), ""))
        if wants_json(request):
            response: Response = JSONResponse({"ok": True, "message": "logged out"})
        else:
            context = {"error": None, "notice": "Logged out: log in again to go on.", "next": "/"}
            response = self.templates.TemplateResponse(request, "login.html", context)
        response.delete_cookie(cookie_name(request))
        return response

    def login_page(self, request: Request, status: int, error: str | None = None, then: str | None = None) -> Response:
        """All that someone without a login sees of a private station; `then`: the page to go to after
        logging in (default: the one asked for)."""
        held = request.cookies.get(cookie_name(request), "")
        stale = bool(held) and not self.sessions.use(held)  # an ended session (or an earlier server's)
        if error is None and stale:
            error = self.sessions.why_not(held)
        if wants_json(request):
            response: Response = JSONResponse(
                {"error": error or "this station's pages need a login: open the login address `station serve` printed"},
                status_code=status,
            )
        else:
            asked = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            context = {"error": error, "next": local_path(then if then is not None else asked)}
            response = self.templates.TemplateResponse(request, "login.html", context, status_code=status)
        if stale:  # of no use any more
            response.delete_cookie(cookie_name(request))
        return response


def given_token(request: Request, form_token: str | None = None) -> str:
    return form_token or request.headers.get("x-station-token") or ""


def too_many(request: Request, err: TooManyTries) -> Response:
    wait = {"retry-after": str(math.ceil(err.wait_s))}
    if wants_json(request):
        return JSONResponse({"error": str(err)}, status_code=429, headers=wait)
    return PlainTextResponse(str(err), status_code=429, headers=wait)


def site_of(request: Request) -> Site:
    site: Site = request.app.state.site
    return site
