"""The viewer's pages, one router per group; `create_app` includes them all."""

from __future__ import annotations

from fastapi import APIRouter

from station.apps.web.pages import agents, login, operator, overview, papers, research, study, threads, workers

ROUTERS: list[APIRouter] = [
    overview.router,
    agents.router,
    papers.router,
    threads.router,
    research.router,
    workers.router,
    study.router,
    operator.router,
    login.router,
]
