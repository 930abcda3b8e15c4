"""Loads the texts agents read from codex/: messages, room help, codex modules, tests, tips.

A station picks a set (`codex.set`, e.g. `research` or `open`); a file in the set overrides the
shared file of the same name, and `codex.texts` in the config overrides both.  Texts are
`string.Template`s (`${name}` placeholders), so the braces of `/execute_action{...}` need no
escaping, and a missing value is an error rather than a silently printed placeholder.

With `prompt.style: compact`, help is looked up under `help/compact/` first (in the set, then
shared), so a room can have a short first-visit help for small models; rooms without one keep
their usual help.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

import yaml

CODEX_ROOT = Path(__file__).resolve().parents[2] / "codex"
MODULE_HEADING = re.compile(r"^## Module (\d+): (.+?)\s*$", re.MULTILINE)
RESERVE_CAP = 10_000  # the token reserve advised to agents with large budgets
RESERVE_SHARE = 4  # with smaller limits: a quarter of the limit (so 40,000 and more keep the cap)


def token_reserve(limit: int) -> int:
    """Tokens an agent should keep free to stay safely (room for a few more turns and a graceful
    exit): 10,000 for large budgets, a quarter of the limit for small ones (an 8k model)."""
    return max(1, min(RESERVE_CAP, limit // RESERVE_SHARE))


def token_amount(n: int) -> str:
    """A rounded token count as advice reads it: 10k, 8k, 1.8k, 700."""
    if n >= 10_000:
        return f"{n // 1000}k"
    if n >= 1000:
        return f"{n / 1000:.1f}".rstrip("0").rstrip(".") + "k"
    return str(round(n, -2)) if n >= 100 else str(n)


class TextsError(ValueError):
    pass


@dataclass(frozen=True)
class CodexModule:
    id: str
    title: str
    text: str

    @property
    def word_count(self) -> int:
        return len(self.text.split())


@dataclass(frozen=True)
class TestDefinition:
    id: str
    title: str
    goal: str
    question: str
    pass_criteria: str
    key_terms: tuple[tuple[str, ...], ...]


class Texts:
    def __init__(
        self, set_name: str, overrides: dict[str, str] | None = None, root: Path = CODEX_ROOT, style: str = "full"
    ) -> None:
        set_dir = Path(set_name) if ("/" in set_name or set_name.startswith(".")) else root / "sets" / set_name
        if not set_dir.is_dir():
            known = sorted(p.name for p in (root / "sets").iterdir()) if (root / "sets").is_dir() else []
            raise TextsError(f"codex set {set_name!r} not found (known sets: {', '.join(known)})")
        self.root, self.set_dir, self.style = root, set_dir, style
        self.messages = _load_messages(root)
        if (set_dir / "messages.yaml").exists():
            self.messages.update(_load_yaml(set_dir / "messages.yaml") or {})
        self.overrides = dict(overrides or {})
        unknown = [k for k in self.overrides if k not in self.messages and not k.endswith("_help")]
        if unknown:
            raise TextsError(f"codex.texts: unknown text names {unknown}")
        self.modules = _split_codex(set_dir / "codex.md")
        self.tests = _load_tests(set_dir / "tests.yaml")
        tips = set_dir / "tips.yaml"
        self.tips: list[str] = list(_load_yaml(tips) or []) if tips.exists() else []

    def render(self, text_name: str, /, **values: Any) -> str:
        template = self.overrides.get(text_name) or self.messages.get(text_name)
        if template is None:
            raise TextsError(f"no text named {text_name!r}")
        return fill(template, text_name, values)

    def help(self, short: str, **values: Any) -> str:
        override = self.overrides.get(f"{short}_help")
        if override is not None:
            return fill(override, f"{short}_help", values)
        places = [self.set_dir / "help", self.root / "help"]
        if self.style == "compact":
            places = [places[0] / "compact", places[1] / "compact", *places]
        for path in (place / f"{short}.md" for place in places):
            if path.exists():
                return fill(path.read_text(encoding="utf-8"), path.name, values).strip()
        return ""


def fill(template: str, name: str, values: dict[str, Any]) -> str:
    """`template` with its $placeholders filled from `values`; a clear error names the text."""
    try:
        return Template(template).substitute(values).strip()
    except KeyError as err:
        raise TextsError(f"text {name!r} needs a value for {err}") from None
    except ValueError as err:
        raise TextsError(f"text {name!r} has a malformed placeholder: {err}") from None


def _load_messages(root: Path) -> dict[str, str]:
    """The shared messages: messages.yaml plus one file per subject under messages/."""
    messages: dict[str, str] = {}
    sources = [root / "messages.yaml", *sorted((root / "messages").glob("*.yaml"))]
    for source in sources:
        if not source.exists():
            continue
        loaded = _load_yaml(source) or {}
        clash = sorted(set(loaded) & set(messages))
        if clash:
            raise TextsError(f"{source}: text name(s) {clash} are already defined in another message file")
        messages.update(loaded)
    return messages


# The codex's own files, read by every station process (a tenth of the time with libyaml's parser).
_CODEX_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_CODEX_LOADER)
    except (OSError, yaml.YAMLError) as err:
        raise TextsError(f"cannot load {path}: {err}") from None


def _split_codex(path: Path) -> list[CodexModule]:
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    heads = list(MODULE_HEADING.finditer(text))
    modules = []
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = re.sub(r"\n{3,}", "\n\n", text[head.end() : end]).strip()
        modules.append(CodexModule(id=head.group(1), title=head.group(2), text=body))
    return modules


def _load_tests(path: Path) -> list[TestDefinition]:
    if not path.exists():
        return []
    raw = _load_yaml(path) or []
    if not isinstance(raw, list):
        raise TextsError(f"{path}: expected a list of tests")
    tests = []
    for i, entry in enumerate(raw):
        try:
            tests.append(
                TestDefinition(
                    id=str(entry["id"]).strip(),  # ids are strings even when written as numbers
                    title=str(entry["title"]),
                    goal=str(entry.get("goal", "")),
                    question=str(entry["question"]),
                    pass_criteria=str(entry.get("pass_criteria", "")),
                    key_terms=tuple(tuple(str(t) for t in group) for group in entry.get("key_terms") or []),
                )
            )
        except (KeyError, TypeError) as err:
            raise TextsError(f"{path}: test #{i + 1} is missing or has a bad field: {err}") from None
    return tests
