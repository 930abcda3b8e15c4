"""Write replies.jsonl: agent replies with the actions the engine spec (§5.1) finds in them.

Run from the repository root: `.venv/bin/python data/parser_examples/make_replies.py`.

Every expectation here is written by hand from the spec's rules; the station's parser is never
imported.  The only library used for checking is PyYAML (the YAML reader the spec assumes): each
block whose expected params are written here is loaded with it, so a typo in a hand-written
expectation stops the script instead of ending up in the file.

Two kinds of replies:
* HAND: whole replies written for one rule each (unclosed blocks, fences, CRLF, ...).
* composed: replies assembled (seeded, reproducible) from hand-written pieces: prose, thought
  blocks and action units.  Each unit carries its own expected action(s); the composition keeps
  the pieces apart so that the expectation of a reply is the units' expectations in order
  (prose never starts with whitespace or a yaml fence, so it never becomes a unit's YAML).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
A = "/execute_action"
COMPOSED = 300


def act(content: str) -> str:
    return A + "{" + content + "}"


def block(body: str, fence: str = "```yaml") -> str:
    return f"{fence}\n{body}\n```"


def exp(name: str, args: str | None = None, params: dict | None = None, error: bool = False) -> dict:
    return {"name": name, "args": args, "params": params, "error": error}


def scalar(text: str, indent: str = "  ") -> str:
    """A text as the lines of a `|` block scalar (empty lines stay empty)."""
    return "\n".join(indent + line if line else "" for line in text.split("\n"))


def check_yaml(body: str, params: dict | None, error: bool) -> None:
    """The hand-written expectation must be what PyYAML reads (spec: the block loads to a mapping)."""
    try:
        data = yaml.safe_load(body + "\n")
    except yaml.YAMLError:
        data = "error"
    if error:
        assert not isinstance(data, dict), (body, data)
    else:
        if isinstance(data, dict) and "tags" in data and isinstance(data["tags"], str):
            data["tags"] = [t.strip() for t in data["tags"].split(",")]
        assert data == params, (body, data, params)


def unit(line: str, name: str, args: str | None, body: str | None = None, params: dict | None = None,
         error: bool = False, indent: str = "") -> tuple[str, list[dict]]:
    """An action line, optionally with its yaml block right below it."""
    if body is None:
        return line, [exp(name, args)]
    check_yaml(body, params, error)
    fenced = "\n".join(indent + x if x else x for x in block(body).split("\n"))
    return line + "\n" + fenced, [exp(name, args, None if error else params, error)]


# --- papers and texts that go inside block scalars -----------------------------------------------

PAPER_PACKING = """# Greedy seeding beats random starts for n = 26

## Abstract

Seeding the optimiser with a hexagonal layout raised the sum of radii from 2.58 to 2.62.

## Method

We place the circles on a slightly perturbed hexagonal grid and then run SLSQP:

```python
import numpy as np
from scipy.optimize import minimize

def seed(n: int) -> np.ndarray:
    rows = int(np.ceil(np.sqrt(n)))
    pts = [(0.1 + 0.8 * (i % rows) / rows, 0.1 + 0.8 * (i // rows) / rows) for i in range(n)]
    return np.array(pts)
```

| start | sum of radii |
|---|---|
| random | 2.58 |
| hexagonal | 2.62 |

## Conclusion

Start from structure; the optimiser only polishes."""

PAPER_FORECAST = """Title: Lagged features help the forecaster

We tried three input windows (8, 16, 32 steps).  The 16-step window won:

```
window  mae
8       0.412
16      0.389
32      0.395
```

Code used for the sweep:

```python
for window in (8, 16, 32):
    cfg = dict(base, window=window)
    print(window, evaluate(cfg))
```

Unicode check: the loss fell by ≈ 5 % (Δ = −0.023); 谢谢 to Spiro III for the idea."""

PAPER_SOKOBAN = """Summary of my Sokoban runs

1. Entropy 0.01 -> solved 41 % of levels.
2. Entropy 0.03 -> solved 47 % of levels.

   Indented continuation of item 2 (three spaces, Markdown keeps it in the item).

Pseudo-code of the curriculum:

    for level in sorted(levels, key=difficulty):
        train(level, steps=budget(level))

Next: try a value-loss coefficient of 0.25."""

NOTE_SHORT = """Lineage note: the test asks about the Codex's five principles.
Read it carefully before `goto test`."""

CODE_SUBMIT = """import numpy as np

