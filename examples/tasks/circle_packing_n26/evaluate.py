"""The trusted scorer of the circle-packing example: exact float64 checks with zero tolerance.

It applies the built-in task's rules (evaluators/circle_packing.py) with the same arithmetic, so
both give the same verdict and the same score, bit for bit, on every packing. An invalid packing
is rejected with ValueError, whose message the author reads.
"""

import numpy as np

N = 26


def evaluate(returned, context):
    centers, radii = _arrays(returned)
    _check_shapes_and_values(centers, radii)
    _check_geometry(centers, radii)
    total = float(np.sum(radii))
    return {"score": total, "details": f"Valid packing of {N} circles; sum of radii = {total:.6f}"}


def _arrays(value):
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"construct_packing() must return a pair (centers, radii); got {type(value).__name__}.")
    arrays = []
    for name, item in zip(("centers", "radii"), value):
        try:
            array = np.asarray(item)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{name} is not a regular array of numbers ({err}).") from None
        if array.dtype.kind not in "iuf":
            raise ValueError(f"{name} must hold only real numbers (got values of type {array.dtype}).")
        arrays.append(array.astype(np.float64))
    return arrays[0], arrays[1]


def _check_shapes_and_values(centers, radii):
    if centers.shape != (N, 2):
        raise ValueError(f"centers must have shape ({N}, 2), got {centers.shape}.")
    if radii.shape != (N,):
        raise ValueError(f"radii must have shape ({N},), got {radii.shape}.")
    for name, array in (("centers", centers), ("radii", radii)):
        if not np.isfinite(array).all():
            raise ValueError(f"{name} holds NaN or infinite values.")
    small = np.flatnonzero(~(radii > 0))
    if small.size:
        raise ValueError(f"every radius must be > 0, but circle {int(small[0])} has radius {float(radii[small[0]])!r}.")


def _check_geometry(centers, radii):
    x, y, r = centers[:, 0], centers[:, 1], radii
    outside = np.flatnonzero((x - r < 0) | (x + r > 1) | (y - r < 0) | (y + r > 1))
    if outside.size:
        k = int(outside[0])
        raise ValueError(f"circle {k} is not inside the square ({outside.size} circle(s) cross a side).")
    # Per pair, the very operations of np.sqrt(np.sum((centers[i] - centers[j]) ** 2)).
    i, j = np.triu_indices(N, 1)
    dist = np.sqrt(np.sum((centers[i] - centers[j]) ** 2, axis=1))
    overlapping = np.flatnonzero(dist < r[i] + r[j])
    if overlapping.size:
        p = int(overlapping[0])
        raise ValueError(
            f"circles {int(i[p])} and {int(j[p])} overlap by {float(r[i[p]] + r[j[p]] - dist[p]):.3g}; "
            f"{overlapping.size} overlapping pair(s) in all."
        )
