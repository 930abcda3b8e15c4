"""One batch-integration dataset on disk: made on first use, split into what runs may read
(`input/`) and what only the scorer reads (`private/`: labels, the held-out test draw, and the
normalization bounds of the control methods).

Simulated data are drawn with seeds keyed by the data root's secret (secret.py), so the public
simulator and the `seed` parameter alone cannot draw them again. Nothing a run can see names the
source of a user's file or the seed and size of a simulated one: the cache folder is named by a hash
of the file (or a keyed digest of the generator, size and seed), and the text agents read calls it
"a user-supplied dataset" (or names the size only).

    python -m evaluators.scrna.dataset [--size default|small] [--seed 0] [--h5ad FILE]

prepares one ahead of time (generation, then the control methods' bounds), with progress.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..cache import build_once, exclusive
from ..secret import folder_name
from .metric_inputs import keep_terms_on_disk
from .secret import data_root, keyed_seed, secret_dir, station_secret

GENERATOR = "sim-v2"  # v2: batch_hvg from scanpy's seurat_v3
FILE_LAYOUT = "file2"  # the same change for a user's file (its genes are chosen by seurat_v3 too)
PLANNED = {"default": (16_000, 2_000), "small": (2_000, 500)}  # cells, genes (train)
CONTROLS = ("no_integration", "random_embedding", "perfect_embedding")
# The solutions this process has read, by file: every Dataset on the same data (each task made from
# the same params) scores against one object, so what the metrics keep per solution
# (metric_inputs.solution_term) is computed once. The few most recent files only.
_SOLUTIONS: dict[tuple[str, int, int, int], Any] = {}
_SOLUTIONS_KEPT = 4
_SOLUTIONS_LOCK = threading.Lock()


def _read_solution(path: Path) -> Any:
    import anndata as ad

    info = path.stat()
    key = (str(path), info.st_ino, info.st_mtime_ns, info.st_size)  # a rebuilt file is read again
    with _SOLUTIONS_LOCK:
        if key not in _SOLUTIONS:
            while len(_SOLUTIONS) >= _SOLUTIONS_KEPT:
                _SOLUTIONS.pop(next(iter(_SOLUTIONS)))
            _SOLUTIONS[key] = solution = ad.read_h5ad(path)
            keep_terms_on_disk(solution, path.parent / f"{path.stem}-terms", terms_tag(key))
        return _SOLUTIONS[key]


def terms_tag(file_key: tuple[str, int, int, int]) -> str:
    """What a solution's stored terms were computed from: its file (as read), the metrics' version
    and the library that computes the regressions' PCA (an upgrade recomputes them)."""
    from importlib.metadata import version

    from .metrics import METRICS_VERSION

    return json.dumps([*file_key[1:], METRICS_VERSION, version("scanpy")])


