"""Sokoban levels in numpy: a reverse-play generator and the reference rules.

A level is an (H, W) int8 array of cell codes for the inner grid; the outer border wall is
implicit (anything outside the grid counts as wall). The rules here are the trusted ones:
the station replays an agent's action sequence with `replay` to verify a solution, so they
are kept plain and obviously correct, and this module never imports JAX.

Generation works backwards from a solved room: boxes start on their targets and the agent
pulls them away, so every level is solvable by construction; its moves played backwards are a
solution (loops in the walks cut out; returned with the level, checked with `replay` first).
"""

from __future__ import annotations

import itertools

import numpy as np

# Cell codes; also the order of the observation one-hot. They must match the constants in
# evaluators/jaxtrain/station_jax/sokoban_env.py (a test checks).
FLOOR, WALL, TARGET, AGENT, BOX, AGENT_ON_TARGET, BOX_ON_TARGET = range(7)
N_CODES = 7

# Actions: 0 up, 1 right, 2 down, 3 left, as (row, col) offsets; the opposite of a is (a + 2) % 4.
MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))

# Rewards; must match sokoban_env.py as well.
STEP_PENALTY = -0.01
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_PENALTY = -1.0
SOLVE_BONUS = 10.0

_CHARS = {FLOOR: " ", WALL: "#", TARGET: ".", AGENT: "@", BOX: "$", AGENT_ON_TARGET: "+", BOX_ON_TARGET: "*"}
_CODES = {char: code for code, char in _CHARS.items()} | {"-": FLOOR, "_": FLOOR}


# ---------------------------------------------------------------------------------------------
# Text form, for tests and for reading levels by eye


def render(level: np.ndarray) -> str:
    """The level as text, one line per row, without the implicit outer wall:
    '#' wall, ' ' floor, '.' target, '@' agent, '+' agent on target, '$' box, '*' box on target."""
    return "\n".join("".join(_CHARS[int(code)] for code in row) for row in np.asarray(level))


def parse(text: str) -> np.ndarray:
    """The inverse of `render`: exactly the inner grid, one line per row (no outer border).

    Blank first and last lines are dropped (so triple-quoted strings work), short lines are
    padded with floor on the right (editors strip trailing spaces), and '-' or '_' may stand
    for floor. The result is not validated; see `validate`."""
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return parse_rows(lines)


def parse_rows(lines: list[str]) -> np.ndarray:
    """Exactly these rows (an all-floor row included), short ones padded with floor."""
    if not lines:
        raise ValueError("empty level")
    width = max(len(line) for line in lines)
    try:
        rows = [[_CODES[char] for char in line.ljust(width)] for line in lines]
    except KeyError as error:
        raise ValueError(f"unknown level character {error.args[0]!r}") from None
    return np.array(rows, dtype=np.int8)


def validate(level: np.ndarray) -> None:
    """Raise ValueError unless `level` is a playable level: a 2-D array of codes 0..6 with one
    agent, as many boxes as targets, and at least one box off a target."""
    level = np.asarray(level)
    if level.ndim != 2 or level.size == 0 or not np.issubdtype(level.dtype, np.integer):
        raise ValueError(f"a level is a non-empty 2-D integer array, got {level.dtype} {level.shape}")
    if level.min() < 0 or level.max() >= N_CODES:
        raise ValueError("level codes must lie in 0..6")
    agents = np.isin(level, (AGENT, AGENT_ON_TARGET)).sum()
    boxes = np.isin(level, (BOX, BOX_ON_TARGET)).sum()
    targets = np.isin(level, (TARGET, AGENT_ON_TARGET, BOX_ON_TARGET)).sum()
    if agents != 1:
        raise ValueError(f"a level needs exactly one agent, found {agents}")
    if boxes != targets:
        raise ValueError(f"{boxes} boxes but {targets} targets")
    if not (level == BOX).any():
        raise ValueError("every box is already on a target")


# ---------------------------------------------------------------------------------------------
# Reference rules (the verifier)


