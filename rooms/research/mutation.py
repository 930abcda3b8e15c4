"""Random mutations of a Python program, for the scripted researcher's evolution (evolve_play.py).

A mutation is one or two small edits, each made on the program's text at a place its syntax tree
names, so that everything else (comments, layout, the other constants) stays as the author wrote
it: a numeric constant perturbed, a numeric expression scaled by a factor near 1, or an arithmetic
or comparison operator swapped. Every result is checked with `compile()`; a program that would not
compile is never returned. The choices come from the caller's `random.Random` only, so a seed gives
the same mutation every time (the scripted policy must be a pure function of what it is sent).

Where the program marks the part to evolve, as OpenEvolve's do (`# EVOLVE-BLOCK-START` ...
`# EVOLVE-BLOCK-END`), only that part is edited: the rest (the objective, the entry point) is
the task's, and changing it would be cheating rather than research.
"""

from __future__ import annotations

import ast
import math
import random
import re
from dataclasses import dataclass

from evaluators.folder.layout import EVOLVE_END, EVOLVE_START

ATTEMPTS = 12  # mutations tried before giving up (each may fail to compile or find no place to edit)
# Edit kinds and how often each is drawn where the program offers a place for it: constants are
# what usually wants tuning, scaling lets a program without constants gain one, swaps are rarely right.
KINDS = (("number", 5), ("scale", 3), ("swap", 1))
# Calls whose value is a number, so that scaling it keeps the program meaningful (scaling `open(...)`
# or a list would only crash): builtins, and the usual numpy / math / random functions.
NUMERIC_CALLS = frozenset(
    "abs float int len max min pow round sum mean median std sqrt exp log uniform normal random gauss".split()
)
# Operators that may be swapped, by how they are written, and what each becomes.
SYMBOLS: dict[type, str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
}
SWAPS = {"+": "-", "-": "+", "*": "/", "/": "*", "<": "<=", "<=": "<", ">": ">=", ">=": ">"}
NOT_NUMBERS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp, ast.JoinedStr)
LINE_END = re.compile(r"\r\n|\r|\n")  # the line ends ast counts (str.splitlines knows more)
SHOWN_CHARS = 40  # how much of an edited expression the description quotes


@dataclass(frozen=True)
class Mutation:
    code: str
    edits: tuple[str, ...]  # one line per edit, e.g. "line 6: 1000 -> 1386"


def mutate(code: str, rng: random.Random) -> Mutation | None:
    """A variant of `code` with one or two random edits that still compiles; None when the program
    does not parse or offers nothing to edit."""
    if _tree(code) is None:
        return None
    for _ in range(ATTEMPTS):
        variant, edits = code, list[str]()
        for _ in range(rng.choice((1, 1, 2))):
            edited = _edit(variant, rng)
            if edited is not None:
                variant, edits = edited[0], [*edits, edited[1]]
        if variant != code and _compiles(variant):
            return Mutation(variant, tuple(edits))
    return None


