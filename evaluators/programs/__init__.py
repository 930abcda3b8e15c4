"""Circle-packing submissions of increasing quality, for the offline scripted agents.

Each program is a standalone file, exactly what an agent would submit (numpy and scipy only).
Its tunable constants sit at module level as `NAME = <number>` lines so that they can be
rewritten: `program("optimized", 32, SEED=3)` gives the optimiser's source for n = 32 with
another seed. Quality, for n = 26: grid (2.17) < hex (2.50) < optimized (about 2.62-2.636).
"""

from __future__ import annotations

import re
from pathlib import Path

_HERE = Path(__file__).parent
KINDS = {"grid": "circle_grid.py", "hex": "circle_hex.py", "optimized": "circle_optimized.py"}


def program(kind: str, n: int, **constants: int | float) -> str:
    """The source of program `kind` with `N = n` and the given constants (e.g. STARTS, HOPS, SEED)."""
    if kind not in KINDS:
        raise ValueError(f"unknown program {kind!r}; known: {', '.join(KINDS)}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    source = (_HERE / KINDS[kind]).read_text(encoding="utf-8")
    for name, value in {"N": n, **constants}.items():
        # Only plain numbers: the result is code that will run, so nothing else may be spliced in.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, not {value!r}")
        pattern = re.compile(rf"^{re.escape(name)} = [-+0-9.eE]+", re.MULTILINE)
        if not pattern.search(source):
            raise ValueError(f"program {kind!r} has no constant {name}")
        source = pattern.sub(f"{name} = {value!r}", source, count=1)
    return source
