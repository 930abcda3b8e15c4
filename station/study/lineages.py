"""Lineage fitness and selection (offspring, lifetimes, scores by lineage) and cost per unit of progress."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from station.study import ideas, windows

if TYPE_CHECKING:
    from station.study import Study


def lineages(study: Study) -> pd.DataFrame:
    """One row per lineage, by founding tick then name."""
    lives = study.lives.dropna(subset=["lineage"])
    evaluations = study.evaluations.dropna(subset=["lineage"])
    papers = ideas.papers(study.texts).dropna(subset=["lineage"])
    by_life = lives.groupby("lineage")
    founders = lives.sort_values(["generation", "birth_tick"]).drop_duplicates("lineage").set_index("lineage")
    by_evaluation = evaluations.groupby("lineage")
    table = pd.DataFrame(
        {
            "founded_tick": founders["birth_tick"],
            "generations": by_life.size(),
            "mean_ticks_alive": by_life["ticks_alive"].mean(),
            "evaluations": by_evaluation.size(),
            "scored": by_evaluation["score"].count(),
            "best_score": by_evaluation["score"].max(),
            "mean_score": by_evaluation["score"].mean(),
            "new_bests": by_evaluation["new_best"].sum(),
            "papers": papers.groupby("lineage").size(),
            "cost_usd": by_life["cost_usd"].sum(),
        }
    )
    table = table[table["generations"].notna()]  # lineages of lives in the range (a paper alone does not make one)
    for count in ("evaluations", "scored", "new_bests", "papers"):
        table[count] = table[count].fillna(0)
    table["heirs"] = table["generations"] - 1
    table["share_of_lives"] = table["generations"] / max(len(lives), 1)
    table = table.rename_axis("lineage").reset_index()
    return table.sort_values(["founded_tick", "lineage"], kind="stable").reset_index(drop=True)


def gini(values: pd.Series) -> float:
    """Gini coefficient: sum over pairs |x_i - x_j| / (2 n^2 mean); 0 when all are equal (or zero)."""
    x = np.sort(values.to_numpy(dtype=float))
    n = len(x)
    if n == 0:
        return float("nan")
    if x.sum() == 0:
        return 0.0
    ranks = np.arange(1, n + 1)
    return float((2 * (ranks * x).sum()) / (n * x.sum()) - (n + 1) / n)


def first_task(study: Study) -> str | None:
    """The task the cost table follows: that of the earliest evaluation (None: no evaluation)."""
    evaluations = study.evaluations.sort_values("id")
    return None if evaluations.empty else str(evaluations["task"].iloc[0])


def best_by_tick(study: Study, task: str | None) -> pd.Series:
    """The best delivered score of the task after each tick that delivered one (cumulative)."""
    evaluations = study.evaluations
    scored = evaluations[
        (evaluations["task"] == task) & evaluations["score"].notna() & evaluations["finished_tick"].notna()
    ]
    best = scored.groupby(scored["finished_tick"].astype("int64"))["score"].max().sort_index().cummax()
    return best


def best_at(best: pd.Series, tick: int) -> float:
    """The best score delivered up to `tick` (NaN: none yet)."""
    upto = best[best.index <= tick]
    return float(upto.iloc[-1]) if len(upto) else float("nan")


def cost(study: Study) -> pd.DataFrame:
    """Per window: dollars and tokens spent by every role, the best score of the first task and the
    progress it made, and dollars per unit of progress."""
    spend = study.spend.dropna(subset=["tick"])
    spend = spend.assign(
        window_start=windows.starts(study, spend["tick"]) if len(spend) else np.zeros(0, dtype="int64"),
        tokens=spend["input_tokens"] + spend["output_tokens"],
    )
    sums = spend.groupby("window_start")[["cost_usd", "tokens"]].sum()
    best = best_by_tick(study, first_task(study))
    rows = []
    for start, end in windows.bounds(study):
        now, before = best_at(best, end), best_at(best, start - 1)
        progress = now - before
        dollars = float(sums["cost_usd"].get(start, 0.0))
        rows.append(
            {
                "window_start": start,
                "window_end": end,
                "cost_usd": dollars,
                "tokens": int(sums["tokens"].get(start, 0)),
                "best_score": now,
                "progress": progress,
                "cost_per_progress": dollars / progress if progress > 0 else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def summary(study: Study, table: pd.DataFrame) -> list[tuple[str, float, str]]:
    """The lineage and cost rows of the summary."""
    lives = study.lives
    nan = float("nan")
    scored = table.dropna(subset=["best_score"])
    selection = (
        float(scored["best_score"].corr(scored["heirs"], method="spearman"))
        if len(scored) > 2 and scored["heirs"].nunique() > 1 and scored["best_score"].nunique() > 1
        else nan
    )
    best = best_by_tick(study, first_task(study))
    gained = float(best.iloc[-1] - best.iloc[0]) if len(best) else 0.0
    dollars = float(study.spend["cost_usd"].sum())
    spans = _lineage_spans(study)
    return [
        ("lives", float(len(lives)), "lives (sessions) in the range"),
        ("lineages", float(len(table)), "lineages with a life in the range"),
        (
            "mean_ticks_alive",
            float(lives["ticks_alive"].mean()) if len(lives) else nan,
            "mean lifetime of a life (ticks)",
        ),
        (
            "lineage_mean_span",
            float(spans.mean()) if len(spans) else nan,
            "mean ticks from a lineage's first birth to its last life's end",
        ),
        ("heirs_mean", float(table["heirs"].mean()) if len(table) else nan, "mean heirs (offspring) per lineage"),
        ("heirs_gini", gini(table["heirs"]), "inequality of heirs across lineages (Gini; 0: all equal)"),
        ("selection", selection, "Spearman correlation of a lineage's best score and its heirs"),
        ("best_score", float(best.iloc[-1]) if len(best) else nan, "the first task's best delivered score"),
        ("cost_usd", dollars, "dollars spent by every role"),
        (
            "cost_per_progress",
            dollars / gained if gained > 0 else nan,
            "dollars per unit the first task's best score rose over the range",
        ),
    ]


def _lineage_spans(study: Study) -> pd.Series:
    lives = study.lives.dropna(subset=["lineage"])
    ends = lives["end_tick"].fillna(study.last_tick).astype("int64")
    spans = lives.assign(end=ends).groupby("lineage").agg(first=("birth_tick", "min"), last=("end", "max"))
    return spans["last"] - spans["first"] + 1
