"""Circle packing, second attempt: staggered rows, with the best radii for those centres.

Centres are laid out in rows, alternate rows shifted by half a step (a hexagonal-like
pattern). For fixed centres, the radii that maximise their sum solve a linear program:
    maximise sum(r)  subject to  r_i + r_j <= |c_i - c_j|,  r_i <= distance to each side.
Several row counts are tried and the best layout is kept.
"""

import numpy as np
from scipy.optimize import linprog

N = 26  # number of circles


def layout(rows, shift):
    """N centres in `rows` rows; odd rows are offset by `shift` of a step."""
    points = []
    for k in range(rows):
        m = N // rows + (1 if k < N % rows else 0)
        s = shift if k % 2 else 0.0
        y = (k + 0.5) / rows
        points += [((i + 0.5 + s) / (m + shift), y) for i in range(m)]
    return np.array(points, dtype=np.float64)


def best_radii(centers):
    """The LP above (HiGHS), then shrunk so that exact float64 checks pass."""
    n = len(centers)
    i, j = np.triu_indices(n, 1)
    dist = np.sqrt(np.sum((centers[i] - centers[j]) ** 2, axis=1))
    a = np.zeros((len(i), n))
    a[np.arange(len(i)), i] = 1.0
    a[np.arange(len(i)), j] = 1.0
    wall = np.min(np.column_stack([centers, 1 - centers]), axis=1)
    # A tiny lower bound keeps every radius strictly positive, as the checker demands.
    res = linprog(-np.ones(n), A_ub=a, b_ub=dist, bounds=list(zip(np.full(n, 1e-7), wall)), method="highs")
    if not res.success:
        return None
    return make_valid(centers, res.x)


def make_valid(centers, radii):
    """Shrink radii until no circle crosses a side or overlaps another in float64 (touching is fine).

    The LP solver works to a tolerance of about 1e-9, which the station's zero-tolerance check
    would reject, so each offending circle is scaled down to exact tangency and a little more.
    """
    x, y = centers[:, 0], centers[:, 1]
    r = np.minimum(radii, np.min(np.column_stack([x, 1 - x, y, 1 - y]), axis=1))
    d = np.sqrt(np.sum((centers[:, None, :] - centers[None, :, :]) ** 2, axis=-1))
    np.fill_diagonal(d, np.inf)
    for _ in range(100):
        total = r[:, None] + r[None, :]
        bad = total > d
        if not bad.any():
            return r
        factor = np.where(bad, d / np.where(bad, total, 1.0), 1.0).min(axis=1)
        r = r * factor * (1 - 1e-15)
    return None


def construct_packing():
    best_sum, best = -1.0, None
    around = int(round(np.sqrt(N)))
    for rows in range(max(1, around - 3), min(N, around + 3) + 1):
        for shift in (0.0, 0.5):
            centers = layout(rows, shift)
            radii = best_radii(centers)
            if radii is not None and radii.sum() > best_sum:
                best_sum, best = radii.sum(), (centers, radii)
    return best


if __name__ == "__main__":
    centers, radii = construct_packing()
    print(f"{N} circles, sum of radii {radii.sum():.6f}")
