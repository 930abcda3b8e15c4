"""The viewer's plots: plain SVG strings built on the server (no JavaScript library).

Every number drawn comes with "nice" round axis ticks and labels precise enough to tell the
ticks apart, so that a leaderboard whose scores differ in the fifth decimal still reads. All text
an agent wrote (titles, lineage and agent names) is escaped; figures an evaluation returned are
checked value by value, and whatever is malformed is left out rather than breaking the page.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from html import escape
from numbers import Real
from typing import Any, NamedTuple

from markupsafe import Markup

PALETTE = ("#2f5fa7", "#b0452c", "#2d8a4e", "#8a2a8f", "#c27c0e", "#1b8a8a", "#a33b6b", "#5a6b2f")
GREY = "#b4bcc5"
TOP_LINEAGES = 8  # lineages with their own colour and best-so-far line; the rest are grey dots
MAX_CIRCLES = 10_000
MAX_POINTS = 2_000  # per drawn series: more would not show, only weigh on the page
MAX_SERIES = 64
MAX_PANELS = 12
MAX_ROWS = 100
STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)


# -- numbers -----------------------------------------------------------------------------------
def _number(value: Any) -> float | None:
    """A finite float from untrusted data (no bools, no strings), else None."""
    if type(value) is float:  # the common cases first: plots check thousands of values
        return value if math.isfinite(value) else None
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond floats
        return None
    return number if math.isfinite(number) else None


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 x 10^k apart) from at or below lo to at or above hi."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    lo, hi = min(lo, hi), max(lo, hi)
    span, mid = hi - lo, lo / 2 + hi / 2
    if not math.isfinite(span):
        return [lo, hi]  # wider than floats can step through
    if span <= abs(mid) * 1e-12:  # no spread a float can show: a small range around the value
        half = abs(mid) * 0.01 or 0.5
        lo, hi, span = mid - half, mid + half, 2 * half
    raw = span / max(2, min(int(target), 20))
    exponent = math.floor(math.log10(raw))
    mantissa = next(m for m in STEPS if m * 10.0**exponent >= raw * (1 - 1e-9))
    if mantissa == 10.0:
        mantissa, exponent = 1.0, exponent + 1
    step = mantissa * 10.0**exponent
    if step <= 0 or not math.isfinite(step):
        return [lo, hi]
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    if last - first > 100:
        return [lo, hi]
    # rounding to the step's own decimals makes 0.1 + 0.2 print as 0.3; + 0.0 turns -0.0 into 0.0
    decimals = max(0, -exponent) + (1 if mantissa == 2.5 else 0)
    return [round(k * step, decimals) + 0.0 for k in range(first, last + 1)]


def _fixed(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}"


def _scientific(value: float, decimals: int) -> str:
    return re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", f"{value:.{decimals}e}")  # 1.5e+09 -> 1.5e9


def tick_labels(ticks: list[float]) -> list[str]:
    """Labels with the fewest decimals that keep every tick distinct and exact for its step."""
    values = [float(t) for t in ticks]
    finite = sorted({v for v in values if math.isfinite(v)})
    if not finite:
        return [str(v) for v in values]
    gaps = [b - a for a, b in zip(finite, finite[1:])]
    tolerance = min(gaps) * 1e-6 if gaps else (abs(finite[0]) * 1e-9 or 1e-12)
    # plain decimals (200000, -0.14132) unless they grow long and powers of ten read shorter (2.5e12, 3e-9)
    best = _fewest_decimals(_fixed, finite, tolerance)
    if best is None or max(map(len, best)) > 9:
        options = [labels for labels in (best, _fewest_decimals(_scientific, finite, tolerance)) if labels]
        if not options:
            return [repr(v) for v in values]
        best = min(options, key=lambda labels: max(map(len, labels)))
    shown = dict(zip(finite, best))
    return [_no_negative_zero(shown[v]) if v in shown else str(v) for v in values]


def _fewest_decimals(fmt: Callable[[float, int], str], values: list[float], tolerance: float) -> list[str] | None:
    """The labels of `values` in `fmt` with the fewest decimals that are distinct and exact."""
    for decimals in range(16):
        labels = [fmt(v, decimals) for v in values]
        exact = all(abs(float(label) - v) <= tolerance for label, v in zip(labels, values))
        if exact and len(set(labels)) == len(labels):
            return labels
    return None


def _no_negative_zero(label: str) -> str:
    return label[1:] if label.startswith("-") and float(label) == 0 else label


def _domain(lo: float, hi: float, *, pad: float = 0.05, integer: bool = False) -> tuple[float, float, list[float]]:
    """(axis low, axis high, ticks) for data from lo to hi: the data's range padded a little, with
    the nice ticks inside it; only whole ticks for whole-numbered data (epochs, delivery ticks)."""
    spread = hi - lo
    lo, hi = lo - spread * pad, hi + spread * pad
    ticks = nice_ticks(lo, hi) or [lo, hi]
    shown = [t for t in ticks if not integer or float(t).is_integer()] or ticks
    slack = (hi - lo) * 1e-9
    inside = [t for t in shown if lo - slack <= t <= hi + slack]
    if len(inside) >= 2:
        return lo, hi, inside
    if ticks[-1] > ticks[0]:  # too few ticks within the data: widen to the ticks' range
        return min(lo, ticks[0]), max(hi, ticks[-1]), shown
    return lo - 0.5, hi + 0.5, shown


# -- axes -----------------------------------------------------------------------------------------
class Frame:
    """Data coordinates to pixels, for one plot area."""

    def __init__(self, x: tuple[float, float], y: tuple[float, float], box: tuple[float, float, float, float]):
        self.x0, self.x1 = x
        self.y0, self.y1 = y
        self.left, self.top, self.right, self.bottom = box
        self.sx = (self.right - self.left) / ((self.x1 - self.x0) or 1.0)
        self.sy = (self.bottom - self.top) / ((self.y1 - self.y0) or 1.0)

    def px(self, x: float) -> float:
        return self.left + (x - self.x0) * self.sx

    def py(self, y: float) -> float:
        return self.bottom - (y - self.y0) * self.sy


def axis(frame: Frame, x_ticks: list[float], y_ticks: list[float], x_label: str, y_label: str) -> list[str]:
    """Gridlines, axis lines, tick labels and axis titles of one frame, as SVG pieces."""
    f = frame
    parts = []
    for tick, label in zip(y_ticks, tick_labels(y_ticks)):
        y = f.py(tick)
        parts.append(f"<line class='grid' x1='{f.left:.1f}' y1='{y:.1f}' x2='{f.right:.1f}' y2='{y:.1f}'/>")
        parts.append(
            f"<text class='tick-label' x='{f.left - 6:.1f}' y='{y + 4:.1f}' text-anchor='end'>{escape(label)}</text>"
        )
    for tick, label in zip(x_ticks, tick_labels(x_ticks)):
        x = f.px(tick)
        parts.append(f"<line class='grid' x1='{x:.1f}' y1='{f.top:.1f}' x2='{x:.1f}' y2='{f.bottom:.1f}'/>")
        parts.append(
            f"<text class='tick-label' x='{x:.1f}' y='{f.bottom + 15:.1f}' text-anchor='middle'>{escape(label)}</text>"
        )
    parts.append(f"<line class='axis' x1='{f.left:.1f}' y1='{f.bottom:.1f}' x2='{f.right:.1f}' y2='{f.bottom:.1f}'/>")
    parts.append(f"<line class='axis' x1='{f.left:.1f}' y1='{f.top:.1f}' x2='{f.left:.1f}' y2='{f.bottom:.1f}'/>")
    parts.append(
        f"<text class='axis-title' x='{(f.left + f.right) / 2:.1f}' y='{f.bottom + 32:.1f}' "
        f"text-anchor='middle'>{escape(x_label)}</text>"
    )
    middle = (f.top + f.bottom) / 2
    parts.append(
        f"<text class='axis-title' x='12' y='{middle:.1f}' text-anchor='middle' "
        f"transform='rotate(-90 12 {middle:.1f})'>{escape(y_label)}</text>"
    )
    return parts


def _left_margin(y_ticks: list[float]) -> float:
    """Room for the widest y tick label (about 6.5 px a character at 11 px) and the axis title."""
    width = max((len(label) for label in tick_labels(y_ticks)), default=1)
    return min(120.0, 30 + 6.5 * width)


def _short(text: str, limit: int = 22) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def legend(entries: list[tuple[str, str, str]], x: float, y: float, room: float) -> list[str]:
    """(label, colour, kind "line" or "dot") as rows from (x, y) down, as many as fit in `room` px."""
    fits = max(1, int(room // 14))
    shown = entries if len(entries) <= fits else entries[: fits - 1]
    parts = ["<g class='legend'>"]
    for n, (label, colour, kind) in enumerate(shown):
        row = y + 14 * n
        if kind == "line":
            parts.append(
                f"<line x1='{x:.1f}' y1='{row - 4:.1f}' x2='{x + 16:.1f}' y2='{row - 4:.1f}' "
                f"stroke='{colour}' stroke-width='2'/>"
            )
        else:
            parts.append(f"<circle cx='{x + 8:.1f}' cy='{row - 4:.1f}' r='3.5' fill='{colour}'/>")
        parts.append(
            f"<text x='{x + 22:.1f}' y='{row:.1f}'><title>{escape(label)}</title>{escape(_short(label))}</text>"
        )
    if len(shown) < len(entries):
        parts.append(f"<text x='{x + 22:.1f}' y='{y + 14 * len(shown):.1f}'>+{len(entries) - len(shown)} more</text>")
    parts.append("</g>")
    return parts


def _thin(items: list[Any], limit: int = MAX_POINTS) -> list[Any]:
    """At most `limit` items, evenly spread, keeping the first and the last."""
    if len(items) <= limit:
        return items
    last = len(items) - 1
    return [items[round(i * last / (limit - 1))] for i in range(limit)]


def _svg_id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


# -- the research page's score plots ---------------------------------------------------------------------
class _Point(NamedTuple):
    """One scored evaluation, checked once: numbers as floats, its hover text already escaped."""

    tick: float
    ident: int
    score: float
    lineage: str | None
    text: str


def _point(raw: Any, owners: dict[tuple[Any, Any], str]) -> _Point | None:
    """The point of one evaluation, or None when its numbers are missing; `owners` caches escaped names."""
    if not isinstance(raw, dict):
        return None
    tick, score, ident = _number(raw.get("tick")), _number(raw.get("score")), _number(raw.get("id"))
    if tick is None or score is None or ident is None:
        return None
    author, lineage = raw.get("author"), raw.get("lineage")
    lineage = lineage if isinstance(lineage, str) else None
    owner = owners.get((author, lineage))
    if owner is None:  # authors and lineages repeat across thousands of points: escape each pair once
        owner = owners[(author, lineage)] = escape(str(author)) + (f" ({escape(lineage)})" if lineage else "")
    text = f"#{int(ident)} {escape(str(raw.get('title', '')))} — {owner}: {score:.8g}"
    return _Point(tick, int(ident), score, lineage, text)


def score_plots(points: list[dict], width: int = 760, height: int = 320) -> Markup:
    """One plot per task: every scored evaluation as a linked dot, the best so far as a thick step
    line, and the best so far of each of the leading lineages as a thin one in its colour."""
    tasks: dict[str, list[_Point]] = {}
    owners: dict[tuple[Any, Any], str] = {}
    for raw in points:
        point = _point(raw, owners)
        if point is not None:
            tasks.setdefault(str(raw.get("task")), []).append(point)
    if not tasks:
        return Markup("<p class='empty'>No scored evaluations yet.</p>")
    figures = [_task_figure(task, tasks[task], width, height) for task in sorted(tasks, key=_task_order)]
    return Markup("<div id='score-plots'>" + "".join(figures) + "</div>")


def _task_order(task: str) -> tuple[int, int, str]:
    return (0, int(task), "") if task.isdigit() else (1, 0, task)


def _task_figure(task: str, points: list[_Point], width: int, height: int) -> str:
    points = sorted(points)  # by tick, then id: the order the best-so-far lines follow
    colours = _lineage_colours(points)
    x_lo, x_hi, x_ticks = _domain(points[0].tick, points[-1].tick, pad=0.02, integer=True)
    y_lo, y_hi, y_ticks = _domain(min(p.score for p in points), max(p.score for p in points))
    legend_width = 170 if colours else 0
    box = (_left_margin(y_ticks), 12.0, width - 16.0 - legend_width, height - 44.0)
    frame = Frame((x_lo, x_hi), (y_lo, y_hi), box)
    parts = [
        f"<figure><figcaption>Task {escape(task)}: {len(points)} scored evaluations</figcaption>",
        f"<svg class='plot score-plot' id='score-plot-{_svg_id(task)}' viewBox='0 0 {width} {height}' "
        f"role='img' aria-label='score versus delivery tick, task {escape(task)}'>",
        *axis(frame, x_ticks, y_ticks, "delivery tick", "score (higher is better)"),
    ]
    px, py = frame.px, frame.py
    for p in points:
        colour = colours.get(p.lineage, GREY) if p.lineage else GREY
        parts.append(
            f"<a href='/research/{p.ident}'><circle class='dot' cx='{px(p.tick):.1f}' cy='{py(p.score):.1f}' "
            f"r='3.5' fill='{colour}'><title>{p.text}</title></circle></a>"
        )
    # The lines over the dots (a crowded plot would hide them), letting clicks through to the dots.
    for lineage, colour in colours.items():
        mine = [p for p in points if p.lineage == lineage]
        parts.append(f"<path class='lineage-best' fill='none' stroke='{colour}' d='{_best_path(frame, mine, None)}'/>")
    parts.append(f"<path class='best' fill='none' stroke='#1d232b' d='{_best_path(frame, points, x_hi)}'/>")
    if colours:
        entries = [("best so far", "#1d232b", "line")] + [(name, c, "line") for name, c in colours.items()]
        entries.append(("other lineages, System", GREY, "dot"))
        parts.extend(legend(entries, box[2] + 14, box[1] + 10, box[3] - box[1]))
    parts.append("</svg></figure>")
    return "".join(parts)


def _lineage_colours(points: list[_Point]) -> dict[str, str]:
    """The leading lineages by their best score (System baselines have none), each with a colour."""
    best: dict[str, float] = {}
    for p in points:
        if p.lineage:
            best[p.lineage] = max(best.get(p.lineage, -math.inf), p.score)
    leading = sorted(best, key=lambda name: (-best[name], name))[:TOP_LINEAGES]
    return {name: PALETTE[n] for n, name in enumerate(leading)}


def _best_path(frame: Frame, points: list[_Point], end: float | None) -> str:
    """A step line of the best score so far, through points sorted by tick; to `end`, or the last point."""
    best = -math.inf
    path: list[str] = []
    for p in points:
        if not path:
            path.append(f"M{frame.px(p.tick):.1f},{frame.py(p.score):.1f}")
        elif p.score > best:
            path.append(f"H{frame.px(p.tick):.1f}V{frame.py(p.score):.1f}")
        best = max(best, p.score)
    path.append(f"H{frame.px(end if end is not None else points[-1].tick):.1f}")
    return "".join(path)


# -- a generic multi-line plot -------------------------------------------------------------------------
def line_plot(
    series: dict[str, list[tuple[float, float]]],
    *,
    x_label: str,
    y_label: str,
    svg_id: str,
    width: int = 560,
    height: int = 260,
    colours: Sequence[str] | Mapping[str, str] | None = None,
    best: str | None = None,
    css_class: str = "plot line-plot",
    x_range: tuple[float, float] | None = None,
) -> Markup:
    """A line per series (label -> (x, y) points) with ticks, gridlines and a legend. `colours`: a
    palette cycled over the series, or a colour per label. `best`: "min" or "max" marks each
    series' best point. `x_range`: an x span the axis covers even where no series reaches."""
    lines = _clean_series(series)
    if not lines:
        return Markup("<p class='empty'>No data to plot.</p>")
    xs = [x for points in lines.values() for x, _ in points] + [float(x) for x in x_range or ()]
    ys = [y for points in lines.values() for _, y in points]
    x_lo, x_hi, x_ticks = _domain(min(xs), max(xs), pad=0.0, integer=all(x.is_integer() for x in xs))
    y_lo, y_hi, y_ticks = _domain(min(ys), max(ys))
    longest = max(len(_short(label)) for label in lines)
    legend_width = min(160.0, 34 + 6.5 * longest)  # as wide as the longest label needs
    box = (_left_margin(y_ticks), 12.0, width - 12.0 - legend_width, height - 44.0)
    frame = Frame((x_lo, x_hi), (y_lo, y_hi), box)
    parts = [
        f"<svg class='{escape(css_class)}' id='{_svg_id(svg_id)}' viewBox='0 0 {width} {height}' role='img' "
        f"aria-label='{escape(y_label)} versus {escape(x_label)}'>",
        *axis(frame, x_ticks, y_ticks, x_label, y_label),
    ]
    entries = []
    for n, (label, points) in enumerate(lines.items()):
        colour = _colour(colours, label, n)
        entries.append((label, colour, "line"))
        parts.append(_polyline(frame, points, colour, label))
        if best in ("min", "max"):
            parts.append(_best_point(frame, points, colour, label, best))
    parts.extend(legend(entries, box[2] + 12, box[1] + 10, box[3] - box[1]))
    parts.append("</svg>")
    return Markup("".join(parts))


