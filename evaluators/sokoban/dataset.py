"""One Sokoban level set on disk: training levels and held-out evaluation levels, made once.

    python -m evaluators.sokoban.dataset [--grid 6] [--boxes 2] [--train 20000] [--eval 500] [--seed 0]

Levels come from our reverse-play generator (levels.py), so each is solvable by construction.
Training and evaluation levels are drawn from different seed streams, and any evaluation level
that also occurs among the training levels is replaced, so the evaluation set is truly held
out. The streams' seeds are keyed by the data root's secret (evaluators/secret.py), so a run
holding the generator and the training levels cannot draw the held-out ones again, and the
set's folder is named by a keyed digest (nothing of seed, size or generator in its name). On
disk, in the level set's folder:

    train/train_levels.npy     what a training run sees (its data mount), nothing else
    held_out/eval_levels.npy   what the station's scorer sees (its `scoring_data/` mount)
    meta.json                  how the set was made (written last: marks a finished build)

The whole folder is hidden from runs (the task's private_paths); each gets its part as a mount.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from ..cache import build_once
from ..secret import SECRET_FILE, folder_name, keyed_seed, read_key, secret_dir, station_secret
from .boxoban import BoxobanError, boxes_per_level, read_split
from .levels import make_level_set, replay

GENERATOR = "reverse-play-v1"
RANDOM_EPISODES_SEED = 99  # the random policy's reference score uses its own fixed stream


def data_root() -> Path:
    return Path(os.environ.get("STATION_SOKOBAN_DATA") or Path.home() / ".cache" / "station" / "sokoban")


class LevelSet:
    secret_dir: Path | None = None  # the key's folder, when the levels are keyed (never for Boxoban's files)

    def __init__(
        self,
        root: Path,
        *,
        grid: int = 6,
        boxes: int = 2,
        train: int = 20_000,
        eval: int = 500,
        seed: int = 0,
        unkeyed: bool = False,
    ) -> None:
        """`unkeyed`: draw with the public `seed` directly, as before draws were keyed (for measuring
        against the old data and for the red-team tests; no task parameter reaches it)."""
        if not 4 <= grid <= 12:
            raise ValueError("grid must be between 4 and 12")
        if not 1 <= boxes <= 6 or boxes * 4 > grid * grid:
            raise ValueError("boxes must be between 1 and 6 and fit the grid")
        if train < 1 or eval < 1:
            raise ValueError("train and eval level counts must be positive")
        self.grid, self.boxes, self.n_train, self.n_eval, self.seed = grid, boxes, train, eval, seed
        if unkeyed:
            self.dir = Path(root) / f"unkeyed-{GENERATOR}-{grid}x{grid}-{boxes}b-seed{seed}-{train}-{eval}"
        else:  # the folder named by a keyed digest; the key is read again when the levels are drawn
            secret = station_secret(Path(root))
            self.dir = Path(root) / folder_name(secret, GENERATOR, f"{grid}x{grid}", f"{boxes}b", seed, train, eval)
            self.secret_dir = secret_dir(Path(root))
        self._eval: np.ndarray | None = None

    @property
    def train_dir(self) -> Path:
        return self.dir / "train"

    @property
    def held_out_dir(self) -> Path:
        return self.dir / "held_out"

    def ready(self) -> bool:
        return (self.dir / "meta.json").exists()

    def _stream(self, name: str, batch: int = 0) -> int:
        """The seed of one stream of levels: the training levels, or a batch of held-out ones. Keyed:
        by the data root's secret, read here (this object, pickled to scorers, holds no key). The
        old public rule: 2 seed for the training levels, 2 seed + 1 + 1000 batch for held-out ones."""
        if self.secret_dir is None:
            return 2 * self.seed + (0 if name == "train" else 1 + 1000 * batch)
        made = (GENERATOR, f"{self.grid}x{self.grid}", f"{self.boxes}b", self.seed)
        return keyed_seed(read_key(self.secret_dir / SECRET_FILE), *made, name, batch)

    def ensure(self) -> LevelSet:
        build_once(self.dir, self.ready, self._build)
        return self

    def _build(self, building: Path) -> None:
        began = time.monotonic()
        shape = (self.grid, self.grid, self.boxes)
        train = make_level_set(self._stream("train"), self.n_train, *shape)
        held = self._held_out(train, shape)
        meta = {"generator": GENERATOR, "grid": self.grid, "boxes": self.boxes, "train": self.n_train}
        meta |= {"eval": self.n_eval, "seed": self.seed, "seconds": round(time.monotonic() - began, 1)}
        self._place(building, train, held, meta)

    def _place(self, building: Path, train: np.ndarray, held: np.ndarray, meta: dict) -> None:
        """Move the two splits into place, each in its own folder, then meta.json (the mark of a finished build)."""
        for name, levels, file in (("train", train, "train_levels.npy"), ("held_out", held, "eval_levels.npy")):
            (building / name).mkdir()
            np.save(building / name / file, levels)
            (building / name / file).chmod(0o644)
            (building / name).chmod(0o755)
            shutil.rmtree(self.dir / name, ignore_errors=True)
            (building / name).replace(self.dir / name)
        shutil.rmtree(self.dir / "input", ignore_errors=True)  # the layout before both splits had a folder
        (building / "meta.json").write_text(json.dumps(meta))
        (building / "meta.json").replace(self.dir / "meta.json")

    def _held_out(self, train: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
        seen = {level.tobytes() for level in train}
        kept: list[np.ndarray] = []
        batch = 0
        while len(kept) < self.n_eval:  # a second seed stream; duplicates of training levels are dropped
            for level in make_level_set(self._stream("held_out", batch), self.n_eval, *shape):
                if level.tobytes() not in seen and len(kept) < self.n_eval:
                    seen.add(level.tobytes())
                    kept.append(level)
            batch += 1
        return np.stack(kept)

    def private_paths(self) -> list[Path]:
        """What no run may see: the whole set (the held-out levels; runs get their part as mounts) and
        the key its streams were drawn with."""
        return [self.dir, *filter(None, [self.secret_dir])]

    def eval_levels(self) -> np.ndarray:
        if self._eval is None:
            self._eval = np.load(self.ensure().held_out_dir / "eval_levels.npy")
        return self._eval

    def solved(self, actions: object, max_steps: int) -> np.ndarray:  # checked: the run's untrusted output
        """Which held-out levels the action sequences solve, replayed under the trusted rules."""
        levels = self.eval_levels()
        if not isinstance(actions, np.ndarray) or actions.ndim != 2 or actions.shape[0] != len(levels):
            raise ValueError(
                f"action sequences of shape {getattr(actions, 'shape', None)}, expected ({len(levels)}, steps)"
            )
        if actions.size and (actions.min() < 0 or actions.max() > 3):
            raise ValueError("actions must be 0 (up), 1 (right), 2 (down) or 3 (left)")
        return np.array([replay(level, seq, max_steps)["solved"] for level, seq in zip(levels, actions)])

    def random_solve_rate(self, max_steps: int) -> float:
        """The reference: a uniformly random policy, one episode per held-out level (cached)."""
        path = self.dir / f"random-{max_steps}.json"
        if path.exists():
            return json.loads(path.read_text())["solve_rate"]
        rng = np.random.default_rng(RANDOM_EPISODES_SEED)
        actions = rng.integers(0, 4, size=(len(self.eval_levels()), max_steps), dtype=np.int8)
        rate = float(self.solved(actions, max_steps).mean())
        path.write_text(json.dumps({"solve_rate": rate}))
        return rate

    def describe(self) -> str:
        return (
            f"{self.n_train:,} training levels and {self.n_eval:,} held-out evaluation levels, "
            f"{self.grid}x{self.grid} inside an outer wall, {self.boxes} box{'es' if self.boxes > 1 else ''} "
            f"each, generated by reverse play (so every level is solvable)."
        )


# How held-out Boxoban levels are drawn (BoxobanLevelSet). A station's stored config keeps the name it
# was made with, and a name keeps its meaning: a new rule gets a new name.
EVAL_DRAWS = ("reference", "paper", "distinct")
TEST_SEED = 42  # the reference's draw of the external evaluation's levels from test/ (create_test_env)


def draw_indices(draw: str, seed: int, pool: int, count: int) -> np.ndarray:
    """Which of `pool` levels (in file order) a draw picks. ``reference``: as the reference station's
    code draws (create_valid_env, create_test_env): RandomState(seed).choice(pool, count,
    replace=False), sorted; all of them when the pool is smaller. On Boxoban's unfiltered valid/
    (100,000 levels) that is its choice(100000, 1000) with seed 999. ``paper``: the rule an earlier
    issue gave, RandomState(seed).choice(pool, count), with replacement, in draw order (a level
    drawn twice counts twice). ``distinct``: our first rule, default_rng(seed), different levels,
    in file order."""
    if draw == "reference":
        return np.sort(np.random.RandomState(seed).choice(pool, min(count, pool), replace=False))
    if draw == "paper":
        return np.random.RandomState(seed).choice(pool, count)
    return np.sort(np.random.default_rng(seed).choice(pool, count, replace=False))


class BoxobanLevelSet(LevelSet):
    """Levels from a Boxoban-format folder (boxoban.py): all of `train/` for training, and `eval`
    held-out levels drawn with `seed` (`draw_indices`) from `valid/`, or from `test/` for the
    external evaluation (`test_set`)."""

    def __init__(
        self,
        root: Path,
        folder: str | Path,
        *,
        eval: int = 1000,
        seed: int = 999,
        draw: str = "paper",
        split: str = "valid",
    ) -> None:
        """`draw`: ``paper`` when not named, the meaning a station made before the draw had a name
        keeps (a new station records its draw; evaluators/sokoban/task.py)."""
        if draw not in EVAL_DRAWS:
            raise BoxobanError(f"sokoban: eval_draw must be one of {', '.join(EVAL_DRAWS)}; got {draw!r}")
        self.folder = Path(folder).expanduser().resolve()
        if not self.folder.is_dir():
            raise BoxobanError(f"sokoban: level folder {self.folder} does not exist")
        self.n_eval, self.seed, self.draw, self.split = eval, seed, draw, split
        stamp = hashlib.sha256(
            "".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in self._files()).encode()
        ).hexdigest()[:12]
        held = "" if split == "valid" else f"-{split}"  # valid/'s sets keep the names they were cached under
        self.dir = Path(root) / f"boxoban-{stamp}-eval{eval}-seed{seed}-{draw}{held}"
        self._eval = None
        self.ensure()  # read once (and cached): the room's size and box count come from the files

    def test_set(self) -> BoxobanLevelSet | None:
        """The external evaluation's levels, as the reference draws them: `eval` of `test/` (all when
        it holds fewer) with seed 42, distinct, in file order; None when the folder has no test/."""
        if not any((self.folder / "test").glob("*.txt")):
            return None
        return BoxobanLevelSet(
            self.dir.parent, self.folder, eval=self.n_eval, seed=TEST_SEED, draw="reference", split="test"
        )

    def private_paths(self) -> list[Path]:
        return [self.dir, self.folder]  # the source's valid/ and test/ hold the held-out levels too

    def _files(self) -> list[Path]:
        files = [f for split in ("train", self.split) for f in sorted((self.folder / split).glob("*.txt"))]
        if not files:
            raise BoxobanError(f"sokoban: {self.folder} holds no train/*.txt or {self.split}/*.txt level file")
        return files

    @staticmethod
    def _shape(levels: np.ndarray) -> tuple[int, int]:
        height, width = levels.shape[1:]
        if height != width:
            raise BoxobanError(f"sokoban: rooms must be square, these are {height + 2} x {width + 2}")
        return int(height), boxes_per_level(levels)

    def _read_meta(self) -> None:
        meta = json.loads((self.dir / "meta.json").read_text())
        self.grid, self.boxes, self.n_train, self.n_eval = meta["grid"], meta["boxes"], meta["train"], meta["eval"]

    def _build(self, building: Path) -> None:
        train, pool = read_split(self.folder, "train"), read_split(self.folder, self.split)
        if self.split == "valid" and len(pool) < self.n_eval:
            raise BoxobanError(
                f"sokoban: {self.folder / 'valid'} has {len(pool)} levels, fewer than eval={self.n_eval}"
            )
        self.grid, self.boxes = self._shape(np.concatenate([train, pool]))
        held = pool[draw_indices(self.draw, self.seed, len(pool), self.n_eval)]
        self.n_train, self.n_eval = len(train), len(held)
        meta = {"source": str(self.folder), "grid": self.grid, "boxes": self.boxes, "train": len(train)}
        meta |= {"eval": self.n_eval, "seed": self.seed, "draw": self.draw, "split": self.split}
        self._place(building, train, held, meta)

    def ensure(self) -> LevelSet:
        super().ensure()
        self._read_meta()
        return self

    def describe(self) -> str:
        return (
            f"{self.n_train:,} training levels and {self.n_eval:,} held-out evaluation levels from the Boxoban-format "
            f"level folder {self.folder.name}, {self.grid}x{self.grid} inside an outer wall, {self.boxes} boxes each."
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="prepare a Sokoban level set ahead of time")
    parser.add_argument("--grid", type=int, default=6)
    parser.add_argument("--boxes", type=int, default=2)
    parser.add_argument("--train", type=int, default=20_000)
    parser.add_argument("--eval", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=80)
    args = parser.parse_args()
    began = time.monotonic()
    levels = LevelSet(
        data_root(), grid=args.grid, boxes=args.boxes, train=args.train, eval=args.eval, seed=args.seed
    ).ensure()
    print(f"{levels.describe()}\nin {levels.dir} ({time.monotonic() - began:.1f} s)")
    print(f"random policy solves {levels.random_solve_rate(args.max_steps):.1%} within {args.max_steps} steps")


if __name__ == "__main__":
    main()
