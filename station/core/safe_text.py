"""Text that SQLite, the providers' JSON and every page can hold, whatever bytes arrived.

Python strings may carry lone surrogates: from a model reply or a replay file ("\\ud800"), from a
file name that is not UTF-8 (os.listdir gives "\\udcff"), from JSON a sandboxed run wrote. SQLite
and the HTTP clients refuse them with an exception, which used to stop the station for good.
Everything that enters the store or a prompt passes through `valid()`: valid pairs become the
character they encode, anything else becomes U+FFFD, shown as such.
"""

from __future__ import annotations

from typing import Any


def valid(text: str) -> str:
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:  # UTF-16 joins valid surrogate pairs; a lone one is replaced
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def valid_params(params: Any) -> Any:
    """SQL parameters (a sequence or a mapping) with every string made valid."""
    if isinstance(params, dict):
        return {k: valid(v) if isinstance(v, str) else v for k, v in params.items()}
    return tuple(valid(p) if isinstance(p, str) else p for p in params)
