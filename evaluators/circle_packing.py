"""Circle packing in the unit square: n circles, no overlaps, maximise the sum of radii.

The verifier is exact float64 arithmetic with zero tolerance (spec research §3.1): touching is
allowed, an overlap of 1e-16 is not. Its order of checks and its formulas are part of the
contract, since published packings sit within ~5e-16 of tangency and any other arithmetic could
flip their verdict.
"""

from __future__ import annotations

import operator
import random
import re
from typing import Any

import numpy as np

from station.core.run_types import RunResult

from .base import SCRIPTED_TYPO_RATE, Baseline, Task, Verdict, figure_number, numbers_within, register

SHOWN_N = re.compile(r"n = (\d+)")  # the instance's title names its n

MIN_N, MAX_N = 2, 200
TOLERANCE_HINT = 1e-9  # only for the "what if" note on failures; never for the score


class PackingError(Exception):
    """The submission's value breaks a rule; the message is shown to the author."""


def scripted_circles(n: int, seen: Any, rng: random.Random) -> dict[str, str]:
    """The scripted researcher climbs a ladder of real algorithms (evaluators/programs): a square grid,
    then hexagonal rows, then scipy-optimised centres and radii, searching harder with each try and
    as the station ages, so the leaderboard improves; now and then with a slip the debugger mends."""
    from .programs import program

    # Build on what the leaderboard shows: after a grid, try rows; after rows, optimise.
    shown = (
        2
        if ("Hexagonal rows" in seen.prompt or "Optimised centres" in seen.prompt)
        else 1
        if "Square grid" in seen.prompt
        else 0
    )
    level = max(seen.notes.get("cp_level", 0), shown)
    seen.notes["cp_level"] = level + 1
    constants: dict[str, int]
    if level == 0:
        kind, constants, title = "grid", {}, f"Square grid of {n} equal circles"
        abstract = "Equal circles on the smallest square grid that holds them, as a reference point."
        tags = "grid, baseline"
    elif level == 1:
        kind, constants, title = "hex", {}, f"Hexagonal rows for {n} circles"
        abstract = "Circles on staggered rows, with the radii chosen by a linear program that maximises their sum."
        tags = "hexagonal, layout"
    else:
        # Each further try, and a station that has run longer, search harder, up to 6 starts and 16 rounds
        # (~2 s): 12 starts and 40 rounds took 2.4 times as long for packings only ~0.005 better.
        step = level - 2 + seen.tick // 15
        starts, hops, seed = min(2 + 2 * step, 6), min(8 * step, 16), rng.randrange(10_000)
        kind, constants = "optimized", {"STARTS": starts, "HOPS": hops, "SEED": seed}
        title = f"Optimised centres and radii: {starts} starts, {hops} perturbation rounds (seed {seed})"
        abstract = (
            f"Maximise the sum of radii over centres and radii with SLSQP from {starts} random starts and "
            f"{hops} rounds of perturbing the best layout, then shrink radii just enough to satisfy every "
            "constraint exactly."
        )
        tags = "optimization, slsqp, restarts"
    code = program(kind, n, **constants)
    if rng.random() < SCRIPTED_TYPO_RATE and "np.zeros(" in code:
        code = code.replace("np.zeros(", "np.zeroes(", 1)  # a slip the debugger can mend
    return {"title": title, "tags": tags, "abstract": abstract, "content": code}


def packing_figure(centers: np.ndarray, radii: np.ndarray) -> dict[str, Any]:
    """The valid packing for the viewer's drawing of the unit square: [x, y, r] per circle (6 digits)."""
    circles = [[figure_number(v) for v in (x, y, r)] for (x, y), r in zip(centers.tolist(), radii.tolist())]
    return {"kind": "circles", "width": 1.0, "height": 1.0, "circles": circles}


