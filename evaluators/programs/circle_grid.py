"""Circle packing, first attempt: equal circles on a square grid.

Every circle gets the same radius, half the grid spacing. Simple and always valid, but it
wastes the space between rows; the other programs improve on it.
"""

import numpy as np

N = 26  # number of circles


def construct_packing():
    cols = int(np.ceil(np.sqrt(N)))
    rows = int(np.ceil(N / cols))
    # A hair below half the spacing: float rounding of the centres must never make neighbours overlap.
    r = 0.5 / max(rows, cols) * (1 - 1e-12)
    centers = np.zeros((N, 2))
    for k in range(N):  # row by row, each circle in the middle of its cell
        centers[k] = ((2 * (k % cols) + 1) / (2 * cols), (2 * (k // cols) + 1) / (2 * rows))
    return centers, np.full(N, r)


if __name__ == "__main__":
    centers, radii = construct_packing()
    print(f"{N} circles, sum of radii {radii.sum():.6f}")
