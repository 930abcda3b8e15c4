"""A station's viewer served under a path prefix (`/branch/2/...`) inside another app.

The station's pages link with absolute paths (`/agents`, `/research/7`); served under a prefix, every
such link, form, redirect and live update must stay under it, or a click would leave the branch.
So the app is called as if at the root, and its answers are rewritten on the way out: absolute
addresses in HTML attributes and in the live updates' JSON get the prefix, and the page's <html>
element carries it as `data-root`, which live.js puts before the addresses it asks. The shared
static files (`/static/...`) are left as they are. Only reading is passed on: a branch's pages
are read-only here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# an attribute holding an absolute path of the site (not "//host", not the shared /static/ files)
ADDRESS = re.compile(r"""\b(href|src|action|data-live-append)=(["'])/(?!/|static/)""")
HTML_TAG = re.compile(r"<html\b")
HEADER = "<header>"
UP = '<header><a class="up" id="up" href="/" title="every branch side by side">&larr; the multistart</a>'  # back to the branches
READING = ("GET", "HEAD")


def prefixed_path(prefix: str, path: str) -> str:
    """An address of the station as the browser must ask it: under the prefix (other addresses unchanged)."""
    if path.startswith("/") and not path.startswith(("//", "/static/")):
        return prefix + path
    return path


def prefixed_html(prefix: str, html: str) -> str:
    html = ADDRESS.sub(lambda m: f"{m.group(1)}={m.group(2)}{prefix}/", html)
    return HTML_TAG.sub(f'<html data-root="{prefix}"', html, count=1).replace(HEADER, UP, 1)


def prefixed_json(prefix: str, value: Any, key: str = "") -> Any:
    """The live updates' answer: event links (`href`) and re-rendered page parts (`html`) under the prefix."""
    if isinstance(value, dict):
        return {k: prefixed_json(prefix, v, "html" if key == "html" else k) for k, v in value.items()}
    if isinstance(value, list):
        return [prefixed_json(prefix, v, key) for v in value]
    if isinstance(value, str) and key == "href":
        return prefixed_path(prefix, value)
    if isinstance(value, str) and key == "html":
        return prefixed_html(prefix, value)
    return value


class Prefixed:
    """The ASGI app `app` (a station's viewer) answering under `prefix`, read-only."""

    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app, self.prefix = app, prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        inner = dict(scope)
        inner["path"] = scope["path"][len(self.prefix) :] or "/"
        inner["raw_path"] = inner["path"].encode()
        inner["root_path"] = ""
        if scope["method"] not in READING:
            await _answer(
                send, 405, b"405: a branch's pages are read-only here; operate a station where it is served alone"
            )
            return
        start: Message = {}
        body: list[bytes] = []

        async def rewrite(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body":  # e.g. the test client's debug extension
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            await self._send(send, start, b"".join(body))

        await self.app(inner, receive, rewrite)

    async def _send(self, send: Send, start: Message, body: bytes) -> None:
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        kind = dict((k.lower(), v) for k, v in headers).get(b"content-type", b"")
        if kind.startswith(b"text/html"):
            body = prefixed_html(self.prefix, body.decode("utf-8")).encode("utf-8")
        elif kind.startswith(b"application/json"):
            body = json.dumps(prefixed_json(self.prefix, json.loads(body))).encode("utf-8")
        headers = [
            (k, prefixed_path(self.prefix, v.decode("latin-1")).encode("latin-1") if k.lower() == b"location" else v)
            for k, v in headers
        ]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _answer(send: Send, status: int, text: bytes) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(text)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": text})
