"""`station serve`: the web viewer and operator console of one station directory.

Pages are server-rendered templates, one router per group of pages in `pages/`; the only script
is our own small `live.js`, which polls `/api/live` to refresh parts of a page while the station
runs. Reading opens the database read-only; operating goes through the same queued, recorded
operator commands as the CLI (`pages/operator.py`). This module builds the app and holds the
guard every request passes first.

Every page and every operator action needs a login, also on loopback (another account on the
same machine can reach that port too): `station serve` prints a login address holding a one-time
token; opening it (or typing that token, or the server's own `--token` / STATION_WEB_TOKEN, on
the login page) sets a session cookie (a new secret per login, SameSite=Strict, so other sites
cannot post with it), and the used address is replaced by a fresh one, printed in turn. A session
ends with the header's logout button, after a while without a request, or some time after its
login (access.Sessions); its cookie then opens only the login page, which says why. Scripts send
the server's token in an X-Station-Token header. With `public_read` anyone may read the pages;
operating still needs the login.

Against DNS rebinding and cross-site forms (see docs/security.md):
* a request whose Host is not an allowed name (loopback names, the bound address, `allow_hosts`)
  is answered 421 and nothing else (a login address sent there is not used up);
* a state-changing request (anything but GET, HEAD, OPTIONS) whose Origin, or without one its
  Referer, is not this server is refused (403). A request with neither is let through to the
  token check: browsers send Origin with every cross-site POST, so such a request is a script;
* wrong tokens are counted per client address: after a few, every try waits (429, Retry-After);
* after a login the browser goes on only to a path of this server (no open redirect).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles

from station.apps.web.access import (
    SAFE_METHODS,
    SECURITY_HEADERS,
    OneTimeLogin,
    Sessions,
    TooManyTries,
    allowed_hosts,
    check_token,
    foreign_origin,
    host_name,
    in_process,
    is_loopback,
)
from station.apps.web.pages import ROUTERS
from station.apps.web.pages.operator import refuse
from station.apps.web.runner import StationRunner
from station.apps.web.site import HERE, Reader, Site, site_of, too_many, wants_json
from station.core.store import Store

__all__ = ["HERE", "create_app"]


def create_app(
    directory: str | Path,
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    runner: StationRunner | None = None,
    static_export: bool = False,
    allow_hosts: Iterable[str] = (),
    public_read: bool = False,
    announce_login: Callable[[str], None] = lambda address: None,
    session_idle_s: float | None = None,
    session_max_s: float | None = None,
    session_clock: Callable[[], float] | None = None,
) -> FastAPI:
    """The app. `allow_hosts`: Host names answered besides loopback and `host`; `public_read`: pages
    may be read without a login (operating still needs it); `announce_login`: told the path of the
    next login address each time one is used (`station serve` prints it; the first one is
    `app.state.login.address()`). `static_export` renders pages in-process for `station export`: no
    login, as no server is listening. A login session ends after `session_idle_s` without a request
    or `session_max_s` after the login (None: Sessions.IDLE_S, MAX_S); `session_clock`: for tests."""
    directory = Path(directory)
    if not Store.exists(directory):
        raise ValueError(f"no station at {directory}")
    if token is None and not is_loopback(host):
        raise ValueError(f"serving on {host} (not a loopback address) needs a token: --token or STATION_WEB_TOKEN")
    check_token(token)
    # Opened once now: an older station's tables are brought up to date (the pages read their new
    # columns), and a damaged database is named in one line, not at the first page.
    from station.apps.world import Station

    Station.open_to_read(directory).close()
    site = Site(
        directory,
        runner or StationRunner(directory),
        OneTimeLogin(announce_login),
        allowed_hosts(host, allow_hosts),
        token,
        read_locked=not public_read and not static_export,  # research is private, also from other local accounts
        static_export=static_export,
        sessions=Sessions(session_idle_s, session_max_s, session_clock),
    )
    app = FastAPI(title="Station", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.site = site
    app.state.runner, app.state.reader, app.state.login = site.runner, site.reader, site.login
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    _guard(app)
    for router in ROUTERS:
        app.include_router(router)
    if not static_export:  # build the search index in the background: the first search is then quick
        threading.Thread(
            target=lambda: site.index.refresh(Reader(directory).db()), name="search-index", daemon=True
        ).start()
    return app


def guard_requests(app: FastAPI) -> None:
    """The gatekeeper before every route, the security headers after it, and the login's throttle
    (the station viewer's and a multistart's)."""

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable) -> Response:
        response = gatekeeper(request) or await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.exception_handler(TooManyTries)
    async def throttled(request: Request, err: TooManyTries) -> Response:
        return too_many(request, err)


def _guard(app: FastAPI) -> None:
    """What every request passes before its route, and the answers to requests no route takes."""
    guard_requests(app)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, err: RequestValidationError) -> Response:
        if request.method == "GET":  # a malformed id or page number: that page does not exist
            return site_of(request).not_found(
                request, "No such page (the address has an id or number that cannot exist)."
            )
        return refuse(request, 400, "bad form: " + "; ".join(e["msg"] for e in err.errors()))

    @app.exception_handler(404)
    async def unknown(request: Request, err: Exception) -> Response:
        return site_of(request).not_found(request, "No such page.")


def gatekeeper(request: Request) -> Response | None:
    """The answer to a request that may not go on (None: it may): an unknown Host, a post from
    another site, or (off loopback) a page read without the token."""
    site = site_of(request)
    if not (in_process(request) or host_name(request.headers.get("host", "")) in site.hosts):
        return PlainTextResponse(
            f"421 Misdirected Request: this server answers to {', '.join(sorted(site.hosts))}; "
            "to reach it by another name, start it with --allow-host NAME",
            status_code=421,
        )
    if request.method not in SAFE_METHODS:  # a post's token is checked by its route
        if not foreign_origin(request):
            return None
        message = "refused: this request comes from a page of another site"
        return (
            JSONResponse({"error": message}, status_code=403)
            if wants_json(request)
            else PlainTextResponse(f"403 Forbidden: {message}", status_code=403)
        )
    if request.url.path.startswith("/static/") or request.url.path == "/login":  # nothing private there
        return None
    try:
        return None if site.may_read(request) else site.login_page(request, 401)
    except TooManyTries as err:
        return too_many(request, err)