def construct_packing():
    n = 26
    centers = np.zeros((n, 2))
    for i in range(n):
        centers[i] = [0.1 + 0.8 * (i % 5) / 4, 0.1 + 0.8 * (i // 5) / 5]
    radii = np.full(n, 0.05)
    return centers, radii, float(radii.sum())"""

# Whitespace-only lines deeper than the block's indentation are content (YAML keeps the spaces).
PAPER_SPACES = "Line one.\n   \nLine three after a line of three spaces.\n    indented line  \nLast line."


# --- action units: (text, expected actions) ---------------------------------------------------------

def units() -> list[tuple[str, list[dict]]]:
    u: list[tuple[str, list[dict]]] = []
    # Navigation and plain actions (no YAML).
    for room in ("codex", "test", "archive", "mail", "common", "private_memory", "public_memory",
                 "research", "token_management", "reflect", "misc", "lobby"):
        u.append((act(f"goto {room}"), [exp("goto", room)]))
    u += [
        (act("go archive"), [exp("go", "archive")]),
        ("`" + act("goto mail") + "`", [exp("goto", "mail")]),
        ("  " + act("goto codex"), [exp("goto", "codex")]),
        ("\t" + act("goto common"), [exp("goto", "common")]),
        ("`" + act("help lobby"), [exp("help", "lobby")]),
        (act("GOTO Archive"), [exp("goto", "Archive")]),
        (act("Help capsule"), [exp("help", "capsule")]),
        (act("help"), [exp("help")]),
        (act("read 3"), [exp("read", "3")]),
        (act("read 12"), [exp("read", "12")]),
        (act("preview all"), [exp("preview", "all")]),
        (act("page 2"), [exp("page", "2")]),
        (act("search circle packing"), [exp("search", "circle packing")]),
        (act("pin 4"), [exp("pin", "4")]),
        (act("unread 7"), [exp("unread", "7")]),
        (act("take"), [exp("take")]),
        (act("review 5"), [exp("review", "5")]),
        (act("rank score"), [exp("rank", "score")]),
        (act("storage read notes/plan.md"), [exp("storage", "read notes/plan.md")]),
        (act("storage list"), [exp("storage", "list")]),
        (act("exit"), [exp("exit")]),
        (act("goto archive") + " and then I will read the newest paper", [exp("goto", "archive")]),
        (act("  read   9  "), [exp("read", "9")]),
        (act("prune_response 441:458"), [exp("prune_response", "441:458")]),
        (act("prune_response 12"), [exp("prune_response", "12")]),
        (act("prune_response 30-35"), [exp("prune_response", "30-35")]),
        (act("search  Δ-loss  ablation "), [exp("search", "Δ-loss  ablation")]),
        (act(""), [exp("", None, None, True)]),
    ]
    # Actions that take YAML, with it.
    u += [
        unit(act("create"), "create", None,
             'recipients: Spiro II\ntitle: "Re: the packing seeds"\ncontent: |\n  Thanks! I will try the hexagonal start.\n  Best, Nova I',
             {"recipients": "Spiro II", "title": "Re: the packing seeds",
              "content": "Thanks! I will try the hexagonal start.\nBest, Nova I\n"}),
        unit(act("create"), "create", None,
             "title: Greedy seeding beats random starts\ntags: packing, seeding, slsqp\n"
             "abstract: >\n  Seeding with a hexagonal layout\n  raised the score.\ncontent: |\n" + scalar(PAPER_PACKING),
             {"title": "Greedy seeding beats random starts", "tags": ["packing", "seeding", "slsqp"],
              "abstract": "Seeding with a hexagonal layout raised the score.\n", "content": PAPER_PACKING + "\n"}),
        unit(act("create"), "create", None,
             "title: Lagged features\ntags: [forecasting, features]\ncontent: |\n" + scalar(PAPER_FORECAST),
             {"title": "Lagged features", "tags": ["forecasting", "features"], "content": PAPER_FORECAST + "\n"}),
        unit(act("create"), "create", None,
             "title: Sokoban log\ncontent: |\n" + scalar(PAPER_SOKOBAN, "    "),
             {"title": "Sokoban log", "content": PAPER_SOKOBAN + "\n"}),
        unit(act("create"), "create", None,
             "title: Note for my heirs\ncontent: |\n" + scalar(NOTE_SHORT),
             {"title": "Note for my heirs", "content": NOTE_SHORT + "\n"}),
        unit(act("create"), "create", None,
             "title: Spaces kept\ncontent: |\n" + scalar(PAPER_SPACES),
             {"title": "Spaces kept", "content": PAPER_SPACES + "\n"}),
        unit(act("reply 3"), "reply", "3",
             'content: "Agreed, the 16-step window is the best so far."',
             {"content": "Agreed, the 16-step window is the best so far."}),
        unit(act("reply 8"), "reply", "8",
             "content: |\n  Two points:\n  - the table has a typo in row 2\n  - please share the seed",
             {"content": "Two points:\n- the table has a typo in row 2\n- please share the seed\n"}),
        unit(act("update 2"), "update", "2", "tags: summary, v2", {"tags": ["summary", "v2"]}),
        unit(act("reflect"), "reflect", None,
             'prompt: "What have I learned about the reviewer\'s standards?"\ntick: 3',
             {"prompt": "What have I learned about the reviewer's standards?", "tick": 3}),
        unit(act("reflect"), "reflect", None, "tick: 5", {"tick": 5}),
        unit(act("speak"), "speak", None,
             "message: Hello everyone, is anyone working on the n = 32 task?",
             {"message": "Hello everyone, is anyone working on the n = 32 task?"}),
        unit(act("speak"), "speak", None,
             "message: |\n  Quick update: 2.631 with the hexagonal seed.\n  Details in my paper.",
             {"message": "Quick update: 2.631 with the hexagonal seed.\nDetails in my paper.\n"}),
        unit(act("invite"), "invite", None, "recipients: [Spiro II, Nova I]", {"recipients": ["Spiro II", "Nova I"]}),
        unit(act("send"), "send", None, "recipients: Nova I\ncontent: ping", {"recipients": "Nova I", "content": "ping"}),
        unit(act("forward 4"), "forward", "4", "recipients: Spiro II, Kepler I", {"recipients": "Spiro II, Kepler I"}),
        unit(act("submit"), "submit", None,
             "title: Hexagonal seed v3\ntags: packing\ncontent: |\n" + scalar(CODE_SUBMIT),
             {"title": "Hexagonal seed v3", "tags": ["packing"], "content": CODE_SUBMIT + "\n"}),
        unit(act("submit"), "submit", None,
             "title: Quick test\nno_debugger: true\ncpu_only: yes\ncontent: |\n  print('hello')",
             {"title": "Quick test", "no_debugger": True, "cpu_only": True, "content": "print('hello')\n"}),
        unit(act("storage write notes/plan.md"), "storage", "write notes/plan.md",
             "content: |\n  # Plan\n  1. Seed hexagonally.\n  2. Polish with SLSQP.\n  \n  Budget: 3 runs.",
             {"content": "# Plan\n1. Seed hexagonally.\n2. Polish with SLSQP.\n\nBudget: 3 runs.\n"}),
        unit(act("storage write seed.py"), "storage", "write seed.py",
             "content: |\n" + scalar(CODE_SUBMIT),
             {"content": CODE_SUBMIT + "\n"}),
        unit(act("meta"), "meta", None,
             "content: Focus on circle packing; publish every 20 ticks.",
             {"content": "Focus on circle packing; publish every 20 ticks."}),
        unit(act("meta"), "meta", None, 'content: ""', {"content": ""}),
        unit(act("prune_response"), "prune_response", None,
             'prune_blocks:\n  - ticks: "12-15"\n    summary: "Tried three learning rates; 3e-4 was best."\n  - ticks: 18\n    summary: ""',
             {"prune_blocks": [{"ticks": "12-15", "summary": "Tried three learning rates; 3e-4 was best."},
                               {"ticks": 18, "summary": ""}]}),
        unit(act("prune_response"), "prune_response", None,
             "prune_blocks:\n- ticks: '20,21,22'",
             {"prune_blocks": [{"ticks": "20,21,22"}]}),
        unit(act("request_human"), "request_human", None,
             "title: Budget\ncontent: May I use a GPU for the next three runs?",
             {"title": "Budget", "content": "May I use a GPU for the next three runs?"}),
        unit(act("change_description"), "change_description", None,
             "new_description: Packing researcher, careful with budgets",
             {"new_description": "Packing researcher, careful with budgets"}),
        unit(act("suggest"), "suggest", None,
             "suggestion_content: Please show the leaderboard on the research page.",
             {"suggestion_content": "Please show the leaderboard on the research page."}),
        unit(act("ascend_new"), "ascend_new", None,
             "name: Kepler\ndescription: Circle packing by structure first",
             {"name": "Kepler", "description": "Circle packing by structure first"}),
        unit(act("ascend_inherit Spiro"), "ascend_inherit", "Spiro",
             "description: Heir of Spiro, continuing the seeding work",
             {"description": "Heir of Spiro, continuing the seeding work"}),
        unit(act("create"), "create", None, 'title: "Ünïcødé ✓ — 日本語"\ncontent: "émoji 🚀"',
             {"title": "Ünïcødé ✓ — 日本語", "content": "émoji 🚀"}),
        unit(act("create"), "create", None, "title: Indented block\ncontent: fine", {"title": "Indented block", "content": "fine"},
             indent="  "),
        # Malformed YAML: the action is still found, with an error and no params.
        unit(act("create"), "create", None, "title: Re: results\ncontent: hi", None, error=True),
        unit(act("speak"), "speak", None, "- hello\n- everyone", None, error=True),
        unit(act("reflect"), "reflect", None, "just a sentence without a key", None, error=True),
        unit(act("create"), "create", None, "title: [unclosed\ncontent: x", None, error=True),
        unit(act("meta"), "meta", None, "# only a comment", None, error=True),
        unit(act("create"), "create", None, "title: x\n\tcontent: tab-indented", None, error=True),
    ]
    # Actions that take YAML, written without it (params stay null, no error).
    u += [(act("create"), [exp("create")]), (act("reflect"), [exp("reflect")]),
          (act("prune_response"), [exp("prune_response")])]
    return u


# --- prose and thought pieces (never an action, never a unit's YAML) ---------------------------------

PROSE = [
    "I have read the Codex. Next I will take the test.",
    "**Plan for this turn**\n\n1. Check the archive.\n2. Reply to Spiro's mail.\n3. Update my notes.",
    "My context is at 41 %, so I should prune soon.",
    "Reasoning: the last submission scored 2.618, below the best (2.631). The difference is the seeding.",
    "I will not use /execute_action{goto exit} yet; there is still work to do.",
    "Last turn I wrote `/execute_action{read 3}` but it showed the wrong paper.",
    "Note to self - /execute_action{goto lobby} is only for help.",
    "Here is the code I am thinking about:\n\n```python\ndef score(r):\n    return r.sum()\n```\n\nIt is short.",
    "A table of my runs:\n\n| run | score |\n|---|---|\n| 1 | 2.58 |\n| 2 | 2.62 |",
    "Trailing spaces on this line   \nand on this one\t\nshould not matter.",
    "Unicode: café, naïve, 数学, Ελληνικά, emoji 🎯 — all fine.",
    "Tabs\tinside\tthe\tline are just prose.",
    "> Quoting the Codex: \"Knowledge shared is knowledge kept.\"",
    "- a bullet point about the budget\n- another bullet about the reviewer\n  - a nested one",
    "An example of YAML I might send later (not attached to anything):\n\n```yaml\ntitle: draft\n```",
    "Thinking aloud: the reviewer wants ablations. I have two.",
    "Done for this tick.",
    "Let me also check my mail.",
    "```text\nThis fenced text is not YAML and holds no action.\n```",
    "Summary of the leaderboard: Nova 2.631, Spiro 2.618, Kepler 2.604.",
    "Hmm. The test said I failed question 3. Re-reading the Codex section on lineages.",
    "Nothing new in the common room.",
    "The curly braces {like these} are fine in prose.",
    "Observation: tick 57, age 40, token usage 52 %.",
]

THOUGHTS = [
    "```thought\nThe reviewer will want code. I could " + act("goto archive") + " first.\n```",
    "```thought\nShould I exit? No.\n" + act("goto exit") + "\n```",
    "```THOUGHT\nplanning the next three ticks\n```",
    "<think>\nA short private note; no actions here.\n</think>",
]


def compose(rng: random.Random, pool: list[tuple[str, list[dict]]], index: int) -> dict:
    """One reply: optional thought/prose first, then units with optional prose between them."""
    parts: list[str] = []
    expected: list[dict] = []
    if rng.random() < 0.3:
        parts.append(rng.choice(THOUGHTS))
    if rng.random() < 0.7:
        parts.append(rng.choice(PROSE))
    for _ in range(rng.choice([1, 1, 2, 2, 3, 4, 6])):
        text, actions = rng.choice(pool)
        parts.append(text)
        expected += actions
        if rng.random() < 0.4:
            parts.append(rng.choice(PROSE))
    reply = rng.choice(["\n", "\n\n"]).join(parts)
    if rng.random() < 0.5:
        reply += "\n"
    if rng.random() < 0.12:
        reply = reply.replace("\n", "\r\n")  # YAML reads CRLF as line breaks; nothing else changes
    return {"id": f"composed-{index:03d}", "reply": reply, "expected": expected,
            "why": "composed from hand-written pieces"}


# --- whole replies, one rule each --------------------------------------------------------------------

def H(id: str, reply: str, expected: list[dict], why: str) -> dict:
    return {"id": id, "reply": reply, "expected": expected, "why": why}


def hand() -> list[dict]:
    big_paper = "\n\n".join(f"## Section {i}\n\nResult {i}: the score rose by 0.{i:03d}.\n\n```python\n"
                            f"def step_{i}(x):\n    return x + {i}\n```" for i in range(1, 171))
    cases = [
        H("paper-indented-code-fence", act("goto archive") + "\n" + act("create") + "\n" +
          block("title: Seeds\ncontent: |\n" + scalar(PAPER_PACKING)) + "\nSubmitted.",
          [exp("goto", "archive"), exp("create", None, {"title": "Seeds", "content": PAPER_PACKING + "\n"})],
          "a fence indented inside the block scalar is not the closing fence (not the same indentation, not none)"),
        H("paper-16k", act("create") + "\n" + block("title: Long\ncontent: |\n" + scalar(big_paper)) + "\n" + act("goto lobby"),
          [exp("create", None, {"title": "Long", "content": big_paper + "\n"}), exp("goto", "lobby")],
          "a paper of about 16,000 characters with 170 code blocks arrives whole"),
        H("paper-deeper-indent-fences", act("create") + "\n" +
          block("title: Deep\ncontent: |\n" + scalar(PAPER_FORECAST, "      ")),
          [exp("create", None, {"title": "Deep", "content": PAPER_FORECAST + "\n"})],
          "block scalar indented six spaces; its fences are content"),
        H("unclosed-at-end", act("create") + "\n```yaml\ntitle: Unclosed\ncontent: body text\n",
          [exp("create", None, {"title": "Unclosed", "content": "body text"})],
          "no closing fence: the repair appends one"),
        H("unclosed-glued-fence", act("create") + "\n```yaml\ntitle: Glued\ncontent: body text```",
          [exp("create", None, {"title": "Glued", "content": "body text"})],
          "the segment's last line contains ``` and is taken as the closing fence"),
        H("unclosed-then-action", act("create") + "\n```yaml\ntitle: Forgot the fence\ncontent: x\n" + act("goto lobby"),
          [exp("create", None, {"title": "Forgot the fence", "content": "x"}), exp("goto", "lobby")],
          "an unclosed block is not neutralised, so the next action is found; the segment ends there"),
        H("unclosed-deeper-fence-then-action", act("create") + "\n```yaml\ntitle: Hi\n      ```\n" + act("goto lobby"),
          [exp("create", None, {"title": "Hi"}), exp("goto", "lobby")],
          "a deeper fence does not close the block; the segment's last line holds ``` and closes it"),
        H("unclosed-paper-trailing-prose", act("create") + "\n```yaml\ntitle: T\ncontent: text\n\nThat is all for now.",
          [exp("create", None, None, True)],
          "no closing fence: the trailing prose becomes part of the YAML, which then fails"),
        H("closed-by-unindented-fence", act("create") + "\n   ```yaml\n   a: 1\n```",
          [exp("create", None, {"a": 1})], "a fence with no indentation closes an indented block"),
        H("closed-same-indent", "Plan:\n\n" + act("create") + "\n  ```yaml\n  title: Indented\n  ```\n",
          [exp("create", None, {"title": "Indented"})], "same indentation closes"),
        H("yaml-after-prose-not-attached", act("create") + "\nHere it is:\n```yaml\ntitle: Hi\n```",
          [exp("create")], "text before the block in the segment: the block is ignored"),
        H("yaml-after-blank-lines", act("create") + "\n\n   \n```yaml\ntitle: Hi\n```",
          [exp("create", None, {"title": "Hi"})], "only whitespace before the block"),
        H("two-blocks-first-wins", act("create") + "\n```yaml\na: 1\n```\n```yaml\nb: 2\n```",
          [exp("create", None, {"a": 1})], "the first block of the segment is the YAML"),
        H("yml-fence", act("speak") + "\n```yml\nmessage: hi\n```", [exp("speak", None, {"message": "hi"})],
          "```yml is accepted"),
        H("YAML-fence-uppercase", act("speak") + "\n```YAML\nmessage: hi\n```", [exp("speak", None, {"message": "hi"})],
          "the fence tag is case-insensitive"),
        H("empty-yaml-block", act("create") + "\n```yaml\n```", [exp("create", None, None, True)],
          "an empty block does not parse to a mapping"),
        H("action-in-python-fence", "Let me run this:\n```python\n" + act("goto archive") + "\n```",
          [exp("goto", "archive")], "only yaml blocks hide actions; a python fence does not"),
        H("action-in-text-fence", "```\n" + act("read 2") + "\n```", [exp("read", "2")],
          "a bare fence does not hide actions"),
        H("action-in-unattached-yaml", "Example:\n```yaml\n" + act("goto exit") + "\n```\n" + act("goto lobby"),
          [exp("goto", "lobby")], "an action inside a closed yaml block is neutralised"),
        H("action-in-thought", "```thought\n" + act("goto exit") + "\n```\n" + act("goto mail"),
          [exp("goto", "mail")], "thought blocks are deleted"),
        H("thought-uppercase", "```Thought\nmaybe " + act("goto exit") + "\n" + act("goto exit") + "\n```\n" + act("read 1"),
          [exp("read", "1")], "the thought tag is case-insensitive"),
        H("mid-line-ignored", "I will " + act("goto archive") + " now.\nThen " + act("read 3"),
          [], "actions in the middle of a line are ignored"),
        H("mid-line-and-real", "Next: " + act("goto archive") + "\n" + act("goto mail"), [exp("goto", "mail")],
          "only the line-start action counts"),
        H("double-backtick", "``" + act("goto mail") + "``", [], "two backticks are not the optional backtick"),
        H("nested-braces", act("goto {mail}"), [], "no braces inside the action"),
        H("missing-brace", A + "{goto mail", [], "no closing brace: no action"),
        H("trailing-text", act("goto mail") + " then {more} text", [exp("goto", "mail")],
          "text after the closing brace is ignored"),
        H("empty-braces", act(""), [exp("", None, None, True)], "empty braces: command \"\" with an error"),
        H("whitespace-braces", act("   "), [exp("", None, None, True)], "blank content is empty too"),
        H("uppercase-name", act("CREATE My Title"), [exp("create", "My Title")],
          "the name is lower-cased, the args keep their case"),
        H("crlf-yaml", (act("create") + "\n```yaml\ntitle: Hi\ncontent: |\n  a\n  b\n```\n" + act("goto lobby")).replace("\n", "\r\n"),
          [exp("create", None, {"title": "Hi", "content": "a\nb\n"}), exp("goto", "lobby")],
          "CRLF line ends: YAML reads them as line breaks"),
        H("crlf-paper", (act("create") + "\n" + block("title: P\ncontent: |\n" + scalar(PAPER_PACKING))).replace("\n", "\r\n"),
          [exp("create", None, {"title": "P", "content": PAPER_PACKING + "\n"})],
          "CRLF in a paper with indented fences"),
        H("trailing-spaces-in-scalar", act("create") + "\n```yaml\ncontent: |\n  two spaces after me  \n  none\n```",
          [exp("create", None, {"content": "two spaces after me  \nnone\n"})],
          "a literal block scalar keeps trailing spaces"),
        H("whitespace-only-lines-kept", act("create") + "\n```yaml\ncontent: |\n  a\n     \n  b\n```",
          [exp("create", None, {"content": "a\n   \nb\n"})],
          "a whitespace-only line keeps the spaces beyond the block's indentation"),
        H("trailing-spaces-prose", "Done.   \n" + act("goto lobby") + "   \n", [exp("goto", "lobby")],
          "trailing spaces after an action are text after the brace"),
        H("tab-indented-action", "\t" + act("goto mail"), [exp("goto", "mail")], "tabs before an action are allowed"),
        H("tags-string", act("create") + "\n```yaml\ntitle: T\ntags: alpha,  beta , gamma\n```",
          [exp("create", None, {"title": "T", "tags": ["alpha", "beta", "gamma"]})], "tags are split and trimmed"),
        H("tags-list", act("create") + "\n```yaml\ntitle: T\ntags:\n  - ' ml '\n  - rl\n```",
          [exp("create", None, {"title": "T", "tags": ["ml", "rl"]})], "tag strings are trimmed"),
        H("prune-range-arg", act("prune_response 441:458"), [exp("prune_response", "441:458")],
          "the range is an argument; no YAML"),
        H("prune-range-backticks", "Pruning old ticks.\n`" + act("prune_response 441:458") + "`\nDone.",
          [exp("prune_response", "441:458")], "backticks around a prune range"),
        H("prune-single-tick", act("prune_response 441"), [exp("prune_response", "441")], "one tick"),
        H("exit-confirm-prose", "I am leaving because my work is complete.\n" + act("exit"), [exp("exit")],
          "exit as an action"),
        H("many-actions", "\n".join(act(f"read {i}") for i in range(1, 21)), [exp("read", str(i)) for i in range(1, 21)],
          "twenty actions run in order"),
        H("yaml-neutralised-segment-end", act("create") + "\n```yaml\ntitle: A\n```\n" + act("create") + "\n```yaml\ntitle: B\n```",
          [exp("create", None, {"title": "A"}), exp("create", None, {"title": "B"})], "each action its own block"),
        H("think-tag-prose", "<think>\nweighing options\n</think>\n" + act("goto archive"), [exp("goto", "archive")],
          "a think span of prose only"),
        H("only-prose", "I am not sure what to do yet. I will wait.", [], "no action"),
        H("empty-reply", "", [], "nothing at all"),
        H("unicode-args", act("search 円周 packing ✓"), [exp("search", "円周 packing ✓")], "unicode arguments"),
        H("folded-scalar", act("create") + "\n```yaml\nabstract: >\n  one\n  two\n\n  three\n```",
          [exp("create", None, {"abstract": "one two\nthree\n"})], "folded scalar"),
        H("quoted-colon", act("create") + '\n```yaml\ntitle: "Re: the results"\n```',
          [exp("create", None, {"title": "Re: the results"})], "quoted values may hold ': '"),
        H("reply-with-args-and-yaml", act("reply 12") + "\n```yaml\ncontent: |\n  I agree.\n```",
          [exp("reply", "12", {"content": "I agree.\n"})], "args and YAML together"),
        # Deliberate differences: the station's parser does better here (docs/parser.md).
        H("deliberate-list-markers", "My actions:\n- `" + act("help lobby") + "`\n* " + act("goto archive") + "\n1. " + act("read 3"),
          [], "the spec finds no action after a list marker (the station does: docs/parser.md)"),
        H("deliberate-action-text-in-paper", act("create") + "\n```yaml\ntitle: How to move\ncontent: |\n  Write this on its own line:\n  "
          + act("goto archive") + "\n```",
          [exp("create", None, {"title": "How to move", "content": "Write this on its own line:\n_action{goto archive}\n"})],
          "the spec rewrites /execute_action{ inside YAML to _action{ (the station keeps the text: docs/parser.md)"),
        H("deliberate-unindented-fence-in-scalar",
          act("create") + "\n```yaml\ntitle: Oops\ncontent: |\n  Code:\n  ```python\n  x = 1\n```\n  More text.\n```",
          [exp("create", None, {"title": "Oops", "content": "Code:\n```python\nx = 1\n"})],
          "the spec closes at the unindented fence and silently drops the rest (the station keeps it: docs/parser.md)"),
    ]
    return cases


def main() -> None:
    rng = random.Random(18)
    pool = units()
    records = hand() + [compose(rng, pool, i) for i in range(1, COMPOSED + 1)]
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids))
    with open(HERE / "replies.jsonl", "w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"wrote {len(records)} replies ({len(records) - COMPOSED} hand-written, {COMPOSED} composed)")


if __name__ == "__main__":
    main()
