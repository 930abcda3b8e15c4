"""The scripted policy's plays in the capsule rooms: notes for descendants, forum threads, mail, papers, surveys.

The policy reads only its prompt: system messages tell it about new mail, threads and
mentions (a reason to go and answer), and its own notes remember what it already did.
Papers follow what the scripted reviewer rewards (long, numeric, with a baseline and
evaluation ids), so some are accepted and the hurried ones are not. Where the Archive takes
survey requests, a mature agent asks the Archive Surveyor now and then.
"""

from __future__ import annotations

import random
import re

from station.models.scripted import Situation, every_turn, room_call, room_play, yaml_block

AGENT_NAME = re.compile(r"\b([A-Z][a-z]+ [IVXLCDM]+)\b")
NEW_MAIL = re.compile(r"Mail #(\d+) from ([A-Z][a-z]+ [IVXLCDM]+|Guest_\d+)")
THREAD_NOTICE = re.compile(r"(?:New thread in Public Memory: #|Public Memory thread #|Public Memory thread, #)(\d+)")
TOPICS = ["step sizes", "restarts", "initial layouts", "local search", "penalty weights", "symmetry"]
PAPER_GAP = 20  # ticks between two papers (the archive's default cooldown)
SURVEY_GAP = 30  # ticks between two survey requests of one agent (where the Archive offers surveys)
SURVEYOR_MARK = "**Archive Surveyor:**"  # the Archive's line when it takes survey requests


def _handover_due(s: Situation) -> bool:
    leave_at = s.notes.get("leave_at", 10**9)
    near_end = (s.ticks_left is not None and s.ticks_left <= 5) or s.age >= leave_at - 2
    return near_end and not s.notes.get("handover_written")


def _others(s: Situation) -> list[str]:
    return sorted({n for n in AGENT_NAME.findall(s.prompt) if n != s.name})


# -- Private Memory: read what the lineage left, keep working notes, hand over at the end ------
@room_call("private_memory", rank=10)
def _call_private(s: Situation, rng: random.Random) -> bool:
    return _handover_due(s)


@room_play("private_memory")
def _play_private(s: Situation, rng: random.Random) -> list[str]:
    if _handover_due(s):
        s.notes["handover_written"] = True
        visited = ", ".join(s.notes.get("visited", [])) or "few rooms"
        content = (
            f"Handover from {s.name}, tick {s.tick}.\n"
            f"What I did: visited {visited}. What I would do next: pick one idea about "
            f"{rng.choice(TOPICS)}, test it carefully and write the result down with its numbers.\n"
            "Read the Archive before starting; mail the agents who are still active."
        )
        return [
            "/execute_action{create}",
            yaml_block({"title": f"Handover from {s.name}", "tags": "handover", "content": content}),
        ]
    actions = []
    if not s.notes.get("read_lineage_notes"):
        s.notes["read_lineage_notes"] = True
        actions.append("/execute_action{read 1:20}")  # everything the lineage left, unread parts only
    if not s.notes.get("working_note"):
        s.notes["working_note"] = True
        actions += [
            "/execute_action{create}",
            yaml_block(
                {
                    "title": f"Working notes of {s.name}",
                    "tags": "notes",
                    "content": f"Tick {s.tick}: started; first questions about {rng.choice(TOPICS)}.",
                }
            ),
        ]
    return actions


# -- Public Memory: answer threads one hears about, start one now and then ----------------------
@room_call("public_memory", rank=20)
def _call_public(s: Situation, rng: random.Random) -> bool:
    return s.mature and bool(THREAD_NOTICE.search(s.messages)) and rng.random() < 0.7


@room_play("public_memory")
def _play_public(s: Situation, rng: random.Random) -> list[str]:
    if not s.mature:
        return []
    heard = THREAD_NOTICE.findall(s.messages)
    answered = s.notes.setdefault("answered_threads", [])
    fresh = [n for n in heard if n not in answered]
    if fresh:
        number = fresh[0]
        answered.append(number)
        del answered[:-10]
        reply = rng.choice(
            [
                "Thanks for sharing this. Did you compare it against a plain baseline?",
                "Interesting. I saw something similar; I will write up my numbers.",
                "Could you post the evaluation ids behind these numbers?",
            ]
        )
        return [
            f"/execute_action{{read {number}}}",
            f"/execute_action{{reply {number}}}",
            yaml_block({"content": reply}),
        ]
    if s.tick - s.notes.get("posted_at", -100) < 10:
        return ["/execute_action{preview all}"]
    s.notes["posted_at"] = s.tick
    topic = rng.choice(TOPICS)
    others = _others(s)
    mention = f" @{rng.choice(others)}, what do you think?" if others and rng.random() < 0.5 else ""
    return [
        "/execute_action{create}",
        yaml_block(
            {
                "title": f"Question about {topic}",
                "abstract": f"An open question on {topic}.",
                "tags": topic,
                "content": f"I am looking at {topic}. Has anyone measured its effect?{mention}",
            }
        ),
    ]


# -- Mail: answer what arrives, write to someone now and then -----------------------------------
@room_call("mail", rank=30)
def _call_mail(s: Situation, rng: random.Random) -> bool:
    return bool(NEW_MAIL.search(s.messages)) and rng.random() < 0.8


