"""A study's files: every table as Parquet and CSV, the networks as GraphML, and study.json, the
manifest that says what was computed from which station and when (docs/study.md).

A study folder is written whole or not at all: into a hidden folder beside it, renamed into place at
the end, so that a reader never sees half a study and an earlier study is replaced only by a complete
one. Only a new or empty folder, or one an earlier study wrote (every entry of it named in its
study.json), is written; a folder inside a station is written only for a station being studied, and
never inside its files/ (what its agents' code reads and writes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

from station.core.store import DB_NAME, FILES_DIR
from station.study.schema import EDGE_KINDS, METRIC_TABLES, TABLES, Column

if TYPE_CHECKING:
    import pandas as pd

    from station.study import Progress, Study

MANIFEST = "study.json"
WRITTEN_BY = "station study"
FORMATS = ("parquet", "csv")
GRAPH = "network.graphml"  # every kind; network_<kind>.graphml holds one kind each
# What an agent node carries in the GraphML files (columns of the lives table)
NODE_COLUMNS = ("session", "lineage", "generation", "model", "kind", "birth_tick", "end_tick", "end_cause")
EDGE_COLUMNS = ("kind", "tick", "record", "detail")
GRAPHML_TYPES = {"int64": "long", "Int64": "long", "float64": "double", "string": "string", "boolean": "boolean"}
# XML 1.0 cannot hold these characters at all, escaped or not: names and details come from agents
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


class StudyFolderError(ValueError):
    """A folder the study may not write, said in one line."""


# -- where a study may be written ---------------------------------------------------------------------
def check_folder(out: Path, stations: Iterable[Path]) -> Path:
    """The resolved folder a study may be written to, or a StudyFolderError saying why not."""
    out = out.resolve()
    studied = {Path(s).resolve() for s in stations}
    for folder in (out, *out.parents):
        if not ((folder / DB_NAME).is_file() and (folder / FILES_DIR).is_dir()):
            continue  # not a station directory (every station has both)
        if folder == out:
            raise StudyFolderError(f"{out} is a station directory; write the study to a folder of its own")
        if folder not in studied:
            raise StudyFolderError(
                f"{out} is inside the station {folder}, which is not being studied; choose another folder"
            )
        if out.relative_to(folder).parts[0] == FILES_DIR:
            raise StudyFolderError(
                f"{out} is inside {folder / FILES_DIR}, the files the station's agents read and write; choose another folder"
            )
    holding = [station for station in studied if out in station.parents]
    if holding:  # replacing the folder would remove the station
        raise StudyFolderError(f"{out} holds the station {holding[0]}; write the study to a folder of its own")
    if out.exists() and not out.is_dir():
        raise StudyFolderError(f"{out} exists and is not a folder; choose a new folder")
    if out.is_dir():
        strangers = _not_written_by_a_study(out)
        if strangers:
            raise StudyFolderError(
                f"{out} holds files a study did not write ({', '.join(strangers[:3])}); choose a new or empty folder, "
                "or one an earlier `station study` wrote"
            )
    return out


def _not_written_by_a_study(folder: Path) -> list[str]:
    """Entries of `folder` that its study.json does not name (all of them when it has none)."""
    entries = sorted(entry.name for entry in folder.iterdir())
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        ours = {Path(name).parts[0] for name in manifest["files"]} | {MANIFEST}
        if manifest.get("written_by") != WRITTEN_BY:
            return entries
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return entries
    return [name for name in entries if name not in ours]


@contextmanager
def replacing(out: Path) -> Iterator[Path]:
    """A fresh hidden folder beside `out` to write into; on success it becomes `out` (an earlier study
    there is removed), on failure it is removed and `out` stays as it was."""
    temp = out.parent / f".{out.name}.writing-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(temp, ignore_errors=True)  # left by a study of this process id that was killed
        temp.mkdir(mode=0o700)  # the study holds what agents wrote: as private as the station
    except OSError as err:
        raise StudyFolderError(
            f"cannot write a study next to {out}: {err.strerror or err}; choose another folder"
        ) from None
    try:
        yield temp
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.is_dir():
            out.rename(old)
        temp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


# -- one station's study -------------------------------------------------------------------------------
def write_study(
    study: Study, folder: Path, formats: Sequence[str] = FORMATS, progress: Progress | None = None
) -> dict[str, Any]:
    """Every table and metric table, the GraphML networks and study.json into `folder`; returns the manifest."""
    report = progress or (lambda step, done, total: None)
    tables = {name: _in_schema_order(df, TABLES[name], name) for name, df in study.tables().items()}
    metrics = study.metrics(progress)
    tables.update({name: _in_schema_order(metrics[name], METRIC_TABLES[name], name) for name in METRIC_TABLES})
    files: list[str] = []
    steps = len(tables) + 1 + len(EDGE_KINDS)
    for done, (name, df) in enumerate(tables.items()):
        report("write tables", done, steps)
        files += write_table(df, folder, name, formats)
    report("write graphs", len(tables), steps)
    files += write_graphs(study, folder, lambda done: report("write graphs", len(tables) + done, steps))
    manifest = {
        "written_by": WRITTEN_BY,
        "station": str(Path(study.path).resolve()),
        "name": study.name,
        "config": config_name(Path(study.path)),
        "first_tick": study.first_tick,
        "last_tick": study.last_tick,
        "window": study.window,
        "computed_at": now(),
        "tables": {name: len(df) for name, df in tables.items()},
        "files": sorted(files),
        "versions": versions(),
    }
    write_manifest(folder, manifest)
    report("write graphs", steps, steps)
    return manifest


def _in_schema_order(df: pd.DataFrame, columns: list[Column], name: str) -> pd.DataFrame:
    missing = [column for column, _, _ in columns if column not in df.columns]
    if missing:  # a table that breaks the contract is a bug of ours: said, not written half
        raise RuntimeError(f"the study's {name} table lacks the columns {missing} of station/study/schema.py")
    return df[[column for column, _, _ in columns]]


def write_table(df: pd.DataFrame, folder: Path, name: str, formats: Sequence[str]) -> list[str]:
    written = []
    if "parquet" in formats:
        df.to_parquet(folder / f"{name}.parquet", index=False)
        written.append(f"{name}.parquet")
    if "csv" in formats:
        df.to_csv(folder / f"{name}.csv", index=False)
        written.append(f"{name}.csv")
    return written


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def versions() -> dict[str, str]:
    """The libraries whose versions decide the numbers (and Python's)."""
    import networkx
    import pandas
    import pyarrow
    import scipy
    import sklearn

    return {
        "python": sys.version.split()[0],
        "pandas": pandas.__version__,
        "networkx": networkx.__version__,
        "scikit-learn": sklearn.__version__,
        "scipy": scipy.__version__,
        "pyarrow": pyarrow.__version__,
    }


def config_name(directory: Path) -> str | None:
    """The `name:` of the station's config, read without opening the station (it may be running)."""
    db = sqlite3.connect(f"{(directory / DB_NAME).resolve().as_uri()}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()
    finally:
        db.close()
    try:
        name = json.loads(row[0]).get("name") if row else None
    except (ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


# -- GraphML ---------------------------------------------------------------------------------------------
def write_graphs(study: Study, folder: Path, progress: Callable[[int], None] = lambda done: None) -> list[str]:
    """network.graphml (every edge kind) and network_<kind>.graphml per kind: the agents as nodes (with
    their lives' columns), each act as one edge (kind, tick, record, detail). Written straight from the
    tables, not through a networkx graph: a big station has millions of acts."""
    nodes = _nodes(study)
    edges = study.edges
    names = [GRAPH]
    _write_graphml(folder / GRAPH, nodes, edges)
    for done, kind in enumerate(EDGE_KINDS, start=1):
        name = f"network_{kind}.graphml"
        _write_graphml(folder / name, nodes, edges[edges["kind"] == kind])
        names.append(name)
        progress(done)
    return names


def _nodes(study: Study) -> pd.DataFrame:
    """Every agent of the lives table, then the other participants of the edges (reviewer, System),
    whose lives' columns are all missing (so the integer columns become nullable integers)."""
    import pandas as pd

    dtypes = {column: "Int64" if dtype == "int64" else dtype for column, dtype, _ in TABLES["lives"]}
    lives = study.lives[["agent", *NODE_COLUMNS]].astype({column: dtypes[column] for column in NODE_COLUMNS})
    named = pd.concat([study.edges["source"], study.edges["target"]]).dropna()
    extra = sorted(set(named) - set(lives["agent"].dropna()))
    others = pd.DataFrame({column: pd.Series([pd.NA] * len(extra), dtype=dtypes[column]) for column in NODE_COLUMNS})
    others.insert(0, "agent", pd.array(extra, dtype="string"))
    return pd.concat([lives, others], ignore_index=True)


def _write_graphml(path: Path, nodes: pd.DataFrame, edges: pd.DataFrame) -> None:
    lives = dict((column, dtype) for column, dtype, _ in TABLES["lives"])
    acts = dict((column, dtype) for column, dtype, _ in TABLES["edges"])
    node_keys = [(f"n{i}", column, GRAPHML_TYPES[lives[column]]) for i, column in enumerate(NODE_COLUMNS)]
    edge_keys = [(f"e{i}", column, GRAPHML_TYPES[acts[column]]) for i, column in enumerate(EDGE_COLUMNS)]
    with open(path, "w", encoding="utf-8", errors="replace") as out:
        out.write("<?xml version='1.0' encoding='utf-8'?>\n<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\">\n")
        for key, column, kind in node_keys:
            out.write(f'  <key id="{key}" for="node" attr.name="{column}" attr.type="{kind}"/>\n')
        for key, column, kind in edge_keys:
            out.write(f'  <key id="{key}" for="edge" attr.name="{column}" attr.type="{kind}"/>\n')
        out.write('  <graph edgedefault="directed">\n')
        for node in _elements(nodes.dropna(subset=["agent"]), ["agent"], node_keys):
            out.write(f"    <node id={node[0]}>{node[1]}</node>\n")
        for edge in _elements(edges.dropna(subset=["source", "target"]), ["source", "target"], edge_keys):
            out.write(f"    <edge source={edge[0]} target={edge[1]}>{edge[2]}</edge>\n")
        out.write("  </graph>\n</graphml>\n")


def _elements(df: pd.DataFrame, ids: list[str], keys: list[tuple[str, str, str]]) -> Iterator[tuple[str, ...]]:
    """Per row: its id columns as quoted XML attributes, then its <data> elements (a missing value has none)."""
    id_columns = [_texts(df[column], quoteattr) for column in ids]
    data = [_texts(df[column], partial(_data, key)) for key, column, _ in keys]
    for row in zip(*id_columns, *data):
        yield (*row[: len(ids)], "".join(row[len(ids) :]))


def _data(key: str, text: str) -> str:
    return f'<data key="{key}">{escape(text)}</data>'


def _texts(column: pd.Series, form: Callable[[str], str]) -> list[str]:
    """Each value of the column as `form` writes its text ("" for a missing one: GraphML has no null).
    Each distinct value is formed once: a big station's columns repeat few values millions of times."""
    import pandas as pd

    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    bool_column = pd.api.types.is_bool_dtype(column.dtype)
    formed = [form(NOT_XML.sub("\ufffd", str(value).lower() if bool_column else str(value))) for value in uniques]
    formed.append("")  # code -1: missing
    return [formed[code] for code in codes.tolist()]