class Dataset:
    def __init__(
        self,
        root: Path,
        *,
        size: str = "default",
        seed: int = 0,
        h5ad: str | None = None,
        batch_key: str = "batch",
        label_key: str = "cell_type",
    ) -> None:
        self.size, self.seed, self.h5ad = size, seed, h5ad
        self.batch_key, self.label_key = batch_key, label_key
        if h5ad:
            source = Path(h5ad).expanduser().resolve()
            if not source.is_file():
                raise ValueError(f"batch_integration: no file {source} (params.h5ad)")
            self.source: Path | None = source
            self._key = b""
            named = hashlib.sha256(f"{source}\0{batch_key}\0{label_key}".encode()).hexdigest()[:16]
            key = f"{FILE_LAYOUT}-{named}"
            self.name = "User-supplied dataset"
        else:
            self.source = None
            self._key = station_secret(root)
            key = folder_name(self._key, GENERATOR, size, seed)  # names none of them, nor the key
            self.name = f"Simulated dataset ({size})"
        self.dir = Path(root) / key
        self.secret_dir = secret_dir(root)
        self.input_dir, self.private_dir = self.dir / "input", self.dir / "private"
        self.split = "train"  # "test": the held-out draw (held_out())
        self._lock = threading.Lock()
        self._solution: Any = None
        self._bounds: dict[str, tuple[float, float]] | None = None

    # -- on disk --------------------------------------------------------------------------------
    def ready(self) -> bool:
        return (self.dir / "input" / "train_input.h5ad").exists() and (
            self.private_dir / "train_solution.h5ad"
        ).exists()

    def ensure(self) -> Dataset:
        build_once(self.dir, self.ready, self._build)
        if self.split == "test":
            build_once(self.input_dir, lambda: (self.input_dir / "train_input.h5ad").exists(), self._show_test_input)
        return self

    def held_out(self) -> Dataset:
        """The held-out test draw of simulated data as a dataset of its own, for the external
        evaluation: an independent draw (its own gene programmes and batch effects) that no
        internal evaluation scored. Its input is shown to runs in `test-input/` under the name the
        driver reads; its solution and bounds stay in `private/`."""
        if self.source is not None:
            raise ValueError("batch_integration: a user-supplied dataset has no held-out test draw")
        twin = copy.copy(self)
        twin.split, twin.input_dir, twin.name = "test", self.dir / "test-input", f"{self.name}, held-out test draw"
        twin._lock, twin._solution, twin._bounds = threading.Lock(), None, None
        return twin

    def _show_test_input(self, building: Path) -> None:
        source = self.private_dir / "test_input.h5ad"
        try:
            os.link(source, building / "train_input.h5ad")
        except OSError:
            shutil.copyfile(source, building / "train_input.h5ad")
        (building / "train_input.h5ad").chmod(0o644)
        (building / "train_input.h5ad").replace(self.input_dir / "train_input.h5ad")
        self.input_dir.chmod(0o755)

    def _build(self, building: Path) -> None:
        if self.source is not None:
            self._from_file(building)
        else:
            from .simulate import make_datasets

            train, test = (keyed_seed(self._key, GENERATOR, self.size, self.seed, split) for split in ("train", "test"))
            make_datasets(building, size=self.size, seed=train, test_seed=test)
        shown = self.dir / "input"  # not self.input_dir: a held-out twin may be the one building
        shown.mkdir(exist_ok=True)
        (building / "train_input.h5ad").replace(shown / "train_input.h5ad")
        shutil.rmtree(self.private_dir, ignore_errors=True)
        building.replace(self.private_dir)
        shown.chmod(0o755)
        (shown / "train_input.h5ad").chmod(0o644)

    def _from_file(self, out: Path) -> None:
        from .simulate import load_h5ad, split_for_task

        source = cast(Path, self.source)  # _build calls this only when source is not None
        if not source.exists():
            raise ValueError(f"batch_integration: no file {source}")
        full = load_h5ad(source, batch_key=self.batch_key, label_key=self.label_key)
        task_input, solution = split_for_task(full)
        task_input.write_h5ad(out / "train_input.h5ad")
        solution.write_h5ad(out / "train_solution.h5ad")
        (out / "dataset.json").write_text(
            json.dumps({"source": str(source), "cells": int(full.n_obs), "genes": int(full.n_vars)})
        )

    def info(self) -> dict[str, Any]:
        path = self.private_dir / "dataset.json"
        return json.loads(path.read_text()) if path.exists() else {}

    @property
    def n_cells(self) -> int:
        return int(self.solution().n_obs)

    def describe(self) -> str:
        if self.source is not None:
            return "A user-supplied dataset, restricted to batch-aware highly variable genes."
        cells, genes = PLANNED[self.size]
        return (
            f"A simulated human-tissue-like dataset: about {cells:,} cells × {genes:,} genes from 4 batches "
            "(experiments with different depth, dropout and gene-wise biases), about 15 cell types of very "
            "different abundance (some rare, some missing from some batches), and cycling cells."
        )

    # -- scoring ----------------------------------------------------------------------------------
    def solution(self) -> Any:
        with self._lock:
            if self._solution is None:
                self.ensure()
                self._solution = _read_solution(self.private_dir / f"{self.split}_solution.h5ad")
            return self._solution

    def score_arrays(
        self,
        value: dict[str, Any],
        *,
        extra: Sequence[str] = (),
        timings: dict[str, float] | None = None,
        graph_rule: str = "paper",
        clustering: str = "paper",
    ) -> tuple[dict[str, float], dict[str, str]]:
        """The raw metrics (the ten, then `extra`) of a run's returned arrays, put back on the solution's
        cells. `graph_rule` (GRAPH_RULES): under ``paper`` a returned graph is used only when the run
        registered it in uns['neighbors'] or returned no embedding; otherwise the graph is rebuilt from
        the embedding, as OpenProblems' post-processing does. ``as_returned`` always uses it."""
        import anndata as ad
        import pandas as pd
        import scipy.sparse as sp

        solution = self.solution()
        n = solution.n_obs
        if value.get("n_obs") != n:
            raise ValueError(f"the result has {value.get('n_obs')} cells; the data has {n}")
        result = ad.AnnData(obs=solution.obs[["batch"]].copy())
        result.obs_names = solution.obs_names
        if "X_emb" in value:
            emb = np.asarray(value["X_emb"], dtype=np.float32)
            if emb.ndim != 2 or emb.shape[0] != n:
                raise ValueError(f"X_emb has shape {emb.shape}; expected ({n}, dimensions)")
            if not np.isfinite(emb).all():
                raise ValueError(f"obsm['X_emb'] has {int((~np.isfinite(emb)).sum()):,} NaN or infinite values")
            result.obsm["X_emb"] = emb
        if "connectivities_data" in value and not graph_replaced(value, graph_rule):
            for name in ("connectivities", "distances"):
                parts = [np.asarray(value[f"{name}_{p}"]) for p in ("data", "indices", "indptr")]
                if (
                    len(parts[2]) != n + 1
                    or (len(parts[1]) and (parts[1].min() < 0 or parts[1].max() >= n))
                    or parts[2][0] != 0
                    or parts[2][-1] != len(parts[1])
                    or len(parts[0]) != len(parts[1])
                    or np.any(np.diff(parts[2]) < 0)
                ):
                    raise ValueError(f"obsp['{name}'] is not a valid {n} x {n} sparse matrix")
                if not np.isfinite(parts[0]).all() or (parts[0] < 0).any():
                    raise ValueError(f"obsp['{name}'] has NaN, infinite or negative values")
                result.obsp[name] = sp.csr_matrix(tuple(parts), shape=(n, n))
        try:
            counts, bad_counts = _corrected_counts(value, n), ""
        except ValueError as err:  # only HVG overlap needs them: it alone fails
            counts, bad_counts = None, str(err)
        if counts is not None:
            genes = pd.DataFrame(index=pd.RangeIndex(counts.shape[1]).astype(str))
            result = ad.AnnData(
                obs=result.obs, var=genes, obsm=result.obsm, obsp=result.obsp, layers={"corrected_counts": counts}
            )
        values, problems = self._metrics(result, timings, extra, clustering)
        if bad_counts and "hvg_overlap" in values:
            problems["hvg_overlap"] = bad_counts
        return values, problems

    def _metrics(
        self, result: Any, timings: dict[str, float] | None = None, extra: Sequence[str] = (), clustering: str = "paper"
    ) -> tuple[dict[str, float], dict[str, str]]:
        from .metrics import compute_metrics
        from .simulate import G2M_GENES, S_GENES

        genes = set(self.solution().var["feature_name"])
        cycle = (S_GENES, G2M_GENES) if set(S_GENES) <= genes else None
        return compute_metrics(
            result, self.solution(), cell_cycle_genes=cycle, extra=extra, timings=timings, clustering=clustering
        )

    def bounds(self, progress: Any = None) -> dict[str, tuple[float, float]]:
        """Per metric (min, max) over the control methods on this data, computed once and stored
        (again when the metrics' definitions changed: METRICS_VERSION); `progress(step)` is told
        each control method as it runs."""
        from .metrics import METRICS_VERSION

        with self._lock:
            if self._bounds is not None:
                return self._bounds
        path = self.private_dir / ("bounds.json" if self.split == "train" else f"bounds-{self.split}.json")
        if _stored_version(path) != METRICS_VERSION:
            with exclusive(self.dir):
                if _stored_version(path) != METRICS_VERSION:
                    bounds = self._control_bounds(progress) | {"metrics_version": METRICS_VERSION}
                    path.write_text(json.dumps(bounds, indent=2))
        stored = json.loads(path.read_text())
        with self._lock:
            self._bounds = {m: (float(v["min"]), float(v["max"])) for m, v in stored["bounds"].items()}
            return self._bounds

    def _control_bounds(self, progress: Any = None) -> dict[str, Any]:
        import anndata as ad

        solution = self.solution()
        runs: dict[str, dict[str, float]] = {}
        for control in CONTROLS:
            if progress:
                progress(f"control method: {control}")
            result = ad.AnnData(obs=solution.obs[["batch"]].copy())
            result.obs_names = solution.obs_names
            result.obsm["X_emb"] = control_embedding(control, solution, self.seed)
            runs[control], _ = self._metrics(result)
        bounds = {}
        for metric in runs[CONTROLS[0]]:
            values = [runs[c][metric] for c in CONTROLS if math.isfinite(runs[c].get(metric, math.nan))]
            bounds[metric] = {"min": min(values) if values else 0.0, "max": max(values) if values else 1.0}
        return {"controls": runs, "bounds": bounds}