@register("circle_packing")
class CirclePacking(Task):
    title = "Circle Packing in a Unit Square"  # the instance's title names its n
    description = "Pack n non-overlapping circles in the unit square to maximise the sum of their radii."
    mode = "function"

    entry = "construct_packing"
    timeout_s = 1200.0
    memory_mb = 4096
    display_precision = 7

    @classmethod
    def scripted_submission(cls, shown_title: str, seen: Any, rng: random.Random) -> dict[str, str] | None:
        n = SHOWN_N.search(shown_title)
        return scripted_circles(int(n.group(1)), seen, rng) if n else None

    def __init__(self, n: int = 26, cpus: float = 1.0, gpus: float = 0.0) -> None:
        try:
            if isinstance(n, bool):
                raise TypeError
            n = operator.index(n)  # ints (numpy ints too), never floats or strings
        except TypeError:
            raise ValueError(f"circle_packing: n must be an integer from {MIN_N} to {MAX_N}, got {n!r}") from None
        if not MIN_N <= n <= MAX_N:
            raise ValueError(f"circle_packing: n must be from {MIN_N} to {MAX_N}, got {n}")
        if not (0 < cpus <= 256 and 0 <= gpus <= 16):
            raise ValueError(f"circle_packing: cpus must be in (0, 256] and gpus in [0, 16], got {cpus} and {gpus}")
        self.n, self.num_cpus, self.num_gpus = n, float(cpus), float(gpus)
        self.title = f"Circle Packing in a Unit Square (n = {n})"
        self.description = f"Pack {n} non-overlapping circles in the unit square to maximise the sum of their radii."

    # ----- scoring -----------------------------------------------------------------------------

    def score(self, result: RunResult) -> Verdict:
        try:
            centers, radii = self._arrays(result.value, self.n)
            self._check_shapes_and_values(centers, radii)
        except PackingError as err:
            return Verdict(False, details=f"Verification failed: {err}")
        problem, worst = self._check_geometry(centers, radii)
        total = float(np.sum(radii))
        if problem:
            details = f"Verification failed: {problem}"
            if worst <= TOLERANCE_HINT:
                details += (
                    f" With a tolerance of {TOLERANCE_HINT:g} the sum of radii would be {total:.6f}; that is "
                    "not the score, since no tolerance is allowed: shrink the radii very slightly."
                )
            return Verdict(False, details=details)
        return Verdict(
            True,
            total,
            f"Valid packing of {self.n} circles; sum of radii = {total:.6f}",
            figure=packing_figure(centers, radii),
        )

    @staticmethod
    def _arrays(value: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(centers, radii) as float64 arrays, from a 2-item tuple or list of numbers; refused before
        anything is built when either holds more numbers than n circles need."""
        if not isinstance(value, (tuple, list)) or len(value) != 2:
            got = "None" if value is None else f"a {type(value).__name__}"
            got += f" of length {len(value)}" if isinstance(value, (tuple, list)) else ""
            raise PackingError(f"construct_packing() must return a pair (centers, radii); got {got}.")
        arrays = []
        for name, item, need in zip(("centers", "radii"), value, (2 * n, n)):
            if not numbers_within(item, 4 * need):  # near misses get the shape check's exact message
                raise PackingError(f"{name} holds more than {4 * need} numbers; {n} circles need {need}.")
            try:
                array = np.asarray(item)
            except (ValueError, TypeError) as err:  # ragged nesting, for instance
                raise PackingError(f"{name} is not a regular array of numbers ({err}).") from None
            # Only real numbers: strings such as "0.5", booleans, None or objects are refused outright.
            if array.dtype.kind not in "iuf":
                raise PackingError(f"{name} must hold only real numbers (got values of type {array.dtype}).")
            arrays.append(array.astype(np.float64))
        return arrays[0], arrays[1]

    def _check_shapes_and_values(self, centers: np.ndarray, radii: np.ndarray) -> None:
        """Rules 1-3: shapes, finite values, strictly positive radii."""
        n = self.n
        if centers.ndim == 0 or centers.shape[0] != n:
            rows = "a single number" if centers.ndim == 0 else f"{centers.shape[0]} rows"
            raise PackingError(f"expected {n} circles, but centers has {rows}.")
        if centers.shape != (n, 2):
            raise PackingError(f"centers must have shape ({n}, 2), got {centers.shape}.")
        if radii.shape != (n,):
            raise PackingError(f"radii must have shape ({n},), got {radii.shape}.")
        for name, array in (("centers", centers), ("radii", radii)):
            bad = ~np.isfinite(array)
            if bad.any():
                where = int(np.argwhere(bad)[0][0])
                raise PackingError(
                    f"{name} holds NaN or infinite values ({int(bad.sum())} in all; the first at circle {where})."
                )
        small = np.flatnonzero(~(radii > 0))
        if small.size:
            i = int(small[0])
            raise PackingError(
                f"every radius must be > 0, but circle {i} has radius {float(radii[i])!r} "
                f"({small.size} circle(s) in all)."
            )

    @staticmethod
    def _check_geometry(centers: np.ndarray, radii: np.ndarray) -> tuple[str | None, float]:
        """Rules 4-5: inside the square, no overlaps. (first problem or None, worst violation)."""
        x, y, r = centers[:, 0], centers[:, 1], radii
        # Rule 4, exactly as stated: x - r < 0, x + r > 1, y - r < 0, y + r > 1 (touching is fine).
        crossings = np.column_stack([-(x - r), (x + r) - 1, -(y - r), (y + r) - 1])
        outside = (x - r < 0) | (x + r > 1) | (y - r < 0) | (y + r > 1)
        # Rule 5. For each pair this does the very float64 operations of
        # np.sqrt(np.sum((centers[i] - centers[j]) ** 2)): an elementwise difference, two squares,
        # one two-term sum (its order cannot matter) and a square root; so the verdict is identical.
        i, j = np.triu_indices(len(r), 1)
        dist = np.sqrt(np.sum((centers[i] - centers[j]) ** 2, axis=1))
        reach = r[i] + r[j]
        overlapping = np.flatnonzero(dist < reach)
        worst = max(float(crossings[outside].max(initial=0.0)), float((reach - dist)[overlapping].max(initial=0.0)))
        if outside.any():
            k = int(np.flatnonzero(outside)[0])
            side = int(np.argmax(crossings[k]))
            names = ("left", "right", "bottom", "top")
            return (
                f"circle {k} (center ({float(x[k])!r}, {float(y[k])!r}), radius {float(r[k])!r}) crosses the {names[side]} side of "
                f"the square by {crossings[k, side]:.3g}; {int(outside.sum())} circle(s) cross a side in all "
                "(circles are numbered from 0)."
            ), worst
        if overlapping.size:
            p = int(overlapping[np.argmax(reach[overlapping] - dist[overlapping])])
            a, b = int(i[p]), int(j[p])
            return (
                f"circles {a} and {b} overlap by {reach[p] - dist[p]:.3g} (distance between centers "
                f"{float(dist[p])!r} < r{a} + r{b} = {float(reach[p])!r}); {overlapping.size} overlapping pair(s) in all, "
                "this is the worst (circles are numbered from 0)."
            ), worst
        return None, worst

    # ----- what agents read ----------------------------------------------------------------------

    def example_code(self) -> str:
        """A short, valid submission for this n (it is part of the spec, and tested)."""
        return _EXAMPLE.replace("N_CIRCLES", str(self.n))

    def spec(self) -> str:
        n = self.n
        return f"""# {self.title}

## The problem
Place exactly **{n} circles** inside the unit square [0, 1] x [0, 1] so that no two circles overlap,
and make the **sum of their radii** as large as possible. Circles may have different sizes.

## What to submit
A Python file that defines a function `construct_packing()`, called with **no arguments**. It must
return a pair `(centers, radii)`:
- `centers`: an array of shape ({n}, 2), row i holding the (x, y) center of circle i;
- `radii`: an array of shape ({n},), entry i holding the radius of circle i.

Both are read as float64 NumPy arrays (plain lists of numbers are accepted and converted).

## When a packing is valid
The station checks the returned arrays in this order, in float64, with **zero tolerance**:
1. `centers` has {n} rows, `centers.shape == ({n}, 2)` and `radii.shape == ({n},)`.
2. No value is NaN or infinite.
3. Every radius is strictly greater than 0.
4. Every circle lies inside the square: for each circle, `x - r < 0`, `x + r > 1`, `y - r < 0` or
   `y + r > 1` makes the packing invalid.
5. No two circles overlap: for each pair i < j, with
   `d = np.sqrt(np.sum((centers[i] - centers[j]) ** 2))`, the packing is invalid if `d < radii[i] + radii[j]`.

Touching (equality) is allowed, both between circles and with the sides. Anything beyond, even by 1e-15,
is not: optimisers usually end up a hair infeasible, so finish with a step that shrinks the radii
slightly and re-checks with exactly these formulas before returning.

## Score
The score is `float(np.sum(radii))`; **higher is better**. An invalid packing gets no score, and the
result says which rule failed and for which circle or pair.

The station computes everything itself from the arrays your function returns. Printing a score, or
anything else, changes nothing; printed output only appears in your run's logs.

## Limits
- Time: {self.timeout_s:g} seconds of wall-clock time per run ({self.timeout_s / 60:g} minutes); the run is stopped after that.
- Memory: {self.memory_mb} MB. {self._processors()}
- Python with NumPy and SciPy available.

## A valid example ({n} circles, equal circles on a square grid)
```python
{self.example_code()}```
It is valid but far from good: a better packing mixes circle sizes.

## Tips
- Optimise centers and radii together, for instance with `scipy.optimize` (SLSQP, trust-constr, or a
  penalty method followed by a constrained polish); vectorise constraints and supply their Jacobians.
- Many starting layouts, or perturbing the best packing and optimising again, often beat one long run.
- Files can be kept between runs under `storage/` (paths relative to the working directory):
  `storage/shared` (shared with everyone), `storage/system` (read-only task files) and
  `storage/<your lineage>` (your lineage's own files), within the access rules the station shows you.
  Loading a good earlier packing from there and improving it is a fair strategy.
"""

    def _processors(self) -> str:
        cores = "One CPU core" if self.num_cpus == 1 else f"{self.num_cpus:g} CPU cores"
        gpus = "no GPU" if not self.num_gpus else f"{self.num_gpus:g} GPU" + ("" if self.num_gpus == 1 else "s")
        return f"{cores}, {gpus}."

    # ----- baselines -----------------------------------------------------------------------------

    def baselines(self) -> list[Baseline]:
        return [
            Baseline(
                title="Ring Pattern Baseline",
                tags=("baseline", "rings"),
                abstract=(
                    "A centre circle surrounded by concentric rings of circles (ring k holds a share of the "
                    "circles proportional to k). Each circle starts at half the distance to its nearest "
                    "neighbour, then grows into the room left by the others and the sides; a final exact "
                    "scale-down guarantees validity. A simple, deliberately unoptimised reference point."
                ),
                code=_RING_BASELINE.replace("N_CIRCLES", str(self.n)),
            )
        ]


_EXAMPLE = """import numpy as np


def construct_packing():
    n = N_CIRCLES
    cols = int(np.ceil(np.sqrt(n)))
    rows = int(np.ceil(n / cols))
    # Slightly under half the spacing, so that float rounding never makes neighbours overlap.
    r = 0.5 / max(rows, cols) * (1 - 1e-12)
    k = np.arange(n)
    centers = np.column_stack([(2 * (k % cols) + 1) / (2 * cols), (2 * (k // cols) + 1) / (2 * rows)])
    return centers, np.full(n, r)
"""

_RING_BASELINE = '''"""Ring Pattern Baseline: a centre circle and concentric rings, radii grown to fit."""
import numpy as np

N = N_CIRCLES


def construct_packing():
    # Enough rings to hold N circles at hexagonal density (ring k could take 6k circles);
    # ring k gets a share of the N - 1 outer circles proportional to k.
    rings = 1
    while 1 + 3 * rings * (rings + 1) < N:
        rings += 1
    weights = np.arange(1, rings + 1)
    counts = np.floor((N - 1) * weights / weights.sum()).astype(int)
    counts[-1] += N - 1 - counts.sum()
    centers = [(0.5, 0.5)]
    for k, m in zip(weights, counts):
        radius, turn = 0.4 * k / rings, 0.5 * k  # successive rings are turned against each other
        for i in range(m):
            angle = 2 * np.pi * (i + turn) / m
            centers.append((0.5 + radius * np.cos(angle), 0.5 + radius * np.sin(angle)))
    centers = np.array(centers, dtype=np.float64)
    x, y = centers[:, 0], centers[:, 1]
    wall = np.min(np.column_stack([x, 1 - x, y, 1 - y]), axis=1)
    d = np.sqrt(np.sum((centers[:, None, :] - centers[None, :, :]) ** 2, axis=-1))
    np.fill_diagonal(d, np.inf)
    # Half the distance to the nearest neighbour, then each circle grows into the room left over.
    radii = np.minimum(wall, d.min(axis=1) / 2)
    for _ in range(3):
        for i in range(N):
            radii[i] = min(wall[i], np.min(d[i] - radii))
    # Float rounding may leave pairs overlapping by an ulp: scale them down until exact checks pass.
    for _ in range(100):
        total = radii[:, None] + radii[None, :]
        bad = total > d
        if not bad.any():
            break
        radii = radii * np.where(bad, d / np.where(bad, total, 1.0), 1.0).min(axis=1) * (1 - 1e-15)
    return centers, radii
'''
