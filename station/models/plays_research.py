"""Scripted plays for the Research Counter: read the task, submit real programs, follow the results.

On circle packing the policy climbs a ladder of real algorithms (evaluators/programs): a
square grid, then a hexagonal layout, then scipy-optimised centres and radii, searching
harder with each further submission and as the station ages, so the leaderboard improves over time. Now and then it
submits with a misspelt name, as people do, which the debugger can repair. On the general
Python task it runs small scripts; on batch integration it climbs from plain PCA through ComBat to a
batch-balanced kNN graph, varying their settings; on forecasting it tunes the shared MLP, then makes
it predict the change from the last frame; on Sokoban it tunes the actor-critic. It keeps at most two evaluations open (the room's limit),
counting its submissions and the result messages it has received.
"""
from __future__ import annotations

import random
import re

from .scripted import Situation, _yaml_block, room_call, room_play

TASK_ROW = re.compile(r"^\| (\d+) \| (.+?) \|$", re.MULTILINE)
CIRCLES = re.compile(r"Circle Packing.*?n = (\d+)")
RESULT = re.compile(r"\*\*Evaluation #(\d+) ")
SCORED = re.compile(r"\*\*Evaluation #(\d+) has a result\*\*[^\n]*\n+Score: (-?\d+(?:\.\d+)?(?:e-?\d+)?)")
KEEP_SCORES = 6
MAX_OPEN = 2
TYPO_RATE = 0.12


def _remember_tasks(s: Situation) -> dict[str, str]:
    """Task id -> title, from the Research Tasks table of the room's view (when it is in the prompt)."""
    tasks = s.notes.setdefault("tasks", {})
    start = s.prompt.rfind("**Research Tasks**")
    if start >= 0:
        lines = s.prompt[start:].split("\n")[2:]
        table = "\n".join(line for line in lines[:lines.index("") if "" in lines else len(lines)])
        tasks.update({number: title.strip() for number, title in TASK_ROW.findall(table)})
    return tasks


def remember_results(s: Situation) -> None:
    """Note the result messages of this turn, wherever the agent is: which evaluations answered, and
    the scores of the successful ones (the last few, which its papers cite)."""
    seen = s.notes.setdefault("results_seen", [])
    seen.extend(n for n in dict.fromkeys(RESULT.findall(s.messages)) if n not in seen)
    scores = s.notes.setdefault("scores", [])
    for number, score in SCORED.findall(s.messages):
        if all(n != int(number) for n, _ in scores):
            scores.append([int(number), float(score)])
    del scores[:-KEEP_SCORES]


def _open_count(s: Situation) -> int:
    """Own evaluations without a result message yet (each submission gets exactly one)."""
    return max(0, s.notes.get("submitted", 0) - len(s.notes.get("results_seen", [])))


@room_call("research")
def _call_research(s: Situation, rng: random.Random) -> bool:
    if s.guest:
        return False
    # Research is one pursuit among several: the other rooms get their visits between experiments.
    return s.tick >= s.notes.get("next_research_tick", 0) and rng.random() < 0.7


@room_play("research")
def _play_research(s: Situation, rng: random.Random) -> list[str]:
    tasks = _remember_tasks(s)
    if not s.notes.get("task_read"):
        s.notes["task_read"] = True
        return ["/execute_action{read 1}"]
    if not tasks:
        return ["/execute_action{help research}"]
    s.notes["next_research_tick"] = s.tick + rng.randint(3, 6)
    if _open_count(s) >= MAX_OPEN:
        s.notes["next_research_tick"] = s.tick + 1
        return ["/execute_action{rank score}"] if rng.random() < 0.3 else []
    number = max(tasks, key=int)
    submission = _submission(tasks[number], s, rng)
    if submission is None:
        return [f"/execute_action{{read {number}}}"]
    s.notes["submitted"] = s.notes.get("submitted", 0) + 1
    return [f"/execute_action{{submit {number}}}", _yaml_block(submission)]


def _submission(title: str, s: Situation, rng: random.Random) -> dict[str, str] | None:
    circles = CIRCLES.search(title)
    if circles:
        return _circle_submission(int(circles.group(1)), s, rng)
    if "General Purpose" in title:
        return _general_submission(s, rng)
    if "Batch Integration" in title:
        return _integration_submission(s, rng)
    if "Forecasting" in title:
        return _forecasting_submission(s, rng)
    if "Sokoban" in title:
        return _sokoban_submission(s, rng)
    return None


def _circle_submission(n: int, s: Situation, rng: random.Random) -> dict[str, str]:
    from evaluators.programs import program

    # Build on what the leaderboard shows: after a grid, try rows; after rows, optimise.
    seen = 2 if ("Hexagonal rows" in s.prompt or "Optimised centres" in s.prompt) else \
        1 if "Square grid" in s.prompt else 0
    level = max(s.notes.get("cp_level", 0), seen)
    s.notes["cp_level"] = level + 1
    if level == 0:
        kind, constants, title = "grid", {}, f"Square grid of {n} equal circles"
        abstract = "Equal circles on the smallest square grid that holds them, as a reference point."
        tags = "grid, baseline"
    elif level == 1:
        kind, constants, title = "hex", {}, f"Hexagonal rows for {n} circles"
        abstract = "Circles on staggered rows, with the radii chosen by a linear program that maximises their sum."
        tags = "hexagonal, layout"
    else:
        step = level - 2 + s.tick // 15  # each further try, and a station that has run longer, search harder
        starts, hops, seed = min(2 + 2 * step, 12), min(8 * step, 40), rng.randrange(10_000)
        kind, constants = "optimized", {"STARTS": starts, "HOPS": hops, "SEED": seed}
        title = f"Optimised centres and radii: {starts} starts, {hops} perturbation rounds (seed {seed})"
        abstract = (f"Maximise the sum of radii over centres and radii with SLSQP from {starts} random starts and "
                    f"{hops} rounds of perturbing the best layout, then shrink radii just enough to satisfy every "
                    "constraint exactly.")
        tags = "optimization, slsqp, restarts"
    code = program(kind, n, **constants)
    if rng.random() < TYPO_RATE and "np.zeros(" in code:
        code = code.replace("np.zeros(", "np.zeroes(", 1)  # a slip the debugger can mend
    return {"title": title, "tags": tags, "abstract": abstract, "content": code}


