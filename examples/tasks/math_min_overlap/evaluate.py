"""The verifier of Erdős's minimum overlap task: an exact upper bound for the constant M.

Split {1, ..., 2n} into A and B of n elements each; M(n) is the least possible value, over splits, of
the largest number of pairs (a, b) with a - b = k, over all k; M = lim M(n)/n. A measurable f on
[0, 2] with 0 <= f <= 1 and integral 1 (A's density; 1 - f is B's) gives the upper bound
    M <= max_k  integral of f(x) (1 - f(x + k)) over the x with x and x + k in [0, 2].
For a step function of n equal steps (width 2/n) that function of k is piecewise linear with its
corners at multiples of the width, so its maximum is at one of them. The given heights are scaled
exactly to integral 1, and every scaled height must be at most 1. Exact integer arithmetic throughout.
"""

from fractions import Fraction

import numpy as np
from exact import integers, plain, rational, short, shown

MAX_STEPS = 1000
MAX_HEIGHT = 10**6


def evaluate(returned, context):
    heights = _heights(returned)
    n = len(heights)
    ints, _ = integers(heights)
    total = sum(ints)
    if total == 0:
        raise ValueError("at least one height must be positive")
    # scaled heights f_i = a_i * n / (2 * total): each must be <= 1
    over = next((i for i, a in enumerate(ints) if a * n > 2 * total), None)
    if over is not None:
        scaled = Fraction(ints[over] * n, 2 * total)
        raise ValueError(
            f"height {over} is {float(scaled):.9g} times the unit once the function is scaled to integral 1 "
            "on [0, 2]: every scaled height must be <= 1 (spread the mass over more steps)"
        )
    a = np.array(ints, dtype=object)
    corr = np.convolve(a, a[::-1])  # corr[j + n - 1] = sum_i a_i a_(i+j), j = -(n-1)..n-1
    prefix = [0]
    for value in ints:
        prefix.append(prefix[-1] + value)
    # at the shift j*width the overlap is (2 * total * T_j - n * C_j) / (2 * total^2),
    # with T_j the sum of the a_i whose shifted step i + j still lies in [0, 2]
    best, at = None, 0
    for j in range(-(n - 1), n):
        inside = prefix[min(n, n - j)] - prefix[max(0, -j)]
        value = 2 * total * inside - n * corr[j + n - 1]
        if best is None or value > best:
            best, at = value, j
    bound = Fraction(best, 2 * total * total)
    return {
        "score": float(bound),
        "metrics": {"steps": n, "worst_shift_steps": at},
        "details": f"Exact upper bound M <= {short(bound)} (= {float(bound):.12f}) from {n} steps; the largest "
        f"overlap is at the shift of {at} steps.",
        "certificate": [shown(h) for h in heights],
    }


def _heights(value):
    value = plain(value)
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= MAX_STEPS:
        raise ValueError(f"construct_density() must return a list of 1 to {MAX_STEPS} heights")
    heights = [rational(item, f"height {i}", MAX_HEIGHT) for i, item in enumerate(value)]
    negative = next((i for i, h in enumerate(heights) if h < 0), None)
    if negative is not None:
        raise ValueError(f"height {negative} is {float(heights[negative]):.6g}: every height must be >= 0")
    return heights