def _tree(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte in the source
        return None


def _compiles(code: str) -> bool:
    try:
        compile(code, "<mutation>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def _edit(code: str, rng: random.Random) -> tuple[str, str] | None:
    """One edit of `code`: (the new text, what changed), or None when there is no place for one."""
    tree = _tree(code)
    if tree is None:
        return None
    sites = _sites(tree, _evolve_lines(code))
    kinds = [(kind, weight) for kind, weight in KINDS if sites[kind]]
    if not kinds:
        return None
    kind = rng.choices([k for k, _ in kinds], weights=[w for _, w in kinds])[0]
    node = rng.choice(sites[kind])
    if kind == "swap":
        return _swap(code, node)
    start, end = _span(code, node)
    old = code[start:end]
    if kind == "number":
        assert isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
        new = _perturbed(node.value, rng)
        what = f"{old} -> {new}"
    else:
        factor = _factor(rng)
        new = f"({old} * {factor})"
        what = f"scaled {_shown(old)} by {factor}"
    return code[:start] + new + code[end:], f"line {node.lineno}: {what}"


def _sites(tree: ast.Module, blocks: list[tuple[int, int]] | None) -> dict[str, list[ast.expr]]:
    """The places each kind of edit can go, in a fixed order (ast.walk's), inside `blocks` if given."""
    unsafe = _unsafe(tree)
    sites: dict[str, list[ast.expr]] = {kind: [] for kind, _ in KINDS}
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr) or id(node) in unsafe:
            continue
        last = node.end_lineno or node.lineno
        if blocks is not None and not any(start < node.lineno and last < end for start, end in blocks):
            continue
        if _tunable(node):
            sites["number"].append(node)
        if _numeric(node):
            sites["scale"].append(node)
        if isinstance(node, ast.BinOp) and type(node.op) in SYMBOLS and _plain_operands(node.left, node.right):
            sites["swap"].append(node)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SYMBOLS:
            sites["swap"].append(node)
    return sites


def _unsafe(tree: ast.Module) -> set[int]:
    """Nodes no edit touches: indexes and keys (`row["y"]`, `bounds[0]`: a float there is an error,
    not an experiment), f-string parts (their positions are not reliable), annotations and decorators."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            roots.append(node.slice)
        elif isinstance(node, ast.JoinedStr):
            roots.append(node)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            roots += node.decorator_list
            if not isinstance(node, ast.ClassDef) and node.returns is not None:
                roots.append(node.returns)
    return {id(inner) for root in roots for inner in ast.walk(root)}


def _tunable(node: ast.expr) -> bool:
    """A number worth perturbing: any float, and integers from 2 up (0 and 1 are mostly structure)."""
    if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
        return False
    if isinstance(node.value, float):
        return math.isfinite(node.value)
    return isinstance(node.value, int) and abs(node.value) >= 2


def _numeric(node: ast.expr) -> bool:
    """An expression that computes a number: arithmetic on no container or text, or a numeric call."""
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)) and _plain_operands(
            node.left, node.right
        )
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in NUMERIC_CALLS
    return False


def _plain_operands(*sides: ast.expr) -> bool:
    """No operand is a container or text: `[x] * n` repeats a list, and scaling it or turning `*`
    into `/` only makes a program that crashes."""
    return not any(
        isinstance(side, NOT_NUMBERS) or (isinstance(side, ast.Constant) and isinstance(side.value, str))
        for side in sides
    )


def _perturbed(value: int | float, rng: random.Random) -> str:
    """A nearby value of the same type, as source text: integers change by a factor near 1 (at least
    by one, keeping their sign), floats by a log-normal factor (zero moves by a small step)."""
    if isinstance(value, int):
        new = round(value * math.exp(rng.gauss(0.0, 0.35)))
        if new == value:
            new = value + rng.choice((-1, 1))
        new = max(1, new) if value > 0 else min(-1, new)
        return str(new)
    number = value * math.exp(rng.gauss(0.0, 0.3)) if value else rng.gauss(0.0, 0.1)
    text = f"{number:.6g}"
    if not any(c in text for c in ".en"):
        text += ".0"  # stays a float: 3 would turn float arithmetic into integer arithmetic
    return f"({text})" if text.startswith("-") else text


def _factor(rng: random.Random) -> str:
    """A scaling factor near 1, never 1 itself."""
    factor = f"{math.exp(rng.gauss(0.0, 0.25)):.3g}"
    return factor if factor not in ("1", "1.0") else rng.choice(("0.9", "1.1"))


def _swap(code: str, node: ast.expr) -> tuple[str, str] | None:
    """`code` with the operator of a binary operation or comparison swapped, where it is written:
    between its two operands, outside any comment (the rest of the text stays as it was)."""
    if isinstance(node, ast.BinOp):
        left, right, symbol = node.left, node.right, SYMBOLS[type(node.op)]
    elif isinstance(node, ast.Compare):
        left, right, symbol = node.left, node.comparators[0], SYMBOLS[type(node.ops[0])]
    else:
        return None
    start, end = _span(code, left)[1], _span(code, right)[0]
    gap = "\n".join(line.split("#", 1)[0].ljust(len(line)) for line in code[start:end].split("\n"))
    at = gap.find(symbol)
    if at < 0:
        return None
    where, new = start + at, SWAPS[symbol]
    return code[:where] + new + code[where + len(symbol) :], f"line {node.lineno}: {symbol} -> {new}"


def _span(code: str, node: ast.expr) -> tuple[int, int]:
    """Where the node's text begins and ends in `code`, as string indexes (ast counts UTF-8 bytes)."""
    starts = [0, *(m.end() for m in LINE_END.finditer(code)), len(code)]

    def index(line: int, column: int) -> int:
        text = code[starts[line - 1] : starts[line]]
        return starts[line - 1] + len(text.encode("utf-8")[:column].decode("utf-8", errors="ignore"))

    end_line, end_column = node.end_lineno or node.lineno, node.end_col_offset or node.col_offset
    return index(node.lineno, node.col_offset), index(end_line, end_column)


def _evolve_lines(code: str) -> list[tuple[int, int]] | None:
    """The (start, end) line numbers of each EVOLVE-BLOCK's markers (a ShinkaEvolve program may have
    several), or None when the program marks none: then all of it may change."""
    blocks, start = [], None
    for number, line in enumerate(LINE_END.split(code), 1):
        if EVOLVE_START in line:
            start = number
        elif EVOLVE_END in line and start is not None:
            blocks.append((start, number))
            start = None
    return blocks or None


def _shown(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
