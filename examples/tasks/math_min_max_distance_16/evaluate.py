"""The verifier of the min/max distance ratio task: 16 points in the plane whose largest distance is as
small as possible relative to their smallest. The score is (d_max / d_min)^2, a ratio of squared
distances, so with exact rational coordinates it is an exact rational number, computed as one.
"""

from fractions import Fraction
from itertools import combinations

from exact import plain, rational, short, shown

POINTS = 16
LIMIT = 10**6
MAX_RATIO = 10**300  # beyond it the score is no float


def evaluate(returned, context):
    points = _points(returned)
    squared = {(i, j): (p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2 for (i, p), (j, q) in combinations(enumerate(points), 2)}
    (near, smallest), (far, largest) = min(squared.items(), key=_value), max(squared.items(), key=_value)
    if smallest == 0:
        raise ValueError(f"points {near[0]} and {near[1]} coincide: the {POINTS} points must be distinct")
    ratio = Fraction(largest) / smallest
    if ratio > MAX_RATIO:
        raise ValueError(f"(d_max/d_min)^2 is above {MAX_RATIO:g}: points {near} are far too close to score")
    return {
        "score": float(ratio),
        "metrics": {"ratio_squared": float(ratio)},
        "details": f"(d_max/d_min)^2 = {short(ratio)} (= {float(ratio):.12f}); the closest pair is {near}, "
        f"the farthest {far}.",
        "certificate": [[shown(x), shown(y)] for x, y in points],
    }


def _value(item):
    return item[1]


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
