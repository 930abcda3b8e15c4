"""`station export DIR --out SITE/`: the whole station as static HTML, readable from disk.

It renders the viewer's own pages (through the app, in-process) starting from the overview
and following every internal link, saves each as a file, and rewrites links to relative file
paths, so the site opens with file:// and can be published as it is. The operator page and
forms are left out; the live updates switch themselves off on file://. A marker file says the
folder is an export, so that `--force` may replace it with a fresh one, and nothing else.
"""

from __future__ import annotations

import json
import posixpath
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, unquote, urljoin, urlsplit

from fastapi.testclient import TestClient

from .app import HERE, create_app

LINK = re.compile(r"""(href|src)=(["'])([^"']*)\2""")
SKIP = ("/operator", "/login", "/api/", "/search")  # they need a live server
MARKER = ".station-export"


def file_for(url: str) -> str:
    """The site file of an internal address: / -> index.html, /agents/A?page=2 -> agents/A/page-2.html."""
    parts = urlsplit(url)
    path = unquote(parts.path).strip("/") or "index"
    safe = "/".join(re.sub(r"[^\w.\- ]", "_", piece) for piece in path.split("/"))
    query = parts.query.replace("=", "-").replace("&", "_")
    return f"{safe}/{query}.html" if query else f"{safe}.html"


def export(
    directory: str | Path,
    out: str | Path,
    *,
    force: bool = False,
    limit: int = 100_000,
    progress: Callable[[int, str], None] = lambda n, url: None,
) -> int:
    """Write the site into `out`, a new or empty folder, or with `force` the folder of an earlier export."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not force:
            raise ValueError(
                f"{out} exists and is not empty; choose a new folder (or refresh an earlier export there with --force)"
            )
        if not (out / MARKER).is_file():
            raise ValueError(
                f"{out} is not an earlier export (it has no {MARKER} file); --force replaces only "
                "those, so choose a new folder"
            )
    client = TestClient(create_app(directory, static_export=True))
    if force and out.exists():
        shutil.rmtree(out)  # pages of the old site that the new one lacks must not stay behind
    out.mkdir(parents=True, exist_ok=True)
    # written first: an export cut short can be replaced with --force too
    (out / MARKER).write_text(
        json.dumps({"station": str(Path(directory).resolve()), "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        + "\n",
        encoding="utf-8",
    )
    shutil.copytree(HERE / "static", out / "static", dirs_exist_ok=True)
    queue, seen = ["/"], {"/"}
    written = 0
    while queue and written < limit:
        url = queue.pop(0)
        answer = client.get(url)
        if answer.status_code != 200 or "text/html" not in answer.headers.get("content-type", ""):
            continue
        target = file_for(url)
        html = LINK.sub(lambda m: _relink(m, url, target, queue, seen), answer.text)  # noqa: B023 - called at once by sub(), inside this iteration
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
