"""The administrator's choice of a multistart (`station multistart --choose admin`).

When every branch is done, a few active agents of each branch answer three short questions through
their own model, and the administrator model reads the branches' table and these interviews, then
names the branch to keep, with a selection report (why) and a guidance report (advice to the kept
branch's agents, delivered to them as an operator message once the branch is installed).

    DIR/branches/N.interviews.json   branch N's interviews (rewritten whole after each answer)
    DIR/administrator-request.md     what the administrator was sent
    DIR/administrator-reply-K.txt    its K-th reply, as it came (an untrusted text: never run or parsed again)
    DIR/administrator.json           each reply's verdict (used, or why not) and cost, then the choice
    DIR/selection.md, guidance.md    the two reports of the reply that was used

Nothing here changes a branch: its station is only read, and an interview is no turn of it. Each
answer and reply is recorded as soon as it comes, so a multistart stopped meanwhile asks no one twice.
"""

from __future__ import annotations

import json
import os
import re
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rooms.archive.config import ReviewerConfig
from station.apps.cli_commands import CliError
from station.core.budget import cost_usd
from station.core.config import ModelConfig, MultistartConfig, StationConfig
from station.core.model_api import Message, ModelError
from station.core.store import Store
from station.core.terminal_text import clean
from station.models import create_model
from station.models.branch_seed import branch_seeded
from station.models.interview import (
    ADMINISTRATOR_HEADER,
    BRANCH_HEADING,
    CHOSEN,
    GUIDANCE,
    INTERVIEW,
    REPLY_FORM,
    SELECTION,
)

if TYPE_CHECKING:
    from station.apps.multistart import Branch

RECENT_MESSAGES = 6  # an interviewed agent's recent dialogue, sent before the questions (the cost stays small)
MESSAGE_CHARS = 3000  # of each, its last characters (where its latest thoughts and notes are)
ANSWER_CHARS = 3000  # of each answer, what the administrator reads
MAX_REPLY_CHARS = 40_000  # a longer reply from the administrator is refused
ATTEMPTS = 2  # the administrator's replies asked per run of the command: one retry
RECORD = "administrator.json"
MODEL_KEY = "multistart.administrator.model"


class UnusableReply(ValueError):
    """The administrator's reply does not name an existing branch with both reports."""


# -- the rule -----------------------------------------------------------------------------------
def administrator_choice(branches: list[Branch], _: str) -> tuple[int, str, dict[int, float | None]]:
    """The rule `admin` (RULES): the branch the administrator model names after reading the interviews."""
    out = branches[0].directory.parent.parent
    config = _stored_config(branches[0].directory)
    cap = config.section(MultistartConfig).administrator.interviews_per_branch
    interviews = {b.number: interview_branch(out, b.number, cap) for b in branches}
    record = _read(out / RECORD) or {"attempts": []}
    if record.get("branch") is None:
        record = ask_administrator(out, branches, interviews, config, record)
    why = clean(record["selection"].strip().splitlines()[0])[:160]  # the report's first line, for the terminal
    return (
        record["branch"],
        f"the administrator's choice: {why} (selection.md)",
        {b.number: b.best_score for b in branches},
    )


def choice_record(out: Path) -> dict[str, Any]:
    """What the ledger's choice keeps of the administrator's: both reports and what it all cost."""
    record = _read(out / RECORD) or {}
    interviews = [_read(path) or {} for path in sorted((out / "branches").glob("*.interviews.json"))]
    interviews_usd = sum(answer["usd"] for each in interviews for answer in each.get("answers", []))
    administrator_usd = sum(attempt["usd"] for attempt in record.get("attempts", []))
    return {
        "selection": record.get("selection", ""),
        "guidance": record.get("guidance", ""),
        "interviews_usd": round(interviews_usd, 6),
        "administrator_usd": round(administrator_usd, 6),
        "spend_usd": round(interviews_usd + administrator_usd, 6),
    }


def deliver_guidance(station: Path, choice: dict[str, Any]) -> None:
    """The guidance report queued as an operator message to every agent of the station being
    installed (as `station message '*'`): applied at its next tick and recorded in its inputs."""
    from station.core import commands

    guidance = (choice.get("guidance") or "").strip()
    if not guidance:
        return  # another rule: no guidance
    text = f"Guidance from the station's administrator, who kept this run of the station:\n\n{guidance}"
    store = Store(station)
    try:
        commands.queue(store, {"op": "message", "to": "*", "text": text})
    finally:
        store.close()


