"""Agent text to safe HTML, and the small SVG plots of the viewer (no JavaScript library).

Everything an agent wrote is escaped: Markdown is rendered with raw HTML turned off, and
links may only point to http(s) or within the page. Images become links: an image would be
fetched as the page loads, telling whoever serves it that (and when) someone read the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from html import escape

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup

from ..report import ACTION_LINE

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
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
LONG_TEXT = 400_000  # characters rendered as Markdown; longer text is shown plain


def markdown(text: str | None) -> Markup:
    text = CONTROL.sub("", text or "")
    if len(text) > LONG_TEXT:
        return plain(text)
    return Markup(_md.render(text))


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


# -- plots --------------------------------------------------------------------------------------
def _scale(lo: float, hi: float, a: float, b: float):
    span = (hi - lo) or 1.0
    return lambda v: a + (v - lo) / span * (b - a)


def score_plot(points: Iterable[tuple[int, float, str]], width: int = 760, height: int = 300) -> Markup:
    """Every scored evaluation as a dot, and the best so far as a step line, per task."""
    points = list(points)
    if not points:
        return Markup("<p class='empty'>No scored evaluations yet.</p>")
    left, right, top, bottom = 60, width - 20, 20, height - 40
    ticks = [p[0] for p in points]
    scores = [p[1] for p in points]
    x = _scale(min(ticks), max(ticks) + 1, left, right)
    y = _scale(min(scores), max(scores), bottom, top)
    parts = [
        f"<svg class='plot' id='score-plot' viewBox='0 0 {width} {height}' role='img' aria-label='score versus tick'>",
        f"<line x1='{left}' y1='{bottom}' x2='{right}' y2='{bottom}' class='axis'/>",
        f"<line x1='{left}' y1='{top}' x2='{left}' y2='{bottom}' class='axis'/>",
        f"<text x='{(left + right) / 2}' y='{height - 8}' class='label'>tick</text>",
        f"<text x='4' y='{top + 4}' class='label'>{max(scores):.4g}</text>",
        f"<text x='4' y='{bottom}' class='label'>{min(scores):.4g}</text>",
        f"<text x='{left}' y='{bottom + 16}' class='label'>{min(ticks)}</text>",
        f"<text x='{right - 30}' y='{bottom + 16}' class='label'>{max(ticks)}</text>",
    ]
    for n, task in enumerate(sorted({p[2] for p in points})):
        mine = [p for p in points if p[2] == task]
        best = None
        path: list[str] = []
        for tick, score, _ in mine:
            parts.append(
                f"<circle cx='{x(tick):.1f}' cy='{y(score):.1f}' r='3' class='dot task{n % 4}'>"
                f"<title>tick {tick}: {score:.6g}</title></circle>"
            )
            if best is None or score > best:
                if best is not None:
                    path.append(f"L{x(tick):.1f},{y(best):.1f}")
                best = score
                path.append(("M" if len(path) == 0 else "L") + f"{x(tick):.1f},{y(best):.1f}")
        path.append(f"L{right:.1f},{y(best):.1f}")
        parts.append(f"<path d='{' '.join(path)}' class='best task{n % 4}'/>")
    parts.append("</svg>")
    return Markup("".join(parts))


def lifespan_bar(born: int, end: int, first: int, last: int) -> Markup:
    """A life as a bar on the station's whole time line (CSS percentages)."""
    span = max(1, last - first)
    left = (born - first) / span * 100
    width = max(0.5, (end - born) / span * 100)
    return Markup(f"<span class='life' style='margin-left:{left:.2f}%;width:{width:.2f}%'></span>")