GRAPH_RULES = ("paper", "as_returned")


def graph_replaced(value: dict[str, Any], graph_rule: str) -> bool:
    """Whether a returned graph gives way to one built from the embedding (score_arrays)."""
    registered = bool(value.get("uns_neighbors"))
    return graph_rule == "paper" and "connectivities_data" in value and "X_emb" in value and not registered


def _stored_version(path: Path) -> str | None:
    try:
        return json.loads(path.read_text()).get("metrics_version")
    except (OSError, ValueError, AttributeError):
        return None


def _corrected_counts(value: dict[str, Any], n: int) -> Any:
    """A run's returned corrected counts (dense, or CSR parts), checked; None when it sent none."""
    import scipy.sparse as sp

    if "corrected_counts" in value:
        counts = np.asarray(value["corrected_counts"], dtype=np.float32)
        if counts.ndim != 2 or counts.shape[0] != n:
            raise ValueError(f"layers['corrected_counts'] has shape {counts.shape}; expected ({n}, genes)")
        finite = bool(np.isfinite(counts).all())
    elif "corrected_counts_data" in value:
        data, indices, indptr = (np.asarray(value[f"corrected_counts_{p}"]) for p in ("data", "indices", "indptr"))
        n_genes = int(value.get("corrected_counts_n_genes", 0))
        if (
            n_genes < 1
            or len(indptr) != n + 1
            or indptr[0] != 0
            or indptr[-1] != len(indices)
            or len(data) != len(indices)
            or np.any(np.diff(indptr) < 0)
            or (len(indices) and (indices.min() < 0 or indices.max() >= n_genes))
        ):
            raise ValueError("layers['corrected_counts'] is not a valid cells x genes sparse matrix")
        counts = sp.csr_matrix((data.astype(np.float32), indices, indptr), shape=(n, n_genes))
        finite = bool(np.isfinite(counts.data).all())
    else:
        return None
    if not finite:
        raise ValueError("layers['corrected_counts'] has NaN or infinite values")
    return counts


