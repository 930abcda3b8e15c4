# title: Constant step function
# tags: baseline, constant
# abstract: Twelve equal steps: the bound 2, the trivial value. Each height is a separate number to
#   change; lowering the middle steps against the edges is where the improvement lies.

HEIGHTS = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


def construct_step_function():
    return list(HEIGHTS)