def step(level_state: np.ndarray, action: int) -> tuple[np.ndarray, float, bool]:
    """One move under the rules: returns (new cell array, reward, solved). The input is not changed.

    The agent moves one cell unless the cell is wall or off-grid. A box in the way is pushed one
    cell further if that cell is floor or target; otherwise nothing moves. Reward: STEP_PENALTY,
    plus 1 for a box pushed onto a target, minus 1 for one pushed off, plus SOLVE_BONUS when the
    step leaves every box on a target."""
    if int(action) != action or not 0 <= action < 4:
        raise ValueError(f"actions are 0..3, got {action!r}")
    grid = np.array(level_state, dtype=np.int8, copy=True)
    height, width = grid.shape
    ((row, col),) = np.argwhere((grid == AGENT) | (grid == AGENT_ON_TARGET))
    drow, dcol = MOVES[int(action)]

    def inside(r: int, c: int) -> bool:
        return 0 <= r < height and 0 <= c < width

    reward = STEP_PENALTY
    r1, c1 = row + drow, col + dcol
    if not inside(r1, c1) or grid[r1, c1] == WALL:
        return grid, reward, False
    if grid[r1, c1] in (BOX, BOX_ON_TARGET):
        r2, c2 = r1 + drow, c1 + dcol
        if not inside(r2, c2) or grid[r2, c2] not in (FLOOR, TARGET):
            return grid, reward, False
        was_on = grid[r1, c1] == BOX_ON_TARGET
        now_on = grid[r2, c2] == TARGET
        grid[r2, c2] = BOX_ON_TARGET if now_on else BOX
        grid[r1, c1] = TARGET if was_on else FLOOR
        if now_on:
            reward += BOX_ON_TARGET_REWARD
        if was_on:
            reward += BOX_OFF_TARGET_PENALTY
    grid[row, col] = TARGET if grid[row, col] == AGENT_ON_TARGET else FLOOR
    grid[r1, c1] = AGENT_ON_TARGET if grid[r1, c1] == TARGET else AGENT
    solved = not (grid == BOX).any()
    if solved:
        reward += SOLVE_BONUS
    return grid, reward, solved


def replay(level: np.ndarray, actions, max_steps: int) -> dict:
    """Play `actions` from `level`, stopping at the first solve; actions past `max_steps` are ignored.

    Returns {"solved": bool, "steps": steps played, "return": summed reward}. Raises ValueError
    for an invalid level or any action outside 0..3 (all actions are checked, played or not)."""
    validate(level)
    actions = np.asarray(actions)
    if actions.size == 0:
        actions = actions.astype(np.int64).reshape(0)
    if actions.ndim != 1 or not np.issubdtype(actions.dtype, np.integer) or actions.dtype == bool:
        raise ValueError(f"actions must be a 1-D integer sequence, got {actions.dtype} {actions.shape}")
    if actions.size and (actions.min() < 0 or actions.max() > 3):
        raise ValueError("actions must lie in 0..3")
    if int(max_steps) != max_steps or max_steps < 0:
        raise ValueError(f"max_steps must be a non-negative integer, got {max_steps!r}")
    grid, total, steps, solved = np.asarray(level), 0.0, 0, False
    for action in actions[: int(max_steps)].tolist():
        grid, reward, solved = step(grid, action)
        total += reward
        steps += 1
        if solved:
            break
    return {"solved": bool(solved), "steps": steps, "return": float(total)}


# ---------------------------------------------------------------------------------------------
# Generator


def _uniforms(rng: np.random.Generator, block: int = 1024):
    """A function returning uniform floats from `rng`, drawn in blocks: one numpy call per
    scalar would be the slow part of generation."""
    blocks = iter(lambda: rng.random(block).tolist(), None)
    return itertools.chain.from_iterable(blocks).__next__


