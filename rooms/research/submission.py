"""The checks a submission's form passes (research §1.4, steps 4-8), in the spec's order: the first
one that fails is what the agent is told. What passes comes out typed, as a `Draft`."""

from __future__ import annotations

from dataclasses import dataclass, field

from evaluators import has_real_code
from evaluators.source_text import unhonoured_line_break
from rooms.research.config import ResearchConfig

from .params import (
    BIDI,
    CODER_REQUIRED,
    CONTROL,
    LINE_BREAK,
    REQUIRED,
    SubmitParams,
    as_text,
    blank,
    cut_words,
    normalise_tags,
)

MAX_TITLE_CHARS = 200


class Refused(Exception):
    """A submission the Research Counter does not queue; the message says why, for the agent."""


@dataclass(frozen=True)
class Draft:
    title: str
    tags: list[str]
    abstract: str
    code: str
    cpu_only: bool
    no_debugger: bool
    warnings: list[str] = field(default_factory=list)
    instruction: str | None = None  # coder mode: the code is the coder's, written later


def check_form(p: SubmitParams | None, cfg: ResearchConfig) -> Draft:
    """The submission's YAML as a Draft, or Refused with the first problem."""
    if cfg.mode == "coder":
        return check_instruction_form(p, cfg)
    given = p.model_dump() if p is not None else {}
    if not blank(given.get("instruction")):
        raise Refused(
            "this station takes code, not instructions: put your program under `content` and leave out `instruction`"
        )
    empty = [key for key in REQUIRED if blank(given.get(key))]
    if p is None or empty:
        raise Refused(
            "a submission needs a ```yaml block with all four keys title, tags, abstract and content; "
            f"missing or empty: {', '.join(empty or REQUIRED)}"
        )
    title, tags, abstract, warnings = _described(p, cfg)
    cpu_only, no_debugger = _options(p, cfg)
    return Draft(title, tags, abstract, _code(p, cfg), cpu_only, no_debugger, warnings)


def _described(p: SubmitParams, cfg: ResearchConfig) -> tuple[str, list[str], str, list[str]]:
    """The title, tags and abstract every submission has, with the warnings they give."""
    warnings: list[str] = []
    title = _title(p)
    tags, tag_warnings, problem = normalise_tags(p.tags, cfg.max_tags, cfg.max_tag_chars)
    if problem:
        raise Refused(problem)
    warnings += tag_warnings
    return title, tags, _abstract(p, cfg, warnings), warnings


def _title(p: SubmitParams) -> str:
    title = as_text(p.title)
    if title is None:
        raise Refused("the title must be text")
    title = title.strip()
    if LINE_BREAK.search(title) or CONTROL.search(title) or BIDI.search(title):
        raise Refused("the title must be one line without control characters")
    if len(title) > MAX_TITLE_CHARS:
        raise Refused(f"the title is {len(title)} characters long; at most {MAX_TITLE_CHARS} are allowed")
    return title


def _abstract(p: SubmitParams, cfg: ResearchConfig, warnings: list[str]) -> str:
    abstract = as_text(p.abstract)
    if abstract is None:
        raise Refused("the abstract must be text")
    if CONTROL.search(abstract) or BIDI.search(abstract):
        raise Refused("the abstract contains control characters")
    abstract, words = cut_words(abstract.strip(), cfg.max_abstract_words)
    if words > cfg.max_abstract_words:
        warnings.append(f"the abstract had {words} words; only the first {cfg.max_abstract_words} were kept")
    return abstract


def _options(p: SubmitParams, cfg: ResearchConfig) -> tuple[bool, bool]:
    """(cpu_only, no_debugger); cpu_only only where the station allows it."""
    if p.cpu_only is not None:
        if not isinstance(p.cpu_only, bool):
            raise Refused("cpu_only must be true or false")
        if p.cpu_only and not cfg.allow_cpu_only:
            raise Refused("cpu_only is not available in this station; leave the key out")
    if p.no_debugger is not None and not isinstance(p.no_debugger, bool):
        raise Refused("no_debugger must be true or false")
    return bool(p.cpu_only) and cfg.allow_cpu_only, bool(p.no_debugger)


def _code(p: SubmitParams, cfg: ResearchConfig) -> str:
    code = p.content
    if not isinstance(code, str):
        raise Refused("content must be your Python code as text (use a `|` block)")
    if "\x00" in code:
        raise Refused("the code contains NUL characters")
    odd = unhonoured_line_break(code)  # readers (reviewers, the debugger, frame checks) would see other code
    if odd is not None:
        raise Refused(f"the code cannot be run as shown: {odd}")
    if len(code) > cfg.max_code_chars:
        raise Refused(f"the code is {len(code):,} characters long; at most {cfg.max_code_chars:,} are allowed")
    if not has_real_code(code):
        raise Refused(
            "the content holds only comments or docstrings. Submit real, complete code that runs "
            "as it stands; keep reusable pieces in your lineage's storage and import them from there"
        )
    return code


def check_instruction_form(p: SubmitParams | None, cfg: ResearchConfig) -> Draft:
    """Coder mode (docs/coder.md): title, tags, abstract and an instruction for the research coder; no code."""
    given = p.model_dump() if p is not None else {}
    if not blank(given.get("content")):
        raise Refused(
            "this station takes instructions, not code: describe the experiment under `instruction` and leave "
            "out `content`; the research coder writes and runs the code"
        )
    empty = [key for key in CODER_REQUIRED if blank(given.get(key))]
    if p is None or empty:
        raise Refused(
            "a submission needs a ```yaml block with all four keys title, tags, abstract and instruction; "
            f"missing or empty: {', '.join(empty or CODER_REQUIRED)}"
        )
    title, tags, abstract, warnings = _described(p, cfg)
    cpu_only, _ = _options(p, cfg)
    if p.no_debugger is not None:
        warnings.append("no_debugger does nothing here: the research coder debugs its own attempts")
    return Draft(title, tags, abstract, "", cpu_only, True, warnings, _instruction(p, cfg))


def _instruction(p: SubmitParams, cfg: ResearchConfig) -> str:
    text = p.instruction
    if not isinstance(text, str):
        raise Refused("instruction must be text (use a `|` block)")
    if "\x00" in text or BIDI.search(text):
        raise Refused("the instruction contains NUL or direction-changing characters")
    limit = cfg.coder.max_instruction_chars
    if len(text) > limit:
        raise Refused(f"the instruction is {len(text):,} characters long; at most {limit:,} are allowed")
    return text.strip("\n")
