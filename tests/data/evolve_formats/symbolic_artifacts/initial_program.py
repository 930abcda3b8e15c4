# EVOLVE-BLOCK-START
"""Fit y = f(x) to the points the evaluator holds; start with a straight line."""


def predict(x):
    return 2.0 * x


# EVOLVE-BLOCK-END
