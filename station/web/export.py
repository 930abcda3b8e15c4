"""`station export DIR --out SITE/`: the whole station as static HTML, readable from disk.

It renders the viewer's own pages (through the app, in-process) starting from the overview
and following every internal link, saves each as a file, and rewrites links to relative file
paths, so the site opens with file:// and can be published as it is. The operator page and
forms are left out; the live updates switch themselves off on file://.
"""
from __future__ import annotations

import posixpath
import re
import shutil
from pathlib import Path
from typing import Callable
from urllib.parse import quote, unquote, urljoin, urlsplit

from fastapi.testclient import TestClient

from .app import HERE, create_app

LINK = re.compile(r"""(href|src)=(["'])([^"']*)\2""")
SKIP = ("/operator", "/login", "/api/", "/search")  # they need a live server


def file_for(url: str) -> str:
    """The site file of an internal address: / -> index.html, /agents/A?page=2 -> agents/A/page-2.html."""
    parts = urlsplit(url)
    path = unquote(parts.path).strip("/") or "index"
    safe = "/".join(re.sub(r"[^\w.\- ]", "_", piece) for piece in path.split("/"))
    query = parts.query.replace("=", "-").replace("&", "_")
    return f"{safe}/{query}.html" if query else f"{safe}.html"


def export(directory: str | Path, out: str | Path, *, limit: int = 100_000,
           progress: Callable[[int, str], None] = lambda n, url: None) -> int:
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not empty; choose a new folder")
    client = TestClient(create_app(directory, static_export=True))
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(HERE / "static", out / "static", dirs_exist_ok=True)
    queue, seen = ["/"], {"/"}
    written = 0
    while queue and written < limit:
        url = queue.pop(0)
        answer = client.get(url)
        if answer.status_code != 200 or "text/html" not in answer.headers.get("content-type", ""):
            continue
        target = file_for(url)
        html = LINK.sub(lambda m: _relink(m, url, target, queue, seen), answer.text)
        path = out / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
        written += 1
        progress(written, url)
    return written


def _relink(match: re.Match, page_url: str, page_file: str, queue: list[str], seen: set[str]) -> str:
    attribute, quote_char, href = match.groups()
    if href.startswith(("http:", "https:", "mailto:", "#", "data:")) or not href:
        return match.group(0)
    absolute = urljoin(page_url, href)
    parts = urlsplit(absolute)
    if parts.path.startswith("/static/"):
        target = parts.path.lstrip("/")
    elif parts.path.startswith(SKIP):
        return f"{attribute}={quote_char}#{quote_char}"
    else:
        address = parts.path + (f"?{parts.query}" if parts.query else "")
        if address not in seen:
            seen.add(address)
            queue.append(address)
        target = file_for(address)
    relative = posixpath.relpath(target, posixpath.dirname(page_file) or ".")
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{attribute}={quote_char}{quote(relative)}{fragment}{quote_char}"
