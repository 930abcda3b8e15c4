"""`station export DIR --out SITE/`: the whole station as static HTML, readable from disk.

It renders the viewer's own pages (through the app, in-process) starting from the overview
and following every internal link, saves each as a file, and rewrites links to relative file
paths, so the site opens with file:// and can be published as it is. The operator page and
forms are left out; the live updates switch themselves off on file://. A marker file says the
folder is an export, so that `--force` may replace it with a fresh one, and nothing else.
"""

from __future__ import annotations

import html
import json
import posixpath
import re
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, unquote, urljoin, urlsplit

from fastapi.testclient import TestClient

from station.apps.web.app import HERE, create_app
from station.apps.web.branches import is_multistart
from station.apps.web.branches_app import create_multistart_app

LINK = re.compile(r"""(href|src)=(["'])([^"']*)\2""")
SKIP = ("/operator", "/login", "/api/", "/search")  # they need a live server
MARKER = ".station-export"
FRONTIER = ".station-export-frontier.db"  # the crawl's addresses while the site is written (removed after)
STUB = (
    '<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0; url={href}"><a href="{href}">on</a>\n'
)


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
    # a multistart: its branches page, with every branch's pages under it
    make = create_multistart_app if is_multistart(Path(directory)) else create_app
    app = make(directory, static_export=True)
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
    frontier = Frontier(out / FRONTIER)
    # one client entered once for the whole crawl: a client used outside `with` starts a thread
    # and an event loop for every request, about half of an export's CPU
    with TestClient(app) as client:
        try:
            written = 0
            while written < limit:
                url = frontier.next()
                if url is None:
                    break
                answer = client.get(url, follow_redirects=False)
                target = file_for(url)
                if answer.is_redirect:  # one page, one file: a stub that sends the browser on to it
                    html = STUB.format(href=_relink_to(answer.headers["location"], url, target, frontier))
                elif answer.status_code != 200 or "text/html" not in answer.headers.get("content-type", ""):
                    continue
                else:
                    html = LINK.sub(lambda m: _relink(m, url, target, frontier), answer.text)  # noqa: B023 - called at once by sub(), inside this iteration
                path = out / target
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(html, encoding="utf-8")
                written += 1
                progress(written, url)
        finally:
            frontier.close()
        return written


class Frontier:
    """The addresses found and not yet saved, in the order found, and every address ever found: in
    a small SQLite file beside the site while it is written (a station of a thousand agents has
    millions of pages: their addresses stay on disk, not in memory)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("CREATE TABLE IF NOT EXISTS found (n INTEGER PRIMARY KEY, url TEXT UNIQUE, done INTEGER)")
        self.add("/")

    def add(self, url: str) -> None:
        self.db.execute("INSERT OR IGNORE INTO found(url, done) VALUES(?, 0)", (url,))

    def next(self) -> str | None:
        row = self.db.execute("SELECT n, url FROM found WHERE done=0 ORDER BY n LIMIT 1").fetchone()
        if row is None:
            return None
        self.db.execute("UPDATE found SET done=1 WHERE n=?", (row[0],))
        return row[1]

    def close(self) -> None:
        self.db.close()
        self.path.unlink(missing_ok=True)


def _relink(match: re.Match, page_url: str, page_file: str, frontier: Frontier) -> str:
    attribute, quote_char, escaped = match.groups()
    href = html.unescape(escaped)  # an attribute's "&amp;" is the address's "&"
    if href.startswith(("http:", "https:", "mailto:", "#", "data:")) or not href:
        return match.group(0)
    return f"{attribute}={quote_char}{_relink_to(href, page_url, page_file, frontier)}{quote_char}"


def _relink_to(href: str, page_url: str, page_file: str, frontier: Frontier) -> str:
    """The relative file address of an internal link (its page queued to be saved), or '#'."""
    absolute = urljoin(page_url, href)
    parts = urlsplit(absolute)
    if parts.path.startswith("/static/"):
        target = parts.path.lstrip("/")
    elif parts.path.startswith(SKIP):
        return "#"
    else:
        address = parts.path + (f"?{parts.query}" if parts.query else "")
        frontier.add(address)
        target = file_for(address)
    relative = posixpath.relpath(target, posixpath.dirname(page_file) or ".")
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{quote(relative)}{fragment}"