def _clean_series(series: Any) -> dict[str, list[tuple[float, float]]]:
    """Only finite (x, y) points, at most MAX_POINTS a series, at most MAX_SERIES series."""
    out: dict[str, list[tuple[float, float]]] = {}
    if not isinstance(series, Mapping):
        return out
    for label, points in list(series.items())[:MAX_SERIES]:
        if not isinstance(points, (list, tuple)):
            continue
        clean = []
        for point in _thin(list(points), MAX_POINTS * 2):  # bounded work even for a huge list
            if isinstance(point, (list, tuple)) and len(point) == 2:
                x, y = _number(point[0]), _number(point[1])
                if x is not None and y is not None:
                    clean.append((x, y))
        if clean:
            out[str(label)] = _thin(sorted(clean))
    return out


def _colour(colours: Sequence[str] | Mapping[str, str] | None, label: str, n: int) -> str:
    if isinstance(colours, Mapping):
        chosen = colours.get(label)
    else:
        palette = colours or PALETTE
        chosen = palette[n % len(palette)]
    # colours go into an attribute: only plain colour names and #hex codes
    return chosen if isinstance(chosen, str) and re.fullmatch(r"#[0-9a-fA-F]{3,8}|[a-z]{3,20}", chosen) else GREY


def _polyline(frame: Frame, points: list[tuple[float, float]], colour: str, label: str) -> str:
    if len(points) == 1:
        x, y = points[0]
        return f"<circle cx='{frame.px(x):.1f}' cy='{frame.py(y):.1f}' r='3' fill='{colour}'/>"
    coords = " ".join(f"{frame.px(x):.1f},{frame.py(y):.1f}" for x, y in points)
    return f"<polyline class='series' fill='none' stroke='{colour}' points='{coords}'><title>{escape(label)}</title></polyline>"


