# title: Flat density with a raised middle
# tags: baseline, step-function
# abstract: Sixteen steps, flat with a raised centre; the verifier scales it to integral 1. Each height
#   is a separate number to change (no scaled height may exceed 1).

HEIGHTS = [0.5, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.8, 0.7, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5]


def construct_density():
    return list(HEIGHTS)
