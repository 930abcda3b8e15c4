#!/usr/bin/env python3
"""How well the code keeps its floors apart: the counts issue 31 asks for, as a table.

Usage: scripts/layer_counts.py [--list]   (--list also names what each count found)

- SQL of room tables outside rooms: SQL statements (string literals that SELECT, INSERT,
  UPDATE or DELETE) in station/ that name a table a room's or a room hook's migration creates.
- Feature names in the core: string literals in station/core, station/models and
  station/executors (the floors below the features) that are a room's short name or a research
  task's name.
- `Any` in rooms: the name `Any` used in rooms/ (annotations and casts).
- Functions over 80 lines: in station/ (the core and the apps), by their line span.
- Import circles: groups of modules of station/, rooms/ and evaluators/ that import each other
  round a cycle (strongly connected components of the import graph, imports at run time).
- Modules outside contracts: modules no import contract names (itself or a package above it).
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PACKAGES = ("station", "rooms", "evaluators")
SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.IGNORECASE)
CREATE = re.compile(r"CREATE (?:VIRTUAL )?TABLE (?:IF NOT EXISTS )?(\w+)", re.IGNORECASE)


def python_files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "static" not in p.parts)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parts_of_fstrings = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts_of_fstrings:
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            found.append((node.lineno, text))
    return found


def room_tables() -> set[str]:
    tables = set()
    for path in python_files("rooms"):
        for _, text in strings(path):
            tables.update(name.lower() for name in CREATE.findall(text))
    return tables


def room_sql_outside_rooms() -> list[str]:
    tables = room_tables()
    hits = []
    for path in python_files("station"):
        for line, text in strings(path):
            if SQL.match(text):
                named = sorted(t for t in tables if re.search(rf"\b{t}\b", text, re.IGNORECASE))
                if named:
                    hits.append(f"{path.relative_to(ROOT)}:{line} {', '.join(named)}")
    return hits


def contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["importlinter"]["contracts"]


def engine_modules() -> list[str]:
    """The floors below the features: the engine, and the providers and executors beside it."""
    return ["station.core", "station.models", "station.executors"]


def feature_names_in_core() -> list[str]:
    import evaluators  # noqa: F401 - registers the tasks
    from evaluators.base import TASKS
    from rooms import room_classes

    names = {cls.short for cls in room_classes()} | set(TASKS.names())
    names -= {"lobby", "exit"}  # every station's entry and exit belong to the engine's world
    hits = []
    for path in python_files("station"):
        module = module_name(path)
        if not any(module == m or module.startswith(m + ".") for m in engine_modules()):
            continue
        for line, text in strings(path):
            if text in names:
                hits.append(f"{path.relative_to(ROOT)}:{line} {text!r}")
    return hits


def any_in_rooms() -> list[str]:
    hits = []
    for path in python_files("rooms"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and node.id == "Any":
                hits.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return hits


def long_functions(limit: int = 80) -> list[str]:
    hits = []
    for path in python_files("station"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    hits.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    return hits


def import_circles() -> list[str]:
    import grimp

    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    return [" ↔ ".join(group) for group in strongly_connected(modules, edges) if len(group) > 1]


def strongly_connected(nodes: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is a few hundred modules deep at most)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = edges.get(node, [])
            if child < len(targets):
                work.append((node, child + 1))
                target = targets[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                groups.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return groups


def modules_outside_contracts() -> list[str]:
    named: set[str] = set()
    for contract in contracts():
        for key in ("layers", "source_modules", "modules", "containers"):
            for entry in contract.get(key, []):
                named.update(part.strip() for part in re.split(r"[:|]", entry))
    outside = []
    for folder in PACKAGES:
        for path in python_files(folder):
            module = module_name(path)
            if module in PACKAGES:
                continue
            if not any(module == n or module.startswith(n + ".") for n in named):
                outside.append(module)
    return outside


COUNTS = [
    ("SQL of room tables outside rooms", room_sql_outside_rooms),
    ("feature names in the core", feature_names_in_core),
    ("`Any` in rooms", any_in_rooms),
    ("functions over 80 lines (station/)", long_functions),
    ("import circles", import_circles),
    ("modules outside contracts", modules_outside_contracts),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="name what each count found")
    args = ap.parse_args()
    found = [(label, count()) for label, count in COUNTS]
    print("| count | value |\n|---|---:|")
    for label, hits in found:
        print(f"| {label} | {len(hits)} |")
    if args.list:
        for label, hits in found:
            print(f"\n## {label}")
            print("\n".join(f"- {hit}" for hit in hits) or "(none)")


if __name__ == "__main__":
    main()
