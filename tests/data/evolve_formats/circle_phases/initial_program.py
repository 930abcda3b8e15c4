# EVOLVE-BLOCK-START
"""Place circles in the unit square; the evaluator sums their radii."""


def construct_packing():
    """Four equal circles on a 2 x 2 grid."""
    centers = [(0.25, 0.25), (0.75, 0.25), (0.25, 0.75), (0.75, 0.75)]
    radii = [0.2, 0.2, 0.2, 0.2]
    return centers, radii


# EVOLVE-BLOCK-END


def run_packing():
    centers, radii = construct_packing()
    return centers, radii, sum(radii)
