"""The scripted researcher on a task no built-in play knows (rooms/research/evolve_play.py): it evolves
the task's programs offline, through the room's own actions, and the board's best improves.

The mutations (rooms/research/mutation.py) are checked alone first: they compile, they change the
program, a seed always gives the same one, and they stay inside an EVOLVE-BLOCK when there is one."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from rooms.research.mutation import mutate
from station.apps.world import Station
from station.core.config import load_config
from station.core.engine import Engine

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "tasks"
INITIAL_PROGRAM = (EXAMPLES / "openevolve_function_minimization" / "initial_program.py").read_text()
AWKWARD = '''# ünïcode before the code moves every byte offset
import math


@staticmethod
def shape(x: float = 2.5, *rest: int) -> float:
    label = f"{x:.3f} é {len(rest) * 2}"
    table = {"a": 3, "b": 4.5}
    if x < 10 and table["a"] >= 2:
        return math.sqrt(abs(x) * 3.0) + table["b"] / 7 - len(label)
    return sum([x] * 3) ** 2
'''
TWO_BLOCKS = """import math

# EVOLVE-BLOCK-START
def first():
    return 2.5 * 3
# EVOLVE-BLOCK-END

FIXED = 7.25 * math.pi


# EVOLVE-BLOCK-START
def second(x):
    return x ** 2 + 10
