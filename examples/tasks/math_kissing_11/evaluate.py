"""The verifier of the kissing-configuration task in dimension 11: an exact lower bound for the
kissing number K(11).

A finite set C of nonzero points of R^11 with  min over x != y of |x - y|  >=  max over x of |x|
gives |C| unit spheres that touch a central unit sphere and overlap nowhere (put a sphere of radius 1
at 2x/|x| for every x in C; the inequality keeps those centres at least 2 apart). With integer points
every squared length and distance is an integer, so the check is exact.
"""

import numpy as np

DIMENSION = 11
MAX_POINTS = 1000
MAX_COORDINATE = 10**15


def evaluate(returned, context):
    points = _points(returned)
    small = max(abs(c) for p in points for c in p) < 2**28  # dot products of 11 such terms fit in int64
    array = np.array(points, dtype=np.int64 if small else object)
    norms = [int(v) for v in (array * array).sum(axis=1)]
    gram = array @ array.T
    if 0 in norms:
        raise ValueError(f"point {norms.index(0)} is the origin: every point must be nonzero")
    longest = max(norms)
    closest, pair = None, (0, 0)
    for i in range(len(points)):
        for j in range(i + 1, len(points)):
            d = norms[i] + norms[j] - 2 * int(gram[i, j])
            if closest is None or d < closest:
                closest, pair = d, (i, j)
    if closest < longest:
        i, j = pair
        what = "coincide" if closest == 0 else f"are at squared distance {closest}"
        raise ValueError(
            f"points {i} and {j} {what}, less than the largest squared length {longest}: "
            "every two points must be at least as far apart as the longest point is long"
        )
    return {
        "score": len(points),
        "metrics": {"points": len(points), "max_squared_norm": longest, "min_squared_distance": closest},
        "details": f"Valid kissing configuration of {len(points)} points in dimension {DIMENSION}: smallest squared "
        f"distance {closest} >= largest squared length {longest}.",
        "certificate": points,
    }


def _points(value):
    value = value.tolist() if hasattr(value, "tolist") else value
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= MAX_POINTS:
        raise ValueError(f"construct_kissing_configuration() must return a list of 1 to {MAX_POINTS} points")
    points = []
    for i, point in enumerate(value):
        point = point.tolist() if hasattr(point, "tolist") else point
        if not isinstance(point, (list, tuple)) or len(point) != DIMENSION:
            raise ValueError(f"point {i} must be a list of {DIMENSION} integers")
        for c in point:
            if isinstance(c, bool) or not isinstance(c, int):
                raise ValueError(f"point {i} holds {str(c)[:30]!r}: every coordinate must be an integer")
            if abs(c) > MAX_COORDINATE:
                raise ValueError(f"point {i} has a coordinate beyond {MAX_COORDINATE:g} in size")
        points.append([int(c) for c in point])
    return points
