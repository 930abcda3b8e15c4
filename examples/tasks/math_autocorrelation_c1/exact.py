"""Exact numbers for the verifier (each mathematics-pack folder keeps its own copy, so that a folder
stands alone). A number arrives as an int, a float (taken at its exact binary value) or a string
"p/q" of decimal digits, and becomes a fractions.Fraction; nothing is ever rounded."""

import math
import re
from fractions import Fraction

RATIONAL = re.compile(r"-?[0-9]{1,400}(?:/[0-9]{1,400})?")  # any float's exact value fits


def plain(value):
    """NumPy arrays and scalars as Python lists and numbers (what a submission may return)."""
    return value.tolist() if hasattr(value, "tolist") else value


def rational(value, where, limit):
    """`value` as an exact Fraction within [-limit, limit]; ValueError naming `where` otherwise."""
    value = plain(value)
    if isinstance(value, bool):
        raise ValueError(f"{where} is a boolean, not a number")
    if isinstance(value, int):
        number = Fraction(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} is not finite ({value!r})")
        number = Fraction(value)
    elif isinstance(value, str) and RATIONAL.fullmatch(value) and not re.fullmatch(r".*/0+", value):
        number = Fraction(value)
    else:
        raise ValueError(f"{where} must be an int, a float or a string 'p/q' of digits (got {str(value)[:40]!r})")
    if abs(number) > limit:
        raise ValueError(f"{where} is {float(number):.6g}, outside [-{limit:g}, {limit:g}]")
    return number


def shown(number):
    """An exact rational as JSON: an int, or the string 'p/q' (what a certificate keeps)."""
    return number.numerator if number.denominator == 1 else f"{number.numerator}/{number.denominator}"


def integers(numbers, max_bits=4096):
    """The numbers scaled by their common denominator: a list of ints and that denominator."""
    scale = math.lcm(*(n.denominator for n in numbers))
    if scale.bit_length() > max_bits:
        raise ValueError("the numbers' common denominator is too large; use fewer distinct denominators")
    return [int(n * scale) for n in numbers], scale


def short(number):
    """An exact rational for a message: whole when short, else its ends and its length."""
    text = str(shown(number))
    return text if len(text) <= 200 else f"{text[:90]}...{text[-90:]} (exact, {len(text)} characters)"
