"""The verifier of Heilbronn's problem for convex regions, n = 13: place 13 points so that the
smallest triangle any three of them form is as large as possible relative to the area of their
convex hull (the smallest convex region holding them). Every area of a triangle or polygon with
rational corners is rational: the score is computed exactly.
"""

from fractions import Fraction
from itertools import combinations

from exact import plain, rational, short, shown

POINTS = 13
LIMIT = 10**6


def evaluate(returned, context):
    points = _points(returned)
    if len(set(points)) != POINTS:
        first = next(i for i, p in enumerate(points) if points.index(p) != i)
        raise ValueError(f"point {first} repeats point {points.index(points[first])}: the points must be distinct")
    hull = _hull(points)
    area = _polygon_area(hull)
    if area == 0:
        raise ValueError("all the points lie on one line: their convex hull has no area")
    smallest, triple = min(
        (abs(_cross(a, b, c)) / 2, (i, j, k)) for (i, a), (j, b), (k, c) in combinations(enumerate(points), 3)
    )
    ratio = smallest / area
    return {
        "score": float(ratio),
        "metrics": {"hull_vertices": len(hull)},
        "details": f"smallest triangle / hull area = {short(ratio)} (= {float(ratio):.12f}); the smallest "
        f"triangle is {triple}, the hull has {len(hull)} corners.",
        "certificate": [[shown(x), shown(y)] for x, y in points],
    }


def _cross(o, a, b):
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def _hull(points):
    """The convex hull's corners in order (Andrew's monotone chain, exact)."""
    ordered = sorted(points)
    lower, upper = [], []
    for p in ordered:
        while len(lower) >= 2 and _cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(ordered):
        while len(upper) >= 2 and _cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return lower[:-1] + upper[:-1]


def _polygon_area(corners):
    total = sum(a[0] * b[1] - b[0] * a[1] for a, b in zip(corners, corners[1:] + corners[:1]))
    return abs(Fraction(total)) / 2


def _points(value):
    value = plain(value)
    if not isinstance(value, (list, tuple)) or len(value) != POINTS:
        raise ValueError(f"construct_points() must return a list of {POINTS} points [x, y]")
    points = []
    for i, point in enumerate(value):
        point = plain(point)
        if not isinstance(point, (list, tuple)) or len(point) != 2:
            raise ValueError(f"point {i} must be a pair [x, y]")
        points.append(tuple(rational(c, f"point {i}'s coordinate", LIMIT) for c in point))
    return points
