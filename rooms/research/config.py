"""The research config sections: `research` (the Research Counter, its tasks and executor),
`debugger` and `stagnation`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from evaluators.base import new_station_params
from station.core.config import STORED, ExecutorConfig, ModelConfig, Section, beside, config_section

# Task parameters that name files or folders: forecasting and rna_modelling `path`, sokoban
# `levels`, batch_integration `h5ad`.
PATH_PARAMS = frozenset({"path", "levels", "h5ad"})


class TaskConfig(Section):
    """One research task: a built-in evaluator with its parameters, or a task folder (docs/tasks.md)."""

    evaluator: str | None = Field(None, min_length=1, description="registry name, e.g. circle_packing")
    folder: str | None = Field(
        None, min_length=1, description="a task folder (docs/tasks.md); relative to the config file"
    )
    params: dict[str, Any] = Field(default_factory=dict, description="evaluator parameters, e.g. {n: 26}")

    @model_validator(mode="after")
    def _one_source(self) -> TaskConfig:
        if (self.evaluator is None) == (self.folder is None):
            raise ValueError("give either evaluator (a built-in task) or folder (a task folder), not both or neither")
        if self.folder is not None and self.params:
            raise ValueError("a task folder takes no params: its task.yaml says everything")
        return self

    timeout_s: float | None = Field(None, gt=0, le=7 * 24 * 3600, description="override the task's timeout")
    baselines: bool = Field(True, description="evaluate the task's System baselines when the station is created")

    @model_validator(mode="after")
    def _record_changed_defaults(self, info: ValidationInfo) -> TaskConfig:
        """A new config records the parameters whose default changed (`Task.new_station_params`), so
        the station it makes keeps their meaning; a station's stored config stays as it was made."""
        if self.evaluator is not None and not (info.context or {}).get(STORED):
            self.params = new_station_params(self.evaluator, self.params)
        return self


class CoderCommandConfig(Section):
    """The command back-end of the research coder (docs/coder.md, "Back-ends"): an installed
    command-line coder run in the sandbox, its model calls relayed by the station."""

    argv: list[str] = Field(
        default_factory=list,
        description="the CLI and its arguments; {prompt_file} and {workspace} are filled in, e.g. "
        "[claude, -p, --dangerously-skip-permissions, 'Read {prompt_file} and do what it says']",
    )
    provider: Literal["anthropic", "openai", "openai-chat", "gemini"] = Field(
        "anthropic", description="whose wire format the CLI speaks (openai: Responses; openai-chat: Chat Completions)"
    )
    model: ModelConfig | None = Field(None, description="the endpoint and key the station forwards the CLI's calls to")
    timeout_s: float = Field(3600, gt=0, le=7 * 24 * 3600, description="wall-clock limit of one start of the CLI")
    max_spawns: int = Field(2, ge=1, le=10, description="starts of the CLI per evaluation (a restart starts it again)")


class CoderConfig(Section):
    """The research coder (`research.mode: coder`, docs/coder.md): a tool-using model that turns an
    agent's instruction into code, runs official attempts and reports."""

    backend: str = Field(
        "tools",
        description="tools: the station's tool loop with `model`; command: an installed CLI (`command`); "
        "plugins may add more",
    )
    command: CoderCommandConfig = Field(default_factory=CoderCommandConfig)

    model: ModelConfig = Field(default_factory=lambda: ModelConfig(name="scripted-coder"))
    max_attempts: int = Field(5, ge=1, le=20, description="official attempts per evaluation")
    max_turns: int = Field(30, ge=2, le=500, description="model calls per coder session")
    command_timeout_s: float = Field(60, gt=0, le=3600, description="wall-clock limit of one tool command")
    max_instruction_chars: int = Field(20_000, ge=100, le=1_000_000, description="the longest instruction taken")

    @model_validator(mode="after")
    def _backend_known(self) -> CoderConfig:
        from .backends import CODER_BACKENDS  # the registry loads the back-ends' plugins

        if self.backend not in CODER_BACKENDS:
            raise ValueError(
                f"unknown research.coder.backend {self.backend!r}; known: {', '.join(CODER_BACKENDS.names())}"
            )
        if self.backend == "command":
            command = self.command
            if not command.argv or not command.argv[0].strip():
                raise ValueError("research.coder.command.argv is empty: give the CLI and its arguments")
            if command.model is None:
                raise ValueError("research.coder.command.model is missing: the endpoint the CLI's calls go to")
            family = command.provider.removesuffix("-chat")
            if command.model.provider != family:
                raise ValueError(
                    f"research.coder.command.model.provider is {command.model.provider!r}; a CLI speaking "
                    f"{command.provider} needs {family!r}"
                )
        return self

    def used_model(self) -> ModelConfig:
        """The model the coder's calls are booked against: the tool loop's, or the CLI's endpoint."""
        if self.backend == "command" and self.command.model is not None:
            return self.command.model
        return self.model