def _best_point(frame: Frame, points: list[tuple[float, float]], colour: str, label: str, best: str) -> str:
    pick = min if best == "min" else max
    x, y = pick(points, key=lambda p: p[1])
    return (
        f"<circle class='best-point' cx='{frame.px(x):.1f}' cy='{frame.py(y):.1f}' r='4' fill='{colour}'>"
        f"<title>{escape(label)}: best {y:.6g} at {x:g}</title></circle>"
    )


# -- an evaluation's figure -----------------------------------------------------------------------------
def figure_html(figure: Any) -> Markup:
    """The figure an evaluator attached to its verdict (circles, curves or contributions), or nothing."""
    if not isinstance(figure, dict):
        return Markup("")
    draw = {"circles": _circles, "curves": _curves, "contributions": _contributions}.get(str(figure.get("kind")))
    if draw is None:
        return Markup("")
    try:
        return Markup(draw(figure))
    except Exception:  # noqa: BLE001 - a figure is stored data of any shape: a bad one is left out, never a broken page
        return Markup("")


def _circles(figure: dict) -> str:
    width, height = _number(figure.get("width")) or 1.0, _number(figure.get("height")) or 1.0
    if width <= 0 or height <= 0:
        return ""
    given = figure.get("circles")
    given = given if isinstance(given, list) else []
    circles = []
    for item in given[:MAX_CIRCLES]:
        if isinstance(item, (list, tuple)) and len(item) == 3:
            x, y, r = (_number(v) for v in item)
            if x is not None and y is not None and r is not None and r > 0:
                circles.append((x, y, r))
    scale = 400 / max(width, height)  # one scale for both axes: circles stay round
    pad = 8
    w, h = width * scale + 2 * pad, height * scale + 2 * pad
    parts = [
        f"<figure><figcaption>{len(circles)} circles, sum of radii {sum(c[2] for c in circles):.6g}"
        + (f" (the first {MAX_CIRCLES:,} of {len(given):,} drawn)" if len(given) > MAX_CIRCLES else "")
        + "</figcaption>",
        f"<svg class='plot packing' id='packing' viewBox='0 0 {w:.1f} {h:.1f}' role='img' aria-label='the packing'>",
        f"<rect class='square' x='{pad}' y='{pad}' width='{width * scale:.1f}' height='{height * scale:.1f}'/>",
    ]
    for x, y, r in circles:  # y grows upwards in the problem, downwards in SVG
        parts.append(
            f"<circle cx='{pad + x * scale:.2f}' cy='{pad + (height - y) * scale:.2f}' r='{r * scale:.2f}'>"
            f"<title>centre ({x:.6g}, {y:.6g}), radius {r:.6g}</title></circle>"
        )
    parts.append("</svg></figure>")
    return "".join(parts)