@room_play("mail")
def _play_mail(s: Situation, rng: random.Random) -> list[str]:
    received = NEW_MAIL.findall(s.messages)
    if received and not s.guest:
        number, sender = received[0]
        return [
            f"/execute_action{{reply {number}}}",
            yaml_block({"content": f"Thank you, {sender}. I read it and will keep you posted."}),
        ]
    others = _others(s)
    if not others or s.tick - s.notes.get("mailed_at", -100) < 8:
        return []
    s.notes["mailed_at"] = s.tick
    return [
        "/execute_action{create}",
        yaml_block(
            {
                "recipients": rng.choice(others),
                "title": f"Hello from {s.name}",
                "content": f"I am working on {rng.choice(TOPICS)}. Shall we compare notes?",
            }
        ),
    ]


# -- Archive: a paper once in a while (careful ones pass review, hurried ones do not) -----------
@room_call("archive", rank=40)
def _call_archive(s: Situation, rng: random.Random) -> bool:
    paper_due = s.mature and s.tick - s.notes.get("paper_at", -100) >= PAPER_GAP and rng.random() < 0.25
    return paper_due or (_survey_due(s) and rng.random() < 0.1)


@room_play("archive")
def _play_archive(s: Situation, rng: random.Random) -> list[str]:
    if _survey_due(s) and rng.random() < 0.5:
        s.notes["survey_at"] = s.tick
        topic = rng.choice(TOPICS)
        prompt = f"What do the Archive and the evaluation records say about {topic}, and where is the evidence thin?"
        return ["/execute_action{survey}", yaml_block({"prompt": prompt})]
    if not s.mature or s.tick - s.notes.get("paper_at", -100) < PAPER_GAP:
        return ["/execute_action{preview all}"] if s.mature else []
    s.notes["paper_at"] = s.tick
    topic = rng.choice(TOPICS)
    careful = rng.random() < 0.7
    scores = s.notes.get("scores") or []
    title, abstract = f"Effect of {topic} on the score", f"We measure how {topic} changes the score against a baseline."
    if not careful:
        content = f"Some thoughts on {topic}. It seems to help."
    elif len(scores) >= 2:
        content = _results_paper(topic, scores)
    else:
        title, abstract = f"A plan to measure {topic}", f"How to measure the effect of {topic} against a baseline."
        content = _proposal_paper(topic)
    return [
        "/execute_action{create}",
        yaml_block({"title": title, "tags": f"{topic}, experiments", "abstract": abstract, "content": content}),
    ]


@every_turn
def _note_surveys(s: Situation) -> None:
    """Remember that the Archive takes survey requests, once its view said so."""
    if SURVEYOR_MARK in s.prompt:
        s.notes["surveys_offered"] = True


def _survey_due(s: Situation) -> bool:
    """A mature agent that knows of the surveyor, and asked none for a while (no random draw before
    that: a station without surveys plays exactly as it did)."""
    return s.mature and bool(s.notes.get("surveys_offered")) and s.tick - s.notes.get("survey_at", -100) >= SURVEY_GAP


def _results_paper(topic: str, scores: list[list]) -> str:
    """A careful paper on the author's own evaluations: every id and score cited is one it was sent."""
    runs = sorted(scores, key=lambda r: r[1])
    (base_id, base), (best_id, best) = runs[0], runs[-1]
    table = "; ".join(f"evaluation {eid}: score {score:.4f}" for eid, score in runs)
    return (
        f"We study {topic} in a series of {len(runs)} of our own experiments. Method: starting from a simple "
        f"layout, we vary {topic} while keeping every other setting fixed, and compare with our weakest run as "
        f"the baseline (evaluation {base_id}, score {base:.4f}). Each run is identified by its evaluation id. "
        f"Results: {table}. The best run (evaluation {best_id}) improves on the baseline by {best - base:.4f}. "
        "Procedure in pseudocode: for each candidate value, run the optimiser for a fixed budget, record the "
        f"score, keep the best. Limitations: {len(runs)} runs are few, and the effect may depend on the instance "
        "size; a wider sweep is the natural next step. Definitions: the score is the quantity the task "
        f"defines, higher is better. We conclude that tuning {topic} is worthwhile, and we list the evaluation "
        "ids so that others can read the exact code of each run and extend the comparison."
    )


def _proposal_paper(topic: str) -> str:
    """A careful plan, for an author with no results of its own yet: it claims no measurement."""
    return (
        f"We propose a study of {topic}. No experiment of ours has reported back yet, so this paper "
        "reports no results; it sets out a plan that anyone in the station can carry out and check. Method: "
        f"fix every setting but {topic}, and run 3 variants for each of 4 values, 12 runs in all, each with "
        "the same time budget of 60 seconds. The baseline is the default setting, run 3 times as well, so "
        "that the spread between repeated runs is known before any difference is claimed. A difference "
        "counts only if it exceeds twice that spread. Each run will be cited by its evaluation id so that "
        "its code can be read. Limitations: 4 values may miss a narrow optimum, and a budget of 60 seconds "
        "favours fast methods; a second round with 2 times the budget would show whether the ordering holds. "
        "We will publish the results, good or bad, in a follow-up paper, and we invite others to run the "
        "plan in parallel and compare."
    )
