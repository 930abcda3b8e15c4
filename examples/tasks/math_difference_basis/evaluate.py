"""The verifier of the difference-basis task: an exact upper bound for the constant of interval
difference bases.

A set B of integers is a difference basis for [1, n] when every k = 1..n is a difference b - b' of two
of its elements. The least size of such a basis, D(n), satisfies D(n)^2 / n -> C; any basis gives the
finite value |B|^2 / n. Checked here on the integers themselves: every difference is computed.
"""

from fractions import Fraction

import numpy as np

MAX_N = 2_000_000
MAX_SIZE = 4000
MAX_ELEMENT = 10**12  # differences stay far inside int64


def evaluate(returned, context):
    n, basis = _read(returned)
    values = np.array(basis, dtype=np.int64)
    covered = np.zeros(n + 1, dtype=bool)
    for b in values:  # one row of differences at a time: |B| arrays of |B| numbers
        d = b - values
        covered[d[(d >= 1) & (d <= n)]] = True
    missing = np.flatnonzero(~covered[1:]) + 1
    if missing.size:
        raise ValueError(
            f"the set is not a difference basis for [1, {n}]: {missing.size} of the numbers are no difference of "
            f"two elements, the first of them {int(missing[0])}"
        )
    ratio = Fraction(len(basis) ** 2, n)
    return {
        "score": float(ratio),
        "metrics": {"n": n, "size": len(basis)},
        "details": f"Valid difference basis of {len(basis)} integers for [1, {n}]: |B|^2/n = {ratio.numerator}/"
        f"{ratio.denominator} = {float(ratio):.9f}.",
        "certificate": {"n": n, "basis": sorted(basis)},
    }


def _read(value):
    if not isinstance(value, dict) or set(value) != {"n", "basis"}:
        raise ValueError('construct_difference_basis() must return a dict {"n": int, "basis": [int, ...]}')
    n = _integer(value["n"], "n")
    if not 1 <= n <= MAX_N:
        raise ValueError(f"n is {n}: it must be between 1 and {MAX_N:,}")
    items = value["basis"].tolist() if hasattr(value["basis"], "tolist") else value["basis"]
    if not isinstance(items, (list, tuple)) or not 2 <= len(items) <= MAX_SIZE:
        raise ValueError(f"basis must be a list of 2 to {MAX_SIZE} integers")
    basis = [_integer(item, f"basis[{i}]") for i, item in enumerate(items)]
    if any(abs(b) > MAX_ELEMENT for b in basis):
        raise ValueError(f"every element of the basis must lie in [-{MAX_ELEMENT:g}, {MAX_ELEMENT:g}]")
    if len(set(basis)) != len(basis):
        raise ValueError("the basis holds an element twice: its elements must be distinct")
    return n, basis


def _integer(value, where):
    value = value.tolist() if hasattr(value, "tolist") else value  # a NumPy integer
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} must be an integer (got {type(value).__name__})")
    if abs(value) > 10**15:
        raise ValueError(f"{where} is too large")
    return value
