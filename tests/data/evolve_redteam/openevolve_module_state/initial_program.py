"""Eight numbers in [0, 1], as close as possible to the evaluator's hidden ones."""


# EVOLVE-BLOCK-START
def guess():
    return [0.5] * 8


# EVOLVE-BLOCK-END