# EVOLVE-BLOCK-END
"""
PROGRAMS = {
    "line_fit baseline": (EXAMPLES / "line_fit" / "baselines" / "mean.py").read_text(),
    "openevolve initial program": INITIAL_PROGRAM,
    "awkward": AWKWARD,
}
SEEDS = range(60)


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_mutation_compiles_changes_the_program_and_repeats_for_its_seed(name: str) -> None:
    code = PROGRAMS[name]
    mutations = [mutate(code, random.Random(seed)) for seed in SEEDS]
    for seed, mutation in zip(SEEDS, mutations):
        assert mutation is not None, f"seed {seed} found nothing to mutate"
        compile(mutation.code, f"{name}, seed {seed}", "exec")
        assert mutation.code != code and 1 <= len(mutation.edits) <= 2
        assert all(re.match(r"line \d+: ", edit) for edit in mutation.edits), mutation.edits
        assert mutate(code, random.Random(seed)) == mutation  # the seed alone decides
    assert len({m.code for m in mutations if m is not None}) > len(SEEDS) // 2  # seeds differ


def test_what_a_mutation_leaves_alone() -> None:
    for seed in SEEDS:
        mutation = mutate(AWKWARD, random.Random(seed))
        assert mutation is not None
        # indexes, f-strings, annotations and decorators are never edited
        for kept in ('table["a"]', 'table["b"]', 'f"{x:.3f} é {len(rest) * 2}"', "x: float", "-> float",
                     "@staticmethod", "*rest: int"):
            assert kept in mutation.code, (seed, kept, mutation.code)
    # in an OpenEvolve program only the EVOLVE-BLOCK changes: the objective and entry point are the task's
    head, _, rest = INITIAL_PROGRAM.partition("# EVOLVE-BLOCK-START\n")
    _, _, tail = rest.partition("# EVOLVE-BLOCK-END\n")
    for seed in SEEDS:
        mutation = mutate(INITIAL_PROGRAM, random.Random(seed))
        assert mutation is not None
        assert mutation.code.startswith(head + "# EVOLVE-BLOCK-START\n")
        assert mutation.code.endswith("# EVOLVE-BLOCK-END\n" + tail)
    # several blocks (as ShinkaEvolve programs have): each may change, what lies between them never
    changed = set()
    for seed in SEEDS:
        mutation = mutate(TWO_BLOCKS, random.Random(seed))
        assert mutation is not None and "\nFIXED = 7.25 * math.pi\n" in mutation.code
        changed |= {part for part in ("first", "second") if mutation.code.split("FIXED")[part == "second"]
                    != TWO_BLOCKS.split("FIXED")[part == "second"]}
    assert changed == {"first", "second"}
    # nothing to edit, or no program at all
    assert mutate("print('hello')\n", random.Random(1)) is None
    assert mutate("def broken(:\n    return 2.5\n", random.Random(1)) is None


def test_built_in_tasks_keep_their_own_plays_and_any_other_task_gets_the_evolution() -> None:
    from rooms.research.plays import _known_task

    known = _known_task("Circle Packing in a Unit Square (n = 26)")
    assert known is not None and known.kind == "circle_packing"
    assert _known_task("Fit a line") is None and _known_task("openevolve function minimization") is None


def evolve(config_file: Path, directory: Path, ticks: int) -> list[dict]:
    """Run a shipped config's offline station (scripted agents, local executor) for `ticks` ticks
    from the System baseline's result; its evaluations, and how many replies asked for a program's
    code. A baseline never holds the tick and offline ticks take milliseconds, so its result comes
    at a tick that depends on the machine's load (10 to 20 on an idle 2-core machine); counting
    from it keeps the budget the agents get the same under any load."""
    station = Station.create(directory, load_config(config_file))
    try:
        engine = Engine(station)
        while station.store.scalar("SELECT COUNT(*) FROM evaluations WHERE author = 'System' AND status = 'queued'"):
            assert station.ctx.tick <= ticks, f"the System baseline has no result after {ticks} ticks"
            engine.run(ticks=1)
        engine.run(ticks=ticks)
        rows = station.store.all(
            "SELECT id, author, lineage, tick, finished_tick, status, score, title, abstract, code FROM evaluations "
            "ORDER BY id"
        )
        reviews = station.store.scalar("SELECT COUNT(*) FROM turns WHERE reply LIKE '%/execute_action{review %'")
        boards = station.store.all(
            "SELECT agent, tick, prompt FROM turns WHERE prompt LIKE '%**Submitted Evaluations**%' ORDER BY id"
        )
        return [dict(r) for r in rows] + [{"reviews": reviews, "boards": [tuple(b) for b in boards]}]
    finally:
        station.close()


def improvement(rows: list[dict]) -> tuple[dict, dict]:
    """The System baseline and the agents' best finished evaluation, checked to be the play's work."""
    *rows, counts = rows
    (baseline,) = [r for r in rows if r["author"] == "System"]
    assert baseline["status"] == "finished", baseline
    evolved = [r for r in rows if r["author"] != "System"]
    assert evolved and all(r["title"].startswith("Mutation of") for r in evolved), [r["title"] for r in evolved]
    assert counts["reviews"] > 0  # the code came through `review`, as a model would get it
    finished = [r for r in evolved if r["status"] == "finished"]
    assert finished, [(r["id"], r["status"]) for r in evolved]
    return baseline, max(finished, key=lambda r: r["score"])


def test_scripted_agents_improve_the_line_fit_folder_within_60_ticks_of_its_baseline(tmp_path: Path) -> None:
    baseline, best = improvement(evolve(ROOT / "configs" / "folder_task.yaml", tmp_path / "st", 60))
    assert best["score"] > baseline["score"], (best, baseline)
    assert re.search(r"A random mutation of evaluation #\d+", best["abstract"]), best["abstract"]


@pytest.fixture(scope="module")
def openevolve_run(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return evolve(ROOT / "configs" / "openevolve_task.yaml", tmp_path_factory.mktemp("openevolve") / "st", 60)


# A leaderboard row of task 1 (ID, Task, Title, Author, Tick, Score, ...): its score, as the board shows it
BOARD_ROW = re.compile(r"^\| \d+ \| 1 \| [^|\n]* \| [^|\n]* \| \d+ \| (-?\d+(?:\.\d+)?) \|", re.MULTILINE)


def test_scripted_agents_improve_the_openevolve_folder_within_60_ticks_of_its_baseline(
    openevolve_run: list[dict],
) -> None:
    baseline, best = improvement(openevolve_run)
    assert best["score"] > baseline["score"], (best, baseline)
    head, _, rest = INITIAL_PROGRAM.partition("# EVOLVE-BLOCK-START\n")
    assert best["code"].startswith(head) and best["code"].endswith(rest.partition("# EVOLVE-BLOCK-END\n")[2])


def test_each_child_builds_on_the_best_program_its_author_has_seen(openevolve_run: list[dict]) -> None:
    """Once the System baseline's result is out, nothing is built on the task statement's program: each
    child's parent scores at least as well as the best row of every board its author's prompts showed
    until then (boards show 4 decimals, hence the tolerance). A mature agent's board shows every
    lineage, an immature one's its own lineage and the System: the abstract says which it chose from."""
    *rows, counts = openevolve_run
    (baseline,) = [r for r in rows if r["author"] == "System"]
    by_id = {r["id"]: r for r in rows}
    shown: dict[str, list[tuple[int, float]]] = {}  # author -> (tick, the best score a board showed it)
    for agent, tick, prompt in counts["boards"]:
        scores = [float(score) for score in BOARD_ROW.findall(prompt)]
        if scores:
            shown.setdefault(agent, []).append((tick, max(scores)))
    kinds: dict[str, int] = {}
    for child in (r for r in rows if r["author"] != "System"):
        if "the program in the task statement" in child["abstract"]:
            assert child["tick"] <= baseline["finished_tick"], child
            continue
        found = re.match(r"A random mutation of evaluation #(\d+) \(score [^)]*\), ([^:]*), keeping", child["abstract"])
        assert found, child["abstract"]
        parent, why = by_id[int(found.group(1))], found.group(2)
        kinds[why] = kinds.get(why, 0) + 1
        seen = [best for tick, best in shown.get(child["author"], []) if tick <= child["tick"]]
        assert seen and parent["score"] >= max(seen) - 1e-4, (child, parent, max(seen, default=None))
        if why != "the best on the board":
            assert parent["lineage"] in (child["lineage"], None), (child, parent)
    assert kinds.get("the best on the board") and kinds.get("my lineage's best"), kinds


