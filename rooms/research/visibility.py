"""The Research Counter's visibility rule, in one place.

Supervisors and mature agents see every lineage; an immature agent sees only its own lineage
(and the System baselines). The room applies the rule through its Context (`ResearchCounter.sees_all`,
which its SQL scope and other lineages' storage build on); the evaluation worker, which has no
Context, applies it to a run's author read on its own store connection (`worker.sees_other_lineages`).
"""

from __future__ import annotations

from station.core.agents import Agent


def sees_all(agent: Agent, tick: int, maturity_ticks: int | None) -> bool:
    """Whether the agent sees every lineage at `tick`: a supervisor, or mature, counted as
    `Context.is_mature` counts it (`maturity_ticks` None: the station does not isolate)."""
    return agent.role == "supervisor" or maturity_ticks is None or agent.age(tick) >= maturity_ticks
