"""Untrusted text (agents' and models' words, submitted code's output) made safe for a terminal.

Every command that prints such text goes through `clean` (or the rich wrappers below): escape
sequences could otherwise retitle the window, clear the screen or write the clipboard (OSC 52),
and rich markup inside the text (`[bold red]`) must be shown as written, never interpreted.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich loads only where something is drawn: `station --help` stays quick
    from rich.markdown import Markdown
    from rich.text import Text

_ESCAPE_SEQUENCES = re.compile(
    "\x1b\\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, screen clearing
    "|\x1b\\][^\x07\x1b]*(?:\x07|\x1b\\\\)?"  # OSC: window titles, hyperlinks, clipboard writes
    "|\x1b[PX^_][^\x1b]*(?:\x1b\\\\)?"  # DCS, SOS, PM, APC strings
    "|\x1b[ -/]*[0-~]"  # the remaining two- and three-byte escapes
    "|\x9b[0-?]*[ -/]*[@-~]"  # CSI in its 8-bit form
)
# C0 controls but tab and line feed, DEL, C1 controls, and the bidirectional overrides that make
# text read differently from how it is stored.
_CONTROL_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
MAX_TEXT_CHARS = 250_000  # one shown text at most (the rooms cap a message at 200,000 characters)
MAX_CELL_CHARS = 200


def clean(value: Any, *, limit: int = MAX_TEXT_CHARS) -> str:
    """No escape sequences or control characters (but tabs and line feeds), at most `limit` characters."""
    if value is None:
        return ""
    text = str(value).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL_CHARS.sub("", _ESCAPE_SEQUENCES.sub("", text))
    if len(text) > limit:
        text = text[:limit] + f"\n\n… ({len(text) - limit:,} more characters not shown)"
    return text


def plain(value: Any, style: str = "", *, limit: int = MAX_TEXT_CHARS) -> Text:
    """Untrusted text as a rich Text: printed literally, never parsed as markup."""
    from rich.text import Text

    return Text(clean(value, limit=limit), style=style)


def cell(value: Any, style: str = "") -> Text:
    """A table cell of untrusted text: one line, bounded."""
    from rich.text import Text

    return Text(" ".join(clean(value, limit=MAX_CELL_CHARS).split()), style=style)


def markdown(value: Any, *, limit: int = MAX_TEXT_CHARS) -> Markdown:
    from rich.markdown import Markdown

    # hyperlinks off: a link shows where it points instead of hiding it behind its label
    return Markdown(clean(value, limit=limit), hyperlinks=False)
