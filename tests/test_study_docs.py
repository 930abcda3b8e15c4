"""docs/study.md documents every column of every study table, in the schema's order and types."""

import re
from pathlib import Path

from station.study.schema import METRIC_TABLES, TABLES

DOC = Path(__file__).resolve().parents[1] / "docs" / "study.md"


def documented() -> dict[str, list[tuple[str, str]]]:
    tables: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in DOC.read_text().splitlines():
        heading = re.match(r"#### `(\w+)`", line)
        if heading:
            current = tables.setdefault(heading.group(1), [])
        elif line.startswith("#"):
            current = None
        elif current is not None and (row := re.match(r"\| `(\w+)` \| (\w+) \|", line)):
            current.append((row.group(1), row.group(2)))
    return tables


def test_every_table_and_column_is_documented_as_the_schema_has_it() -> None:
    docs = documented()
    for name, columns in {**TABLES, **METRIC_TABLES}.items():
        assert docs.get(name) == [(column, dtype) for column, dtype, _ in columns], name
    assert set(docs) == {*TABLES, *METRIC_TABLES}
