"""Logging in (the printed one-time address, and the form for the server's token) and out."""

from __future__ import annotations

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from station.apps.web.access import local_path
from station.apps.web.pages.operator import refuse
from station.apps.web.site import site_of, wants_json

router = APIRouter()


@router.get("/login")
def login_address(request: Request, token: str = "", next: str = "/") -> Response:
    """The printed login address (`?token=`), or the login form."""
    site = site_of(request)
    if site.logged_in(request):  # already in (a used address reopened from history): no token is tried
        return RedirectResponse(local_path(next), status_code=303)
    if not token:
        return site.login_page(request, 200, then=next)
    if site.log_in(request, token):
        return site.go_on(request, next)
    used = "This login address was used already (each works once) or is wrong: `station serve` prints a new one."
    return site.login_page(request, 403, used, then=next)


@router.post("/login")
def login_form(request: Request, token: str = Form(""), next: str = Form("/")) -> Response:
    site = site_of(request)
    if site.log_in(request, token):
        return site.go_on(request, next)
    if site.read_locked and not wants_json(request):
        return site.login_page(request, 403, "Wrong token: not logged in.", then=next)
    return refuse(request, 403, "Wrong token: not logged in.")


@router.post("/logout")
def log_out(request: Request) -> Response:
    """The header's logout button (a post from another site's page is refused before it gets here)."""
    return site_of(request).log_out(request)