def test_a_child_identical_to_a_program_already_scored_is_not_sent() -> None:
    """The same code scored again is no progress (with an unseeded evaluator, only noise): a mutation
    equal to a program whose record the agent holds is drawn again."""
    from rooms.research.evolve_play import evolve_step
    from station.models.scripted import Situation

    def record(number: int, code: str) -> str:
        return f"**Evaluation #{number}: a program**\n\nCode:\n```python\n{code.removesuffix(chr(10))}\n```\n"

    def child(prompt: str) -> dict[str, str] | None:
        notes = {"evolve": {"task": "1", "ranked": True, "best": [5, 0.97, "", True]}}
        return evolve_step("1", Situation(prompt, notes, []), random.Random(3))[1]

    first = mutate(INITIAL_PROGRAM, random.Random(3))
    assert first is not None
    sent = child(record(5, INITIAL_PROGRAM))
    assert sent is not None and sent["content"] == first.code
    assert "evaluation #5 (score 0.97), the best on the board" in sent["abstract"]
    sent = child(record(5, INITIAL_PROGRAM) + "\n---\n" + record(6, first.code))
    assert sent is not None and sent["content"] not in (first.code, INITIAL_PROGRAM)


def test_a_board_ranked_by_more_than_the_score_is_read_by_its_order() -> None:
    """A reference-format task may rank by a sort key that is not the score (a sparse ruler: fewer
    marks rank first): once a board ranked by score lists a lower score above a higher one, its top row
    is the best to build on; a board in submission order compares the scores."""
    from rooms.research.evolve_play import _note_best
    from station.models.scripted import Situation

    def board(rows: list[tuple[int, float]], below: str) -> str:
        lines = ["**Submitted Evaluations**", "", "| ID | Task | Title | Author | Tick | Score |", "|---|---|---|---|---|---|"]
        lines += [f"| {n} | 1 | Ruler {n} | System | 0 | {v} |" for n, v in rows]
        return "\n".join([*lines, "", below])

    in_id_order: dict = {"task": "1"}
    _note_best(in_id_order, Situation(board([(2, 6.0), (1, 11.0)], "Filter: none"), {}, []))
    assert in_id_order["best"][:2] == [1, 11.0] and "by_rank" not in in_id_order
    ranked: dict = {"task": "1"}
    _note_best(ranked, Situation(board([(2, 6.0), (1, 11.0)], "Sorted by: score."), {}, []))
    assert ranked["best"][:2] == [2, 6.0] and ranked["by_rank"]
    _note_best(ranked, Situation(board([(7, 5.0), (2, 6.0), (1, 11.0)], "Sorted by: score."), {}, []))
    assert ranked["best"][:2] == [7, 5.0]  # a new top row is the new best, though its score is lower
