"""Spread n points on the unit circle so that the closest two are as far apart as possible."""

import math


# EVOLVE-BLOCK-START
def spread(n):
    """Angles of n points: evenly over half the circle."""
    return [math.pi * i / n for i in range(n)]


# EVOLVE-BLOCK-END


def run_experiment(n, seed):
    angles = [float(a) for a in spread(n)]
    return {"n": n, "seed": seed, "angles": angles}
