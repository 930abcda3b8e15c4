"""What a submission's text must not hold because readers and Python would see different code.

Python breaks lines only at \\n, \\r\\n and \\r; str.splitlines(), editors and browsers also break
at U+000B, U+000C, U+001C-U+001E, U+0085, U+2028 and U+2029. Code holding one of them shows
lines that Python reads as part of the line before (a comment, a string): a frame check, a
reviewer or the debugger would read code that never runs. A coding declaration other than UTF-8
does the same (unicode_escape turns "\\u000a" inside a comment into a line that runs).
"""

from __future__ import annotations

import re
import tokenize
import unicodedata
from io import BytesIO

UNHONOURED_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
PYTHON_BREAKS = re.compile(r"\r\n|\r|\n")
UTF8_NAMES = ("utf-8", "utf-8-sig")


def unhonoured_line_break(code: str) -> str | None:
    """Why `code` is refused (one line), or None: a line break Python does not honour, named with
    its line as Python counts lines, or a coding declaration other than UTF-8."""
    found = UNHONOURED_BREAKS.search(code)
    if found is not None:
        char = found.group()
        line = len(PYTHON_BREAKS.findall(code, 0, found.start())) + 1
        return (
            f"line {line} holds U+{ord(char):04X} ({unicodedata.name(char, 'a control character')}), a line break "
            "for some readers that Python does not honour; remove it (inside a string, write it as an escape "
            f"such as '\\u{ord(char):04x}')"
        )
    return _coding_problem(code)


def _coding_problem(code: str) -> str | None:
    head = "\n".join(PYTHON_BREAKS.split(code, maxsplit=2)[:2]) + "\n"  # a declaration counts on line 1 or 2
    try:
        encoding, _ = tokenize.detect_encoding(BytesIO(head.encode("utf-8", "replace")).readline)
    except SyntaxError as err:  # an unknown codec, or one Python refuses
        return f"the coding declaration is not one Python accepts: {err.msg}"
    if encoding not in UTF8_NAMES:
        return (
            f"the code declares the source coding {encoding!r}: Python would then read other code than the text "
            "shown; remove the coding declaration (the code is UTF-8)"
        )
    return None
