"""Parse an agent's free-text reply into a list of actions.

Rules (engine spec §5.1, with the project's overrides; docs/parser.md says why):

* Line endings are normalised first (``\\r\\n`` and ``\\r`` become ``\\n``); YAML
  reads both as line breaks, so no byte that matters to a YAML value changes.
  Nothing else is rewritten before YAML parsing.
* Thought blocks are ignored: every ```` ```thought ```` fenced block (fence at
  line start, case-insensitive, closed by the next bare ```` ``` ```` line) and
  every ``<think>...</think>`` / ``<thinking>...</thinking>`` span is removed,
  but only outside yaml blocks (a paper may quote them).  An unclosed one runs
  to the end of the text.  Their newlines are kept, so line numbers still refer
  to the reply as written.
* An action is a line ``[spaces/tabs][list marker][`]/execute_action{<content>}[`]``
  where the content has no braces and the optional list marker is one of
  ``- * +`` or a number followed by ``.`` or ``)``, then a space.  Text after
  the closing brace is ignored; an action in the middle of a line is not one.
* A yaml block opens at a ```` ```yaml ```` / ```` ```yml ```` line indented by I
  characters.  It is closed by the first later bare ```` ``` ```` line indented
  by I or less; a deeper fence is content (a code fence inside a ``content: |``
  block scalar).  A fence at I or less is content too when the lines after it
  are indented deeper than I (the block scalar goes on) up to another such
  fence.  Every line of a closed block is content, never an action.  A block
  with no closing fence ends at the first action line indented by I or less.
* The content is trimmed and split at the first whitespace: the first token,
  lower-cased, is the name; the rest (trimmed, original case) is ``args``.
* Parameters: if the text between an action's line and the next action's line
  starts (after blank lines only) with a yaml block, that block is the action's
  YAML.  An unclosed block is repaired: a ```` ``` ```` ending its last line
  closes it.  The block is dedented by its common margin (whitespace-only lines
  keep any spaces beyond it) and must load to a mapping; keys become strings and
  a ``tags`` value is normalised to a list of trimmed strings.  If it does not
  load as written, it is loaded once more with whitespace-only lines emptied
  and stray fences re-indented into the block scalar around them.
* At most ``max_actions`` actions are returned, plus one error entry when more
  were written.  The parser never raises on any ``str``.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

# YAML 1.1's numbers less its base-60 forms (YAML 1.2 dropped them too): an agent's `ticks: 12:45`
# is the range it wrote, not the number 765.
_NUMBER = {
    "tag:yaml.org,2002:int": re.compile(
        r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"
    ),
    "tag:yaml.org,2002:float": re.compile(
        r"^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
}


class _YamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader (libyaml's where present: ~10x faster) with the numbers above."""

    yaml_implicit_resolvers = {
        first: [(tag, _NUMBER.get(tag, pattern)) for tag, pattern in resolvers]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


_YAML_LOADER = _YamlLoader

# Everything below is matched line by line or with simple forward searches,
# so parsing stays linear in the size of the reply (no nested quantifiers).
_THOUGHT_FENCE = re.compile(r"[ \t]*```[ \t]*thought\b", re.I)
_THINK_OPEN = re.compile(r"<(think|thinking)[ \t]*>", re.I)
_THINK_CLOSE = {"think": re.compile(r"</think[ \t]*>", re.I), "thinking": re.compile(r"</thinking[ \t]*>", re.I)}
_FENCE_CLOSE = re.compile(r"[ \t]*```[ \t]*")
_YAML_OPEN = re.compile(r"[ \t]*```[ \t]*ya?ml[ \t]*", re.I)
_ACTION = re.compile(r"[ \t]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)?`?/execute_action\{([^{}]*)\}")

# Bounds on the loaded YAML: aliases can make a tiny document expand
# exponentially (or even refer to itself), which would hang later consumers.
_MAX_YAML_NODES = 50_000
_MAX_YAML_DEPTH = 100

_EMPTY_ACTION_ERROR = "Empty action command: write the action name inside the braces, e.g. /execute_action{goto lobby}."


@dataclass(frozen=True)
class ParsedAction:
    name: str  # lower-cased command, "" when empty/invalid
    args: str | None  # inline arguments, original case, trimmed; None if absent
    params: dict[str, Any] | None  # parsed YAML mapping, None when no (valid) YAML
    yaml_text: str | None  # raw (dedented) YAML block text when a block was attached
    error: str | None  # None when fine; otherwise a human-readable error
    line: int  # 1-based line number of the action in the normalised reply

    def to_json(self) -> dict[str, Any]:
        """name, args, params, error and line as a JSON-serialisable dict."""
        return {
            "name": self.name,
            "args": self.args,
            "params": _json_safe(self.params),
            "error": self.error,
            "line": self.line,
        }


@dataclass(frozen=True)
class _Block:
    end: int  # index of the closing fence, or of the first line after an unclosed block
    closed: bool


def parse_actions(text: str, max_actions: int = 100) -> list[ParsedAction]:
    """Return the actions written in ``text``, in order (see module docstring)."""
    if not isinstance(text, str):
        raise TypeError(f"parse_actions expects str, got {type(text).__name__}")
    max_actions = max(0, max_actions)
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    found, blocks = _scan(lines)

    actions = []
    for pos, (index, content) in enumerate(found[:max_actions]):
        # The segment ends at the next action even if that one is dropped.
        stop = found[pos + 1][0] if pos + 1 < len(found) else len(lines)
        actions.append(_build_action(lines, blocks, index, content, stop))
    if len(found) > max_actions:
        actions.append(
            ParsedAction(
                name="",
                args=None,
                params=None,
                yaml_text=None,
                error=(
                    f"Too many actions in one reply: only the first {max_actions} are run; "
                    f"{len(found) - max_actions} more were ignored."
                ),
                line=found[max_actions][0] + 1,
            )
        )
    return actions


def _scan(lines: list[str]) -> tuple[list[tuple[int, str]], dict[int, _Block]]:
    """Action lines (index, brace content) and yaml blocks (by opening line) of the reply.

    Thought blocks outside yaml blocks are blanked in ``lines`` as they are met.
    """
    found: list[tuple[int, str]] = []
    blocks: dict[int, _Block] = {}
    last_fence = _last_fence_indents(lines)
    index = 0
    while index < len(lines):
        line = lines[index]
        if "`" not in line and "/execute_action{" not in line and "<" not in line:
            index += 1  # cheap skip for prose and blank lines
            continue
        if _THOUGHT_FENCE.match(line):
            index = _blank_thought_fence(lines, index)
            continue
        if "<" in line:
            line = _cut_think_spans(lines, index)
        if _YAML_OPEN.fullmatch(line):
            block = _find_block_end(lines, index, last_fence)
            blocks[index] = block
            index = block.end + 1 if block.closed else block.end
            continue
        if (match := _ACTION.match(line)) is not None:
            found.append((index, match.group(1)))
        index += 1
    return found, blocks


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _is_fence(line: str, most: int) -> bool:
    """A bare ``` line indented by at most `most` characters."""
    return _indent(line) <= most and _FENCE_CLOSE.fullmatch(line) is not None


def _last_fence_indents(lines: list[str]) -> list[int]:
    """For each index i, the smallest indentation of a bare fence at i or later (huge if none).

    It tells in O(1) whether a yaml block opened at i will ever close.
    """
    smallest = [1 << 30] * (len(lines) + 1)
    for i in range(len(lines) - 1, -1, -1):
        here = _indent(lines[i]) if _FENCE_CLOSE.fullmatch(lines[i]) else 1 << 30
        smallest[i] = min(here, smallest[i + 1])
    return smallest


def _find_block_end(lines: list[str], start: int, last_fence: list[int]) -> _Block:
    """Where the yaml block opened at lines[start] ends (see module docstring)."""
    depth = _indent(lines[start])
    i = start + 1
    # The table can only be wrong where a think span was cut out of the text: then the
    # fence it promised is gone and the block is treated as never closed.
    while last_fence[start + 1] <= depth and i < len(lines):
        if _is_fence(lines[i], depth):
            resumes = _scalar_resumes(lines, i, depth)
            if resumes is None:
                return _Block(i, closed=True)
            i = resumes
        else:
            i += 1
    # Never closed: it ends before the first action line it cannot hold as content.
    for i in range(start + 1, len(lines)):
        if _indent(lines[i]) <= depth and _ACTION.match(lines[i]):
            return _Block(i, closed=False)
    return _Block(len(lines), closed=False)


def _scalar_resumes(lines: list[str], fence: int, depth: int) -> int | None:
    """The next fence at `depth` or less when every line between is blank or indented deeper
    (a block scalar that goes on past an unindented code fence); None if the fence closes."""
    saw_content = False
    for i in range(fence + 1, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        if _is_fence(line, depth):
            return i if saw_content else None
        if _indent(line) <= depth or _ACTION.match(line):
            return None
        saw_content = True
    return None


def _blank_thought_fence(lines: list[str], start: int) -> int:
    """Blank a ```thought block (closed by the next bare fence); return the index after it."""
    end = start + 1
    while end < len(lines) and not _FENCE_CLOSE.fullmatch(lines[end]):
        end += 1
    for i in range(start, min(end + 1, len(lines))):
        lines[i] = ""
    return end + 1


def _cut_think_spans(lines: list[str], start: int) -> str:
    """Remove the <think>/<thinking> spans opening on lines[start] (one pass over the line; the
    last may run over later lines, or to the end if unclosed); return what is left of the line."""
    line, kept, pos = lines[start], [], 0
    while (tag := _THINK_OPEN.search(line, pos)) is not None:
        kept.append(line[pos : tag.start()])
        closer = _THINK_CLOSE[tag.group(1).lower()]
        closing = closer.search(line, tag.end())
        if closing is None:
            _cut_to_closer(lines, start + 1, closer)
            pos = len(line)
            break
        pos = closing.end()
    kept.append(line[pos:])
    lines[start] = "".join(kept)
    return lines[start]


def _cut_to_closer(lines: list[str], start: int, closer: re.Pattern[str]) -> None:
    """Blank lines from `start` up to the closer; the rest of the closer's line stays."""
    for i in range(start, len(lines)):
        closing = closer.search(lines[i])
        if closing is not None:
            lines[i] = lines[i][closing.end() :]
            return
        lines[i] = ""


def _build_action(lines: list[str], blocks: dict[int, _Block], index: int, content: str, stop: int) -> ParsedAction:
    parts = content.split(None, 1)
    name = parts[0].lower() if parts else ""
    args = parts[1].strip() if len(parts) > 1 else None
    yaml_text = _attached_yaml(lines, blocks, index + 1, stop)
    params, error = _parse_yaml(yaml_text) if yaml_text is not None else (None, None)
    if not name:
        error = _EMPTY_ACTION_ERROR
    return ParsedAction(name, args, params, yaml_text, error, index + 1)


def _attached_yaml(lines: list[str], blocks: dict[int, _Block], start: int, stop: int) -> str | None:
    """The dedented yaml block opening the segment lines[start:stop], if any."""
    while start < stop and not lines[start].strip():
        start += 1
    block = blocks.get(start)
    if start >= stop or block is None:
        return None
    body = lines[start + 1 : min(block.end, stop)]
    if not block.closed:
        # Repair: a fence ending the last line closes the block.
        while body and not body[-1].strip():
            body.pop()
        if body and body[-1].rstrip().endswith("```"):
            body[-1] = body[-1].rstrip()[:-3]
    return _dedent(body)


def _dedent(body: list[str]) -> str:
    """Remove the margin common to the non-blank lines; whitespace-only lines keep their extra
    spaces (textwrap.dedent would empty them, changing block scalars that keep them)."""
    margins = [line[: _indent(line)] for line in body if line.strip()]
    margin = margins[0] if margins else ""
    for other in margins[1:]:
        while not other.startswith(margin):
            margin = margin[:-1]
    cut = len(margin)
    return "\n".join(line[cut:] if line.startswith(margin) else "" for line in body)


def _lenient(yaml_text: str) -> str:
    """A second reading of a block that failed: whitespace-only lines emptied, and a fence line
    left of the lines around it moved in to them (a code fence the writer forgot to indent)."""
    lines = [line if line.strip() else "" for line in yaml_text.split("\n")]
    filled = [i for i, line in enumerate(lines) if line]
    for before, here, after in zip(filled, filled[1:], filled[2:]):
        line = lines[here]
        if line.lstrip().startswith("```"):
            inner = min(_indent(lines[before]), _indent(lines[after]))
            if _indent(line) < inner:
                lines[here] = lines[after][:inner] + line.lstrip()
    return "\n".join(lines)


def _parse_yaml(yaml_text: str) -> tuple[dict[str, Any] | None, str | None]:
    """Load a block into params, or return (None, error); the block as written comes first."""
    params, error = _load_params(yaml_text)
    if error is not None and (lenient := _lenient(yaml_text)) != yaml_text:
        second, second_error = _load_params(lenient)
        if second_error is None:
            return second, None
    return params, error


def _load_params(yaml_text: str) -> tuple[dict[str, Any] | None, str | None]:
    if not yaml_text.strip():
        return None, "YAML block is empty"
    try:
        # A final newline keeps `|` block values the same wherever they sit.
        data = yaml.load(yaml_text + "\n", Loader=_YAML_LOADER)
    except yaml.MarkedYAMLError as exc:
        return None, _describe_yaml_error(exc)
    except Exception as exc:  # noqa: BLE001 - reader/encoding/recursion errors: still never raise
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return None, f"YAML error: {reason}"
    if data is None:  # only comments
        return None, "YAML block is empty"
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single value ({type(data).__name__})"
        return None, f"YAML error: parameters must be a mapping of 'key: value' lines, got {kind}"
    too_big = _size_problem(data)
    if too_big:
        return None, f"YAML error: {too_big}"
    params = {str(key): _str_keys(value) for key, value in data.items()}
    if "tags" in params:
        params["tags"] = _normalise_tags(params["tags"])
    return params, None


def _describe_yaml_error(exc: yaml.MarkedYAMLError) -> str:
    reason = exc.problem or exc.context or "invalid YAML"
    if reason == "mapping values are not allowed here":
        reason += " (quote values that contain ': ')"
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1} of the block" if mark is not None else ""
    return f"YAML error{where}: {reason}"


def _size_problem(data: Any) -> str | None:
    """Reject documents whose aliases expand too far (iterative: no recursion limit)."""
    stack = [(data, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > _MAX_YAML_NODES:
            return f"document too large (more than {_MAX_YAML_NODES} values once aliases are expanded)"
        if depth > _MAX_YAML_DEPTH:
            return f"nesting deeper than {_MAX_YAML_DEPTH} levels"
        if isinstance(node, dict):
            stack.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, (list, tuple, set, frozenset)):
            stack.extend((value, depth + 1) for value in node)
    return None


def _str_keys(value: Any) -> Any:
    """Copy nested mappings with string keys (depth already bounded)."""
    if isinstance(value, dict):
        return {str(key): _str_keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_str_keys(item) for item in value]
    return value


def _normalise_tags(value: Any) -> Any:
    """A comma string or a list of scalars -> list of trimmed tags; other shapes are left as given
    so the action's parameter check refuses them with a clear error."""
    if value is None:
        return []
    if isinstance(value, str):
        return [tag.strip() for tag in value.split(",") if tag.strip()]
    if isinstance(value, (int, float)):
        return [str(value)]
    if isinstance(value, list) and all(isinstance(item, (str, int, float)) or item is None for item in value):
        tags = (item if isinstance(item, str) else str(item) for item in value if item is not None)
        return [tag.strip() for tag in tags if tag.strip()]
    return value


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # strict JSON has no NaN
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return [_json_safe(item) for item in sorted(value, key=repr)]  # stable order
    if isinstance(value, (datetime.date, datetime.time)):  # includes datetime
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)
