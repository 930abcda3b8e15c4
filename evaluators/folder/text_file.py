"""Reading one text file of a task folder, with the one-line errors a folder's check reports."""

from __future__ import annotations

from pathlib import Path


def read_text(file: Path, limit: int, error: type[ValueError]) -> str:
    """`file`'s UTF-8 text, at most `limit` characters; anything else raises `error` naming the file."""
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise error(f"{file} is not UTF-8 text") from None
    except OSError as err:
        raise error(f"cannot read {file}: {err.strerror}") from None
    if len(text) > limit:
        raise error(f"{file} is {len(text):,} characters; at most {limit:,} are allowed")
    return text
