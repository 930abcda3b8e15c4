"""The study's tables (station/study/tables.py) on a hand-made station whose every row is known by
construction (tests/study_station.py says what it holds), on a station being written, and on a replay."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from study_station import ROOT, StudyStation, build_society

from rooms.archive.views import papers_named
from station.study import load
from station.study.schema import TABLES
from station.study.tables import StudyError, read_study, round_window

REVIEWER = "Archive Review System"


@pytest.fixture(scope="module")
def society(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_society(tmp_path_factory.mktemp("study") / "society")


@pytest.fixture(scope="module")
def study(society: Path):  # noqa: ANN201
    return read_study(society)


def edges_of(study, kind: str) -> list[tuple]:  # noqa: ANN001
    rows = study.edges[study.edges["kind"] == kind]
    return [
        (r.tick, r.source, r.target, *(None if pd.isna(v) else v for v in (r.record, r.detail)))
        for r in rows.itertuples()
    ]


EXPECTED_EDGES = {
    # the mail cycle Ada -> Bo -> Cy -> Ada, and Bo's reply to mail 1 (to its starter)
    "mail": [
        (5, "Ada I", "Bo I", "mail/1#1", None),
        (6, "Bo I", "Cy I", "mail/2#1", None),
        (7, "Cy I", "Ada I", "mail/3#1", None),
        (8, "Bo I", "Ada I", "mail/1#2", None),
    ],
    "reply": [(11, "Cy I", "Bo I", "forum/1#2", None), (14, "Cy I", "Ada I", "paper/1#3", None)],
    # @"Ada II" at tick 10 names nobody yet: Ada II ascends at 30
    "mention": [(10, "Bo I", "Cy I", "forum/1#1", None)],
    "common": [(40, "Bo I", "Cy I", "common/1", None)],
    "review": [
        (12, REVIEWER, "Ada I", "paper/1", "accepted"),
        (15, REVIEWER, "Cy I", "submission/2", "rejected"),
        (20, REVIEWER, "Bo I", "paper/2", "accepted"),
    ],
    # the chain: Bo's paper 2 cites Ada's paper 1, Cy's evaluation 5 cites paper 2
    "citation": [
        (8, "Bo I", "Ada I", "evaluation/3", "evaluation/2"),
        (9, "Ada I", "Bo I", "note/Ada/1#1", "evaluation/3"),
        (11, "Cy I", "System", "forum/1#2", "evaluation/1"),  # the baseline's author is no agent
        (20, "Bo I", "Ada I", "paper/2", "paper/1"),
        (25, "Bo I", "Ada I", "evaluation/4", "evaluation/2"),
        (27, "Cy I", "Bo I", "evaluation/5", "paper/2"),
        (35, "Ada II", "Cy I", "evaluation/6", "evaluation/5"),
        (35, "Ada II", "Ada I", "evaluation/6", "evaluation/2"),
    ],
    "built_on": [
        (25, "Bo I", "Ada I", "evaluation/4", "evaluation/2 (declared)"),
        (27, "Cy I", "Bo I", "evaluation/5", "evaluation/4 (detected)"),
        (35, "Ada II", "Ada I", "evaluation/6", "evaluation/2 (declared)"),
    ],
    # Ada's read of forum 1 has no tick (made before reads had one): the message's; Bo's read of the
    # review and of its own reply are no reads
    "read": [(10, "Ada I", "Bo I", "forum/1#1", None), (13, "Cy I", "Ada I", "paper/1", None)],
    "inheritance": [(30, "Ada I", "Ada II", None, "generation 1 -> 2")],
}


@pytest.mark.parametrize("kind", list(EXPECTED_EDGES))
def test_each_kind_of_edge_is_one_row_per_act(study, kind: str) -> None:  # noqa: ANN001
    assert edges_of(study, kind) == EXPECTED_EDGES[kind]


def test_edges_carry_sessions_and_the_lineages_at_the_act(study) -> None:  # noqa: ANN001
    edges = study.edges
    assert (edges["source_session"] != edges["target_session"]).fillna(True).all()
    review = edges[edges["kind"] == "review"].iloc[0]
    assert pd.isna(review["source_session"]) and review["target_session"] == 1
    baseline = edges[edges["target"] == "System"].iloc[0]
    assert pd.isna(baseline["target_session"]) and pd.isna(baseline["target_lineage"])
    inherit = edges[edges["kind"] == "inheritance"].iloc[0]
    assert (inherit["source_session"], inherit["target_session"]) == (1, 4)
    assert (inherit["source_lineage"], inherit["target_lineage"]) == ("Ada", "Ada")


def test_every_table_has_the_schema_columns_in_order_with_their_types(study) -> None:  # noqa: ANN001
    for name, columns in TABLES.items():
        table = study.tables()[name]
        assert [(c, str(t)) for c, t in table.dtypes.items()] == [(c, d) for c, d, _ in columns], name


def test_lives(study) -> None:  # noqa: ANN001
    lives = study.lives.set_index("session")
    ada = lives.loc[1]
    assert (ada["agent"], ada["names"], ada["lineage"], ada["generation"], ada["kind"]) == (
        "Ada I", "Guest_1 > Ada I", "Ada", 1, "recursive")
    assert (ada["birth_tick"], ada["ascend_tick"], ada["end_tick"], ada["end_cause"], ada["ticks_alive"]) == (
        1, 2, 29, "reaching the life limit", 29)
    # a turn every 5 ticks of its life in two rooms, 100 + 10 tokens and a cent each (its guest's too)
    assert (ada["turns"], ada["rooms_visited"], ada["input_tokens"], ada["output_tokens"]) == (6, 2, 600, 60)
    assert ada["cost_usd"] == pytest.approx(0.06)
    heir = lives.loc[4]
    assert (heir["agent"], heir["ancestor"], heir["generation"], heir["birth_tick"], heir["ascend_tick"]) == (
        "Ada II", "Ada I", 2, 25, 30)
    assert pd.isna(heir["end_tick"]) and pd.isna(heir["end_cause"]) and heir["ticks_alive"] == 36
    guest = lives.loc[5]
    assert (guest["agent"], guest["kind"], guest["turns"]) == ("Guest_5", "guest", 5)
    assert pd.isna(guest["lineage"]) and pd.isna(guest["generation"]) and pd.isna(guest["ascend_tick"])
    assert list(lives.index) == [1, 2, 3, 4, 5]


def test_spend_by_role_and_tick(study) -> None:  # noqa: ANN001
    spend = study.spend
    assert set(spend["role"]) == {"agent", "reviewer"}
    reviewer = spend[spend["role"] == "reviewer"].iloc[0]
    assert (reviewer["tick"], reviewer["calls"], reviewer["input_tokens"]) == (12, 1, 1000)
    agents = spend[spend["role"] == "agent"]
    assert agents["calls"].sum() == study.lives["turns"].sum() == 43
    assert agents.loc[agents["tick"] == 1, "calls"].item() == 3  # Guest_1, Guest_2, Guest_3


def test_evaluations_parents_best_visible_and_new_bests(study) -> None:  # noqa: ANN001
    ev = study.evaluations.set_index("id")

    def row(i: int) -> tuple:
        r = ev.loc[i]
        return tuple(None if pd.isna(v) else v for v in (
            r["parent"], r["parent_how"], r["parent_author"], r["best_visible"], r["new_best"]))

    assert row(1) == (None, None, None, None, True)  # the baseline: the first score
    assert row(2) == (None, None, None, 1.0, True)
    # Bo I, young at tick 8, names evaluation 2 and has its very code, but could not see Ada's work:
    # no parent, and the best it saw was the baseline's
    assert row(3) == (None, None, None, 1.0, False)
    assert row(4) == (2, "declared", "Ada I", 2.0, True)
    assert row(5) == (4, "detected", "Bo I", 2.5, False)
    # Ada II, young, names evaluations 5 (Cy's: unseen) and 2 (its lineage's); the best it saw is 2.0, not 2.5
    assert row(6) == (2, "declared", "Ada I", 2.0, False)
    assert ev.loc[4, "improvement"] == pytest.approx(0.5)
    assert ev.loc[5, "improvement"] == pytest.approx(-0.1)
    assert pd.isna(ev.loc[6, "improvement"]) and ev.loc[6, "status"] == "failed"
    assert (ev.loc[6, "lineage"], ev.loc[6, "parent_lineage"], ev.loc[1, "author"]) == ("Ada", "Ada", "System")


def test_texts(study) -> None:  # noqa: ANN001
    texts = study.texts.set_index("record")
    assert list(texts["kind"].value_counts().sort_index().items()) == [
        ("common", 1), ("evaluation", 5), ("forum", 2), ("mail", 4), ("note", 1), ("paper", 3)]
    paper = texts.loc["paper/1"]
    assert (paper["author"], paper["tick"], paper["title"], paper["lineage"]) == ("Ada I", 12, "Rings", "Ada")
    assert "Rings of circles pack well." in paper["text"] and "About Rings." in paper["text"]
    assert not study.texts["text"].str.contains("Score 8").any()  # the reviewer's review is no agent's text
    assert texts.loc["evaluation/5", "text"] == "Following paper 2."
    assert "evaluation/1" not in texts.index  # a baseline is no agent's text
    assert texts.loc["common/1", "author"] == "Bo I" and texts.loc["note/Ada/1#1", "kind"] == "note"
    assert pd.isna(texts.loc["mail/1#2", "title"])


def test_first_and_last_restrict_every_table(society: Path) -> None:
    steps: list[tuple[str, int, int]] = []
    part = read_study(society, first=9, last=27, progress=lambda *step: steps.append(step))
    assert (part.first_tick, part.last_tick, part.window) == (9, 27, 1)
    assert steps[0] == ("lives", 0, steps[0][2]) and steps[-1][1] == steps[-1][2]
    assert {s for s, _, _ in steps} >= {"lives", "evaluations", "texts", "edges: mail", "edges: read"}
    for name in ("edges", "evaluations", "texts"):
        ticks = part.tables()[name]["tick"]
        assert ticks.between(9, 27).all() and len(ticks), name
    assert list(part.evaluations["id"]) == [4, 5]  # 3 was submitted at tick 8
    assert list(part.lives["agent"]) == ["Ada I", "Bo I", "Cy I", "Ada II"]  # Guest_5 is born at 40
    ada = part.lives.set_index("agent").loc["Ada I"]
    assert pd.isna(ada["end_tick"]) and ada["ticks_alive"] == 27  # it was alive at tick 27
    assert ada["turns"] == 4  # ticks 11, 16, 21, 26
    late = read_study(society, first=30)
    assert "Ada I" not in set(late.lives["agent"])  # ended at 29
    assert set(late.spend["tick"]) <= set(range(30, 61))


def test_a_round_window_makes_about_twenty_windows() -> None:
    assert [round_window(n) for n in (1, 19, 60, 100, 200, 1000, 10_000, 30_000)] == [1, 1, 2, 5, 10, 50, 500, 2000]


def test_one_paper_pattern() -> None:
    text = "As paper 7 and Paper #8 show (see Archive #9, archive paper 10, paper no. 11); newspaper 12, papers"
    assert papers_named(text) == [7, 8, 9, 10, 11]
    assert papers_named(None) == []


def test_a_folder_that_is_no_station_is_one_clear_error(tmp_path: Path, society: Path) -> None:
    with pytest.raises(StudyError, match="no such station directory"):
        load(tmp_path / "missing")
    with pytest.raises(StudyError, match="holds no station.db"):
        load(tmp_path)
    (tmp_path / "station.db").write_bytes(b"these are not the tables you are looking for" * 100)
    with pytest.raises(StudyError, match=r"station.db: not a readable station database"):
        load(tmp_path)
    (tmp_path / "station.db").unlink()
    sqlite3.connect(tmp_path / "station.db").execute("CREATE TABLE other (x)").connection.close()
    with pytest.raises(StudyError, match=r"station.db: not a station database"):
        load(tmp_path)
    with pytest.raises(StudyError, match="give first <= last"):
        load(society, first=30, last=20)
    assert isinstance(StudyError("x"), ValueError)


def test_a_station_without_rooms_gives_empty_tables_of_the_same_columns(society: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    shutil.copytree(society, bare)
    db = sqlite3.connect(bare / "station.db")
    for table in ("evaluations", "capsule_messages", "capsules", "capsule_reads", "common_reads", "common_messages",
                  "paper_reviews", "paper_submissions"):
        db.execute(f"DROP TABLE {table}")
    db.commit()
    db.close()
    study, window = read_study(bare), read_study(bare, first=2, last=40)
    assert study.evaluations.empty and study.texts.empty and window.evaluations.empty
    assert set(study.edges["kind"]) == set(window.edges["kind"]) == {"inheritance"} and len(study.lives) == 5
    for name, columns in TABLES.items():
        assert [(c, str(t)) for c, t in study.tables()[name].dtypes.items()] == [(c, d) for c, d, _ in columns]
        assert [(c, str(t)) for c, t in window.tables()[name].dtypes.items()] == [(c, d) for c, d, _ in columns]


def test_a_station_being_written_is_read_as_it_was_last_committed(society: Path, tmp_path: Path) -> None:
    copy = tmp_path / "running"
    shutil.copytree(society, copy)
    writer = sqlite3.connect(copy / "station.db", isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO common_messages(tick, author, content) VALUES(50, 'Cy I', 'half-written')")
    writer.execute("INSERT INTO common_reads(message, reader, tick) VALUES(2, 'Bo I', 50)")
    during = read_study(copy)
    writer.execute("COMMIT")
    after = read_study(copy)
    writer.close()
    assert len(during.edges[during.edges["kind"] == "common"]) == 1
    assert len(after.edges[after.edges["kind"] == "common"]) == 2


def test_a_replayed_station_gives_identical_tables(demo60: Path, tmp_path: Path) -> None:
    replayed = tmp_path / "replayed"
    done = subprocess.run(
        [sys.executable, "-m", "station.apps.cli", "replay", str(demo60), str(replayed)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    original, again = read_study(demo60), read_study(replayed)
    for name, table in original.tables().items():
        if name == "spend":  # the reviewer's, grader's and debugger's calls: a replay makes none
            assert set(table["role"]) > {"agent"} and set(again.spend["role"]) == {"agent"}
            table = table[table["role"] == "agent"]
        pd.testing.assert_frame_equal(again.tables()[name], table, obj=name)
    kinds = set(original.edges["kind"])
    assert {"mail", "review", "built_on", "read", "inheritance"} <= kinds, kinds
    # read marks record their tick: none of the run's reads lacks one
    db = sqlite3.connect(f"file:{replayed / 'station.db'}?mode=ro", uri=True)
    assert db.execute("SELECT COUNT(*), COUNT(tick) FROM capsule_reads").fetchone()[0] > 0
    assert db.execute("SELECT COUNT(*) FROM capsule_reads WHERE tick IS NULL").fetchone()[0] == 0
    db.close()


# Windows cutting the society's chains in the middle: forum thread 1 (started 10, answered 11), the
# citation chain paper 1 (12) <- paper 2 (20) <- evaluation 5 (27), the build-on chain 2 (5) <- 4 (25) <- 5 (27),
# the inheritance at 30 and the Common Room message said at 40 and heard at 41.
WINDOWS = [(None, 9), (8, 8), (11, 30), (13, 27), (27, 27), (26, 45), (41, None)]


@pytest.mark.parametrize(("first", "last"), WINDOWS)
def test_a_window_has_the_whole_stations_rows_of_its_ticks(society: Path, study, first, last) -> None:  # noqa: ANN001
    part = read_study(society, first=first, last=last)
    since, hi = first or 0, last or 60  # the baselines are read from tick 0 when no first tick is given
    for name in ("edges", "evaluations", "texts"):
        whole = study.tables()[name]
        pd.testing.assert_frame_equal(part.tables()[name], whole[whole["tick"].between(since, hi)].reset_index(drop=True), obj=name)
    spend = study.spend[study.spend["tick"].between(first or 1, hi)].reset_index(drop=True)
    pd.testing.assert_frame_equal(part.spend, spend, obj="spend")
    lives = study.lives[(study.lives["birth_tick"] <= hi) & (study.lives["end_tick"].fillna(hi) >= (first or 1))]
    who = ["session", "agent", "names", "lineage", "generation", "ancestor", "model", "kind", "birth_tick", "ascend_tick"]
    pd.testing.assert_frame_equal(part.lives[who].reset_index(drop=True), lives[who].reset_index(drop=True), obj="lives")


def test_a_window_names_what_it_cites_and_builds_on_from_before_it(society: Path) -> None:
    part = read_study(society, first=21, last=27)  # after paper 1, paper 2 and evaluations 1-3
    edges = {(r.kind, r.source, r.target, r.detail) for r in part.edges.itertuples()}
    assert ("built_on", "Bo I", "Ada I", "evaluation/2 (declared)") in edges  # evaluation 2 is from tick 5
    assert ("citation", "Cy I", "Bo I", "paper/2") in edges  # paper 2 was published at tick 20
    ev = part.evaluations.set_index("id")
    assert (ev.loc[4, "best_visible"], ev.loc[4, "new_best"], ev.loc[5, "best_visible"]) == (2.0, True, 2.5)


def test_a_detected_parent_stays_as_later_evaluations_arrive(tmp_path: Path) -> None:
    # Ada's second code shares nine of its ten words with her first: similar enough. Ten later codes
    # of the nine shared words alone used to make those words common, so that the first code no longer
    # looked like the parent once they arrived.
    st = StudyStation(tmp_path / "growing", last_tick=30)
    st.life(1, "Guest_1", born=1, name="Ada I", lineage="Ada", generation=1, ascended=1)
    shared = "alpha beta gamma delta epsilon zeta eta theta iota"
    st.evaluation(2, "Ada I", code=f"{shared} kappa", delivered=3, score=1.0)
    st.evaluation(5, "Ada I", code=f"{shared} lambda", delivered=6, score=1.0)
    early = read_study(st.finish()).evaluations.set_index("id")
    db = sqlite3.connect(tmp_path / "growing" / "station.db")
    for tick in range(10, 20):
        db.execute(
            "INSERT INTO evaluations(task, author, session, lineage, tick, title, tags, abstract, code, status) "
            "VALUES('1', 'Ada I', 1, 'Ada', ?, 'Again', '[]', '', ?, 'queued')",
            (tick, shared),
        )
    db.commit()
    db.close()
    later = read_study(tmp_path / "growing").evaluations.set_index("id")
    assert (early.loc[2, "parent"], early.loc[2, "parent_how"]) == (1, "detected")
    assert (later.loc[2, "parent"], later.loc[2, "parent_how"]) == (1, "detected")


def test_only_the_tables_asked_for_are_read_with_what_they_are_made_from(society: Path, study) -> None:  # noqa: ANN001
    only = load(society, tables=["evaluations"])
    pd.testing.assert_frame_equal(only.evaluations, study.evaluations)
    assert only.lives.empty and only.edges.empty and only.texts.empty and only.spend.empty
    assert [list(only.tables()[t].columns) for t in TABLES] == [[c for c, _, _ in TABLES[t]] for t in TABLES]
    steps: list[str] = []
    edges = load(society, tables=["edges"], progress=lambda step, done, total: steps.append(step))
    pd.testing.assert_frame_equal(edges.edges, study.edges)
    assert steps[:2] == ["evaluations", "texts"] and "lives" not in steps and steps[-1] == "done"
    with pytest.raises(StudyError, match="no study table papers"):
        load(society, tables=["papers"])
