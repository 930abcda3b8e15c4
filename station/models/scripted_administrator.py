"""`scripted` administrator (model names starting `scripted-administrator`): the offline stand-in for
the administrator model of `station multistart --choose admin`.

It keeps the branch whose interviewed agents report the best score (an answer's line "Best score: X";
a tie goes to the lower branch; with no score reported, the lowest branch) and writes two
short reports in the form the station asks for.
"""

from __future__ import annotations

import re

from station.core.model_api import SCRIPTED_POLICIES, Message, Reply, Usage, estimate_conversation, estimate_reply
from station.models.interview import ADMINISTRATOR_HEADER, BRANCH_HEADING, CHOSEN, GUIDANCE, SELECTION

# an interview's own line "Best score: 0.83" (the scripted agents end their answers with one)
REPORTED = re.compile(r"^\s*best score\s*:\s*(-?\d+(?:\.\d+)?(?:e-?\d+)?)", re.IGNORECASE | re.MULTILINE)


def reported_scores(request: str) -> dict[int, float | None]:
    """Each branch of the request, with the best score its interviews report (None: none reported)."""
    parts = re.split(rf"^{re.escape(BRANCH_HEADING)}(\d+)\b.*$", request, flags=re.MULTILINE)
    found: dict[int, float | None] = {}
    for number, text in zip(parts[1::2], parts[2::2]):
        scores = [float(value) for value in REPORTED.findall(text)]
        found[int(number)] = max(scores) if scores else None
    return found


@SCRIPTED_POLICIES.register("scripted-administrator")
class ScriptedAdministrator:
    def __init__(self, name: str) -> None:
        self.name = name

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        return estimate_conversation(messages, system)

    def complete(self, messages: list[Message], *, system: str | None, agent: str) -> Reply:
        request = next((m["text"] for m in messages if m["text"].startswith(ADMINISTRATOR_HEADER)), "")
        text = _choice(reported_scores(request))
        usage = Usage(input_tokens=estimate_conversation(messages, system), output_tokens=estimate_reply(text))
        return Reply(text=text, usage=usage)


def _choice(scores: dict[int, float | None]) -> str:
    if not scores:
        return "I was shown no branch to choose from."
    scored = [n for n, score in scores.items() if score is not None]
    chosen = max(scored, key=lambda n: (scores[n], -n)) if scored else min(scores)
    shown = ", ".join(f"branch {n}: {'none' if s is None else f'{s:.6g}'}" for n, s in sorted(scores.items()))
    if scored:
        tied = [n for n in scored if n != chosen and scores[n] == scores[chosen]]
        label = ("branch " if len(tied) == 1 else "branches ") + ", ".join(map(str, tied))
        why = f"Its interviewed agents report the best score of all branches ({scores[chosen]:.6g})" + (
            f"; so do those of {label}, and the lowest branch is kept." if tied else "."
        )
        advice = (
            f"Your run was kept because your results were the strongest (best score {scores[chosen]:.6g}). "
            "Build on the ideas that reached it, write down what worked, and try one bold variation at a time."
        )
    else:
        why = "No interviewed agent reports a score yet, so the lowest branch is kept."
        advice = "No run has a score yet. Read the research task closely and submit a first simple baseline early."
    return "\n".join([f"{CHOSEN} {chosen}", SELECTION, why, f"Best scores reported: {shown}.", GUIDANCE, advice])
