"""The scRNA-seq batch-integration task (spec research §3.2), on our simulated data or a user's.

A submission defines `eliminate_batch_effect_fn(adata) -> AnnData`. It runs in the sandbox on
the task input (raw counts, normalized layer, batches; no cell types), through the driver the
station appends (`driver.py`). Scoring happens here, in the trusted parent: the returned
embedding and/or graph is put back on the labelled solution's cells, the ten metrics are
computed (`metrics.py`), each is normalized (`normalisation.py`: bounds from the control methods
on the same data, or OpenProblems' fixed table), and the primary score is their mean. The three
metrics the paper left out (HVG overlap, isolated-label F1 and ASW) can be asked for with
`extra_metrics`; they are shown raw and never enter the score.

Data lives outside everything a run can see: `~/.cache/station/scrna/<dataset>/` (or
`$STATION_SCRNA_DATA`), whose `input/` folder alone is mounted read-only into runs; labels
(`private/`) and the data root's secret (`secret/`, which keys the simulator's draw: secret.py)
are in the executors' hide list. `seed` picks one of the station's draws; with the public
simulator alone it draws other data.
"""

from __future__ import annotations

import copy
import math
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from station.core.run_types import Mount, RunResult

from ..base import Baseline, ExternalPlan, Task, Verdict, figure_number, register
from .driver import INPUT_DIR, driver
from .extra_metrics import EXTRA_METRICS
from .jax_cache import jax_programs_folder
from .metrics import METRICS
from .normalisation import choose_normalisation, normalise, openproblems_bounds
from .play import submission as scripted_play
from .result_check import problem as result_problem

__all__ = ["LABELS", "METRICS", "BatchIntegration", "normalise"]

LABELS = {
    "asw_batch": "ASW_batch",
    "asw_label": "ASW_label",
    "ari": "ARI",
    "nmi": "NMI",
    "graph_connectivity": "Graph_conn",
    "kbet": "kBET",
    "ilisi": "iLISI",
    "clisi": "cLISI",
    "pcr": "PCR",
    "cell_cycle_conservation": "Cell_cycle",
}
EXTRA_LABELS = {
    "hvg_overlap": "HVG_overlap",
    "isolated_label_f1": "Iso_label_F1",
    "isolated_label_asw": "Iso_label_ASW",
}
BASELINES = {
    "no_integration.py": (
        "No Integration Baseline",
        ("baseline", "pca"),
        "The normalized expression's 50 principal components, with no correction.",
    ),
    "combat.py": (
        "ComBat Baseline",
        ("baseline", "combat", "linear-model"),
        "Empirical-Bayes ComBat on the genes, then 50 principal components.",
    ),
    "bbknn_style.py": (
        "Batch-Balanced kNN Baseline",
        ("baseline", "bbknn", "graph"),
        "A kNN graph with the same number of neighbours from every batch; the embedding is left as plain PCA.",
    ),
}


