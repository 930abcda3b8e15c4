# title: The D11 root system
# tags: baseline, lattice
# abstract: All 220 vectors with two entries +1 or -1 and the rest 0: squared length 2, and no two
#   closer than squared distance 2. The kissing configuration of the D11 lattice.
from itertools import combinations

DIMENSION = 11


def construct_kissing_configuration():
    points = []
    for i, j in combinations(range(DIMENSION), 2):
        for a in (1, -1):
            for b in (1, -1):
                point = [0] * DIMENSION
                point[i], point[j] = a, b
                points.append(point)
    return points
