"""What `station multistart --choose admin` asks: its interview of a branch's agents and its request to
the administrator model, with the form of the administrator's reply. Shared by the station, which
sends and reads them, and the scripted stand-ins, which answer them offline."""

from __future__ import annotations

INTERVIEW_HEADER = "## Interview (outside the station)"
INTERVIEW = f"""{INTERVIEW_HEADER}

Several runs of this station started from the same point; the station's administrator will keep one
of them and set the others aside. Before choosing, the administrator asks a few agents of each run
three short questions. This interview is no part of the station: it takes no tick, nothing you write
here is an action, and only the administrator reads your answers.

1. What have you been working on?
2. What worked, and what did not? Give your best score so far, if you have one.
3. What would you do next?

Answer in plain text, in about 150 words at most."""

ADMINISTRATOR_HEADER = "## The administrator's choice"
CHOSEN = "Chosen branch:"
SELECTION = "## Selection report"
GUIDANCE = "## Guidance report"
BRANCH_HEADING = "### Branch "  # each branch's part of the request: its row and its interviews
REPLY_FORM = f"""{CHOSEN} <the branch's number>
{SELECTION}
<why this branch: what its agents achieved and what the others lack; a few paragraphs at most>
{GUIDANCE}
<advice to the chosen branch's agents, addressed to them: what to keep doing, what to try next>"""