def _curves(figure: dict) -> str:
    panels = figure.get("panels")
    if not isinstance(panels, list):
        return ""
    x_label = figure.get("x_label") if isinstance(figure.get("x_label"), str) else "epoch"
    parts: list[str] = []
    for panel in panels[:MAX_PANELS]:
        if not isinstance(panel, dict):
            continue
        series = _clean_series(_panel_series(panel.get("series")))
        if not series:  # nothing drawable: no empty panel
            continue
        title = str(panel.get("title") or "")
        lower = panel.get("lower_is_better") is True
        own_x = panel.get("x_label")
        plot = line_plot(
            series,
            x_label=own_x if isinstance(own_x, str) else str(x_label),
            y_label=title,
            svg_id=f"curve-{len(parts)}",
            width=440,
            height=250,
            best="min" if lower else "max",
            css_class="plot curve",
        )
        caption = f"{escape(title)} ({'lower' if lower else 'higher'} is better)"
        parts.append(f"<figure><figcaption>{caption}</figcaption>{plot}</figure>")
    return f"<div class='curves'>{''.join(parts)}</div>" if parts else ""


def _panel_series(series: Any) -> dict[str, list[tuple[float, float]]]:
    """label -> (x, y) points of one panel; x is the series' own "x" list when it matches, else 1, 2, ..."""
    out: dict[str, list[tuple[float, float]]] = {}
    if not isinstance(series, list):
        return out
    for n, one in enumerate(series[:MAX_SERIES]):
        if not isinstance(one, dict) or not isinstance(one.get("values"), list):
            continue
        values = one["values"]
        xs = one.get("x")
        xs = xs if isinstance(xs, list) and len(xs) == len(values) else range(1, len(values) + 1)
        label = str(one["label"]) if isinstance(one.get("label"), str) else f"series {n}"
        out[label if label not in out else f"{label} ({n})"] = list(zip(xs, values))
    return out