INTEGRATION_LADDER = [
    ("no_integration.py", "PCA of the normalized data ({pcs} components)", "pca, reference",
     "No correction: the principal components of the normalized expression, to see the batch effect."),
    ("combat.py", "ComBat, then PCA ({pcs} components)", "combat, linear-model",
     "Empirical-Bayes ComBat on the genes removes per-batch location and scale; then principal components."),
    ("bbknn_style.py", "Batch-balanced kNN, {k} neighbours per batch, {pcs} PCs", "bbknn, graph",
     "Every cell takes its nearest neighbours in each batch separately, so the graph mixes batches."),
]


def _integration_submission(s: Situation, rng: random.Random) -> dict[str, str]:
    from pathlib import Path

    import evaluators.scrna as scrna

    level = min(s.notes.get("bi_level", 0), len(INTEGRATION_LADDER) - 1)
    s.notes["bi_level"] = level + 1
    name, title, tags, abstract = INTEGRATION_LADDER[level]
    pcs, k = rng.choice([20, 30, 40, 50]), rng.randint(3, 8)
    code = (Path(scrna.__file__).parent / "baselines" / name).read_text(encoding="utf-8")
    code = code.replace("n_comps=50", f"n_comps={pcs}").replace("NEIGHBOURS_PER_BATCH = 4",
                                                                 f"NEIGHBOURS_PER_BATCH = {k}")
    if rng.random() < TYPO_RATE:
        code = code.replace('adata.obsm["X_emb"]', 'adata.obsmm["X_emb"]', 1)  # a slip the debugger can mend
    return {"title": title.format(pcs=pcs, k=k), "tags": tags, "abstract": abstract, "content": code}


def _forecasting_submission(s: Situation, rng: random.Random) -> dict[str, str]:
    from pathlib import Path

    import evaluators.forecasting as forecasting

    level = s.notes["fc_level"] = s.notes.get("fc_level", 0) + 1
    hidden, lr = rng.choice([32, 64, 128]), rng.choice([3e-4, 1e-3, 3e-3])
    code = (Path(forecasting.__file__).parent / "baselines" / "shared_mlp.py").read_text(encoding="utf-8")
    code = code.replace('{"learning_rate": 1e-3, "hidden": 64}', f'{{"learning_rate": {lr}, "hidden": {hidden}}}')
    if level > 1:  # from the second try on: predict the change from the last frame, not the frames
        code = code.replace("return jnp.swapaxes(h, 1, 2)  # (batch, 32, neurons)",
                            "return jnp.swapaxes(h, 1, 2) + x[:, -1:, :]  # the change from the last frame")
        title, tags = f"Shared MLP on top of persistence ({hidden} units, lr {lr:g})", "mlp, residual"
        abstract = "The shared-neuron MLP predicts the change from each neuron's last frame instead of the frames."
    else:
        title, tags = f"Shared-neuron MLP, {hidden} units, lr {lr:g}", "mlp, baseline-variant"
        abstract = "The baseline's per-neuron MLP with a different width and learning rate."
    return {"title": title, "tags": tags, "abstract": abstract, "content": code}


def _sokoban_submission(s: Situation, rng: random.Random) -> dict[str, str]:
    from pathlib import Path

    import evaluators.sokoban as sokoban

    lr, entropy = rng.choice([2e-4, 4e-4, 8e-4]), rng.choice([0.005, 0.01, 0.02])
    code = (Path(sokoban.__file__).parent / "baselines" / "cnn_pg.py").read_text(encoding="utf-8")
    code = code.replace('{"learning_rate": 4e-4, "entropy_coef": 0.01, "value_coef": 0.5}',
                        f'{{"learning_rate": {lr}, "entropy_coef": {entropy}, "value_coef": 0.5}}')
    return {"title": f"CNN actor-critic, lr {lr:g}, entropy {entropy:g}", "tags": "cnn, a2c, tuning",
            "abstract": "The convolutional actor-critic with another learning rate and entropy bonus.",
            "content": code}


def _general_submission(s: Situation, rng: random.Random) -> dict[str, str]:
    count = s.notes["general_runs"] = s.notes.get("general_runs", 0) + 1
    code = (f"import platform, statistics\n"
            f"values = [((i * 7919) % 101) / 10 for i in range({50 * count})]\n"
            f"print('python', platform.python_version())\n"
            f"print('mean', round(statistics.mean(values), 3), 'stdev', round(statistics.stdev(values), 3))\n")
    return {"title": f"Small statistics probe {count}", "tags": "probe", "content": code,
            "abstract": "A short script that prints the interpreter version and summary statistics."}
