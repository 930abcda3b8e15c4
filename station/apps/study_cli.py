"""`station study`: a station's tables, metrics and networks as files, and several stations compared.

    station study DIR                       into DIR/study/: Parquet and CSV tables, GraphML networks,
                                            study.json; the summary printed
    station study A B C --out FOLDER        each into FOLDER/<name>/, then comparison.csv/.parquet (each
                                            summary metric per station, mean and 95% confidence interval)
                                            and comparison.svg (the windowed metrics over time)

The stations are read, never written (a running station can be studied). docs/study.md says what each
column and metric means.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from station.apps.cli_commands import CliError
from station.core.store import DB_NAME
from station.core.terminal_text import clean

if TYPE_CHECKING:
    import pandas as pd

    from station.study import Progress

FORMATS = {"parquet": ("parquet",), "csv": ("csv",), "both": ("parquet", "csv")}
# The windowed metrics drawn in comparison.svg: (table, column, what the axis says)
PLOTTED = (
    ("network", "density", "network density"),
    ("network", "reciprocity", "reciprocity"),
    ("network", "cross_lineage_share", "share of acts across lineages"),
    ("network", "modularity", "modularity"),
    ("diversity", "diversity", "text diversity"),
    ("diversity", "directions", "research directions"),
    ("cost", "cost_usd", "dollars spent"),
    ("cost", "best_score", "best score"),
)


def add_study_command(sub: Any) -> None:
    s = sub.add_parser(
        "study", help="a station's tables, metrics and networks as Parquet, CSV and GraphML files (several: compared)"
    )
    s.add_argument("dirs", nargs="+", metavar="DIR", help="a station directory (several: compared side by side)")
    s.add_argument(
        "--out",
        metavar="FOLDER",
        help="the folder to write (default DIR/study; with several stations, required: one folder each in it)",
    )
    s.add_argument(
        "--window", type=int, metavar="N", help="ticks per window of the windowed metrics (default: the study's own)"
    )
    s.add_argument("--first", type=int, metavar="T", help="study from tick T (default the first)")
    s.add_argument("--last", type=int, metavar="T", help="study up to tick T (default the last)")
    s.add_argument("--format", choices=tuple(FORMATS), default="both", help="the tables' files (default both)")
    s.set_defaults(fn=cmd_study)


def cmd_study(args: argparse.Namespace) -> int:
    from station.study.output import check_folder

    stations = _stations(args.dirs)
    _check_ticks(args)
    if args.out is None and len(stations) > 1:
        raise CliError(
            "several stations need --out FOLDER: each is written to FOLDER/<name>/, the comparison to FOLDER"
        )
    out = check_folder(Path(args.out) if args.out else stations[0] / "study", stations)
    formats = FORMATS[args.format]
    if len(stations) == 1:
        manifest, summary = _one(stations[0], out, args, formats)
        print(clean(_summary_lines(summary)))
        print(clean(_written(manifest, out)))
    else:
        comparison = _several(stations, out, args, formats)
        print(clean(_comparison_lines(comparison)))
        print(
            clean(
                f"wrote {len(stations)} studies and the comparison (comparison.csv/.parquet, comparison.svg) to {out}"
            )
        )
    return 0


def _stations(dirs: list[str]) -> list[Path]:
    stations: list[Path] = []
    for given in dirs:
        path = Path(os.path.abspath(given))
        if path.is_file():
            raise CliError(f"{given} is a file; give a station directory (the folder holding {DB_NAME})")
        if not (path / DB_NAME).is_file():
            raise CliError(f"no station at {given} (no {DB_NAME} there)")
        if path.resolve() in {s.resolve() for s in stations}:
            raise CliError(f"{given} is given twice; give each station once")
        stations.append(path)
    return stations


def _check_ticks(args: argparse.Namespace) -> None:
    if args.window is not None and args.window < 1:
        raise CliError(f"--window {args.window}: a window is a positive number of ticks, e.g. --window 50")
    for flag, value in (("--first", args.first), ("--last", args.last)):
        if value is not None and value < 0:
            raise CliError(f"{flag} {value}: ticks count from 0; give a tick of the station")
    if args.first is not None and args.last is not None and args.first > args.last:
        raise CliError(f"--first {args.first} is after --last {args.last}; give a first tick no later than the last")


def _load(station: Path, args: argparse.Namespace, progress: Progress) -> Any:
    from station.study import load

    return load(station, first=args.first, last=args.last, window=args.window, progress=progress)


def _one(station: Path, out: Path, args: argparse.Namespace, formats: tuple[str, ...]) -> tuple[dict, pd.DataFrame]:
    from station.study.output import replacing, write_study

    with progress_bar() as progress:
        study = _load(station, args, progress)
        with replacing(out) as folder:
            manifest = write_study(study, folder, formats, progress)
    return manifest, study.metrics()["summary"]


def _several(stations: list[Path], out: Path, args: argparse.Namespace, formats: tuple[str, ...]) -> pd.DataFrame:
    """Each station into its own folder, then the comparison; only the small tables of each study are
    kept between stations, so that comparing big stations takes the memory of one."""
    from station.study.compare import compare_summaries, unique_names
    from station.study.output import (
        MANIFEST,
        WRITTEN_BY,
        now,
        replacing,
        versions,
        write_manifest,
        write_study,
        write_table,
    )

    beside = [MANIFEST, "comparison.svg", *(f"comparison.{kind}" for kind in formats)]
    names = unique_names((station.name for station in stations), reserved=beside)
    summaries, windowed = {}, {}
    with replacing(out) as folder, progress_bar() as progress:
        for name, station in zip(names, stations):
            study = _load(station, args, progress)
            (folder / name).mkdir()
            write_study(study, folder / name, formats, progress)
            metrics = study.metrics()
            summaries[name] = metrics["summary"]
            windowed[name] = {table: metrics[table] for table in {table for table, _, _ in PLOTTED}}
            del study, metrics
        comparison = compare_summaries(summaries)
        files = [f"{name}/" for name in names] + write_table(comparison, folder, "comparison", formats)
        (folder / "comparison.svg").write_text(comparison_svg(windowed), encoding="utf-8")
        manifest = {
            "written_by": WRITTEN_BY,
            "kind": "comparison",
            "stations": {name: str(station.resolve()) for name, station in zip(names, stations)},
            "window": args.window,
            "first_tick": args.first,
            "last_tick": args.last,
            "computed_at": now(),
            "files": sorted([*files, "comparison.svg"]),
            "versions": versions(),
        }
        write_manifest(folder, manifest)
    return comparison


# -- what the terminal shows ---------------------------------------------------------------------------
@contextmanager
def progress_bar() -> Iterator[Progress]:
    """A `progress(step, done, total)` drawn as one bar on a terminal (nothing when piped): each part
    of the work (reading, measuring, writing) fills it again, its current step named beside it."""
    if not sys.stderr.isatty():
        yield lambda step, done, total: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bars = Progress(
        TextColumn("{task.description:<28}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    bar = bars.add_task("study", total=1)

    def show(step: str, done: int, total: int) -> None:
        bars.update(bar, description=clean(step)[:28], completed=done, total=max(total, 1))

    with bars:
        yield show


def _number(value: Any) -> str:
    """A count in full (549,659), any other value to four significant digits, a missing one as -."""
    if value is None or value != value:
        return "-"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def _aligned(rows: list[list[str]]) -> str:
    """Rows as lines of columns padded to their widest cell (the last column as it is)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip() for row in rows)