@register("batch_integration")
class BatchIntegration(Task):
    title = "scRNA-seq Batch Integration"
    description = "Remove batch effects from single-cell RNA-seq data while keeping the biology."
    mode = "function"
    entry = "_station_integrate"
    filename = "submission.py"
    timeout_s = 1800.0
    memory_mb: int | None = 16384
    max_processes = 256
    max_result_mb = 768  # an embedding (up to 5000 float32 dimensions a cell) and a kNN graph's arrays
    num_cpus = 2.0
    # the scoring process: a default dataset's solution, the metrics' libraries and compiled code, and
    # a result of up to max_result_mb made float64 (its graphs); its first scoring compiles the metrics
    scorer_memory_mb = 16384
    scorer_timeout_s = 900.0
    display_precision = 4
    metric_formats = {label: ".3f" for label in (*LABELS.values(), *EXTRA_LABELS.values())}

    @classmethod
    def scripted_submission(cls, shown_title: str, seen: Any, rng: random.Random) -> dict[str, str] | None:
        return scripted_play(seen, rng)

    def __init__(
        self,
        size: str = "default",
        seed: int = 0,
        h5ad: str | None = None,
        batch_key: str = "batch",
        label_key: str = "cell_type",
        memory_mb: int | None = 16384,
        normalisation: str | None = None,
        extra_metrics: Sequence[str] = (),
        graph_rule: str = "paper",
        clustering: str = "paper",
    ) -> None:
        from .clustering import CLUSTERINGS
        from .dataset import GRAPH_RULES, Dataset, data_root

        if size not in ("default", "small"):
            raise ValueError("size must be 'default' or 'small'")
        if isinstance(extra_metrics, str) or any(m not in EXTRA_METRICS for m in extra_metrics):
            raise ValueError(f"extra_metrics must be a list of {', '.join(EXTRA_METRICS)}; got {extra_metrics!r}")
        self.normalisation = choose_normalisation(normalisation)
        if graph_rule not in GRAPH_RULES:
            raise ValueError(f"graph_rule must be one of {', '.join(GRAPH_RULES)}; got {graph_rule!r}")
        self.graph_rule = graph_rule
        if clustering not in CLUSTERINGS:
            raise ValueError(f"clustering must be one of {', '.join(CLUSTERINGS)}; got {clustering!r}")
        self.clustering = clustering
        self.extra_metrics = tuple(dict.fromkeys(extra_metrics))
        self.dataset = Dataset(data_root(), size=size, seed=seed, h5ad=h5ad, batch_key=batch_key, label_key=label_key)
        self.memory_mb = memory_mb

    def __getstate__(self) -> dict[str, Any]:
        """What the scoring process gets (scoring_process.py): the dataset without its lock or the
        solution it read, which the process reads for itself."""
        state = dict(self.__dict__)
        dataset = state["dataset"] = copy.copy(self.dataset)
        vars(dataset).update(_lock=None, _solution=None)  # a lock does not pickle; the solution is big
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.dataset._lock = threading.Lock()

    def external(self, seeds: int | None = None) -> ExternalPlan:
        """The paper ran its best method on OpenProblems' test datasets; here: the held-out test
        draw of the simulated data, which no internal evaluation scored (one dataset, one run)."""
        if seeds not in (None, 1):
            raise ValueError("batch integration is evaluated once, on its held-out dataset: --seeds does not apply")
        twin = copy.copy(self)
        twin.dataset = self.dataset.held_out()
        return ExternalPlan(
            (twin,), "scored on the held-out test draw of the simulated data, which the station never scored"
        )

    def warm_up(self, say: Callable[[str], None]) -> None:
        """Score a random embedding once: the first scoring in a process imports the metrics'
        libraries and compiles their numba and JAX code, about 20 s on the default data."""
        import numpy as np

        say(f"{self.dataset.name}: the scorer (its first run compiles the metrics)")
        n = self.dataset.n_cells
        embedding = np.random.default_rng(0).normal(size=(n, 50)).astype(np.float32)
        self.dataset.score_arrays(
            {"n_obs": n, "X_emb": embedding},
            extra=self.extra_metrics,
            graph_rule=self.graph_rule,
            clustering=self.clustering,
        )

    def bounds(self) -> dict[str, tuple[float, float]]:
        """The (min, max) of each metric under this task's normalisation."""
        return openproblems_bounds() if self.normalisation == "openproblems" else self.dataset.bounds()

    def prepare(self, say: Callable[[str], None]) -> None:
        say(f"{self.dataset.name}: the data")
        self.dataset.ensure()
        if self.normalisation == "controls":
            self.dataset.bounds(progress=lambda step: say(f"{self.dataset.name}: normalization bounds, {step}"))

    # -- what agents read -------------------------------------------------------------------
    def spec(self) -> str:
        d = self.dataset.describe()
        return f"""# {self.title}

Single-cell RNA-seq profiles from several batches (experiments) differ for technical reasons as
well as biological ones. Your task: **remove the batch effects while keeping the biology** —
cells of the same type should mix across batches, and different cell types should stay apart.

## Data
{d}

Your function receives an `AnnData` with:
- `X`: raw counts (cells × genes); the same counts in `layers['counts']`;
- `layers['normalized']`: counts normalized to 10,000 per cell and log1p-transformed;
- `obs['batch']`: the batch of each cell (and `obs['observation_joinid']`, a cell id);
- `var['feature_name']`: gene names; `var['batch_hvg']`: batch-aware highly variable genes.
Cell types are **not** given to you: they are held out and used only for scoring.

## What to submit
`submission.py` defining `eliminate_batch_effect_fn(adata) -> AnnData`. Return the same cells in the
same order, with at least one of:
- `obsm['X_emb']`: an integrated embedding (cells × dimensions), and/or
- `obsp['connectivities']` **and** `obsp['distances']`: an integrated kNN graph (sparse, cells × cells).
  With an `X_emb` too, the graph is scored only if `uns['neighbors']` is set (any dict); otherwise
  the graph metrics use a 15-NN graph rebuilt from `X_emb`, as in OpenProblems.
Several metrics need `X_emb` and count 0 without it. A `layers['corrected_counts']` matrix alone is
also accepted: its 50 principal components become the embedding.

Available: numpy, scipy, scikit-learn, pandas, scanpy (with scikit-misc, for `flavor="seurat_v3"`),
anndata. CPU only, {self.timeout_s / 60:g} minutes, {(self.memory_mb or 0) / 1024:g} GB of memory. A function that defines `test()` instead is run in test mode
(no score), for probing the data.

## Score
Ten metrics, each normalized to [0, 1] with {self._bounds_text()},
so 0 is as bad as a control and 1 as good as the best control:
- batch removal: **ASW_batch**, **iLISI**, **kBET**, **PCR** (batch variance removed), **Graph_conn**;
- biology kept: **ASW_label**, **cLISI**, **ARI**, **NMI** (Leiden clusters vs cell types),
  **Cell_cycle** (cell-cycle variance kept).
The score is the mean of the ten. Higher is better. The details of each result list the raw values too.
{self._extra_text()}"""

    def _bounds_text(self) -> str:
        if self.normalisation == "openproblems":
            return "the fixed bounds of the OpenProblems v2 benchmark (its control methods' results)"
        return (
            "bounds from control methods on this data (no integration, a random embedding,\n"
            "a perfect cell-type embedding)"
        )

    def _extra_text(self) -> str:
        if not self.extra_metrics:
            return ""
        names = ", ".join(f"**{EXTRA_LABELS[m]}**" for m in self.extra_metrics)
        counts = " (HVG_overlap needs `layers['corrected_counts']`)" if "hvg_overlap" in self.extra_metrics else ""
        return f"Also reported, raw and outside the score: {names}{counts}.\n"

    def baselines(self) -> list[Baseline]:
        folder = Path(__file__).parent / "baselines"
        return [
            Baseline(title, tags, abstract, (folder / name).read_text(encoding="utf-8"))
            for name, (title, tags, abstract) in BASELINES.items()
        ]

    # -- how a run is made ------------------------------------------------------------------
    def program(self, code: str) -> str:
        return code.rstrip("\n") + "\n" + driver(return_counts="hvg_overlap" in self.extra_metrics)

    def data_mounts(self) -> list[Mount]:
        return [Mount(self.dataset.ensure().input_dir, INPUT_DIR)]

    def private_paths(self) -> list[Path]:
        secret, programs = self.dataset.secret_dir, jax_programs_folder()
        return [self.dataset.private_dir, *(folder for folder in (secret, programs) if folder.is_dir())]

    def env(self) -> dict[str, str]:
        return {"NUMBA_CACHE_DIR": "/tmp/numba", "MPLCONFIGDIR": "/tmp/mpl"}

    # -- scoring ------------------------------------------------------------------------------
    def score(self, result: RunResult) -> Verdict:
        from .dataset import graph_replaced

        value: Any = result.value
        if not isinstance(value, dict):
            return Verdict(False, details="The run returned nothing the station could read.")
        if value.get("test_mode") is True:
            return Verdict(False, details="Test mode - no scoring")
        error = value.get("contract_error")
        if error is not None and not (isinstance(error, str) and not error):
            shown = (
                error[:2000]
                if isinstance(error, str)
                else f"a contract error that is not text ({type(error).__name__})"
            )
            return Verdict(False, details=f"ERROR: {shown}")
        malformed = result_problem(value, self.dataset.n_cells, lambda: int(self.dataset.solution().n_vars))
        if malformed:  # checked before anything is built from it: the submission's fault, in one line
            return Verdict(False, details=f"ERROR: {malformed}")
        try:
            raw, problems = self.dataset.score_arrays(
                value, extra=self.extra_metrics, graph_rule=self.graph_rule, clustering=self.clustering
            )
        except ValueError as err:
            return Verdict(False, details=f"ERROR: {err}")
        normal = normalise(raw, self.bounds())
        score = sum(normal.values()) / len(normal)
        lines = [
            f"{self.dataset.name} ({self.dataset.n_cells:,} cells)",
            "Normalized: " + ", ".join(f"{LABELS[m]} {normal[m]:.3f}" for m in METRICS[:4]),
            "            " + ", ".join(f"{LABELS[m]} {normal[m]:.3f}" for m in METRICS[4:7]),
            "            " + ", ".join(f"{LABELS[m]} {normal[m]:.3f}" for m in METRICS[7:]),
            "Raw: " + ", ".join(f"{LABELS[m]} {_fmt(raw.get(m))}" for m in METRICS),
            f"Normalization: {self.normalisation}",
        ]
        if graph_replaced(value, self.graph_rule):
            lines.append(
                "Neighbour graph: rebuilt from X_emb (the returned graph is used only with uns['neighbors'] set)"
            )
        if self.extra_metrics:
            shown = ", ".join(f"{EXTRA_LABELS[m]} {_fmt(raw.get(m))}" for m in self.extra_metrics)
            lines.append(f"Extra (raw, not in the score): {shown}")
        labels = LABELS | EXTRA_LABELS
        lines += [f"{labels[m]} could not be computed: {why}" for m, why in problems.items()]
        metrics: dict[str, float | None] = {LABELS[m]: normal[m] for m in METRICS}
        metrics |= {EXTRA_LABELS[m]: _finite(raw.get(m)) for m in self.extra_metrics}
        return Verdict(True, score, "\n".join(lines), metrics=metrics, figure=contributions(score, raw, normal))


def contributions(score: float, raw: Mapping[str, float | None], normal: Mapping[str, float]) -> dict[str, Any]:
    """What each metric adds to the score (the mean of the normalised ten), for the viewer's table."""
    rows = [
        {
            "metric": LABELS[m],
            "raw": figure_number(raw.get(m)),
            "normalised": float(normal[m]),
            "share": float(normal[m]) / len(normal),
        }
        for m in METRICS
    ]
    return {"kind": "contributions", "score": float(score), "rows": rows}


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _fmt(value: float | None) -> str:
    return "n.a." if value is None or not math.isfinite(value) else f"{value:.6f}"
