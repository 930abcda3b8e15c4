"""`station serve`: the web viewer and operator console of one station directory.

Pages are server-rendered templates; the only script is our own small `live.js`, which polls
`/api/live` to refresh parts of a page while the station runs. Reading opens the database
read-only; operating goes through the same queued, recorded operator commands as the CLI.

A form posted from the operator page comes back to that page: the outcome as a banner (carried
by a one-time cookie, so no text travels in the address), a refusal with what was typed kept.
Requests that accept JSON get JSON answers instead.

Every page and every operator action needs a login, also on loopback (another account on the
same machine can reach that port too): `station serve` prints a login address holding a one-time
token; opening it (or typing that token, or the server's own `--token` / STATION_WEB_TOKEN, on
the login page) sets a session cookie (a separate secret, SameSite=Strict, so other sites cannot
post with it), and the used address is replaced by a fresh one, printed in turn. Scripts send
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

import json
import math
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlencode

from fastapi import FastAPI, Form, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from .. import commands, endpoints, report
from ..readers_cli import PAPER_STATES
from ..store import DB_NAME, Store
from ..world import check_room_set
from . import board, data, diff, plots, refs, render, study
from . import events as feed
from .access import (
    SAFE_METHODS,
    SECURITY_HEADERS,
    OneTimeLogin,
    Throttle,
    TooManyTries,
    allowed_hosts,
    check_token,
    client_address,
    cookie_name,
    foreign_origin,
    host_name,
    in_process,
    is_loopback,
    local_path,
    same_secret,
)
from .runner import StationRunner
from .search import SearchIndex

HERE = Path(__file__).parent
FLASH = "station_done"  # the outcome of the last operator form, shown once on the operator page
LIVE_PARTS = {"alerts": "alerts.html", "evaluations": "open_evaluations.html"}  # refreshed by /api/live
MAX_ID = 2**62  # larger ids cannot exist (SQLite integers) and get a 404
OVERVIEW_DOTS = 300  # dots of the overview's small score plot (besides the records its lines pass through)


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
        from ..world import Station

        station = getattr(self._local, "station", None)
        if station is None:
            station = Station.open(self.dir)
            self._local.station = station
        station.agents.invalidate()
        return station


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
) -> FastAPI:
    """The app. `allow_hosts`: Host names answered besides loopback and `host`; `public_read`: pages
    may be read without a login (operating still needs it); `announce_login`: told the path of the
    next login address each time one is used (`station serve` prints it; the first one is
    `app.state.login.address()`). `static_export` renders pages in-process for `station export`: no
    login, as no server is listening.

    One long factory on purpose: every route is a closure over this station's reader, runner,
    token and throttle, and the guard that checks Host, Origin and token sits beside the routes
    it protects, so the whole surface a web page can reach is read in one place."""
    directory = Path(directory)
    if not Store.exists(directory):
        raise ValueError(f"no station at {directory}")
    if token is None and not is_loopback(host):
        raise ValueError(f"serving on {host} (not a loopback address) needs a token: --token or STATION_WEB_TOKEN")
    check_token(token)
    # Opened once now: an older station's tables are brought up to date (the pages read their new
    # columns), and a damaged database is named in one line, not at the first page.
    from ..world import Station

    Station.open(directory).close()
    session = secrets.token_urlsafe(32)  # what the login cookie holds: never printed, never typed
    login = OneTimeLogin(announce_login)
    hosts = allowed_hosts(host, allow_hosts)
    read_locked = not public_read and not static_export  # research is private, also from other local accounts
    throttle = Throttle()
    reader, runner = Reader(directory), runner or StationRunner(directory)
    app = FastAPI(title="Station", docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.globals.update(
        markdown=render.markdown,
        linked=lambda text: refs.link_mentions(
            str(render.markdown(text)), refs.existing(reader.db(), refs.mentioned(text))
        ),
        figure_html=plots.figure_html,
        reply_html=render.reply_html,
        plain=render.plain,
        duration=render.duration,
        static_export=static_export,
        shown_chars=data.SHOWN_CHARS,
    )
    app.state.runner, app.state.reader, app.state.login = runner, reader, login
    index = SearchIndex(directory)
    if not static_export:  # build the search index in the background: the first search is then quick
        threading.Thread(target=lambda: index.refresh(Reader(directory).db()), name="search-index", daemon=True).start()

    def show(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        meta = reader.db().execute("SELECT value FROM meta WHERE key='config'").fetchone()
        context.setdefault("station_name", json.loads(meta[0]).get("name", "station") if meta else "station")
        return templates.TemplateResponse(request, name, {"live": runner.describe(), **context}, status_code=status)

    def not_found(request: Request, what: str) -> HTMLResponse:
        return show(request, "error.html", 404, title="Not found", message=what)

    def host_ok(request: Request) -> bool:
        return in_process(request) or host_name(request.headers.get("host", "")) in hosts

    def logged_in(request: Request) -> bool:
        """The request carries this server's session cookie. Not throttled: 256 random bits cannot be
        guessed, and a stale cookie of an earlier server (a tab polling /api/live) must not lock out
        its address."""
        return same_secret(request.cookies.get(cookie_name(request), ""), session)

    def given_token(request: Request, form_token: str | None = None) -> str:
        return form_token or request.headers.get("x-station-token") or ""

    def knows_token(request: Request) -> bool:
        """Logged in or holding the server's token (not counted: for choosing which page to show)."""
        return logged_in(request) or (token is not None and same_secret(given_token(request), token))

    def authorised(request: Request, form_token: str | None) -> bool:
        return logged_in(request) or tried(request, given_token(request, form_token))

    def tried(request: Request, given: str) -> bool:
        """Whether `given` is the server's token; a wrong one counts against the client's address (TooManyTries)."""
        address = client_address(request)
        if not given:
            return False  # nothing was tried
        wait = throttle.wait(address)
        if wait > 0:
            raise TooManyTries(wait)  # even a right token waits: otherwise guessing would go on
        if token is not None and same_secret(given, token):
            throttle.succeeded(address)
            return True
        throttle.failed(address)
        return False

    def may_read(request: Request) -> bool:
        return not read_locked or authorised(request, None)

    def log_in(request: Request, given: str) -> bool:
        """A login with the login address's one-time token or the server's token."""
        return login.redeem(given) or tried(request, given)

    def go_on(request: Request, then: str) -> Response:
        """After a login: on to the page asked for, with the session cookie and no token in the address."""
        response = RedirectResponse(local_path(then), status_code=303)
        response.set_cookie(cookie_name(request), session, httponly=True, samesite="strict")
        return response

    def refuse(
        request: Request, status: int, message: str, action: str | None = None, typed: dict[str, str] | None = None
    ) -> Response:
        """A refused post: JSON for API clients; for the page's forms, the page with the message
        (the login page for someone who may not read the station)."""
        if wants_json(request):
            return JSONResponse({"error": message}, status_code=status)
        if read_locked and not knows_token(request):
            return login_page(request, status, message, then="/operator")
        return operator_view(request, status, error=message, failed=action, typed=typed or {})

    def login_page(request: Request, status: int, error: str | None = None, then: str | None = None) -> Response:
        """All that someone without a login sees of a private station; `then`: the page to go to after
        logging in (default: the one asked for)."""
        if wants_json(request):
            response: Response = JSONResponse(
                {"error": error or "this station's pages need a login: open the login address `station serve` printed"},
                status_code=status,
            )
        else:
            asked = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            context = {"error": error, "next": local_path(then if then is not None else asked)}
            response = templates.TemplateResponse(request, "login.html", context, status_code=status)
        if request.cookies.get(cookie_name(request)):  # an earlier server's session: of no use any more
            response.delete_cookie(cookie_name(request))
        return response

    def too_many(request: Request, err: TooManyTries) -> Response:
        wait = {"retry-after": str(math.ceil(err.wait_s))}
        if wants_json(request):
            return JSONResponse({"error": str(err)}, status_code=429, headers=wait)
        return PlainTextResponse(str(err), status_code=429, headers=wait)

    @app.exception_handler(TooManyTries)
    async def throttled(request: Request, err: TooManyTries) -> Response:
        return too_many(request, err)

    def gatekeeper(request: Request) -> Response | None:
        """The answer to a request that may not go on (None: it may): an unknown Host, a post from
        another site, or (off loopback) a page read without the token."""
        if not host_ok(request):
            return PlainTextResponse(
                f"421 Misdirected Request: this server answers to {', '.join(sorted(hosts))}; "
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
            return None if may_read(request) else login_page(request, 401)
        except TooManyTries as err:
            return too_many(request, err)

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable) -> Response:
        response = gatekeeper(request) or await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, err: RequestValidationError) -> Response:
        if request.method == "GET":  # a malformed id or page number: that page does not exist
            return not_found(request, "No such page (the address has an id or number that cannot exist).")
        return refuse(request, 400, "bad form: " + "; ".join(e["msg"] for e in err.errors()))

    @app.exception_handler(404)
    async def unknown(request: Request, err: Exception) -> Response:
        return not_found(request, "No such page.")

    # -- reading ----------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse)
    def overview(request: Request, events: str = "") -> HTMLResponse:
        station = reader.station()
        status = report.status(station, running=runner.state().startswith("running"))
        db = reader.db()
        every_event = events == "all"  # the turn and tick markers too, else only what matters
        return show(
            request,
            "overview.html",
            st=status,
            events=feed.recent(db, everything=every_event),
            every_event=every_event,
            progress=plots.score_plots(board.points(db, board.Filters(), dots=OVERVIEW_DOTS), height=240),
            reviews=data.pending_reviews(db),
            shown_agents=data.OVERVIEW_AGENTS,
            **alerts(),
        )

    def alerts() -> dict[str, Any]:
        """What the overview's banners and list of open evaluations show (also live, through /api/live)."""
        tasks = reader.station().ctx.tasks
        watch = data.evaluation_watch(
            reader.db(),
            live=runner.state().startswith("running"),
            timeouts={tid: task.timeout_s for tid, task in tasks.items()},
            run_started=runner.started_at(),
        )
        return {
            "watch": watch,
            "research": bool(tasks),
            "pause_reason": runner.pause_reason(),
            "queue_patience": data.QUEUE_PATIENCE,
        }

    @app.get("/agents", response_class=HTMLResponse)
    def agents_index(
        request: Request, page: int = 1, lineage: str = "", state: str = "", kind: str = ""
    ) -> HTMLResponse:
        """Everyone who lived, newest first; filtered by lineage, state and kind from the address."""
        db = reader.db()
        where, params = data.agent_filter(lineage, state, kind)
        total = db.execute(f"SELECT COUNT(*) FROM agents WHERE {where}", params).fetchone()[0]
        pages = max(1, -(-total // data.AGENTS_PER_PAGE))
        page = min(max(1, page), pages) if abs(page) < MAX_ID else 1
        agents = data.agent_summaries(
            db, where, params, limit=data.AGENTS_PER_PAGE, offset=(page - 1) * data.AGENTS_PER_PAGE, newest_first=True
        )
        chosen = {"lineage": lineage, "state": state, "kind": kind}
        return show(
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

    @app.get("/agents/{name}", response_class=HTMLResponse)
    def agent_page(request: Request, name: str, page: int = 0, tick: int | None = None) -> HTMLResponse:
        db = reader.db()
        who = data.agent(db, name)
        if who is None:
            return not_found(request, f"No agent named {name!r}.")
        if tick is not None and abs(tick) < MAX_ID:
            page = data.page_of_tick(db, who.session, tick)
        page = page if 0 < page < MAX_ID else 10**9  # default: the latest page
        turns, pages = data.dialogue_page(db, who.session, page)
        current = min(page, pages)
        works = data.agent_works(db, who)
        return show(request, "agent.html", agent=who, works=works, turns=turns, page=current, pages=pages)

    @app.get("/agents/{name}/turns", response_class=HTMLResponse)
    def new_turns(request: Request, name: str, after: int = 0) -> HTMLResponse:
        """The agent's turns after a tick, as HTML to append to its open dialogue page (live)."""
        db = reader.db()
        who = data.agent(db, name)
        if who is None or not 0 <= after < MAX_ID:
            return HTMLResponse("", status_code=404)
        turns = data.turns_after(db, who.session, after)
        return templates.TemplateResponse(request, "turns.html", {"turns": turns})

    @app.get("/turns/{session}/{tick}/{part}", response_class=HTMLResponse)
    def turn_text(request: Request, session: int, tick: int, part: str) -> HTMLResponse:
        """The whole of a text a dialogue page shows cut (a runaway reply, a long prompt)."""
        text = (
            data.turn_text(reader.db(), session, tick, part) if 0 <= session < MAX_ID and 0 <= tick < MAX_ID else None
        )
        if text is None:
            return not_found(request, "No such turn text.")
        return show(request, "turn_text.html", session=session, tick=tick, part=part, text=text)

    @app.get("/search", response_class=HTMLResponse)
    def search(request: Request, q: str = "", page: int = 1) -> HTMLResponse:
        q = q[:200]
        hits: list[dict[str, Any]] = []
        total = 0
        if q.strip():
            index.refresh(reader.db())
            hits, total = index.search(q, page if 0 < page < 10_000 else 1)
        return show(request, "search.html", q=q, hits=hits, total=total, page=max(1, min(page, 10_000)))

    @app.get("/study", response_class=HTMLResponse)
    def study_page(
        request: Request,
        first: int | None = None,
        last: int | None = None,
        agent: tuple[str, ...] | None = Query(None),  # repeated: ?agent=A&agent=B
    ) -> HTMLResponse:
        low, high = (v if v is None or abs(v) < MAX_ID else None for v in (first, last))
        chosen = [name[:200] for name in (agent or [])[:50]]  # the address is typed by anyone: keep it small
        return show(request, "study.html", **study.study(reader.db(), low, high, chosen or None))

    @app.get("/papers", response_class=HTMLResponse)
    def papers(request: Request, show_: str = Query("", alias="show")) -> HTMLResponse:
        """The published papers; ?show=all (or a status) lists the submissions, published or not."""
        db = reader.db()
        wanted = show_ if show_ in ("all", *PAPER_STATES) else ""
        listed = data.submissions(db, None if wanted == "all" else wanted) if wanted else []
        return show(
            request,
            "papers.html",
            papers=data.papers(db) if not wanted else [],
            submissions=listed,
            shown=wanted,
            counts=data.submission_counts(db),
        )

    @app.get("/submissions/{sid}", response_class=HTMLResponse)
    def submission(request: Request, sid: int) -> HTMLResponse:
        found = data.submission(reader.db(), sid) if 0 < sid < MAX_ID else None
        if found is None:
            return not_found(request, f"No paper submission {sid}.")
        return show(request, "submission.html", sub=found)

    @app.get("/papers/{number}", response_class=HTMLResponse)
    def paper(request: Request, number: int) -> HTMLResponse:
        found = data.capsule(reader.db(), "archive", number) if 0 < number < MAX_ID else None
        if found is None or found["deleted"]:
            return not_found(request, f"No paper {number} in the Archive.")
        review = [m for m in found["messages"] if m["author"] == data.REVIEWER_NAME]
        rest = [m for m in found["messages"][1:] if m["author"] != data.REVIEWER_NAME]
        return show(
            request,
            "paper.html",
            paper=found,
            body=found["messages"][0],
            review=review,
            replies=rest,
            submission_id=data.submission_of_paper(reader.db(), number),
            cited=data.cited_evaluations(reader.db(), f"{found['abstract'] or ''}\n{found['messages'][0]['content']}"),
        )

    @app.get("/forum", response_class=HTMLResponse)
    def forum(request: Request, writer: str = "", sort: str = "recent") -> HTMLResponse:
        return thread_list(request, "Public forum", "public_memory", "forum", writer, sort)

    @app.get("/mail", response_class=HTMLResponse)
    def mail(request: Request, writer: str = "", sort: str = "recent") -> HTMLResponse:
        return thread_list(request, "Mail", "mail", "mail", writer, sort)

    def thread_list(request: Request, title: str, room: str, link: str, writer: str, sort: str) -> HTMLResponse:
        """A room's threads, newest activity first; `writer` and `sort` from the address."""
        writer, sort = writer[:200].strip(), sort if sort in data.THREAD_SORTS else "recent"
        found = data.threads(reader.db(), room, writer=writer, sort=sort)
        return show(request, "threads.html", title=title, threads=found, link=link, writer=writer, sort=sort)

    @app.get("/forum/{number}", response_class=HTMLResponse)
    def forum_thread(request: Request, number: int) -> HTMLResponse:
        return thread(request, "forum", number)

    @app.get("/mail/{number}", response_class=HTMLResponse)
    def mail_thread(request: Request, number: int) -> HTMLResponse:
        return thread(request, "mail", number)

    def thread(request: Request, room: str, number: int) -> HTMLResponse:
        """A thread by its number in its room, the number agents and `station thread` use."""
        wanted = "public_memory" if room == "forum" else "mail"
        found = data.capsule(reader.db(), wanted, number) if 0 < number < MAX_ID else None
        if found is None or found["deleted"]:
            return not_found(request, f"No {room} thread {number}.")
        return show(request, "thread.html", thread=found, back=room)

    @app.get("/research", response_class=HTMLResponse)
    def research(request: Request) -> HTMLResponse:
        db = reader.db()
        filters = board.Filters.read(dict(request.query_params))
        return show(
            request,
            "research.html",
            f=filters,
            **board.board(db, filters),
            plot=plots.score_plots(board.points(db, filters)),
        )

    @app.get("/research/queue", response_class=HTMLResponse)
    def queue(request: Request) -> HTMLResponse:
        db = reader.db()
        return show(request, "queue.html", failures=data.recent_failures(db), **alerts())

    @app.get("/research/{evaluation_id}", response_class=HTMLResponse)
    def evaluation(request: Request, evaluation_id: int) -> HTMLResponse:
        db = reader.db()
        found = data.evaluation(db, evaluation_id) if 0 < evaluation_id < MAX_ID else None
        if found is None:
            return not_found(request, f"No evaluation #{evaluation_id}.")
        return show(
            request,
            "evaluation.html",
            ev=found,
            built_on=diff.built_on(db, found),
            cited_by=data.citing_papers(db, evaluation_id),
            later=data.later_work(db, evaluation_id),
            figure=data.figure(db, found),
        )

    @app.get("/research/{evaluation_id}/diff", response_class=HTMLResponse)
    def evaluation_diff(request: Request, evaluation_id: int, against: int | None = None) -> HTMLResponse:
        """The submission's code against an earlier one (default: the one it built on)."""
        db = reader.db()
        found = data.evaluation(db, evaluation_id) if 0 < evaluation_id < MAX_ID else None
        if found is None:
            return not_found(request, f"No evaluation #{evaluation_id}.")
        base = diff.built_on(db, found)
        other_id = against if against is not None and 0 < against < MAX_ID else (base["id"] if base else None)
        other = data.evaluation(db, other_id) if other_id else None
        if against is not None and other is None:
            return not_found(request, f"No evaluation #{against} to compare with.")
        lines = diff.unified(other["code"], found["code"], f"#{other['id']}", f"#{found['id']}") if other else []
        return show(
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

    @app.get("/lineages", response_class=HTMLResponse)
    def lineages(request: Request, page: int = 1, lineage: str = "") -> Response:
        """One page of the lineages; ?lineage=NAME: the page that shows that lineage."""
        db = reader.db()
        tick = data.meta(db, "tick")
        if lineage:  # to the address of its page, so that each page has one address (an export saves it once)
            where = data.lineage_page(db, lineage[:200])
            return RedirectResponse(f"/lineages?page={where}#lineage-{quote(lineage[:200])}", status_code=303)
        tree, page, pages = data.lineage_tree(db, tick, page if abs(page) < MAX_ID else 1)
        return show(
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

    @app.get("/api/live")
    def live(after: int = 0, html: str = "", everything: int = 0) -> JSONResponse:
        """The run's state, new events (only meaningful ones unless `everything`), and the page
        parts named in `html` (LIVE_PARTS) re-rendered."""
        db = reader.db()
        since = after if 0 <= after < MAX_ID else 0
        news = feed.recent(db, 25, since, everything=bool(everything))
        answer = {"tick": data.meta(db, "tick"), **runner.describe(), "events": news}
        wanted = [name for name in html.split(",") if name in LIVE_PARTS]
        if wanted:
            context = alerts()
            answer["html"] = {name: templates.get_template(LIVE_PARTS[name]).render(context) for name in wanted}
        return JSONResponse(answer)

    # -- operating --------------------------------------------------------------------------
    @app.get("/operator", response_class=HTMLResponse)
    def operator_page(request: Request) -> HTMLResponse:
        return operator_view(request)

    def operator_view(
        request: Request,
        status: int = 200,
        *,
        error: str | None = None,
        failed: str | None = None,
        typed: dict[str, str] | None = None,
    ) -> HTMLResponse:
        """The operator page; `error`, `failed` and `typed`: a refused form, its action and what was typed."""
        db = reader.db()
        agents = data.agent_summaries(db, "state='active'", limit=data.OPERATOR_NAMES)  # offered, not all
        active = db.execute("SELECT COUNT(*) FROM agents WHERE state='active'").fetchone()[0]
        requests, waiting = [], 0
        if data.has_table(db, "human_requests"):
            waiting = db.execute("SELECT COUNT(*) FROM human_requests WHERE resolved_tick IS NULL").fetchone()[0]
            requests = data.rows(
                db, "SELECT * FROM human_requests WHERE resolved_tick IS NULL ORDER BY id DESC LIMIT 50"
            )
        done = unquote(request.cookies.get(FLASH, "")) or None
        response = show(
            request,
            "operator.html",
            status,
            agents=agents,
            active=active,
            requests=requests,
            waiting=waiting,
            done=done,
            error=error,
            failed=failed,
            typed=typed or {},
            tick=data.meta(db, "tick"),
            needs_login=not knows_token(request),
            safe_keys=commands.changeable(),
        )
        if done:
            response.delete_cookie(FLASH, path="/operator")
        return response

    @app.get("/login")
    def login_address(request: Request, token: str = "", next: str = "/") -> Response:
        """The printed login address (`?token=`), or the login form."""
        if logged_in(request):  # already in (a used address reopened from history): no token is tried
            return RedirectResponse(local_path(next), status_code=303)
        if not token:
            return login_page(request, 200, then=next)
        if log_in(request, token):
            return go_on(request, next)
        used = "This login address was used already (each works once) or is wrong: `station serve` prints a new one."
        return login_page(request, 403, used, then=next)

    @app.post("/login")
    def login_form(request: Request, token: str = Form(""), next: str = Form("/")) -> Response:
        if log_in(request, token):
            return go_on(request, next)
        if read_locked and not wants_json(request):
            return login_page(request, 403, "Wrong token: not logged in.", then=next)
        return refuse(request, 403, "Wrong token: not logged in.")

    @app.post("/operator/{action}")
    def operate(
        request: Request,
        action: str,
        token: str | None = Form(None),
        to: str = Form(""),
        text: str = Form(""),
        request_id: int = Form(0),
        agent: str = Form(""),
        key: str = Form(""),
        value: str = Form(""),
        spec: str = Form(""),
        until_tick: str = Form(""),
    ) -> Response:
        typed = {"to": to, "text": text, "key": key, "value": value, "spec": spec, "until_tick": until_tick}
        if not authorised(request, token):
            return refuse(
                request,
                403,
                "Operator actions need you to log in (with the address `station serve` printed; scripts send the token).",
                action,
                typed,
            )
        try:
            done = _operate(
                directory,
                runner,
                action,
                to=to,
                text=text,
                request_id=request_id,
                agent=agent,
                key=key,
                value=value,
                spec=spec,
                until_tick=until_tick,
                tick=data.meta(reader.db(), "tick"),
            )
        except endpoints.NewEndpoint as err:  # never allowed from the web: only on the command line
            return refuse(request, 403, str(err), action, typed)
        except (commands.CommandError, ValueError) as err:
            return refuse(request, 400, str(err), action, typed)
        if wants_json(request):
            return JSONResponse({"ok": True, "done": done})
        response = RedirectResponse("/operator", status_code=303)  # the banner rides in a one-time cookie
        response.set_cookie(FLASH, quote(done[:400]), path="/operator", httponly=True, samesite="strict")
        return response

    return app


def wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def _operate(directory: Path, runner: StationRunner, action: str, **form: Any) -> str:
    import yaml

    if action == "pause":
        return runner.pause()
    if action == "resume":
        return runner.resume(until_tick=tick_limit(form["until_tick"], form["tick"]))
    if action == "message":
        command = {"op": "message", "to": form["to"] or "*", "text": form["text"]}
    elif action == "answer":
        command = {"op": "answer", "request": form["request_id"], "text": form["text"]}
    elif action == "end_agent":
        command = {"op": "end_agent", "agent": form["agent"]}
    elif action == "spawn":
        try:
            spec = yaml.safe_load(form["spec"] or "{}")
        except yaml.YAMLError as err:
            raise ValueError(f"the agent spec is not valid YAML: {err}") from None
        if not isinstance(spec, dict):
            raise ValueError("the agent spec must be a mapping, like an entry of agents: in a config")
        command = {"op": "spawn", "agent": spec}  # checked by commands.validate
    elif action != "set":
        raise ValueError(f"unknown operator action {action!r}")
    store = Store(directory)
    try:
        command = (
            commands.set_command(store, form["key"], form["value"]) if action == "set" else commands.validate(command)
        )
        config = endpoints.stored_config(store)  # a model here must not carry a key somewhere new
        if action == "set":
            check_room_set(config, command["key"], command.get("value"))
            endpoints.check_set(config, command["key"], command.get("value"))
        elif action == "spawn":
            endpoints.check_spawn(config, command["agent"])
        number = commands.queue(store, command)
    finally:
        store.close()
    return f"operator command #{number} ({action}) queued"


def tick_limit(text: str, tick: int) -> int | None:
    """The Resume form's limit: empty runs with no limit, else the last tick to play (not one already over)."""
    if not text.strip():
        return None
    try:
        limit = int(text)
    except ValueError:
        raise ValueError(f"the tick limit must be a whole number (the last tick to run), not {text!r}") from None
    if limit < tick:
        raise ValueError(f"the tick limit must be at least the current tick, {tick}: tick {limit} is already over")
    return limit