def control_embedding(control: str, solution: Any, seed: int) -> np.ndarray:
    """The embeddings of the control methods, as OpenProblems defines them."""
    import scanpy as sc

    rng = np.random.default_rng(seed)
    if control == "random_embedding":
        return rng.normal(size=(solution.n_obs, 50)).astype(np.float32)
    if control == "perfect_embedding":  # each cell type its own corner, a little noise so ties break
        types = solution.obs["cell_type"].astype("category").cat.codes.to_numpy()
        onehot = np.eye(types.max() + 1, dtype=np.float32)[types]
        return onehot + rng.normal(scale=1e-3, size=onehot.shape).astype(np.float32)
    work = solution.copy()
    work.X = work.layers["normalized"].copy()
    sc.pp.pca(work, n_comps=min(50, min(work.shape) - 1), svd_solver="arpack", random_state=0)
    return work.obsm["X_pca"].astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description="Prepare a batch-integration dataset and its bounds.")
    parser.add_argument("--size", default="default", choices=sorted(PLANNED))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--h5ad", help="a CELLxGENE-style file instead of the simulation")
    args = parser.parse_args()
    dataset = Dataset(data_root(), size=args.size, seed=args.seed, h5ad=args.h5ad)
    print(f"preparing {dataset.name} in {dataset.dir} ...", flush=True)
    dataset.ensure()
    print(json.dumps(dataset.info(), indent=2))
    for metric, (low, high) in dataset.bounds().items():
        print(f"{metric:>24}: {low:.6f} .. {high:.6f}")


if __name__ == "__main__":
    main()
