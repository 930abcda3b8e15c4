"""Red team: the EVOLVE-BLOCK frame check must compare what Python runs (issue 51, item 2).

The old check split a program's text with str.splitlines(), which breaks lines at characters
Python does not (U+000B, U+000C, U+001C-U+001E, U+0085, U+2028, U+2029). A program whose frame
after the block is one comment line, the frame's lines joined by such a character, passed the
check line for line while Python never ran that frame: the block's own run_experiment, which
forges a perfect answer, ran instead. A string opened in one block and closed in the next
swallowed the frame between them the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluators.folder.layout import frame_tokens
from evaluators.folder.task import FolderTask
from evaluators.source_text import unhonoured_line_break
from station.apps.cli import main as station

SHINKA = Path(__file__).parent / "data" / "evolve_formats" / "shinka_unit_vector"
SEPARATORS = ["\x1c", "\x0b", "\x0c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
FORGED = 'def run_experiment(n, seed):\n    return {"n": n, "seed": seed, "angles": [6.283185307179586 * i / n for i in range(n)]}\n'
END = "# EVOLVE-BLOCK-END"


def hidden_frame(separator: str) -> str:
    """The initial program with a forged run_experiment in its block, and the real frame after the
    block folded into the END marker's comment line: str.splitlines() shows the frame intact."""
    code = (SHINKA / "initial.py").read_text()
    before, after = code.split(END + "\n")
    return before + FORGED + separator.join([END, *after.rstrip("\n").split("\n")]) + "\n"


@pytest.mark.parametrize("separator", SEPARATORS)
def test_a_frame_folded_into_one_comment_line_is_refused(separator: str) -> None:
    task = FolderTask(str(SHINKA))
    attack = hidden_frame(separator)
    assert attack.splitlines()[-3:] == (SHINKA / "initial.py").read_text().splitlines()[-3:]  # the text looks kept
    why = task._outside_the_blocks(attack)
    assert f"U+{ord(separator):04X}" in why and "line " in why, why


def test_the_folded_frame_is_refused_before_it_runs_and_scores_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    program = tmp_path / "attack.py"
    program.write_text(hidden_frame("\x1c"))
    status, out, _ = station(["evaluate", str(SHINKA), str(program), "--json"]), *capsys.readouterr()
    result = json.loads(out)
    assert status == 1 and not result["success"], result  # the old check let it score 1.0 (honest: 0.69)
    assert "U+001C" in result["details"] and result["duration_s"] == 0


def test_the_token_check_alone_sees_the_folded_frame() -> None:
    """Even without the line-break refusal, the frame's tokens differ: Python sees a comment."""
    honest = (SHINKA / "initial.py").read_text()
    for separator in SEPARATORS:
        assert frame_tokens(hidden_frame(separator)) != frame_tokens(honest)


def two_blocks(first: str, second: str) -> str:
    return (
        "import math\n\n# EVOLVE-BLOCK-START\n" + first + "# EVOLVE-BLOCK-END\n\n"
        "def check(x):\n    assert x > 0, 'the frame refuses this'\n    return x\n\n"
        "# EVOLVE-BLOCK-START\n" + second + "# EVOLVE-BLOCK-END\n\n"
        "def run():\n    return check(value())\n"
    )


def test_a_string_opened_in_one_block_and_closed_in_the_next_is_refused(tmp_path: Path) -> None:
    """The frame between the blocks becomes string text: every line of it is still there."""
    folder = tmp_path / "two_blocks"
    folder.mkdir()
    (folder / "initial.py").write_text(two_blocks("A = 1\n", "def value():\n    return A\n"))
    (folder / "evaluate.py").write_text((SHINKA / "evaluate.py").read_text())
    task = FolderTask(str(folder))
    honest = two_blocks("A = 2\nB = 3\n", "def value():\n    return A + B\n")
    assert task._outside_the_blocks(honest) == ""
    swallowed = two_blocks('A = -1\n_ = """\n', '"""\ndef check(x):\n    return x\n\ndef value():\n    return A\n')
    assert "differs from the initial program" in task._outside_the_blocks(swallowed)


def test_honest_programs_keep_passing() -> None:
    """Changes inside the blocks, comments, blank lines and indentation width outside them pass."""
    task = FolderTask(str(SHINKA))
    code = (SHINKA / "initial.py").read_text()
    assert task._outside_the_blocks(code) == ""
    assert task._outside_the_blocks(code.replace("math.pi * i / n", "2 * math.pi * i / n")) == ""
    commented = code.replace("def run_experiment(n, seed):", "# the frame\n\ndef run_experiment(n, seed):  # kept")
    assert task._outside_the_blocks(commented) == ""
    assert task._outside_the_blocks(code.replace("\n", "\r\n")) == ""
    moved = code.replace("    return {", "    return  {")  # spacing inside a line changes no token
    assert task._outside_the_blocks(moved) == ""


def test_frame_changes_python_sees_are_refused() -> None:
    task = FolderTask(str(SHINKA))
    code = (SHINKA / "initial.py").read_text()
    dedented = code.replace('    return {"n"', 'return_ = 0\nif True:\n    return {"n"')
    for changed in (
        code.replace("float(a)", "abs(a)"),
        code.replace("import math", "import math as m\nmath = m"),
        code.replace("    angles = [", "    pass\nangles = ["),
        dedented,
    ):
        assert "differs from the initial program" in task._outside_the_blocks(changed), changed


def test_a_coding_declaration_other_than_utf8_is_refused() -> None:
    """unicode_escape turns `\\u000a` inside a comment into a line Python runs: readers see a comment."""
    code = "# coding: unicode_escape\nx = 1  # \\u000a x = 2\n"
    assert "coding declaration" in (unhonoured_line_break(code) or "")
    assert unhonoured_line_break("# -*- coding: utf-8 -*-\nx = 1\n") is None


def test_the_refusal_names_the_character_and_line() -> None:
    assert unhonoured_line_break("x = 1\ny = 2  # a\u2028b\n") == (
        "line 2 holds U+2028 (LINE SEPARATOR), a line break for some readers that Python does not honour; "
        "remove it (inside a string, write it as an escape such as '\\u2028')"
    )
    assert unhonoured_line_break("x = 1\r\ny = 2\rz = 3\n") is None


def test_a_research_submission_with_such_a_break_is_refused_in_every_task() -> None:
    """Every task, not only evolve folders: the board, reviews and the debugger show code split
    as str.splitlines() splits it, so such a character shows readers lines Python never runs."""
    from rooms.research.config import ResearchConfig
    from rooms.research.params import SubmitParams
    from rooms.research.submission import Refused, check_form

    form = {"title": "t", "tags": ["x"], "abstract": "a"}
    code = "def main():\n    return 1  # really\u2029    return 2\n"
    with pytest.raises(Refused, match=r"line 2 holds U\+2029 \(PARAGRAPH SEPARATOR\)"):
        check_form(SubmitParams(**form, content=code), ResearchConfig())
    assert check_form(SubmitParams(**form, content=code.replace("\u2029", "\n")), ResearchConfig()).code
