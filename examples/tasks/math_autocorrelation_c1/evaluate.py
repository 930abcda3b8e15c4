"""The verifier of the first autocorrelation inequality task: an exact upper bound for C1.

For a nonnegative f supported on [-1/4, 1/4], C1 <= max_t (f*f)(t) / (integral of f)^2. With f a step
function of n equal steps of heights h_0..h_{n-1} (width 1/(2n)), f*f is piecewise linear with its
corners at the steps' joints, where it equals width * c_k, c = the discrete self-convolution of h. So
the bound is 2n * max_k c_k / (sum h)^2, computed here exactly: the heights are scaled to integers
(their common denominator, which cancels) and everything after is integer arithmetic.
"""

from fractions import Fraction

import numpy as np
from exact import integers, plain, rational, short, shown

MAX_STEPS = 1000
MAX_HEIGHT = 10**6


def evaluate(returned, context):
    heights = _heights(returned)
    ints, _ = integers(heights)
    total = sum(ints)
    if total == 0:
        raise ValueError("at least one height must be positive")
    joints = np.convolve(np.array(ints, dtype=object), np.array(ints, dtype=object))
    peak = max(joints)
    bound = Fraction(2 * len(ints) * peak, total * total)
    at = next(k for k, c in enumerate(joints) if c == peak)
    return {
        "score": float(bound),
        "metrics": {"steps": len(ints), "peak_joint": at},
        "details": f"Exact upper bound C1 <= {short(bound)} (= {float(bound):.12f}) from {len(ints)} steps; "
        f"the autoconvolution peaks at joint {at} of 0..{2 * len(ints) - 2}.",
        "certificate": [shown(h) for h in heights],
    }


def _heights(value):
    value = plain(value)
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= MAX_STEPS:
        raise ValueError(f"construct_step_function() must return a list of 1 to {MAX_STEPS} heights")
    heights = [rational(item, f"height {i}", MAX_HEIGHT) for i, item in enumerate(value)]
    negative = next((i for i, h in enumerate(heights) if h < 0), None)
    if negative is not None:
        raise ValueError(f"height {negative} is {float(heights[negative]):.6g}: every height must be >= 0")
    return heights
