"""Boxoban-format levels (the paper's Sokoban setting): files read and written, bad files refused
with the file and line, the task built from a level folder named in a config, and its held-out draws."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from evaluators.base import create_task
from evaluators.sokoban.boxoban import BoxobanError, read_file, read_split, write_file
from evaluators.sokoban.levels import BOX, BOX_ON_TARGET, replay
from rooms.research.config import ResearchConfig
from station.core.config import StationConfig

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
    assert params["levels"] == str(SAMPLE) and params["max_steps"] == 120 and params["eval_draw"] == "reference"
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


@pytest.fixture(scope="module")
def boxoban_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Boxoban-format folder as the reference reads it: train/, valid/ in two files (its levels are
    numbered file after file, in name order) and test/."""
    folder = tmp_path_factory.mktemp("boxoban")
    valid = read_split(SAMPLE, "valid")
    for split, name, levels in (("train", "000", read_split(SAMPLE, "train")[:20]), ("valid", "001", valid[150:300]),
                                ("valid", "000", valid[:150]), ("test", "000", valid[300:450])):
        (folder / split).mkdir(exist_ok=True)
        write_file(folder / split / f"{name}.txt", levels)
    return folder


def test_held_out_levels_are_drawn_as_the_reference_station_draws_them(boxoban_folder: Path) -> None:
    """The reference's create_valid_env: RandomState(999).choice(100000, 1000, replace=False), sorted,
    over Boxoban's unfiltered valid/ (100,000 levels); create_test_env, for the external evaluation:
    RandomState(42).choice(len(test), 1000, replace=False), sorted, over test/. Here the same rule on
    300 and 150 levels, computed with numpy directly."""
    from evaluators.sokoban.dataset import draw_indices

    valid, test = read_split(boxoban_folder, "valid"), read_split(boxoban_folder, "test")
    assert np.array_equal(valid[:150], read_file(boxoban_folder / "valid" / "000.txt"))  # 000.txt first
    params = {"levels": str(boxoban_folder), "seed": 999, "eval_levels": 100, "eval_draw": "reference"}
    task = create_task("sokoban", params)
    picks = np.sort(np.random.RandomState(999).choice(300, size=100, replace=False))
    assert np.array_equal(task.levels.eval_levels(), valid[picks])
    plan = task.external()
    (twin,) = plan.runs
    picks = np.sort(np.random.RandomState(42).choice(150, size=100, replace=False))
    assert np.array_equal(twin.levels.eval_levels(), test[picks])
    train = [np.load(t.data_dir() / "train_levels.npy") for t in (task, twin)]  # runs train on the same levels
    assert np.array_equal(*train) and len(train[0]) == 20
    assert "on 100 levels of test/ (seed 42" in plan.protocol
    assert list(draw_indices("reference", 42, 40, 1000)) == list(range(40))  # a smaller pool: all of it, in order


def test_the_earlier_draws_keep_their_meaning_and_an_unnamed_draw_is_the_paper_rule(boxoban_folder: Path) -> None:
    """A station made before the draws had names stored no `eval_draw`: it keeps drawing by the rule
    it drew with (`paper`), and so does its external evaluation (the same held-out levels)."""
    valid = read_split(boxoban_folder, "valid")
    params = {"levels": str(boxoban_folder), "seed": 999, "eval_levels": 100}
    unnamed = create_task("sokoban", params)
    assert np.array_equal(unnamed.levels.eval_levels(), valid[np.random.RandomState(999).choice(300, 100)])
    plan = unnamed.external()
    assert plan.runs[0].levels is unnamed.levels and "on the same held-out levels" in plan.protocol
    distinct = create_task("sokoban", {**params, "eval_draw": "distinct"}).levels.eval_levels()
    assert np.array_equal(distinct, valid[np.sort(np.random.default_rng(999).choice(300, 100, replace=False))])
    no_test = create_task("sokoban", {"levels": str(SAMPLE), "eval_levels": 50, "eval_draw": "reference"})
    assert "the level folder has no test/" in no_test.external().protocol
    with pytest.raises(BoxobanError, match="eval_draw must be one of reference, paper, distinct; got 'shuffled'"):
        create_task("sokoban", {**params, "eval_draw": "shuffled"})


def test_a_new_station_records_the_reference_draw_and_a_stored_config_keeps_its_own() -> None:
    """The draw a config implies when it names none changed: a new config records `reference`, which the
    station stores and keeps; a station's stored config without the key keeps drawing `paper`."""
    from station.core.config import parse_config

    def params(config: StationConfig) -> list[dict]:
        return [task.params for task in config.section(ResearchConfig).tasks]

    tasks = [{"evaluator": "sokoban", "params": {"levels": str(SAMPLE)}},
             {"evaluator": "sokoban", "params": {"levels": str(SAMPLE), "eval_draw": "distinct"}},
             {"evaluator": "sokoban", "params": {"grid": 5}}]  # generated levels: no draw to record
    new = parse_config({"research": {"tasks": copy.deepcopy(tasks)}})
    assert [p.get("eval_draw") for p in params(new)] == ["reference", "distinct", None]
    assert params(parse_config(new.model_dump(mode="json"), stored=True)) == params(new)  # stored, reopened
    old = parse_config({"research": {"tasks": copy.deepcopy(tasks)}}, stored=True)
    assert [p.get("eval_draw") for p in params(old)] == [None, "distinct", None]