def _contributions(figure: dict) -> str:
    rows = figure.get("rows")
    if not isinstance(rows, list):
        return ""
    body, total = [], 0.0
    for row in rows[:MAX_ROWS]:
        if not isinstance(row, dict):
            continue
        normalised, share = _number(row.get("normalised")), _number(row.get("share"))
        if normalised is None or share is None:
            continue
        total += share
        bar = min(100.0, max(0.0, normalised * 100))
        body.append(
            f"<tr><td>{escape(str(row.get('metric', '')))}</td><td class='num'>{_shown(row.get('raw'))}</td>"
            f"<td class='num'>{normalised:.4f}</td><td class='num'>{share:.4f}</td>"
            f"<td><span class='bar' style='width:{bar:.1f}%'></span></td></tr>"
        )
    if not body:
        return ""
    score = _number(figure.get("score"))
    head = "<tr><th>metric</th><th>raw</th><th>normalised</th><th>share of score</th><th></th></tr>"
    foot = (
        f"<tr class='total'><td>total</td><td></td><td></td><td class='num'>{total:.4f}</td>"
        f"<td>{'' if score is None else f'score {score:.4f}'}</td></tr>"
    )
    return f"<table id='contributions'>{head}{''.join(body)}{foot}</table>"


def _shown(value: Any) -> str:
    number = _number(value)
    return "n.a." if number is None else f"{number:.6g}"