def _carve(uniform, height: int, width: int, n_floor: int, persist: float) -> list:
    """Floor cells carved by a walker that mostly keeps its direction; a walk is connected."""
    row, col, direction = int(uniform() * height), int(uniform() * width), int(uniform() * 4)
    floor = {(row, col)}
    floor_list = [(row, col)]  # insertion order, so that later choices do not depend on set order
    while len(floor) < n_floor:
        if uniform() >= persist:
            direction = int(uniform() * 4)
        r, c = row + MOVES[direction][0], col + MOVES[direction][1]
        if not (0 <= r < height and 0 <= c < width):
            direction = int(uniform() * 4)
            continue
        row, col = r, c
        if (r, c) not in floor:
            floor.add((r, c))
            floor_list.append((r, c))
    return floor_list


def _has_exit(cell, box_cell, floor, boxes) -> bool:
    """Whether `cell` keeps a free neighbour once a box stands on `box_cell`: pulling into a dead
    end would shut the reverse-playing agent in for good."""
    for drow, dcol in MOVES:
        near = (cell[0] + drow, cell[1] + dcol)
        if near != box_cell and near in floor and near not in boxes:
            return True
    return False


def _attempt(uniform, height, width, n_boxes, pulls, floor_share, persist, pull_prob):  # noqa: C901, PLR0915 - draws in fixed order
    """One reverse-play try: (level, solution), or None when no moment had every box off the
    targets, or the boxes ended too close to home.

    Kept whole: its draws from `uniform` come in one fixed order, which the shipped level sets
    depend on, and splitting the pulls from the bookkeeping would hide that order."""
    share = floor_share[0] + uniform() * (floor_share[1] - floor_share[0])
    n_floor = min(height * width, max(n_boxes + 3, round(share * height * width)))
    floor_list = _carve(uniform, height, width, n_floor, persist)
    floor = set(floor_list)
    # Targets go where a box can be pulled off at all: two floor cells in a line beside it.
    pullable = [
        (r, c)
        for r, c in floor_list
        if any((r + dr, c + dc) in floor and (r + 2 * dr, c + 2 * dc) in floor for dr, dc in MOVES)
    ]
    if len(pullable) < n_boxes:
        return None
    targets = []
    while len(targets) < n_boxes:
        cell = pullable[int(uniform() * len(pullable))]
        if cell not in targets:
            targets.append(cell)
    agent = targets[0]
    while agent in targets:
        agent = floor_list[int(uniform() * len(floor_list))]
    boxes = {cell: i for i, cell in enumerate(targets)}  # position -> which target it came from

    # Reverse play: the agent walks, and a box right behind it may be dragged into its old cell.
    # It goes on past `pulls` pulls until no box sits on a target, or the budget runs out.
    target_set = set(targets)
    moves, done_pulls, on_target, direction = [], 0, n_boxes, int(uniform() * 4)
    last_clear = None
    budget = 30 * pulls + 4 * (height + width)
    while budget and (done_pulls < pulls or on_target):
        budget -= 1
        if uniform() >= persist:
            direction = int(uniform() * 4)
        drow, dcol = MOVES[direction]
        ahead = (agent[0] + drow, agent[1] + dcol)
        if ahead not in floor or ahead in boxes:
            direction = int(uniform() * 4)  # blocked: turn rather than keep bumping
            continue
        behind = (agent[0] - drow, agent[1] - dcol)
        pulled = behind in boxes and uniform() < pull_prob and _has_exit(ahead, agent, floor, boxes)
        if pulled:
            boxes[agent] = boxes.pop(behind)
            done_pulls += 1
            on_target += (agent in target_set) - (behind in target_set)
        moves.append((direction, pulled))
        agent = ahead
        if pulled and not on_target:
            last_clear = (len(moves), dict(boxes), agent)
    if on_target:  # out of budget: go back to the last moment every box was off the targets
        if last_clear is None:
            return None
        n_moves, boxes, agent = last_clear
        del moves[n_moves:]
    # A last stroll without pulls, so that the agent does not start beside the box it moves first.
    for _ in range(int(uniform() * (height + width + 1))):
        direction = int(uniform() * 4)
        ahead = (agent[0] + MOVES[direction][0], agent[1] + MOVES[direction][1])
        if ahead in floor and ahead not in boxes:
            moves.append((direction, False))
            agent = ahead

    travel = sum(abs(r - targets[i][0]) + abs(c - targets[i][1]) for (r, c), i in boxes.items())
    if travel < 2 * n_boxes:
        return None

    level = np.full((height, width), WALL, dtype=np.int8)
    for cell in floor:
        level[cell] = FLOOR
    for cell in targets:
        level[cell] = TARGET
    for cell in boxes:
        level[cell] = BOX
    level[agent] = AGENT_ON_TARGET if agent in target_set else AGENT
    # Forward play undoes the reverse moves in reverse order: each step goes the opposite way,
    # and a pull becomes a push of the same box (the box is in the way, so it is pushed).
    forward = [((direction + 2) % 4, pulled) for direction, pulled in reversed(moves)]
    return level, np.array(_erase_loops(agent, forward), dtype=np.int8)


