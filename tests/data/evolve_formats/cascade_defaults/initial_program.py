# EVOLVE-BLOCK-START
"""Estimate pi as well as you can."""


def estimate_pi():
    return 3.0


# EVOLVE-BLOCK-END
