"""Parse an agent's free-text reply into a list of actions.

Rules (engine spec §5.1, with the project's overrides):

* Line endings are normalised first (``\\r\\n`` and ``\\r`` become ``\\n``).
* Thought blocks are ignored: every ```` ```thought ```` fenced block (fence at
  line start, case-insensitive, closed by the next bare ```` ``` ```` line) and
  every ``<think>...</think>`` / ``<thinking>...</thinking>`` span is removed.
  An unclosed one runs to the end of the text.  Newlines inside them are kept,
  so line numbers still refer to the reply as written.
* An action is a line ``[spaces/tabs][`]/execute_action{<content>}[`]`` where
  the content has no braces.  Text after the closing brace is ignored; an
  action in the middle of a line is not an action.
* Lines inside any ```` ```yaml ```` / ```` ```yml ```` fenced block (attached to an
  action or not, closed by the next bare ```` ``` ```` line or running to the end
  of the text) are never actions, so YAML values may quote action syntax.
* The content is trimmed and split at the first whitespace: the first token,
  lower-cased, is the name; the rest (trimmed, original case) is ``args``.
* Parameters: if the text between an action's line and the next action's line
  starts (after blank lines only) with a yaml fence, the block up to the first
  bare closing fence is the action's YAML.  An unclosed block runs to the end of
  the segment; a trailing ```` ``` ```` glued to its last line closes it.  The
  block is dedented and must load to a mapping; keys become strings and a
  ``tags`` value is normalised to a list of trimmed strings.
* At most ``max_actions`` actions are returned, plus one error entry when more
  were written.  The parser never raises on any ``str``.
"""

from __future__ import annotations

import datetime
import math
import re
import textwrap
from dataclasses import dataclass
from typing import Any

import yaml

# libyaml is ~10x faster than the pure-Python loader; both are "safe".
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Everything below is matched line by line or with simple forward searches,
# so parsing stays linear in the size of the reply (no nested quantifiers).
_THOUGHT_OPEN = re.compile(r"^[ \t]*```[ \t]*thought\b[^\n]*|<(think|thinking)[ \t]*>", re.I | re.M)
_THINK_CLOSE = {
    "think": re.compile(r"</think[ \t]*>", re.I),
    "thinking": re.compile(r"</thinking[ \t]*>", re.I),
}
_FENCE_CLOSE_IN_TEXT = re.compile(r"^[ \t]*```[ \t]*$", re.M)
_FENCE_CLOSE = re.compile(r"[ \t]*```[ \t]*")
_YAML_OPEN = re.compile(r"[ \t]*```[ \t]*ya?ml[ \t]*", re.I)
_ACTION = re.compile(r"[ \t]*`?/execute_action\{([^{}]*)\}")

# Bounds on the loaded YAML: aliases can make a tiny document expand
# exponentially (or even refer to itself), which would hang later consumers.
_MAX_YAML_NODES = 50_000
_MAX_YAML_DEPTH = 100

_EMPTY_ACTION_ERROR = (
    "Empty action command: write the action name inside the braces, "
    "e.g. /execute_action{goto lobby}."
)


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


def parse_actions(text: str, max_actions: int = 100) -> list[ParsedAction]:
    """Return the actions written in ``text``, in order (see module docstring)."""
    if not isinstance(text, str):
        raise TypeError(f"parse_actions expects str, got {type(text).__name__}")
    max_actions = max(0, max_actions)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = _strip_thoughts(text).split("\n")
    found = _find_action_lines(lines)

    actions = []
    for pos, (index, content) in enumerate(found[:max_actions]):
        # The segment ends at the next action even if that one is dropped.
        stop = found[pos + 1][0] if pos + 1 < len(found) else len(lines)
        actions.append(_build_action(lines, index, content, stop))
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


def _strip_thoughts(text: str) -> str:
    """Remove thought blocks, keeping their newlines so line numbers stay put."""
    out = []
    pos = 0
    while (opening := _THOUGHT_OPEN.search(text, pos)) is not None:
        tag = opening.group(1)
        closer = _THINK_CLOSE[tag.lower()] if tag else _FENCE_CLOSE_IN_TEXT
        closing = closer.search(text, opening.end())
        end = closing.end() if closing else len(text)
        out.append(text[pos : opening.start()])
        out.append("\n" * text.count("\n", opening.start(), end))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _find_action_lines(lines: list[str]) -> list[tuple[int, str]]:
    """(line index, brace content) of every action line outside yaml blocks."""
    found = []
    in_yaml = False
    for index, line in enumerate(lines):
        if "`" not in line and "/execute_action{" not in line:
            continue  # cheap skip for prose and blank lines: neither fence nor action
        if in_yaml:
            in_yaml = not _FENCE_CLOSE.fullmatch(line)
        elif _YAML_OPEN.fullmatch(line):
            in_yaml = True
        elif (match := _ACTION.match(line)) is not None:
            found.append((index, match.group(1)))
    return found


def _build_action(lines: list[str], index: int, content: str, stop: int) -> ParsedAction:
    parts = content.split(None, 1)
    name = parts[0].lower() if parts else ""
    args = parts[1].strip() if len(parts) > 1 else None
    yaml_text = _attached_yaml(lines, index + 1, stop)
    params, error = _parse_yaml(yaml_text) if yaml_text is not None else (None, None)
    if not name:
        error = _EMPTY_ACTION_ERROR
    return ParsedAction(name, args, params, yaml_text, error, index + 1)


def _attached_yaml(lines: list[str], start: int, stop: int) -> str | None:
    """The dedented yaml block opening the segment lines[start:stop], if any."""
    while start < stop and not lines[start].strip():
        start += 1
    if start >= stop or not _YAML_OPEN.fullmatch(lines[start]):
        return None
    body_start = start + 1
    for end in range(body_start, stop):
        if _FENCE_CLOSE.fullmatch(lines[end]):
            body = lines[body_start:end]
            break
    else:
        # Unclosed: repair by accepting a fence glued to the last line.
        body = lines[body_start:stop]
        while body and not body[-1].strip():
            body.pop()
        if body and body[-1].rstrip().endswith("```"):
            body[-1] = body[-1].rstrip()[:-3]
    return textwrap.dedent("\n".join(body))


def _parse_yaml(yaml_text: str) -> tuple[dict[str, Any] | None, str | None]:
    """Load a block into params, or return (None, error)."""
    if not yaml_text.strip():
        return None, "YAML block is empty"
    try:
        # A final newline keeps `|` block values the same wherever they sit.
        data = yaml.load(yaml_text + "\n", Loader=_YAML_LOADER)
    except yaml.MarkedYAMLError as exc:
        return None, _describe_yaml_error(exc)
    except Exception as exc:  # reader/encoding/recursion errors: still never raise
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