# -- interviews ---------------------------------------------------------------------------------
def interview_branch(out: Path, number: int, cap: int) -> list[dict[str, Any]]:
    """Branch `number`'s first `cap` active agents (turn order), each asked once through its own model
    (as the branch calls it: with the branch seed). Their answers, recorded as each comes."""
    from station.apps.world import Station

    path = out / "branches" / f"{number}.interviews.json"
    record = _read(path) or {"branch": number, "answers": []}
    asked = {answer["agent"] for answer in record["answers"]}
    station = Station.open_to_read(out / "branches" / str(number))
    try:
        branch_seed = station.store.get_meta("branch_seed")
        for agent in station.agents.active()[:cap]:
            if agent.name in asked:
                continue
            model = branch_seeded(ModelConfig.model_validate(agent.model), branch_seed)
            context = station.conversations.context(agent.session, agent.pruned)
            record["answers"].append(_interview(agent.name, model, context, agent.system_prompt, station.config))
            _write(path, record)
    finally:
        station.close()
    if not path.exists():
        _write(path, record)  # a branch with no active agent: its (empty) interviews are recorded too
    return list(record["answers"])


def _interview(
    name: str, model: ModelConfig, context: list[Message], system: str | None, config: StationConfig
) -> dict[str, Any]:
    messages = [{"role": m["role"], "text": _tail(m["text"])} for m in context[-RECENT_MESSAGES:]]
    while messages and messages[0]["role"] != "user":
        messages.pop(0)  # a dialogue starts with the station
    if messages and messages[-1]["role"] == "user":
        messages.pop()  # a prompt it has not answered: the questions take its place
    messages.append({"role": "user", "text": INTERVIEW})
    try:
        reply = create_model(model).complete(messages, system=system, agent=name)
    except ModelError as err:  # recorded as its answer: the others are asked all the same
        return {"agent": name, "model": model.name, "answer": None, "error": str(err), "usd": 0.0}
    usd = cost_usd(config.prices.get(model.name), reply.usage)
    return {"agent": name, "model": model.name, "answer": reply.text, "error": None, "usd": usd}


