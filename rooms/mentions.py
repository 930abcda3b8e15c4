"""@mentions in forum posts: `@Spiro II`, `@Spiro_II`, `@"Spiro II"`, `@bob`, any generation.

Candidates are matched against the names of active agents directly, longest name first, so
`@Spiro XII` is Spiro XII (not Spiro) and e-mail addresses never produce junk.
"""

from __future__ import annotations


def mentioned_names(text: str, names: list[str]) -> list[str]:
    """Names mentioned in `text`, in order of first mention, each once."""
    forms = sorted(
        {(form, name) for name in names for form in (name.lower(), name.lower().replace(" ", "_"))},
        key=lambda pair: -len(pair[0]),
    )
    lowered, found = text.lower(), []
    start = lowered.find("@")
    while start >= 0:
        if start == 0 or not (text[start - 1].isalnum() or text[start - 1] in "_."):
            at = start + 1
            quoted = lowered.startswith('"', at)
            at += quoted
            for form, name in forms:
                end = at + len(form)
                if lowered.startswith(form, at) and _ends(lowered, end, quoted):
                    if name not in found:
                        found.append(name)
                    break
        start = lowered.find("@", start + 1)
    return found


def _ends(text: str, end: int, quoted: bool) -> bool:
    if quoted:
        return text.startswith('"', end)
    return end == len(text) or not (text[end].isalnum() or text[end] in "_-")