def _erase_loops(start: tuple, forward: list) -> list:
    """Forward actions with every loop the agent walks between two pushes cut out. Boxes stand
    still between pushes, so the shortened walk only crosses cells the original walk crossed."""
    actions, position = [], start
    base, path, index = 0, [start], {start: 0}  # the walk since the last push: its cells, and where
    for direction, pushed in forward:
        position = (position[0] + MOVES[direction][0], position[1] + MOVES[direction][1])
        actions.append(direction)
        if pushed:
            base, path, index = len(actions), [position], {position: 0}
        elif position in index:  # back on a cell of this walk: drop the loop
            keep = index[position]
            for cell in path[keep + 1 :]:
                del index[cell]
            del path[keep + 1 :], actions[base + keep :]
        else:
            index[position] = len(path)
            path.append(position)
    return actions


def generate_level(
    rng: np.random.Generator,
    height: int,
    width: int,
    n_boxes: int,
    *,
    pulls: int | None = None,
    floor_share: tuple[float, float] = (0.55, 0.65),
    persist: float = 0.6,
    pull_prob: float = 0.8,
    max_tries: int = 1000,
) -> tuple[np.ndarray, np.ndarray]:
    """A random level that is solvable by construction, and a solution for it.

    Returns (level (H, W) int8, solution (K,) int8); `replay(level, solution, K)` solves it,
    and K is where it first does. `pulls` is how many box pulls the reverse play aims for (more
    means boxes end further from home; default 2 per box, plus 1 per 8 cells of grid; when its
    move budget runs out first it goes back to the last moment every box was off the targets);
    `floor_share` bounds the share of the grid carved as floor; `persist` is the chance that
    the carver and the reverse-playing agent keep their direction; `pull_prob` the chance of
    dragging a box that lies behind the agent. Every box ends off every target."""
    if min(height, width) < 2 or height * width < n_boxes + 3 or n_boxes < 1:
        raise ValueError(f"no room for {n_boxes} boxes in {height}x{width}")
    if pulls is None:
        pulls = 2 * n_boxes + (height * width) // 8
    uniform = _uniforms(rng)
    for _ in range(max_tries):
        made = _attempt(uniform, height, width, n_boxes, pulls, floor_share, persist, pull_prob)
        if made is None:
            continue
        level, solution = made
        result = replay(level, solution, len(solution))
        if result["solved"]:  # always, by construction; checked because it is cheap
            return level, solution[: result["steps"]]
    raise RuntimeError(f"no acceptable {height}x{width} level with {n_boxes} boxes in {max_tries} tries")


def make_level_set(seed: int, count: int, height: int, width: int, n_boxes: int, *, with_solutions: bool = False, **kw):
    """`count` levels as a (count, H, W) int8 array; level i comes from
    np.random.default_rng([seed, i]), so a set is reproducible and any prefix is stable.
    With `with_solutions=True`, returns (levels, [solution per level]) instead.
    Other keywords go to `generate_level`."""
    levels = np.empty((count, height, width), dtype=np.int8)
    solutions = []
    for i in range(count):
        levels[i], solution = generate_level(np.random.default_rng([seed, i]), height, width, n_boxes, **kw)
        solutions.append(solution)
    return (levels, solutions) if with_solutions else levels