@config_section("research")
class ResearchConfig(Section):
    """The Research Counter and its evaluations (spec research §1-§2)."""

    tasks: list[TaskConfig] = Field(default_factory=list, description="no tasks: no Research Counter")
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    mode: Literal["direct", "coder"] = Field(
        "direct",
        description="direct: agents submit code (the paper's way); coder: agents submit an instruction "
        "that the research coder implements, runs and reports on (docs/coder.md)",
    )
    coder: CoderConfig = Field(default_factory=CoderConfig)
    max_open_per_agent: int = Field(2, ge=1, le=100, description="unfinished evaluations one agent may have")
    wait_ticks: int | None = Field(
        2,
        ge=1,
        description="the tick waits for evaluations this many ticks old "
        "(counting the submission tick); null never waits",
    )
    delivery: Literal["when_ready", "on_time"] = Field(
        "when_ready",
        description="when_ready: a result reaches its author at the first turn or tick end after it is complete; "
        "on_time: at the end of the tick its wait_ticks run out, never sooner (System baselines too), so a "
        "station with scripted or recorded agents unfolds the same on a fast machine and a slow one",
    )
    cooldown_ticks: int = Field(0, ge=0, description="ticks between one agent's submissions; 0 disables")
    no_score: bool = Field(False, description="hide scores from agents (evaluations still run)")
    show_tag_stats: bool = False
    cross_lineage_review: bool = True
    cross_lineage_storage: bool = True
    allow_cpu_only: bool = False
    holiday_mode: bool = Field(False, description="no submissions on ticks ending in 9 or 0")
    page_size: int = Field(10, ge=1, le=200)
    max_tags: int = Field(6, ge=1, le=50)
    max_tag_chars: int = Field(30, ge=1, le=200)
    max_abstract_words: int = Field(100, ge=1)
    max_code_chars: int = Field(200_000, ge=100)
    log_max_chars: int = Field(15_000, ge=200, description="logs shown in result messages (head and tail)")
    storage_read_max_chars: int = Field(40_000, ge=100)
    storage_write_max_chars: int = Field(1_000_000, ge=100)
    storage_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="each lineage's share of storage/shared, as a fraction of a task's storage limit "
        "(max_storage_mb, 1,024 MB by default: 256 MB); a run that pushes its lineage past it fails "
        "and what it wrote there is removed",
    )

    def models(self) -> list[ModelConfig]:
        return [self.coder.used_model()] if self.mode == "coder" else []

    @model_validator(mode="after")
    def _on_time_needs_a_wait(self) -> ResearchConfig:
        if self.delivery == "on_time" and self.wait_ticks is None:
            raise ValueError("delivery on_time hands results over when wait_ticks run out: set wait_ticks")
        return self

    def resolve_paths(self, config_file: Path) -> None:
        for task in self.tasks:
            if task.folder is not None:
                task.folder = beside(config_file, task.folder)
            for key in PATH_PARAMS.intersection(task.params):
                if isinstance(task.params[key], str):
                    task.params[key] = beside(config_file, task.params[key])


@config_section("debugger")
class DebuggerConfig(Section):
    """The debugger: when a submission crashes, a model proposes a fixed version (spec research §4)."""

    enabled: bool = True
    model: ModelConfig = Field(default_factory=lambda: ModelConfig(name="scripted-debugger", temperature=0.2))
    max_attempts: int = Field(2, ge=1, le=10, description="fixed versions tried per submission")

    def models(self) -> list[ModelConfig]:
        return [self.model]


@config_section("stagnation")
class StagnationConfig(Section):
    """The Stagnation Protocol (spec research §5)."""

    enabled: bool = True
    threshold_ticks: int = Field(120, ge=1, description="ticks without a new best before Protocol I")
    deep_threshold_ticks: int = Field(
        240, ge=1, description="further ticks before Deep Stagnation, and between its code names"
    )
    breakthrough: Literal["tag", "global"] = Field(
        "tag",
        description="tag: progress among the code name's tagged submissions also counts (no cycling "
        "while the tagged track improves); global: only a new overall best",
    )