def _tail(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else "[...]\n" + text[-MESSAGE_CHARS:]


# -- the administrator --------------------------------------------------------------------------
def administrator_model(config: StationConfig) -> ModelConfig:
    """`multistart.administrator.model`; unset, the reviewer's model (its scripted stand-in: the
    scripted administrator, since a scripted model plays the role its name gives)."""
    chosen = config.section(MultistartConfig).administrator.model
    if chosen is not None:
        return chosen
    reviewer = config.section(ReviewerConfig).model
    if reviewer.provider == "scripted":
        return ModelConfig(provider="scripted", name="scripted-administrator", seed=reviewer.seed)
    return reviewer


def ask_administrator(
    out: Path,
    branches: list[Branch],
    interviews: dict[int, list[dict[str, Any]]],
    config: StationConfig,
    record: dict[str, Any],
) -> dict[str, Any]:
    """Ask for the choice, once more if the reply cannot be used; every reply kept in a file."""
    model = administrator_model(config)
    request = administrator_request(branches, interviews)
    (out / "administrator-request.md").write_text(request, encoding="utf-8")
    messages = [{"role": "user", "text": request}]
    for _ in range(ATTEMPTS):
        try:
            reply = create_model(model).complete(messages, system=None, agent="administrator")
        except ModelError as err:
            said = " ".join(str(err).split())
            raise CliError(f"{MODEL_KEY} ({model.provider} {model.name}) could not be asked: {said}") from None
        numbers = count(len(record["attempts"]) + 1)  # past any reply a killed run kept but did not record
        reply_file = next(f for n in numbers if not (f := out / f"administrator-reply-{n}.txt").exists())
        reply_file.write_text(reply.text, encoding="utf-8", errors="replace")
        attempt = {
            "reply": reply_file.name,
            "model": model.name,
            "usd": cost_usd(config.prices.get(model.name), reply.usage),
        }
        record["attempts"].append(attempt)
        try:
            chosen, selection, guidance = parse_reply(reply.text, [b.number for b in branches])
        except UnusableReply as err:
            attempt["error"] = str(err)
            _write(out / RECORD, record)
            messages += [
                {"role": "assistant", "text": reply.text[:MAX_REPLY_CHARS]},
                {
                    "role": "user",
                    "text": f"Your reply cannot be used: {err}. Reply again, in this form:\n\n{REPLY_FORM}",
                },
            ]
            continue
        (out / "selection.md").write_text(selection + "\n", encoding="utf-8")
        (out / "guidance.md").write_text(guidance + "\n", encoding="utf-8")
        record.update(branch=chosen, selection=selection, guidance=guidance)
        _write(out / RECORD, record)
        return record
    raise CliError(
        f"the administrator's reply cannot be used ({record['attempts'][-1]['error']}), twice; the last is in "
        f"{out / record['attempts'][-1]['reply']}; run the command again to ask again, or use a new --out"
    )


def administrator_request(branches: list[Branch], interviews: dict[int, list[dict[str, Any]]]) -> str:
    """The branches' table and each branch's interviews, and the form of the reply."""
    numbers = ", ".join(str(b.number) for b in branches)
    parts = [
        ADMINISTRATOR_HEADER,
        "",
        f"You are the administrator of a research station. {len(branches)} runs of it (branches {numbers}) "
        "started from the same point and each ran for the same number of ticks. One will be kept and run on; "
        "the others are set aside. Below are each branch's figures and short interviews of some of its active "
        "agents. Choose the branch most likely to make the best progress from here, and reply in exactly "
        "this form:",
        "",
        REPLY_FORM,
    ]
    for b in branches:
        best = "none" if b.best_score is None else f"{b.best_score:.6g}"
        parts += [
            "",
            f"{BRANCH_HEADING}{b.number}",
            f"Tick {b.tick}; best score of the first task: {best}; evaluations: {b.evaluations}; "
            f"spend: ${b.spend_usd:.4f}.",
        ]
        for answer in interviews[b.number] or [{"agent": "-", "answer": None, "error": "no active agent"}]:
            said = answer["answer"]
            said = f"(no answer: {answer['error']})" if said is None else said[:ANSWER_CHARS].strip()
            parts += ["", f"Interview of {answer['agent']}:", said]
    return "\n".join(parts)


def parse_reply(text: str, numbers: list[int]) -> tuple[int, str, str]:
    """(branch, selection report, guidance report) from the administrator's reply; UnusableReply says
    what is wrong. Lenient about the decoration of its lines (markdown bold, heading marks, case)."""
    if len(text) > MAX_REPLY_CHARS:
        raise UnusableReply(f"it is {len(text):,} characters long; at most {MAX_REPLY_CHARS:,}")
    label = re.escape(CHOSEN.rstrip(":"))
    found = re.search(
        rf"^[\s#*>_-]*{label}[\s*_]*[:=]?[\s*_]*(?:branch\s*)?#?(\d+)", text, re.IGNORECASE | re.MULTILINE
    )
    if found is None:
        raise UnusableReply(f"no line '{CHOSEN} <number>'")
    chosen = int(found.group(1))
    if chosen not in numbers:
        raise UnusableReply(
            f"it names branch {chosen}, which does not exist (the branches: {', '.join(map(str, numbers))})"
        )
    selection_at, guidance_at = _heading(text, SELECTION), _heading(text, GUIDANCE)
    if selection_at is None or guidance_at is None or guidance_at[0] < selection_at[1]:
        raise UnusableReply(f"it lacks a '{SELECTION}' followed by a '{GUIDANCE}'")
    selection = text[selection_at[1] : guidance_at[0]].strip()
    guidance = text[guidance_at[1] :].strip()
    if not selection or not guidance:
        raise UnusableReply("one of its reports is empty")
    return chosen, selection, guidance


def _heading(text: str, heading: str) -> tuple[int, int] | None:
    words = re.escape(heading.lstrip("# "))
    found = re.search(rf"^[\s#*]*{words}[\s*:]*$", text, re.IGNORECASE | re.MULTILINE)
    return (found.start(), found.end()) if found else None


# -- files ----------------------------------------------------------------------------------------
def _stored_config(directory: Path) -> StationConfig:
    from station.apps import endpoints

    store = Store(directory)
    try:
        return endpoints.stored_config(store)
    finally:
        store.close()


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as err:
        raise CliError(f"{path} cannot be read ({err}); move it aside to ask again") from None


def _write(path: Path, data: dict[str, Any]) -> None:
    """Whole or not at all: a new file, flushed, renamed over the old one."""
    part = path.with_name(f".{path.name}.part")
    with open(part, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(part, path)
