"""The operator's page and its forms: the same queued, recorded operator commands as the CLI.

A form posted here comes back to this page: the outcome as a banner (carried by a one-time
cookie, so no text travels in the address), a refusal with what was typed kept. Requests that
accept JSON get JSON answers instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from rooms.external import waiting_requests
from station.apps import endpoints
from station.apps.web import data
from station.apps.web.runner import StationRunner
from station.apps.web.site import site_of, wants_json
from station.apps.world import check_room_set, station_room_classes
from station.core import commands
from station.core.store import Store

router = APIRouter()
FLASH = "station_done"  # the outcome of the last operator form, shown once on the operator page


@router.get("/operator", response_class=HTMLResponse)
def operator_page(request: Request) -> HTMLResponse:
    return operator_view(request)


@router.post("/operator/{action}")
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
    site = site_of(request)
    typed = {"to": to, "text": text, "key": key, "value": value, "spec": spec, "until_tick": until_tick}
    if not site.authorised(request, token):
        return refuse(
            request,
            403,
            "Operator actions need you to log in (with the address `station serve` printed; scripts send the token).",
            action,
            typed,
        )
    form = {"to": to, "text": text, "request_id": request_id, "agent": agent, "key": key, "value": value}
    try:
        done = _operate(
            site.directory,
            site.runner,
            action,
            **form,
            spec=spec,
            until_tick=until_tick,
            tick=data.meta(site.reader.db(), "tick"),
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


def operator_view(
    request: Request,
    status: int = 200,
    *,
    error: str | None = None,
    failed: str | None = None,
    typed: dict[str, str] | None = None,
) -> HTMLResponse:
    """The operator page; `error`, `failed` and `typed`: a refused form, its action and what was typed."""
    site = site_of(request)
    db = site.reader.db()
    agents = data.agent_summaries(db, "state='active'", limit=data.OPERATOR_NAMES)  # offered, not all
    active = db.execute("SELECT COUNT(*) FROM agents WHERE state='active'").fetchone()[0]
    waiting, requests = waiting_requests(db)
    done = unquote(request.cookies.get(FLASH, "")) or None
    response = site.show(
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
        needs_login=not site.knows_token(request),
        safe_keys=commands.changeable(),
    )
    if done:
        response.delete_cookie(FLASH, path="/operator")
    return response


def refuse(
    request: Request, status: int, message: str, action: str | None = None, typed: dict[str, str] | None = None
) -> Response:
    """A refused post: JSON for API clients; for the page's forms, the page with the message
    (the login page for someone who may not read the station)."""
    site = site_of(request)
    if wants_json(request):
        return JSONResponse({"error": message}, status_code=status)
    if site.read_locked and not site.knows_token(request):
        return site.login_page(request, status, message, then="/operator")
    return operator_view(request, status, error=message, failed=action, typed=typed or {})


def _operate(directory: Path, runner: StationRunner, action: str, **form: Any) -> str:
    if action == "pause":
        return runner.pause()
    if action == "resume":
        return runner.resume(until_tick=tick_limit(form["until_tick"], form["tick"]))
    command = _command(action, form)
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
        else:
            commands.check_target(store, command, station_room_classes(config))
        number = commands.queue(store, command)
    finally:
        store.close()
    return f"operator command #{number} ({action}) queued"


def _command(action: str, form: dict[str, Any]) -> dict[str, Any]:
    """The operator command a form asks for (`set` is made from its key and value by commands.set_command)."""
    import yaml

    if action == "message":
        return {"op": "message", "to": form["to"] or "*", "text": form["text"]}
    if action == "answer":
        return {"op": "answer", "request": form["request_id"], "text": form["text"]}
    if action == "end_agent":
        return {"op": "end_agent", "agent": form["agent"]}
    if action == "spawn":
        try:
            spec = yaml.safe_load(form["spec"] or "{}")
        except yaml.YAMLError as err:
            raise ValueError(f"the agent spec is not valid YAML: {err}") from None
        if not isinstance(spec, dict):
            raise ValueError("the agent spec must be a mapping, like an entry of agents: in a config")
        return {"op": "spawn", "agent": spec}  # checked by commands.validate
    if action != "set":
        raise ValueError(f"unknown operator action {action!r}")
    return {}


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
