"""The reference station's settings that its task evaluators read. Its storage paths point into
this run's own scratch folder (cwd/station_data), where an evaluator may write what it keeps (the
reference keeps packings under rooms/research/internal/); the folder's storage/system is linked
there read-only. The task's constant_config.yaml values are set on this module before the evaluator
is imported (reference_scorer.py). A name not stood in for raises an AttributeError naming it."""

from __future__ import annotations

import os
from typing import Any

BASE_STATION_DATA_PATH = os.path.join(os.getcwd(), "station_data")
ROOMS_DIR_NAME = "rooms"
SHORT_ROOM_NAME_RESEARCH = "research"
RESEARCH_COUNTER_SUBDIR_NAME = "research"
RESEARCH_STORAGE_DIR = "storage"
RESEARCH_STORAGE_SHARED_DIR = "shared"
RESEARCH_STORAGE_SYSTEM_DIR = "system"
RESEARCH_STORAGE_LINEAGES_DIR = "lineages"
RESEARCH_INTERNAL_DIR = "internal"
RESEARCH_STORAGE_BASE_PATH = None
RESEARCH_EVALUATIONS_SUBDIR_NAME = "evaluations"
RESEARCH_TASKS_FILENAME = "research_tasks.yaml"
RESEARCH_TASK_SPEC_FILENAME = "research_task.md"
RESEARCH_BASELINE_FILENAME = "baseline.yamll"
PENDING_RESEARCH_EVALUATIONS_FILENAME = "pending_evaluations.yamll"
YAML_EXTENSION = ".yaml"
YAMLL_EXTENSION = ".yamll"

RESEARCH_SCORE_NA = "n.a."
RESEARCH_SCORE_PENDING = "pending"
RESEARCH_SCORE_DISPLAY_PRECISION = 2
RESEARCH_NO_SCORE = False
RESEARCH_EVAL_TIMEOUT = 610
RESEARCH_EVAL_MAX_TICK = 2
RESEARCH_EVAL_MEMORY_LIMIT = None
RESEARCH_EVAL_CPU_NUM = None
RESEARCH_EVAL_GPU_NUM = None
RESEARCH_EVAL_MAX_PARALLEL_WORKERS = 4
RESEARCH_EVAL_LOG_MAX_CHARS = 15000
RESEARCH_EVAL_STDERR_MAX_CHARS = 7500
RESEARCH_STORAGE_READ_MAX_CHARS = 40000
RESEARCH_SEED_BANK_ENABLED = False

EVALUATION_STATUS_PENDING = "pending"
EVALUATION_STATUS_RUNNING = "running"
EVALUATION_STATUS_COMPLETED = "completed"
EVALUATION_STATUS_FAILED = "failed"
EVALUATION_STATUS_TIMEOUT = "timeout"


def __getattr__(name: str) -> Any:
    raise AttributeError(
        f"station.constants.{name} is not among the reference station's settings this station stands in for "
        "(evaluators/folder/reference/standin/station/constants.py)"
    )
