"""`station serve MULTISTART_DIR`: the branches of a multistart side by side, and each branch's own pages.

The page (`/`) has a column per branch and refreshes itself, as a station's overview does, while the
multistart runs. Each branch's viewer answers under `/branch/N/`, and the installed station's under
`/station/`, read-only (prefixed.py keeps their links inside). The login is the station viewer's:
the same printed one-time address, token and sessions guard every page, the branches' too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles

from station.apps.web import branches, render
from station.apps.web.access import OneTimeLogin, Sessions, allowed_hosts, check_token, is_loopback
from station.apps.web.app import create_app, guard_requests
from station.apps.web.pages import login
from station.apps.web.prefixed import ASGIApp, Prefixed, Receive, Scope, Send
from station.apps.web.runner import StationRunner
from station.apps.web.site import HERE, Site, site_of
from station.core.run_lock import is_running


def create_multistart_app(
    directory: str | Path,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    static_export: bool = False,
    allow_hosts: Iterable[str] = (),
    public_read: bool = False,
    announce_login: Callable[[str], None] = lambda address: None,
) -> FastAPI:
    """The branches page of the multistart in `directory` (ValueError, in one line, if it is none); the
    arguments are create_app's."""
    directory = Path(directory)
    branches.read_ledger(directory)  # a damaged ledger is named now, not at the first page
    if token is None and not is_loopback(host):
        raise ValueError(f"serving on {host} (not a loopback address) needs a token: --token or STATION_WEB_TOKEN")
    check_token(token)
    site = Site(
        directory,
        StationRunner(directory),  # the Site's runner: never started, the multistart runs the branches
        OneTimeLogin(announce_login),
        allowed_hosts(host, allow_hosts),
        token,
        read_locked=not public_read and not static_export,
        static_export=static_export,
        sessions=Sessions(),
    )
    app = FastAPI(title="Station multistart", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.site, app.state.login = site, site.login
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    def station_app(where: Path) -> FastAPI:  # a branch's own viewer: read-only, no login of its own
        return create_app(where, host=host, token=token, static_export=True, allow_hosts=allow_hosts)

    app.add_middleware(BranchPages, directory=directory, station_app=station_app)  # inside the guard below
    _guard(app)
    app.include_router(login.router)
    _pages(app, directory)
    return app


def _guard(app: FastAPI) -> None:
    """The station viewer's guard (Host, other sites' posts, the login) before every page."""
    guard_requests(app)

    @app.exception_handler(404)
    async def unknown(request: Request, err: Exception) -> Response:
        return PlainTextResponse("404: no such page of this multistart (its branches are under /branch/N/)", 404)


def _pages(app: FastAPI, directory: Path) -> None:
    @app.get("/", response_class=HTMLResponse)
    def page(request: Request) -> HTMLResponse:
        site = site_of(request)
        context = _context(directory, site.static_export)
        context["logged_in"] = not site.static_export and site.logged_in(request)
        return site.templates.TemplateResponse(request, "branches.html", context)

    @app.get("/api/live")
    def live(request: Request) -> JSONResponse:
        """What live.js asks every few seconds: the state, and the columns re-rendered."""
        site = site_of(request)
        context = _context(directory, site.static_export)
        html = site.templates.get_template("branch_columns.html").render(context)
        return JSONResponse({"state": context["state"], "events": [], "html": {"branches": html}})


def _context(directory: Path, static_export: bool) -> dict[str, Any]:
    ledger = branches.read_ledger(directory)
    found = branches.columns(directory, ledger)
    choice = ledger.get("choice") if isinstance(ledger.get("choice"), dict) else None
    return {
        "ledger": ledger,
        "name": directory.resolve().name,
        "state": "running" if is_running(directory) else ("chosen" if choice else "stopped"),
        "columns": found,
        "choice": choice,
        "installed": branches.installed_dir(directory) is not None,
        "plot": branches.best_plot(found, ledger.get("until_tick")),
        "reports": branches.reports(directory),
        "markdown": render.markdown,
        "static_export": static_export,
    }


class BranchPages:
    """ASGI middleware: `/branch/N/...` to branch N's viewer, `/station/...` to the installed station's,
    each made when first asked (a branch not yet forked has none), everything else to the app."""

    def __init__(self, app: ASGIApp, directory: Path, station_app: Callable[[Path], ASGIApp]) -> None:
        self.app, self.directory, self.station_app = app, directory, station_app
        self._made: dict[str, Prefixed] = {}
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._served(scope["path"]) if scope["type"] == "http" else None
        await (found or self.app)(scope, receive, send)

    def _served(self, path: str) -> Prefixed | None:
        parts = path.split("/", 3)  # "", "branch", "N", rest
        if parts[1] == "branch" and len(parts) > 2 and parts[2].isdigit() and str(int(parts[2])) == parts[2]:
            prefix, where = f"/branch/{int(parts[2])}", branches.branch_dir(self.directory, int(parts[2]))
        elif parts[1] == "station":
            prefix, where = "/station", branches.installed_dir(self.directory)
        else:
            return None
        if where is None or path[len(prefix) :][:1] not in ("", "/"):
            return None  # the app answers 404
        with self._lock:
            if prefix not in self._made:
                self._made[prefix] = Prefixed(self.station_app(where), prefix)
            return self._made[prefix]
