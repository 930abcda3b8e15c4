"""Boxoban-format level files: the public text format of DeepMind's Boxoban levels (10 x 10 rooms,
4 boxes), read into our level arrays and written from them.

A file holds levels one after another, each a `; <number>` line followed by the room's rows
('#' wall, ' ' floor, '.' target, '@' agent, '$' box, '*' box on target, '+' agent on target),
and a blank line. The room's outer ring is wall; our levels are the inner grid (the outer wall
is implicit), so a 10 x 10 Boxoban room is an 8 x 8 level here, as in the paper's environment.

A level folder holds `train/` and `valid/` (Boxoban's `unfiltered/`, `medium/` or `hard/`
folders do), each with any number of `*.txt` files read in name order, and may hold `test/`
(Boxoban's `unfiltered/` does: the external evaluation's levels). A split's levels are numbered
in that order: file after file, each file's levels as they come.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .levels import BOX, BOX_ON_TARGET, parse_rows, render, validate

MAX_LEVELS_PER_SPLIT = 2_000_000


class BoxobanError(ValueError):
    """A level folder or file that is not in the Boxoban format; the message names the file and line."""


def read_file(path: Path) -> np.ndarray:
    """Every level of one file, as a (count, H - 2, W - 2) int8 array."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise BoxobanError(f"cannot read {path} as ASCII text: {err}") from None
    levels: list[np.ndarray] = []
    block: list[str] = []
    start = 0
    for number, line in enumerate([*lines, ";"], 1):
        if line.startswith(";") or not line.strip():
            if block:
                levels.append(_level(block, path, start))
                block = []
            start = number + 1
        else:
            block.append(line)
    if not levels:
        raise BoxobanError(f"{path} holds no level")
    shapes = {level.shape for level in levels}
    if len(shapes) > 1:
        raise BoxobanError(f"{path} mixes room sizes {sorted(shapes)}; one size per level set")
    return np.stack(levels)


def _level(rows: list[str], path: Path, line: int) -> np.ndarray:
    where = f"{path}, level starting at line {line}"
    width = max(len(row) for row in rows)
    rows = [row.ljust(width) for row in rows]
    if len(rows) < 3 or width < 3:
        raise BoxobanError(f"{where}: a room needs at least 3 rows and columns, got {len(rows)} x {width}")
    border = rows[0] + rows[-1] + "".join(row[0] + row[-1] for row in rows)
    if set(border) != {"#"}:
        raise BoxobanError(f"{where}: the room's outer ring must be wall ('#')")
    try:
        level = parse_rows([row[1:-1] for row in rows[1:-1]])
        validate(level)
    except ValueError as err:
        raise BoxobanError(f"{where}: {err}") from None
    return level


def read_split(folder: Path, split: str) -> np.ndarray:
    """All levels of `folder/split/*.txt`, in file-name order."""
    files = sorted((folder / split).glob("*.txt"))
    if not files:
        raise BoxobanError(f"{folder / split} holds no *.txt level file (expected Boxoban's layout: train/, valid/)")
    levels = np.concatenate([read_file(f) for f in files])
    if len({lv.shape for lv in levels}) > 1:
        raise BoxobanError(f"{folder / split}: files with different room sizes")
    if len(levels) > MAX_LEVELS_PER_SPLIT:
        raise BoxobanError(f"{folder / split}: more than {MAX_LEVELS_PER_SPLIT:,} levels")
    return levels


def write_file(path: Path, levels: np.ndarray) -> None:
    """Levels in the Boxoban format, each with its outer wall drawn."""
    blocks = []
    for number, level in enumerate(levels):
        inner = render(level).split("\n")
        wall = "#" * (len(inner[0]) + 2)
        blocks.append("\n".join([f"; {number}", wall, *(f"#{row}#" for row in inner), wall]))
    path.write_text("\n\n".join(blocks) + "\n", encoding="ascii")


def boxes_per_level(levels: np.ndarray) -> int:
    counts = {int(n) for n in np.isin(levels, (BOX, BOX_ON_TARGET)).sum(axis=(1, 2))}
    if len(counts) != 1:
        raise BoxobanError(f"levels with different numbers of boxes: {sorted(counts)}")
    return counts.pop()


def write_sample(folder: Path, *, train: int, valid: int, seed: int | None = None) -> None:
    """A Boxoban-format folder of our own generated levels (10 x 10 rooms, 4 boxes, as Boxoban's),
    for tests and offline runs of the paper's settings: train/000.txt and valid/000.txt.

    Without `seed` the draw's seed is random and kept nowhere: the generator is public, so with a
    known seed a run holding train/ could draw valid/ (the held-out pool) again."""
    import secrets

    from .levels import make_level_set

    if seed is None:
        seed = secrets.randbits(62)

    for split, count, stream in (("train", train, 2 * seed), ("valid", valid, 2 * seed + 1)):
        (folder / split).mkdir(parents=True, exist_ok=True)
        write_file(folder / split / "000.txt", make_level_set(stream, count, 8, 8, 4))


if __name__ == "__main__":  # python -m evaluators.sokoban.boxoban FOLDER [TRAIN VALID]
    import sys

    target, *counts = sys.argv[1:]
    write_sample(Path(target), train=int(counts[0]) if counts else 1000, valid=int(counts[1]) if counts else 1000)
