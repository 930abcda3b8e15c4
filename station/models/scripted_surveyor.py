"""`scripted` surveyor (model names starting `scripted-surveyor`): an offline stand-in for the Archive Surveyor.

It decides each step from the conversation alone, so a session replays the same. It lists
`archive/`, reads the papers whose titles (in the first message's preview) share the most words
with the agent's question (else the newest ones), searches `evaluations/` for the question's
words, reads the records found, and finishes with a report made of what it read: each paper's
and record's own sentences under its citation (`Archive #N`, `Eval #N`), only for files it read,
within the word bounds the first message states. A report sent back for being short makes it
read the papers it left, then report again. It proposes nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

from station.core.model_api import SCRIPTED_POLICIES, Message, Reply, Usage, estimate_conversation, estimate_reply

QUESTION = re.compile(r"## The agent's question\s*\n(.*?)\n## ", re.DOTALL)
PAPER_LINE = re.compile(r"^- Archive #(\d+): (.+?) \(by ", re.MULTILINE)
BOUNDS = re.compile(r"between (\d+) and (\d+) words")
PAPER_FILE = re.compile(r"\barchive/archive_(\d+)\.md\b")
RECORD_FILE = re.compile(r"\bevaluations/eval_(\d+)\.md\b")
CITATION = re.compile(r"\b(Archive|Eval|Evaluation)(\s*)#", re.IGNORECASE)
WORD = re.compile(r"[a-z][a-z0-9-]{3,}")
SENTENCE = re.compile(r"(?<=[.!?])\s+")
COMMON = frozenset(
    "about above after again also among been before being between both could does each from have into "
    "more most other over same some such than that their them then there these they this those through "
    "under very were what when where which while will with would your which what have known tried".split()
)
PAPERS_PER_READ, RECORDS_TO_READ = 3, 3


@SCRIPTED_POLICIES.register("scripted-surveyor")
class ScriptedSurveyor:
    def __init__(self, name: str = "scripted-surveyor") -> None:
        self.name = name

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        return estimate_conversation(messages, system)

    def complete(self, messages: list[Message], *, system: str | None, agent: str, tools: Any = None) -> Reply:
        calls = [
            {"id": f"call-{len(messages)}-{i}", "name": name, "arguments": arguments}
            for i, (name, arguments) in enumerate(next_calls(messages))
        ]
        text = "Reading the records." if calls[0]["name"] != "finish" else "Here is the survey."
        spent = text + json.dumps([c["arguments"] for c in calls])
        return Reply(
            text=text,
            usage=Usage(input_tokens=estimate_conversation(messages, system), output_tokens=estimate_reply(spent)),
            tool_calls=calls,
        )


def next_calls(messages: list[Message]) -> list[tuple[str, dict[str, Any]]]:
    """The next step's calls, from what the conversation shows was done and read."""
    opening = messages[0].get("text") or "" if messages else ""
    question = _question(opening)
    done = _exchanges(messages)
    names = [name for name, _, _ in done]
    papers_read = {int(n) for name, args, _ in done if name == "read_file" for n in PAPER_FILE.findall(args["path"])}
    if "list_files" not in names:
        return [("list_files", {"path": "archive"})]
    if not papers_read or _sent_back(done):
        unread = _papers_to_read(opening, question, papers_read)
        if unread:
            return [("read_file", {"path": f"archive/archive_{n}.md"}) for n in unread]
    if "search" not in names:
        return [("search", {"pattern": "|".join(sorted(_words(question))[:8]) or ".", "path": "evaluations"})]
    records_read = {int(n) for name, args, _ in done if name == "read_file" for n in RECORD_FILE.findall(args["path"])}
    found = [int(n) for name, _, text in done if name == "search" for n in RECORD_FILE.findall(text)]
    if not found and not records_read:  # nothing matched: the newest records, from a listing
        listings = [text for name, args, text in done if name == "list_files" and args.get("path") == "evaluations"]
        if not listings:
            return [("list_files", {"path": "evaluations"})]
        found = sorted((int(n) for n in re.findall(r"\beval_(\d+)\.md\b", listings[-1])), reverse=True)
    wanted = list(dict.fromkeys(n for n in found if n not in records_read))[:RECORDS_TO_READ]
    if wanted and not records_read:
        return [("read_file", {"path": f"evaluations/eval_{n}.md"}) for n in wanted]
    return [("finish", {"report": report(opening, question, done)})]


