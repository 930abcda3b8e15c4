#!/usr/bin/env python3
"""The JAX training tasks at their configured budgets: each baseline is evaluated exactly as a
station evaluates it (the check run, then the seeds in parallel on the config's executor, a
local Ray instance by default), next to the naive references. Prints one table per task and
saves the learning curves as a plot in bench-results/. For forecasting and Sokoban it also
measures what two-stage scoring costs a trial (evaluators/jaxtrain/two_stage.py): the time the
run waits for the station to take its checkpoints, plus the time from the run's end to the
trial's end.

    scripts/bench_jax.py [--task forecasting|sokoban|rna|all] [--budget SECONDS] [--paper-settings]

--budget overrides the training budget per trial (the configs: 5 min forecasting, 10 min
Sokoban on a CPU); --paper-settings uses configs/*_gpu.yaml, the paper's settings (ZAPBench's
official split and batch 8; Boxoban-format 10x10 rooms with 4 boxes and 120 steps), on a GPU
when there is one and otherwise on the CPU (then trials ask for no GPU, and the tables give the
seconds per epoch or per million steps, to judge what the full budgets would take). The data
are generated on first use.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from rooms.research.standalone import resolve_task  # noqa: E402
from station.executors import create_executor  # noqa: E402

OUT = Console(width=110)
ERR = Console(stderr=True)
PLOTS = ROOT / "bench-results"


def evaluate(task, executor_config, code: str, what: str):
    """Run one baseline like the station does, with a live elapsed-time line."""
    executor = create_executor(executor_config, hide=task.private_paths())
    done = threading.Event()
    began = time.monotonic()
    try:
        with ERR.status(f"{what}: starting ...") as status:
            def tick() -> None:
                while not done.wait(1.0):
                    status.update(f"{what}: check run, then {task.trials} trials of up to "
                                  f"{task.trial_budget_s:g} s in parallel ({executor.name}) - "
                                  f"{time.monotonic() - began:.0f} s")
            threading.Thread(target=tick, daemon=True).start()
            result = task.execute(executor, code, mounts=[], label="bench-jax")
            verdict = task.score(result) if result.status == "ok" else None
    finally:
        done.set()
        executor.close()
    if verdict is None or not verdict.success:
        OUT.print(f"[red]{what} failed: {result.status} {result.error}[/]\n"
                  f"{verdict.details if verdict else result.stderr[-3000:]}")
        raise SystemExit(1)
    return result, verdict, time.monotonic() - began


EXECUTOR: list[str] = []  # --executor, when given


def resolve(config: Path, budget: float | None):
    """The task of `config`, with the budget and executor overrides; without a GPU its trials ask for none."""
    task, executor_config = resolve_task(str(config))
    if EXECUTOR:
        executor_config = executor_config.model_copy(update={"kind": EXECUTOR[0]})
    if budget:
        task.trial_budget_s = budget
        task.timeout_s = budget + task.grace_s
    if task.gpus_per_trial and not has_gpu():
        ERR.print(f"{config.name}: no GPU here, so each trial runs on the CPU")
        task.gpus_per_trial = 0.0
    return task, executor_config


def has_gpu() -> bool:
    import jax

    return any(d.platform == "gpu" for d in jax.devices())


def bench_forecasting(config: Path, budget: float | None) -> None:
    task, executor_config = resolve(config, budget)
    with ERR.status("forecasting: preparing the data (generated on first use) ..."):
        task.dataset.ensure()
        refs = task.dataset.references()
    result, verdict, seconds = evaluate(task, executor_config, task.baselines()[0].code, "forecasting")
    trials = [t for t in result.value["trials"] if t["station"]["best"] is not None]
    table = Table(title=f"Forecasting: validation MAE, {task.dataset.name} "
                        f"({task.trials} seeds, {task.trial_budget_s:g} s each, batch {task.batch_size}, "
                        f"{seconds:.0f} s wall)")
    for column in ("predictor", "val MAE", "h=1", "h=4", "h=8", "h=16", "h=32", "s/epoch", "2-stage cost"):
        table.add_column(column, justify="left" if column == "predictor" else "right")
    for name, ref in refs.items():
        table.add_row(name.replace("_", " "), f"{ref['mae']:.4f}",
                      *(f"{ref['horizons'][str(h)]:.4f}" for h in (1, 4, 8, 16, 32)), "-", "-")
    costs = []
    for trial in trials:
        reported, station = trial["reported"] or {}, trial["station"]
        best = station["best"]
        # two-stage scoring's cost to the trial: the run waiting for its checkpoints to be taken,
        # and the time from the run's end to the trial's (its last checkpoint measured, the scorer ended)
        cost = (reported.get("handover_s", 0.0) + (station.get("after_run_s") or 0.0)) / max(trial["duration_s"], 1e-9)
        costs.append(cost)
        table.add_row(f"shared MLP, seed {trial['seed']} (epochs {reported.get('epochs')}, "
                      f"best {station['best_checkpoint']})",
                      f"{best['mae']:.4f}", *(f"{best['metrics'][f'Val_MAE_{h}']:.4f}" for h in (1, 4, 8, 16, 32)),
                      f"{reported.get('seconds', 0) / max(1, reported.get('epochs') or 1):.1f}", f"{cost:.1%}")
    table.add_row("[bold]shared MLP, station score[/]", f"[bold]{-verdict.score:.4f}[/]",
                  *(f"{verdict.metrics[f'Val_MAE_{h}']:.4f}" for h in (1, 4, 8, 16, 32)), "", "")
    OUT.print(table)
    if costs:
        OUT.print(f"Two-stage scoring cost the trials {sum(costs) / len(costs):.1%} of their time on average "
                  "(goal: under 10%): waiting for the station to take each checkpoint, and finishing after the run.")
    plot_forecasting([{"seed": t["seed"], "curve": t["station"]["curve"]} for t in trials], refs)


def bench_sokoban(config: Path, budget: float | None) -> None:
    task, executor_config = resolve(config, budget)
    with ERR.status("sokoban: generating the levels (first use) ..."):
        task.levels.ensure()
        random = task.levels.random_solve_rate(task.max_steps)
    result, verdict, seconds = evaluate(task, executor_config, task.baselines()[0].code, "sokoban")
    trials = [t for t in result.value["trials"] if t["station"]["best"] is not None]
    table = Table(title=f"Sokoban: solve rate on {task.levels.n_eval} held-out levels "
                        f"({task.levels.grid}x{task.levels.grid}, {task.levels.boxes} box(es), {task.max_steps} steps; "
                        f"{task.trials} seeds, {task.trial_budget_s:g} s each, {seconds:.0f} s wall)")
    for column in ("policy", "solve rate", "env steps", "steps/s", "stopped by", "min per 1M steps", "2-stage cost"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    table.add_row("uniformly random", f"{random:.1%}", "-", "-", "-", "-", "-")
    costs = []
    for trial in trials:
        reported, station = trial["reported"] or {}, trial["station"]
        # two-stage scoring's cost to the trial: handing over the final parameters, then the station
        # playing the held-out levels with them until the scorer ended
        cost = (reported.get("handover_s", 0.0) + (station.get("after_run_s") or 0.0)) / max(trial["duration_s"], 1e-9)
        costs.append(cost)
        table.add_row(f"CNN + PG, seed {trial['seed']}", f"{station['best']['score']:.1f}%",
                      f"{reported.get('env_steps', 0):,}", f"{reported.get('steps_per_second', 0):,.0f}",
                      str(reported.get("stop")), f"{1e6 / max(1.0, reported.get('steps_per_second') or 1.0) / 60:.1f}",
                      f"{cost:.1%}")
    table.add_row("[bold]CNN + PG, station score[/]", f"[bold]{verdict.score:.1f}%[/]", "", "", "", "", "")
    OUT.print(table)
    if costs:
        OUT.print(f"Two-stage scoring cost the trials {sum(costs) / len(costs):.1%} of their time on average "
                  "(goal: under 10%): handing over the parameters, and the station playing the held-out levels.")
    plot_sokoban([{"seed": t["seed"], "curve": (t["reported"] or {}).get("train_curve") or []} for t in trials], random)


def bench_rna(config: Path, budget: float | None) -> None:
    from evaluators.rna.beacon import DATASETS

    task, executor_config = resolve(config, budget)
    with ERR.status("rna: preparing the data (generated on first use) ..."):
        task.data.ensure()
        constant = task.data.references()
    result, verdict, seconds = evaluate(task, executor_config, task.baselines()[0].code, "rna")
    table = Table(title=f"RNA modelling: validation metrics ({task.max_epochs} epochs at most, "
                        f"{task.trial_budget_s:g} s each, {seconds:.0f} s wall)")
    for column in ("dataset", "metric", "constant predictor", "Vanilla MLP", "epochs (best)", "s/epoch",
                   "2-stage cost"):
        table.add_column(column, justify="left" if column in ("dataset", "metric") else "right")
    costs = []
    for trial, dataset in zip(result.value["trials"], DATASETS):
        reported, station = trial["reported"] or {}, trial["station"]
        # as for forecasting: the run waiting for its checkpoints to be taken, and the time from its end to the trial's
        cost = (reported.get("handover_s", 0.0) + (station.get("after_run_s") or 0.0)) / max(trial["duration_s"], 1e-9)
        costs.append(cost)
        table.add_row(dataset.name, dataset.metric, f"{constant[dataset.name]:.4f}",
                      f"{verdict.metrics[dataset.metric_key]:.4f}",
                      f"{reported.get('epochs')} ({station['best_checkpoint']})",
                      f"{reported.get('seconds', 0) / max(1, reported.get('epochs') or 1):.1f}", f"{cost:.1%}")
    table.add_row("[bold]mean (the score)[/]", "", f"{sum(constant.values()) / len(constant):.4f}",
                  f"[bold]{verdict.score:.4f}[/]", "", "", f"{sum(costs) / len(costs):.1%}")
    OUT.print(table)
    OUT.print(f"Two-stage scoring cost the RNA trials {sum(costs) / len(costs):.1%} of their time on average "
              "(goal: under 10%).")


def plot_forecasting(trials, refs) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for trial in trials:
        ax.plot(range(1, len(trial["curve"]) + 1), trial["curve"], marker=".", label=f"shared MLP, seed {trial['seed']}")  # the station's
    for name, ref in refs.items():
        ax.axhline(ref["mae"], linestyle="--", linewidth=1, color="grey")
        ax.annotate(name.replace("_", " "), (1, ref["mae"]), fontsize=8, color="grey", va="bottom")
    ax.set(xlabel="epoch", ylabel="validation MAE", title="Forecasting: validation MAE per epoch")
    ax.legend(fontsize=8)
    save(fig, "jax_forecasting.png")


def plot_sokoban(trials, random: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for trial in trials:
        if trial["curve"]:
            steps, rates = zip(*trial["curve"])
            ax.plot(steps, rates, label=f"training levels, seed {trial['seed']}")
    ax.axhline(random, linestyle="--", color="grey", label="random policy (held-out levels)")
    ax.set(xlabel="environment steps", ylabel="share of episodes solved", title="Sokoban: CNN + policy gradient")
    ax.legend(fontsize=8)
    save(fig, "jax_sokoban.png")


def save(fig, name: str) -> None:
    PLOTS.mkdir(exist_ok=True)
    fig.tight_layout()
    fig.savefig(PLOTS / name, dpi=120)
    ERR.print(f"plot: {PLOTS / name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("forecasting", "sokoban", "rna", "all"), default="all")
    parser.add_argument("--budget", type=float, help="training seconds per trial (default: the config's)")
    parser.add_argument("--executor", choices=("ray", "local"), help="where the runs go (default: the config's)")
    parser.add_argument("--paper-settings", "--gpu", dest="paper", action="store_true",
                        help="the paper's settings: configs/*_gpu.yaml (on the CPU when there is no GPU)")
    args = parser.parse_args()
    EXECUTOR.extend([args.executor] if args.executor else [])
    suffix = "_gpu" if args.paper else ""
    if args.task in ("forecasting", "all"):
        bench_forecasting(ROOT / "configs" / f"forecasting{suffix}.yaml", args.budget)
    if args.task in ("sokoban", "all"):
        bench_sokoban(ROOT / "configs" / f"sokoban{suffix}.yaml", args.budget)
    if args.task in ("rna", "all"):
        bench_rna(ROOT / "configs" / f"rna_modelling{suffix}.yaml", args.budget)


if __name__ == "__main__":
    main()
