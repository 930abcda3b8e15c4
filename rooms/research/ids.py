"""Evaluation IDs as agents type them: one (`#12` or `12`), or a list with ranges (`3,5:9`)."""

from __future__ import annotations

import re

ID_TEXT = re.compile(r"#?(\d{1,18})")


def parse_id(text: str | None) -> int | None:
    """One evaluation ID ('12' or '#12'); None when it is not one."""
    match = ID_TEXT.fullmatch((text or "").strip())
    return int(match.group(1)) if match and int(match.group(1)) > 0 else None


def parse_id_list(text: str, cap: int) -> tuple[list[int], bool]:
    """IDs and inclusive ranges a:b joined by commas -> (unique ids in order, capped). ValueError if bad."""
    seen: dict[int, None] = {}
    for token in text.split(","):
        token = token.strip()
        if not token:
            raise ValueError("an empty entry between commas")
        if ":" in token:
            first, _, last = token.partition(":")
            a, b = parse_id(first), parse_id(last)
            if a is None or b is None:
                raise ValueError(f"'{token[:40]}' is not a range of IDs like 3:7")
            if a > b:
                raise ValueError(f"the range {a}:{b} runs backwards")
            for number in range(a, b + 1):
                if number in seen:
                    continue
                if len(seen) >= cap:
                    return list(seen), True
                seen[number] = None
        else:
            single = parse_id(token)
            if single is None:
                raise ValueError(f"'{token[:40]}' is not an evaluation ID")
            if single in seen:
                continue
            if len(seen) >= cap:
                return list(seen), True
            seen[single] = None
    return list(seen), False