def _question(opening: str) -> str:
    found = QUESTION.search(opening)
    return found.group(1).strip() if found else ""


def _words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in COMMON}


def _exchanges(messages: list[Message]) -> list[tuple[str, dict[str, Any], str]]:
    """(tool name, arguments, result text) of every call answered so far, in order."""
    done = []
    for ask, answer in zip(messages, messages[1:]):
        if ask.get("role") == "assistant" and answer.get("role") == "tool":
            results = {r.get("id"): r.get("text") or "" for r in answer.get("results") or []}
            for call in ask.get("tool_calls") or []:
                arguments = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
                done.append((str(call.get("name")), arguments, results.get(call.get("id"), "")))
    return done


def _sent_back(done: list[tuple[str, dict[str, Any], str]]) -> bool:
    return bool(done) and done[-1][0] == "finish"


def _papers_to_read(opening: str, question: str, read: set[int]) -> list[int]:
    """Unread papers, those whose titles share most words with the question first (newest first on ties)."""
    wanted = _words(question)
    titles = [(int(n), title) for n, title in PAPER_LINE.findall(opening) if int(n) not in read]
    ranked = sorted(titles, key=lambda item: (-len(wanted & _words(item[1])), -item[0]))
    return [n for n, _ in ranked[:PAPERS_PER_READ]]


def report(opening: str, question: str, done: list[tuple[str, dict[str, Any], str]]) -> str:
    """The survey from the files read: a heading per source, then its own sentences, within the bounds."""
    bounds = BOUNDS.search(opening)
    low, high = (int(bounds.group(1)), int(bounds.group(2))) if bounds else (1, 5000)
    sources = []
    for name, args, text in done:
        path = str(args.get("path") or "")
        for kind, pattern in (("Archive", PAPER_FILE), ("Eval", RECORD_FILE)):
            found = pattern.fullmatch(path) if name == "read_file" else None
            if found and text.startswith("# "):  # a record's file, as the station writes them
                title = text.splitlines()[0].partition(": ")[2].strip()
                sources.append((f"{kind} #{found.group(1)}", title, _sentences(text)))
    papers = [cite for cite, _, _ in sources if cite.startswith("Archive")]
    records = [cite for cite, _, _ in sources if cite.startswith("Eval")]
    head = [
        f"# Survey: {question.splitlines()[0] if question else 'the Archive'}",
        "## Scope",
        f'This survey answers the question "{" ".join(question.split())}" from {len(papers)} paper(s) '
        f"({', '.join(papers) or 'none'}) and {len(records)} evaluation record(s) ({', '.join(records) or 'none'}), "
        "read in full. Each section below restates what one record says, in its own words, under its citation; "
        "it reports what the record claims and adds no proposal of its own.",
    ]
    sections = [[f"## {cite}: {title}"] for cite, title, _ in sources]
    words = sum(len(line.split()) for line in head) + sum(len(s[0].split()) for s in sections)
    # one sentence from each source in turn, until the least length is passed (and never past the most)
    for round_ in range(max((len(s) for _, _, s in sources), default=0)):
        for (_, _, sentences), section in zip(sources, sections):
            if round_ < len(sentences) and words + len(sentences[round_].split()) <= high:
                section.append(sentences[round_])
                words += len(sentences[round_].split())
        if words >= low:
            break
    body = [section[0] + "\n\n" + " ".join(section[1:]) for section in sections]
    return "\n\n".join(head + body) + "\n"


def _sentences(text: str) -> list[str]:
    """The file's sentences (its facts as "Key: value." ones, its headings left out), citations defused:
    a paper may name records this survey did not read."""
    lines = [line.strip() for line in text.splitlines()]
    facts = [line[2:].rstrip(".") + "." for line in lines if line.startswith("- ")]
    prose = " ".join(line for line in lines if line and not line.startswith(("#", "- ", "[lines ")))
    sentences = facts + [s for s in SENTENCE.split(prose) if s.strip()]
    return [CITATION.sub(r"\1\2no. ", s).strip() for s in sentences]
