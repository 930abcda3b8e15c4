"""The id grammar agents type in capsule rooms: `3`, `3-2`, `1:5`, `3-1:3-4`, comma lists.

A malformed *range* aborts the whole command (nothing runs); a malformed single item only
produces an "invalid ID" line. Expanded ranges are bounded so no action does unbounded work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CAP = re.compile(r"\d+")
MSG = re.compile(r"(\d+)-(\d+)")


class IdError(ValueError):
    """The whole command is refused; the message says why."""


@dataclass(frozen=True)
class Target:
    number: int
    k: int | None = None  # None: the whole capsule

    def __str__(self) -> str:
        return f"{self.number}" if self.k is None else f"{self.number}-{self.k}"


def parse_ids(text: str | None, *, limit: int, messages: bool = True, ranges: bool = True) -> list[Target | str]:
    """Targets in order (duplicates dropped); a str entry is an invalid item to report."""
    items = [part.strip() for part in (text or "").split(",") if part.strip()]
    if not items:
        raise IdError("no ID given")
    out: list[Target | str] = []
    for item in items:
        if ":" in item:
            if not ranges:
                raise IdError(f"'{item}': ranges are not accepted here; list numbers separated by commas")
            expanded = _expand(item, limit, messages)
            out.extend(t for t in expanded if t not in out)
        else:
            target = _single(item)
            if target is None:
                out.append(item)
            elif target.k is not None and not messages:
                raise IdError(f"'{item}' is a message ID; only capsule numbers are accepted here")
            elif target not in out:
                out.append(target)
        if len(out) > limit:
            raise IdError(f"that names more than {limit} items; ask for at most {limit} at a time")
    return out


def parse_single(text: str | None) -> Target:
    target = _single((text or "").strip())
    if target is None:
        raise IdError("give exactly one capsule number (e.g. 3) or message ID (e.g. 3-2)")
    return target


def _single(item: str) -> Target | None:
    if CAP.fullmatch(item):
        return Target(int(item))
    m = MSG.fullmatch(item)
    if m:
        return Target(int(m.group(1)), int(m.group(2)))
    return None


def _expand(item: str, limit: int, messages: bool) -> list[Target]:
    parts = [p.strip() for p in item.split(":")]
    if len(parts) != 2 or not all(parts):
        raise IdError(f"'{item}': a range is written a:b (e.g. 1:5 or 3-1:3-4)")
    start, end = _single(parts[0]), _single(parts[1])
    if start is None or end is None:
        raise IdError(f"'{item}': both ends of a range must be IDs like 3 or 3-2")
    if (start.k is None) != (end.k is None):
        raise IdError(f"'{item}': a range joins two capsules or two messages, not one of each")
    if start.k is None:
        a, b = start.number, end.number
        make = Target
    else:
        if not messages:
            raise IdError(f"'{item}' is a message range; only capsule numbers are accepted here")
        if start.number != end.number:
            raise IdError(f"'{item}': a message range stays within one capsule (e.g. 3-1:3-4)")
        a, b = start.k, end.k  # type: ignore[assignment]
        number = start.number

        def make(k: int) -> Target:  # type: ignore[misc]
            return Target(number, k)

    if a > b:
        raise IdError(f"'{item}': the range starts after it ends")
    if b - a + 1 > limit:
        raise IdError(f"'{item}' names {b - a + 1} items; ask for at most {limit} at a time")
    return [make(i) for i in range(a, b + 1)]
