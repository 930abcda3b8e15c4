"""The viewer's SVG plots: round axis ticks whose labels tell apart scores that differ in the fifth
decimal, one score plot per task with every evaluation linked and its agent-written text escaped,
best-so-far lines per lineage, and evaluation figures (circles, curves, contributions) that never
break the page, whatever the stored data hold."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from station.apps.web.plots import figure_html, line_plot, nice_ticks, score_plots, tick_labels

HOSTILE = "<script>alert('x')</script> & \"quotes\""


def steps(ticks: list[float]) -> set[float]:
    return {round(b - a, 12) for a, b in zip(ticks, ticks[1:])}


# -- ticks and labels -----------------------------------------------------------------------------------
def test_a_forecasting_leaderboard_spread_of_two_hundred_thousandths_gets_distinct_labels() -> None:
    lo, hi = -0.14132, -0.14130
    ticks = nice_ticks(lo, hi)
    labels = tick_labels(ticks)
    assert len(ticks) >= 3 and len(set(labels)) == len(labels)
    assert ticks[0] <= lo and ticks[-1] >= hi  # they cover the data
    assert ticks[0] > lo - (hi - lo) and ticks[-1] < hi + (hi - lo)  # and stay close to it
    assert [float(label) for label in labels] == pytest.approx(ticks, abs=1e-12)
    assert len(steps(ticks)) == 1  # evenly spaced
    assert all(not label.startswith("-0") or float(label) != 0 for label in labels)


def test_zero_to_one() -> None:
    ticks = nice_ticks(0, 1)
    assert ticks[0] == 0 and ticks[-1] == 1 and 4 <= len(ticks) <= 11
    labels = tick_labels(ticks)
    assert labels[0] in ("0", "0.0") and labels[-1] in ("1", "1.0")
    mantissa = {f"{step:e}"[0:3] for step in steps(ticks)}
    assert mantissa <= {"1.0", "2.0", "2.5", "5.0"}


@pytest.mark.parametrize("value", [0.0, 2.6358, -0.1413, 1e12])
def test_a_single_value_gets_a_small_range_around_it(value: float) -> None:
    ticks = nice_ticks(value, value)
    assert len(ticks) >= 2 and ticks[0] < value < ticks[-1]
    assert ticks[-1] - ticks[0] <= max(1.5, abs(value) * 0.05)
    labels = tick_labels(ticks)
    assert len(set(labels)) == len(labels) and "-0" not in labels and "-0.0" not in labels


def test_large_and_negative_numbers() -> None:
    ticks = nice_ticks(1.2e12, 3.7e12)
    labels = tick_labels(ticks)
    assert ticks[0] <= 1.2e12 and ticks[-1] >= 3.7e12 and len(set(labels)) == len(labels)
    assert [float(label) for label in labels] == pytest.approx(ticks)
    assert all(len(label) <= 8 for label in labels)  # 2.5e12, not 2500000000000
    negative = nice_ticks(-7.3, 12.1)
    assert 0.0 in negative and tick_labels(negative)[negative.index(0.0)] == "0"
    assert nice_ticks(float("nan"), 1.0) == [] and tick_labels([]) == []


# -- score plots -----------------------------------------------------------------------------------------
def point(ident: int, tick: int, score: float, task: str = "1", lineage: str | None = "Ada", **extra) -> dict:
    return {"id": ident, "tick": tick, "score": score, "task": task, "lineage": lineage,
            "author": extra.get("author", "Ada I"), "title": extra.get("title", f"idea {ident}")}


def svg_of(html: str, task: str) -> str:
    found = re.search(rf"<svg[^>]*id='score-plot-{task}'.*?</svg>", html, re.S)
    assert found, html[:500]
    return found.group(0)


def test_one_plot_per_task_in_task_order_with_every_evaluation_linked() -> None:
    points = [point(n, n, 2.0 + n / 100, task="2" if n % 2 else "10") for n in range(1, 9)]
    points.append(point(99, 3, 0.5, task="1", lineage=None, author="System", title="Ring Pattern Baseline"))
    html = str(score_plots(points))
    assert html.startswith("<div id='score-plots'>")
    assert [m for m in re.findall(r"id='score-plot-(\w+)'", html)] == ["1", "2", "10"]
    assert "Task 2: 4 scored evaluations" in html and "Task 1: 1 scored evaluations" in html
    for p in points:
        assert f"href='/research/{p['id']}'" in html
    task_two = svg_of(html, "2")
    assert task_two.count("class='dot'") == 4
    assert "#3 idea 3 — Ada I (Ada): 2.03</title>" in task_two
    assert "#99 Ring Pattern Baseline — System: 0.5</title>" in html  # System baselines have no lineage


def test_agent_written_text_is_escaped() -> None:
    html = str(score_plots([point(1, 1, 1.0, title=HOSTILE, author=HOSTILE, lineage=HOSTILE),
                            point(2, 2, 2.0, lineage="Bob")]))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "\"quotes\"" not in html.replace("'", "")  # quotes escaped too: no attribute can be broken


def test_a_tiny_spread_is_drawn_with_distinct_tick_labels() -> None:
    points = [point(n, n, -0.14132 + n * 0.000004, lineage=f"L{n % 3}") for n in range(6)]
    svg = svg_of(str(score_plots(points)), "1")
    labels = re.findall(r"<text class='tick-label'[^>]*text-anchor='end'>([^<]*)</text>", svg)
    assert len(labels) >= 3 and len(set(labels)) == len(labels)
    assert all(-0.14133 <= float(label) <= -0.14111 for label in labels)


def test_lineages_get_best_so_far_lines_and_a_legend() -> None:
    points = [point(n, n, float(n % 5 + n / 10), lineage=f"lineage {n % 3}") for n in range(12)]
    svg = svg_of(str(score_plots(points)), "1")
    assert svg.count("class='best'") == 1
    assert svg.count("class='lineage-best'") == 3
    colours = set(re.findall(r"class='lineage-best' fill='none' stroke='(#[0-9a-f]{6})'", svg))
    assert len(colours) == 3
    assert all(f"lineage {n}" in svg for n in range(3)) and "class='legend'" in svg
    assert "class='grid'" in svg and "delivery tick" in svg and "score (higher is better)" in svg


def test_only_the_eight_best_lineages_get_lines_and_colours() -> None:
    points = [point(n, n, float(n), lineage=f"L{n}") for n in range(12)]
    svg = svg_of(str(score_plots(points)), "1")
    assert svg.count("class='lineage-best'") == 8
    assert "L11" in svg and "L4" in svg and ">L3<" not in svg  # L0-L3 scored lowest: grey dots, no line


def test_one_point_empty_input_and_broken_points() -> None:
    one = str(score_plots([point(7, 5, 2.5)]))
    assert "href='/research/7'" in one and "class='best'" in one
    assert "No scored evaluations yet." in score_plots([])
    broken = [{"id": 1, "tick": "x", "score": 1.0, "task": "1"}, {"id": 2, "tick": 1, "score": float("nan")}, "no"]
    assert "No scored evaluations yet." in score_plots(broken)  # type: ignore[list-item]


# -- figures ---------------------------------------------------------------------------------------------
def test_a_packing_is_drawn_to_scale_with_each_circle_described() -> None:
    figure = {"kind": "circles", "width": 1.0, "height": 1.0, "circles": [[0.25, 0.25, 0.25], [0.75, 0.75, 0.25]]}
    html = str(figure_html(figure))
    assert "id='packing'" in html and "class='plot packing'" in html
    assert html.count("<title>centre") == 2 and "centre (0.25, 0.25), radius 0.25" in html
    radii = {float(r) for r in re.findall(r"<circle [^>]*r='([0-9.]+)'", html)}
    assert len(radii) == 1  # equal circles stay equal: one scale for both axes
    box = re.search(r"viewBox='0 0 ([0-9.]+) ([0-9.]+)'", html)
    assert box and box.group(1) == box.group(2)


def test_curves_get_one_plot_per_panel_with_a_legend_and_the_best_point() -> None:
    figure = {"kind": "curves", "x_label": "epoch", "panels": [
        {"title": "validation MAE", "lower_is_better": True,
         "series": [{"label": "trial 0", "values": [0.3, 0.2, 0.25]}, {"label": HOSTILE, "values": [0.4, 0.1]}]},
        {"title": "training loss", "lower_is_better": True, "series": [{"label": "trial 0", "values": [1.0, 0.5]}]}]}
    html = str(figure_html(figure))
    assert "id='curve-0'" in html and "id='curve-1'" in html and html.count("class='plot curve'") == 2
    assert "<script>" not in html and "class='legend'" in html and "trial 0" in html
    assert "best 0.1 at 2" in html and "best 0.2 at 2" in html
    assert "(lower is better)" in html and "epoch" in html


def test_contributions_are_a_table_with_bars_and_a_total() -> None:
    rows = [{"metric": "ARI", "raw": 0.8, "normalised": 0.9, "share": 0.45},
            {"metric": HOSTILE, "raw": None, "normalised": 0.2, "share": 0.1}]
    html = str(figure_html({"kind": "contributions", "score": 0.55, "rows": rows}))
    assert "<table id='contributions'>" in html and "<script>" not in html
    assert "width:90.0%" in html and "n.a." in html and "0.5500" in html
    assert "class='total'" in html


@pytest.mark.parametrize("figure", [
    None, "circles", [], {}, {"kind": "unknown"}, {"kind": None},
    {"kind": "circles", "circles": [["a", None]]},
    {"kind": "circles", "circles": [[0.5, 0.5, float("nan")], [0.5, 0.5, -1], [True, 0.5, 0.1], "x"]},
    {"kind": "circles", "width": "wide", "circles": "many"},
    {"kind": "circles", "width": -1, "circles": [[0.5, 0.5, 0.1]]},
    {"kind": "curves", "panels": "x"},
    {"kind": "curves", "panels": [None, 3, {"series": "x"}, {"series": [None, {"values": "x"}]}]},
    {"kind": "curves", "panels": [{"title": 5, "series": [{"label": None, "values": [float("nan"), None, "1"]}]}]},
    {"kind": "curves", "panels": [{"series": [{"values": [1, 2], "x": [float("inf"), 3]}]}]},
    {"kind": "contributions", "rows": "x"},
    {"kind": "contributions", "rows": [None, {"metric": "a", "normalised": float("nan"), "share": 1}]},
    {"kind": "contributions", "score": "high", "rows": [{"metric": ["a"], "raw": "x", "normalised": 1, "share": 2}]},
])
def test_malformed_figures_never_raise(figure) -> None:
    html = str(figure_html(figure))
    assert "<script" not in html and "nan" not in html.lower().replace("n.a.", "")


def test_huge_figures_are_capped() -> None:
    circles = [[0.5, 0.5, 0.001]] * 20_000
    html = str(figure_html({"kind": "circles", "circles": circles}))
    assert html.count("<title>centre") == 10_000 and "the first 10,000 of 20,000 drawn" in html
    values = [math.sin(n / 100) for n in range(50_000)]
    curve = str(figure_html({"kind": "curves", "panels": [{"title": "t", "series": [{"label": "a", "values": values}]}]}))
    drawn = re.search(r"<polyline[^>]*points='([^']*)'", curve)
    assert drawn and len(drawn.group(1).split()) <= 2000


def test_line_plot_draws_each_labelled_series() -> None:
    svg = str(line_plot({"Ada": [(1, 100.0), (2, 300.0)], HOSTILE: [(1, 50.0), (3, float("nan")), (4, 80.0)]},
                        x_label="tick", y_label="context tokens", svg_id="timeline", width=600, height=240,
                        colours=["#123456", "#abcdef"]))
    assert svg.startswith("<svg") and "id='timeline'" in svg
    assert svg.count("<polyline") == 2 and "stroke='#123456'" in svg and "stroke='#abcdef'" in svg
    assert "<script>" not in svg and "Ada" in svg and "context tokens" in svg
    empty = str(line_plot({}, x_label="x", y_label="y", svg_id="e", width=100, height=100, colours=[]))
    assert "<svg" not in empty


def test_the_stylesheet_names_the_classes_the_plots_use() -> None:
    css = (Path(__file__).resolve().parents[1] / "station" / "apps" / "web" / "static" / "style.css").read_text()
    for name in (".grid", ".axis", ".tick-label", ".legend", ".dot", "path.best", "path.lineage-best",
                 ".packing circle", "#contributions .bar"):
        assert name in css
    assert "#e8ecf0" in css and "rgba(47,95,167,.25)" in css
