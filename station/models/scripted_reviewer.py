"""`scripted` reviewer (model names starting `scripted-reviewer`): an offline stand-in for the archive reviewer.

Its verdict depends on the paper's text only, so scripted agents can write papers that pass:
the score starts at 3; +2 for at least 150 words of content; +2 for at least five numbers;
+1 for mentioning a baseline; +1 for citing an evaluation ID ("evaluation 12", "eval #12",
"ID 12"); at most 9. A message without a paper in it (the reviewer's context turn) gets a
short acknowledgement.

`scripted-reviewer-malformed` acknowledges the context turn but never gives a score, for
testing what happens when a reviewer's verdicts cannot be read.
"""

from __future__ import annotations

import re

from station.core.model_api import SCRIPTED_POLICIES, Message, Reply, Usage, estimate_conversation, estimate_reply

BEGIN, END = "----- BEGIN PAPER CONTENT -----", "----- END PAPER CONTENT -----"
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")
BASELINE = re.compile(r"\bbaseline", re.IGNORECASE)
EVAL_ID = re.compile(r"\b(?:evaluation|eval)\s*(?:id\s*)?#?\s*\d+|\bID\s*#?\s*\d+", re.IGNORECASE)
ACK = (
    "Understood. I will judge every submission strictly against these requirements "
    "and end each review with the YAML verdict."
)


def paper_content(text: str) -> str | None:
    """The paper between the submission prompt's markers, or None if the message holds no paper."""
    start = text.find(BEGIN)
    if start < 0:
        return None
    end = text.find(END, start)
    return text[start + len(BEGIN) : end if end >= 0 else len(text)].strip()


def score_paper(content: str) -> tuple[int, list[str], list[str]]:
    """(score, strengths, weaknesses) by the fixed offline rule."""
    score, good, bad = 3, [], []
    checks = [
        (
            len(content.split()) >= 150,
            2,
            "it is long enough to explain the method",
            "it is too short to be reproducible",
        ),
        (len(NUMBER.findall(content)) >= 5, 2, "it reports concrete numbers", "it gives too few concrete numbers"),
        (bool(BASELINE.search(content)), 1, "it compares against a baseline", "it has no baseline comparison"),
        (bool(EVAL_ID.search(content)), 1, "it cites its experiments by ID", "it cites no experiment IDs"),
    ]
    for passed, points, strength, weakness in checks:
        if passed:
            score += points
            good.append(strength)
        else:
            bad.append(weakness)
    return min(score, 9), good, bad


@SCRIPTED_POLICIES.register("scripted-reviewer")
class ScriptedReviewer:
    def __init__(self, name: str = "scripted-reviewer") -> None:
        self.name = name
        self.malformed = name.startswith("scripted-reviewer-malformed")

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        return estimate_conversation(messages, system)

    def complete(self, messages: list[Message], *, system: str | None, agent: str) -> Reply:
        asked = [m["text"] for m in messages if m["role"] == "user"]
        # The newest message with a paper: the submission itself, or the one a retry refers to.
        content = next((c for c in (paper_content(t) for t in reversed(asked)) if c is not None), None)
        if content is None:
            text = ACK
        elif self.malformed:
            text = "I have read the submission carefully and have a number of thoughts about it, but no verdict yet."
        else:
            text = self._review(content)
        return Reply(
            text=text,
            usage=Usage(input_tokens=estimate_conversation(messages, system), output_tokens=estimate_reply(text)),
        )

    @staticmethod
    def _review(content: str) -> str:
        score, good, bad = score_paper(content)
        comment = "The paper's strengths: " + "; ".join(good) + "." if good else "The paper shows no clear strength."
        if bad:
            comment += " Its weaknesses: " + "; ".join(bad) + "."
        suggestion = (
            "Address the weaknesses listed above and resubmit."
            if bad
            else "Extend the study to more settings and compare with more baselines."
        )
        checklist = "\n".join(f"- {w}: not met" for w in bad) or "- all checked requirements are met"
        return (
            f"Checklist:\n{checklist}\n\nOverall this deserves {score} out of 10.\n\n"
            f'```yaml\nscore: {score}\ncomment: "{comment}"\nsuggestion: "{suggestion}"\n```'
        )