def _summary_lines(summary: pd.DataFrame) -> str:
    rows = [["metric", "value", "meaning"]]
    rows += [
        [str(m), _number(v), str(meaning)]
        for m, v, meaning in summary[["metric", "value", "meaning"]].itertuples(index=False)
    ]
    return _aligned(rows)


def _comparison_lines(table: pd.DataFrame) -> str:
    stations = [
        column
        for column in table.columns
        if column not in ("metric", "n", "mean", "sd", "ci_low", "ci_high", "meaning")
    ]
    rows = [["metric", *stations, "mean", "95% CI", ""]]
    for row in table.to_dict("records"):
        interval = f"[{_number(row['ci_low'])}, {_number(row['ci_high'])}]" if row["n"] >= 2 else "-"
        rows.append([str(row["metric"]), *(_number(row[s]) for s in stations), _number(row["mean"]), interval, ""])
    return _aligned(rows)


def _written(manifest: dict, out: Path) -> str:
    tables = len(manifest["tables"])
    graphs = sum(name.endswith(".graphml") for name in manifest["files"])
    kinds = sorted({name.rsplit(".", 1)[1] for name in manifest["files"] if not name.endswith(".graphml")})
    return (
        f"wrote {tables} tables ({', '.join(kinds)}), {graphs} networks (GraphML) and study.json to {out}"
        f" (ticks {manifest['first_tick']}-{manifest['last_tick']}, windows of {manifest['window']} ticks)"
    )


# -- comparison.svg ------------------------------------------------------------------------------------------
PANEL = (560, 260)
STYLE = (
    "text{font-family:sans-serif}.grid{stroke:#e8ecf0}.axis{stroke:#9aa5b1}"
    ".tick-label,.axis-title{font-size:11px;fill:#5b6672}.legend text{font-size:11px;fill:#1d232b}"
    ".series{fill:none;stroke-width:1.5}.panel-title{font-size:13px;fill:#1d232b}"
)


def comparison_svg(windowed: dict[str, dict[str, pd.DataFrame]]) -> str:
    """The windowed metrics over time, a panel per metric and a line per station, as one SVG file that
    needs nothing else (its style inside)."""
    from station.apps.web.plots import line_plot

    width, height = PANEL
    panels = []
    for n, (table, column, label) in enumerate(PLOTTED):
        series = {
            name: list(zip(tables[table]["window_end"].astype(float), tables[table][column].astype(float)))
            for name, tables in windowed.items()
        }
        plot = str(line_plot(series, x_label="tick (window end)", y_label=label, svg_id=f"{table}-{column}"))
        x, y = (n % 2) * width, (n // 2) * (height + 24)
        title = f"<text class='panel-title' x='{x + 8}' y='{y + 16}'>{label}</text>"
        if plot.startswith("<svg "):
            plot = f"<svg x='{x}' y='{y + 24}' width='{width}' height='{height}' " + plot[len("<svg ") :]
        else:  # no data to plot: the panel says so
            plot = f"<text class='tick-label' x='{x + 8}' y='{y + 48}'>no data</text>"
        panels.append(title + plot)
    rows = (len(PLOTTED) + 1) // 2
    total = (2 * width, rows * (height + 24))
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{total[0]}' height='{total[1]}' "
        f"viewBox='0 0 {total[0]} {total[1]}'><style>{STYLE}</style><rect width='100%' height='100%' fill='#fff'/>"
        + "".join(panels)
        + "</svg>\n"
    )
