"""Agent text to safe HTML, and small HTML helpers of the viewer (its SVG plots are in plots.py).

Everything an agent wrote is escaped: Markdown is rendered with raw HTML turned off, and
links may only point to http(s) or within the page. Images become links: an image would be
fetched as the page loads, telling whoever serves it that (and when) someone read the text.
"""

from __future__ import annotations

import re
from html import escape

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup

from station.apps.report import ACTION_LINE

_md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
_md.validateLink = lambda url: bool(re.match(r"^(https?:|#|/)", url.strip(), re.I))  # type: ignore[method-assign]
LINK_REL = "nofollow noopener noreferrer"  # a reader's click tells the target nothing about the station


def _image_as_link(self, tokens, idx, options, env) -> str:  # noqa: ANN001 - markdown-it's renderer signature
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env).strip()
    src = token.attrGet("src") or ""
    return f'<a class="image-link" href="{escapeHtml(src)}" rel="{LINK_REL}">image: {escapeHtml(alt or src)}</a>'


def _link_open(self, tokens, idx, options, env) -> str:  # noqa: ANN001
    tokens[idx].attrSet("rel", LINK_REL)
    return self.renderToken(tokens, idx, options, env)


_md.add_render_rule("image", _image_as_link)
_md.add_render_rule("link_open", _link_open)
# A worker's report (a model's words, which nobody reviewed) may link only within the station: a
# path of this site or a place on the page; "//host" and "/\host" would leave it.
_local_md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
_local_md.validateLink = lambda url: bool(re.match(r"^(#|/(?![/\\]))", url.strip()))  # type: ignore[method-assign]
_local_md.add_render_rule("image", _image_as_link)
_local_md.add_render_rule("link_open", _link_open)
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
LONG_TEXT = 400_000  # characters rendered as Markdown; longer text is shown plain


def markdown(text: str | None) -> Markup:
    text = CONTROL.sub("", text or "")
    if len(text) > LONG_TEXT:
        return plain(text)
    return Markup(_md.render(text))


def local_markdown(text: str | None) -> Markup:
    """Markdown whose links lead only to the station's own pages (a worker's report)."""
    text = CONTROL.sub("", text or "")
    if len(text) > LONG_TEXT:
        return plain(text)
    return Markup(_local_md.render(text))


def plain(text: str | None) -> Markup:
    return Markup(f"<pre class='plain'>{escape(CONTROL.sub('', text or ''))}</pre>")


def reply_html(text: str | None) -> Markup:
    """An agent's reply with its action lines highlighted (and notes lines dimmed)."""
    out = []
    for line in CONTROL.sub("", text or "").splitlines():
        css = "action" if ACTION_LINE.match(line) else ("notes" if line.startswith("notes: ") else "")
        out.append(f"<span class='{css}'>{escape(line)}</span>" if css else escape(line))
    return Markup("<pre class='reply'>" + "\n".join(out) + "</pre>")


def duration(seconds: float | None) -> str:
    """A wall-clock span for people: 41 s, 12 min, 2 h 05 min."""
    s = round(seconds or 0)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def lifespan_bar(born: int, end: int, first: int, last: int) -> Markup:
    """A life as a bar on the station's whole time line (CSS percentages)."""
    span = max(1, last - first)
    left = (born - first) / span * 100
    width = max(0.5, (end - born) / span * 100)
    return Markup(f"<span class='life' style='margin-left:{left:.2f}%;width:{width:.2f}%'></span>")
