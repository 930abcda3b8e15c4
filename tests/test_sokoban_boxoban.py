"""Boxoban-format levels (the paper's Sokoban setting): files read and written, bad files refused
with the file and line, and the task built from a level folder named in a config."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evaluators.base import create_task
from evaluators.sokoban.boxoban import BoxobanError, read_file, read_split, write_file
from evaluators.sokoban.levels import BOX, BOX_ON_TARGET, replay
from rooms.research.config import ResearchConfig

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sokoban" / "boxoban-sample"

ROOM = """; 0
##########
#        #
#  @$ .  #
#        #
#        #
#        #
#        #
#        #
#        #
##########
"""


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STATION_SOKOBAN_DATA", str(tmp_path / "cache"))
    return tmp_path


def test_a_boxoban_room_is_its_inner_8x8_grid_and_plays_under_our_rules(tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_text(ROOM)
    (level,) = read_file(tmp_path / "one.txt")
    assert level.shape == (8, 8)  # the top row is all floor: it is kept, not dropped
    assert replay(level, [1, 1], max_steps=10)["solved"]  # two steps right push the box onto the target


def test_writing_and_reading_back_gives_the_same_levels(tmp_path: Path) -> None:
    levels = read_split(SAMPLE, "valid")[:50]
    write_file(tmp_path / "copy.txt", levels)
    assert np.array_equal(read_file(tmp_path / "copy.txt"), levels)


@pytest.mark.parametrize(("text", "words"), [
    (ROOM.replace("##########\n#        #", "##########\n         #", 1), "outer ring must be wall"),
    (ROOM.replace("$", "X"), "unknown level character 'X'"),
    (ROOM.replace("$", " "), "0 boxes but 1 targets"),
    (ROOM.replace("@", " "), "exactly one agent"),
    ("; 0\n", "holds no level"),
])
def test_a_bad_file_names_the_file_the_line_and_the_problem(tmp_path: Path, text: str, words: str) -> None:
    (tmp_path / "bad.txt").write_text(text if words == "holds no level" else ROOM + "\n" + text)
    with pytest.raises(BoxobanError) as err:
        read_file(tmp_path / "bad.txt")
    assert words in str(err.value) and "bad.txt" in str(err.value)
    if words != "holds no level":
        assert "level starting at line 14" in str(err.value)


def test_the_shipped_sample_has_the_papers_shape() -> None:
    for split in ("train", "valid"):
        levels = read_split(SAMPLE, split)
        assert levels.shape == (1000, 8, 8)
        assert set(np.isin(levels, (BOX, BOX_ON_TARGET)).sum(axis=(1, 2))) == {4}


def test_the_shipped_sample_cannot_be_drawn_again_from_a_public_seed() -> None:
    """The generator is public: had the sample been drawn with a small seed (the first one used 0),
    a run holding train/ could find it and draw valid/, the held-out pool, again."""
    from evaluators.sokoban.levels import make_level_set

    train, valid = read_split(SAMPLE, "train")[0], read_split(SAMPLE, "valid")[0]
    for seed in range(300):  # write_sample's streams: 2 * seed for train/, 2 * seed + 1 for valid/
        assert not np.array_equal(make_level_set(2 * seed, 1, 8, 8, 4)[0], train)
        assert not np.array_equal(make_level_set(2 * seed + 1, 1, 8, 8, 4)[0], valid)


def test_the_task_reads_a_level_folder_named_relative_to_its_config(tmp_path: Path) -> None:
    from rooms.research.tasks import load_tasks
    from station.core.config import load_config

    config = load_config(ROOT / "configs" / "sokoban_gpu.yaml")
    params = config.section(ResearchConfig).tasks[0].params
    assert params["levels"] == str(SAMPLE) and params["max_steps"] == 120
    task = create_task("sokoban", {**params, "eval_levels": 100})
    assert (task.levels.grid, task.levels.boxes, task.levels.n_train, task.levels.n_eval) == (8, 4, 1000, 100)
    assert "Boxoban-format level folder boxoban-sample" in task.spec() and "4 boxes" in task.spec()
    held = task.levels.eval_levels()
    again = create_task("sokoban", {**params, "eval_levels": 100}).levels.eval_levels()
    assert np.array_equal(held, again)  # the same draw every time (seed 999)
    valid = read_split(SAMPLE, "valid")
    assert all(any(np.array_equal(h, v) for v in valid) for h in held[:10])
    # runs get the training levels only; the source folder (its valid/) and the cache are hidden
    assert [p.name for p in task.data_dir().iterdir()] == ["train_levels.npy"]
    assert task.private_paths() == [task.levels.dir, SAMPLE.resolve()]
    with pytest.raises(BoxobanError, match="fewer than eval=5000"):
        create_task("sokoban", {**params, "eval_levels": 5000})
    assert load_tasks(config.section(ResearchConfig))["1"].levels.n_eval == 1000


def test_the_task_text_states_the_random_policys_solve_rate() -> None:
    task = create_task("sokoban", {"grid": 5, "boxes": 1, "train_levels": 50, "eval_levels": 40, "max_steps": 40})
    rate = task.levels.random_solve_rate(40) * 100
    assert f"a uniformly random policy solves {rate:.1f}% of these held-out levels" in task.spec()


def test_held_out_levels_are_drawn_as_the_papers_evaluator_drew_them_unless_asked_otherwise() -> None:
    """The paper's evaluator: numpy's RandomState(999).choice(n, 1000), with replacement, in draw order.
    `eval_draw: distinct` keeps the earlier draw: different levels, in file order."""
    valid = read_split(SAMPLE, "valid")
    params = {"levels": str(SAMPLE), "seed": 999, "eval_levels": 1000}
    paper = create_task("sokoban", params).levels.eval_levels()
    assert np.array_equal(paper, valid[np.random.RandomState(999).choice(len(valid), 1000)])
    distinct = create_task("sokoban", {**params, "eval_draw": "distinct"}).levels.eval_levels()
    assert len({level.tobytes() for level in distinct}) == 1000 > len({level.tobytes() for level in paper})
    with pytest.raises(BoxobanError, match="eval_draw must be one of paper, distinct"):
        create_task("sokoban", {**params, "eval_draw": "shuffled"})
