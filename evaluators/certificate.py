"""A scored record's certificate: the construction its scorer verified, kept with the record so that
anyone can check the score again later, outside any station (`station verify`).

A certificate is {"sha256": hex, "construction": value}: `value` is plain JSON data (numbers,
strings, lists, dicts with string keys), and the hash is taken over its canonical text (sorted keys,
no spaces, ASCII, no NaN), so the same construction always has the same hash, wherever it is kept.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

MAX_BYTES = 1 << 20  # a record keeps at most 1 MiB of construction; a bigger one is refused


def canonical(construction: Any) -> str:
    """The construction's canonical JSON text. TypeError or ValueError: it is not plain JSON data."""
    return json.dumps(construction, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def make(construction: Any) -> dict[str, Any]:
    """The certificate of a verified construction. TypeError: not plain JSON data (the scorer's
    fault); ValueError: NaN or infinity in it (also the scorer's), or over MAX_BYTES (TooLarge)."""
    text = canonical(construction)
    if len(text) > MAX_BYTES:
        raise TooLarge(
            f"the verified construction is {len(text):,} bytes as canonical JSON, over the {MAX_BYTES:,} bytes "
            "(1 MiB) a record keeps as its certificate"
        )
    return {"sha256": sha256(text), "construction": json.loads(text)}


def opened(certificate: Any) -> Any:
    """The construction a certificate holds, once its SHA-256 is checked; ValueError says what is wrong."""
    if not isinstance(certificate, dict) or set(certificate) != {"sha256", "construction"}:
        raise ValueError('a certificate is a JSON object with exactly the keys "sha256" and "construction"')
    try:
        text = canonical(certificate["construction"])
    except (TypeError, ValueError) as err:
        raise ValueError(f"the certificate's construction is not plain JSON data ({err})") from None
    found, stated = sha256(text), certificate["sha256"]
    if found != stated:
        raise ValueError(
            f"the certificate's SHA-256 does not match its construction: it says {str(stated)[:64]}, "
            f"the construction hashes to {found} (the certificate was altered)"
        )
    return certificate["construction"]


class TooLarge(ValueError):
    """A construction too big to keep with a record."""
