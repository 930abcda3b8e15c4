# title: Ring Pattern Baseline
# tags: baseline, rings
# abstract: A centre circle surrounded by concentric rings of circles; each circle starts at half the
#   distance to its nearest neighbour, grows into the room left by the others and the sides, and a final
#   exact scale-down guarantees validity. A simple, deliberately unoptimised reference point.
import numpy as np

N = 26


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
