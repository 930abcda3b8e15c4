"""Typed station configuration: one YAML file -> pydantic models with a default for everything.

Unknown keys and bad values fail at start-up with the key's dotted path, e.g.
`lifecycle.max_age: Input should be greater than 0 (got -3)`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from station.core.agents import lineage_name_problem
from station.core.plugins import EXECUTORS, PROVIDERS
from station.core.registry import PLUGINS, Registry


class ConfigError(ValueError):
    """A config problem, already formatted for the operator."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)
    key: ClassVar[str] = ""  # a feature's section: its top-level key (set by @config_section)

    def models(self) -> list[ModelConfig]:
        """The models this section's feature calls (checked for keys and prices with the agents')."""
        return []

    def resolve_paths(self, config_file: Path) -> None:
        """Make the section's relative file paths relative to `config_file`, wherever it is run from."""


S = TypeVar("S", bound=Section)
# The features' sections by top-level key (research:, reviewer:, ...): each feature defines and
# registers its own; a station's config is the engine's sections plus every registered one.
SECTIONS: Registry[type[Section]] = Registry("config section", plugins=PLUGINS)


def config_section(key: str) -> Callable[[type[S]], type[S]]:
    """Register a feature's config section under its top-level key."""

    def register(cls: type[S]) -> type[S]:
        cls.key = key
        SECTIONS.register(key)(cls)
        return cls

    return register


ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# Validation context of a config a station already holds: names it was created with are kept as they
# are (refusing them now would lock the operator out of the station; they were checked at entry).
STORED = "stored"


DEFAULT_MAX_IN_FLIGHT = 100  # requests at once per endpoint: the SDKs' own keep-alive pool size
DEFAULT_BACKUP_PROBE_S = 1800.0  # while on a backup, the base endpoint is tried again this often


def _no_key_here(data: Any) -> Any:
    """Keys live in the environment: a config that holds one is refused before it is stored."""
    if isinstance(data, dict) and "api_key" in data:
        raise ValueError(
            "api_key: keys never go in the config (it is stored with the station); put the key in an "
            "environment variable and name it with api_key_env"
        )
    return data


class BackupEndpoint(Section):
    """Another endpoint of the same provider and model, tried when the one in use keeps failing."""

    base_url: str | None = Field(None, description="null: the provider's own endpoint")
    api_key_env: str | None = Field(
        None, pattern=ENV_NAME, description="environment variable holding this endpoint's key (default: the model's)"
    )

    _no_key = model_validator(mode="before")(_no_key_here)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("a backup's base_url is an http:// or https:// address")
        return value


class ModelConfig(Section):
    """Which model drives an agent (or the reviewer, grader, debugger).

    Keys never live here: a provider reads its key from an environment variable (the usual
    one, or the one named by `api_key_env`), so a stored config holds no secret.
    """

    provider: str = Field(
        "scripted", description="a registered model provider: scripted, replay, anthropic, openai, gemini"
    )
    name: str = Field("scripted-newcomer", min_length=1, description="model id; lineages match on it")
    temperature: float | None = Field(1.0, ge=0.0, le=2.0, description="null: the provider's default")
    max_output_tokens: int = Field(8192, gt=0)
    context_limit: int | None = Field(
        None,
        gt=0,
        description="the model's context window; agents are warned "
        "and ended before it (with the token budget, whichever is smaller)",
    )
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = Field(
        None, description="openai: reasoning.effort (with a reasoning summary)"
    )
    thinking_budget: int | None = Field(None, ge=0, description="anthropic and gemini: thinking tokens per reply")
    api: Literal["responses", "chat"] = Field(
        "responses",
        description="openai: Responses API, or Chat "
        "Completions (what OpenAI-compatible servers speak; the "
        "default when base_url is set)",
    )
    base_url: str | None = Field(None, description="another endpoint: a proxy, or an OpenAI-compatible server")
    api_key_env: str | None = Field(
        None,
        pattern=ENV_NAME,
        description="environment variable holding the key (default: ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY)",
    )
    timeout_s: float = Field(600.0, gt=0, description="one request, including a streamed reply")
    max_in_flight: int = Field(
        DEFAULT_MAX_IN_FLIGHT,
        ge=1,
        le=100_000,
        # Left out of stored records when it is the default, so stations recorded before the key
        # existed keep the same agent records (and replay to the same world).
        exclude_if=lambda value: value == DEFAULT_MAX_IN_FLIGHT,
        description="most requests sent at once to this model's endpoint (provider, base_url, key), counted "
        "over every model and role using it; where they give different values the smallest holds",
    )
    max_retries: int = Field(10, ge=0, le=100, description="retries of a transient failure before pausing")
    retry_base_s: float = Field(2.0, ge=0, description="first backoff delay; doubles with each retry")
    retry_max_s: float = Field(120.0, ge=0, description="longest backoff delay (retry-after may ask more)")
    options: dict[str, Any] = Field(default_factory=dict, description="extra provider request options")
    # Left out of stored records when unset, like max_in_flight: older stations keep their records.
    backups: list[BackupEndpoint] = Field(
        default_factory=list,
        exclude_if=lambda value: not value,
        description="endpoints tried in turn after this one (base, backup 1, ..., base again) when more than 70% "
        "of the last 10 calls to the one in use failed; each names its key by api_key_env, never the key",
    )
    backup_probe_s: float = Field(
        DEFAULT_BACKUP_PROBE_S,
        ge=0,
        exclude_if=lambda value: value == DEFAULT_BACKUP_PROBE_S,
        description="while a backup is in use, the base endpoint is tried with one small call this often (seconds)",
    )
    replay_file: str | None = Field(None, description="replay provider: JSONL file of replies")
    seed: int = Field(0, description="scripted provider: seed of its decisions")

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, value: str) -> str:
        if value not in PROVIDERS:
            raise ValueError(f"Input should be one of {', '.join(map(repr, PROVIDERS.names()))}")
        return value

    _no_key = model_validator(mode="before")(_no_key_here)

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if self.backups and not self.remote:
            raise ValueError(f"backups: provider {self.provider!r} calls no endpoint; backups need a remote provider")
        where = [(b.base_url or "").rstrip("/") + " " + (b.api_key_env or "") for b in self.backups]
        if len(set(where)) < len(where) or (self.base_url or "").rstrip("/") + " " + (self.api_key_env or "") in where:
            raise ValueError(
                "backups: each endpoint (base_url and api_key_env) must differ from the base and the others"
            )
        if self.provider == "replay" and not self.replay_file:
            raise ValueError("provider 'replay' needs replay_file")
        if self.thinking_budget and self.provider == "anthropic" and self.thinking_budget >= self.max_output_tokens:
            raise ValueError("anthropic: thinking_budget must be smaller than max_output_tokens")
        if self.provider == "openai" and self.base_url and "api" not in self.model_fields_set:
            self.api = "chat"  # most OpenAI-compatible servers have only /v1/chat/completions
        return self

    @property
    def remote(self) -> bool:
        return self.provider in ("anthropic", "openai", "gemini")

    def resolve_paths(self, config_file: Path) -> None:
        if self.replay_file:
            self.replay_file = beside(config_file, self.replay_file)


class Price(Section):
    """US dollars per million tokens. Reasoning tokens are billed as output."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0, description="default: the input price")
    cache_write: float | None = Field(None, ge=0, description="anthropic cache writes; default: the input price")


class BudgetConfig(Section):
    """Caps on spend. The station pauses, with a message, before a model call could cross one."""

    station_usd: float | None = Field(None, ge=0)
    agent_usd: float | None = Field(None, ge=0, description="per agent (each session)")
    station_tokens: int | None = Field(None, ge=0, description="input + output + reasoning tokens of all calls")
    agent_tokens: int | None = Field(None, ge=0)


class AgentSpec(Section):
    """One entry of the initial population (`count` identical agents)."""

    count: int = Field(1, ge=1, le=1000)
    kind: Literal["guest", "recursive"] = "guest"
    model: ModelConfig = Field(default_factory=ModelConfig)
    lineage: str | None = Field(None, description="recursive agents: their lineage name")
    description: str | None = Field(None, max_length=200)
    token_budget: int | None = Field(None, gt=0, description="default: tokens.guest_budget / recursive_budget")
    system_prompt: str | None = None
    role: Literal["supervisor"] | None = None
    assigned_ancestor: str | None = None
    note: str = ""
    max_age: int | None = Field(None, gt=0, description="default: lifecycle.max_age")

    @field_validator("lineage")
    @classmethod
    def _lineage_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        """The rule an ascending guest's new lineage follows, checked where a name enters (a config,
        a spawn): a name the station cannot use (its storage folder, its agents' names) would
        otherwise fail every later evaluation of the lineage. A stored config keeps what it has."""
        if not value or (info.context or {}).get(STORED):  # no name: _recursive_needs_lineage says so
            return value
        problem = lineage_name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _recursive_needs_lineage(self) -> AgentSpec:
        if self.kind == "recursive" and not self.lineage:
            raise ValueError("recursive agents need a lineage")
        if self.kind == "guest" and self.lineage:
            raise ValueError("guests have no lineage (they choose one when they ascend)")
        return self


class LifecycleConfig(Section):
    max_age: int | None = Field(300, gt=0, description="life limit in ticks; null = immortal")
    life_warning_ticks: int = Field(10, ge=0)
    maturity_ticks: int | None = Field(50, ge=0, description="age of maturity; null disables isolation")
    min_tests_for_ascension: int = Field(1, ge=0)
    auto_respawn: bool = True
    respawn_after_operator_end: bool = True


class CompactionConfig(Section):
    """The station compacts an agent's conversation for it when it nears the model's window."""

    enabled: bool = Field(False, description="off: agents that outgrow the window end, as without compaction")
    at_share: float = Field(
        0.85,
        gt=0,
        lt=1,
        description="compact before a prompt once the context passes this share of the model's "
        "context_limit (less max_output_tokens)",
    )
    keep_turns: int = Field(4, ge=1, description="the agent's most recent turns, kept whole")
    model: ModelConfig | None = Field(None, description="the model that writes the summary; null: the agent's own")


class AdministratorConfig(Section):
    """The administrator of `station multistart --choose admin`: it reads interviews of each branch's
    agents and chooses the branch (docs/multistart.md)."""

    model: ModelConfig | None = Field(
        None,
        description="the model that reads the interviews and chooses; null: the reviewer's model (with the "
        "scripted provider: its administrator, scripted-administrator)",
    )
    interviews_per_branch: int = Field(
        4, ge=1, le=50, description="active agents interviewed per branch (the first in turn order), each by its model"
    )


@config_section("multistart")
class MultistartConfig(Section):
    """`station multistart`'s settings kept with the station."""

    administrator: AdministratorConfig = Field(default_factory=AdministratorConfig)
    on_stagnation: bool = Field(
        False,
        description="when a research task enters Stagnation, `station run` runs a multistart from that tick "
        "and goes on as the chosen branch (once per stagnation episode)",
    )
    branches: int = Field(4, ge=1, le=64, description="at stagnation: branches")
    ticks: int = Field(20, ge=1, description="at stagnation: ticks each branch runs")
    parallel: int = Field(2, ge=1, le=64, description="at stagnation: branches run at once")
    choose: str = Field("best-score", description="at stagnation: the rule, as `station multistart --choose`")

    def models(self) -> list[ModelConfig]:
        return [self.administrator.model] if self.administrator.model else []


class TokensConfig(Section):
    guest_budget: int = Field(1_000_000, gt=0)
    recursive_budget: int = Field(1_000_000, gt=0)
    guest_ceiling: int = Field(100_000, gt=0)
    guest_prewarning_ratio: float = Field(0.4, gt=0, le=1)
    guest_warning_ratio: float = Field(0.8, gt=0, le=1)
    recursive_prewarning_ratio: float = Field(0.75, gt=0, le=1)
    recursive_warning_ratio: float = Field(0.9, gt=0, le=1)
    prune_cooldown_ticks: int = Field(5, ge=0)
    protected_keywords: list[str] = Field(
        default_factory=lambda: ["This Codex was written by the Architect", "**Architect Message**"],
        description="a tick whose station text contains one of these cannot be pruned "
        "(room help headers are always protected)",
    )
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)

    def models(self) -> list[ModelConfig]:
        return [self.compaction.model] if self.compaction.model else []


class LineageConfig(Section):
    selection: Literal["evolution", "uniform"] = "evolution"
    temperature: float = Field(1.0, gt=0)
    new_lineage_utility: float = 0.0
    lifespan_penalty_per_tick: float = Field(0.02, ge=0)
    force_new_probability: float = Field(0.0, ge=0, le=1)


class NotificationsConfig(Section):
    tips_every_ticks: int = Field(4, ge=0, description="0 disables automatic tips")
    inactivity_threshold: int | None = Field(10, gt=0, description="null disables")
    supervisor_inactivity_threshold: int | None = Field(5, gt=0)
    inactivity_repeat_ticks: int = Field(10, gt=0, description="re-warn this often while inactive")


ENTRY_AND_EXIT = ("lobby", "exit")  # every station has them: agents arrive in one and leave by the other


class RoomsConfig(Section):
    enabled: list[str] | None = Field(
        None,
        description="the station's rooms by short name, recorded when it is created (every room the code has, less "
        "`disabled`); a room added to the code later joins an existing station only when it is listed here",
    )
    disabled: list[str] = Field(default_factory=list, description="short names of rooms to leave out")
    guest_mail_limit: int = Field(3, ge=0)

    @field_validator("disabled")
    @classmethod
    def _keep_core(cls, value: list[str]) -> list[str]:
        core = set(ENTRY_AND_EXIT)
        if core & set(value):
            raise ValueError(f"rooms {sorted(core & set(value))} cannot be disabled")
        return value

    @field_validator("enabled")
    @classmethod
    def _has_core(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        missing = [short for short in ENTRY_AND_EXIT if short not in value]
        if missing:
            raise ValueError(f"rooms {missing} cannot be left out")
        if len(set(value)) != len(value):
            raise ValueError("a room is listed twice")
        return value


class ExecutorConfig(Section):
    kind: str = Field("local", description="a registered executor: local, ray")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in EXECUTORS:
            raise ValueError(f"Input should be one of {', '.join(map(repr, EXECUTORS.names()))}")
        return value

    max_parallel: int = Field(2, ge=1, le=256, description="evaluations running at once")
    scratch_dir: str | None = Field(
        None, description="where each run's scratch folder is made (on every worker host); null: the system's temp dir"
    )
    ray_address: str | None = Field(
        None, description="join this Ray cluster (e.g. ray://host:10001 or auto); null starts a local instance"
    )
    ray_num_cpus: int | None = Field(None, gt=0, description="CPUs of a local Ray instance (default: all)")
    ray_queue_timeout_s: float | None = Field(
        None,
        gt=0,
        description="give up a run no Ray worker has taken after this long (e.g. it asks for a GPU the cluster lacks)",
    )


class CodexConfig(Section):
    set: str = Field("research", description="a folder under codex/sets/, or a path to one (relative to the config)")
    texts: dict[str, str] = Field(default_factory=dict, description="message/help overrides by name")

    def resolve_paths(self, config_file: Path) -> None:
        # A path, as Texts tells one from a set's name: it has a slash or begins with a dot.
        if "/" in self.set or self.set.startswith("."):
            self.set = beside(config_file, self.set)


class OperatorConfig(Section):
    pause_on_human_request: bool = False


class PromptConfig(Section):
    """How the station's prompts are written (the texts come from the codex either way)."""

    style: Literal["full", "compact"] = Field(
        "full",
        description="full: the paper's prompts (no system prompt, the welcome in the first message); "
        "compact: for small or local models: the standing rules (action syntax with an example, the rooms, "
        "token advice) in one short system prompt sent the provider's own way (so it can be cached), a "
        "short welcome, and no repeated navigation help",
    )


class EngineConfig(Section):
    max_internal_steps: int = Field(50, ge=1, le=200)
    max_actions_per_reply: int = Field(100, ge=1, le=1000)
    max_reply_chars: int = Field(200_000, ge=1000, description="longer replies are cut before parsing")
    durability: Literal["normal", "full"] = "normal"
    backup_every_ticks: int = Field(50, ge=0, description="0 disables automatic backups")
    backups_kept: int = Field(5, ge=1)
    conversation_cache_mb: int = Field(
        256, ge=1, description="conversations kept in memory, at most; the least recently used are read again"
    )
    request_processes: int = Field(
        0,
        ge=0,
        le=64,
        description="processes that send the provider requests and read the answers (the SDKs' CPU); 0: the "
        "station's own process does. Worth a few at hundreds of agents, on a machine with cores to spare",
    )


class StationConfig(Section):
    name: str = "station"
    description: str = ""
    seed: int = 0
    agents: list[AgentSpec] = Field(default_factory=lambda: [AgentSpec(count=5)])
    lifecycle: LifecycleConfig = Field(default_factory=LifecycleConfig)
    tokens: TokensConfig = Field(default_factory=TokensConfig)
    lineage: LineageConfig = Field(default_factory=LineageConfig)
    notifications: NotificationsConfig = Field(default_factory=NotificationsConfig)
    rooms: RoomsConfig = Field(default_factory=RoomsConfig)
    codex: CodexConfig = Field(default_factory=CodexConfig)
    operator: OperatorConfig = Field(default_factory=OperatorConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    turns: Literal["sequential", "concurrent"] = Field(
        "sequential",
        description="concurrent: every prompt of a tick is built from the world at its start, "
        "the model calls run in parallel, and the replies are applied in turn order",
    )
    prices: dict[str, Price] = Field(default_factory=dict, description="by model name, for costs and budgets")
    budget: BudgetConfig = Field(default_factory=BudgetConfig)

    @model_validator(mode="after")
    def _priced_when_budgeted(self) -> StationConfig:
        if self.budget.station_usd is None and self.budget.agent_usd is None:
            return self
        unpriced = sorted({m.name for m in self.all_models() if m.remote and m.name not in self.prices})
        if unpriced:
            raise ValueError(
                f"a money budget is set but these models have no price: {', '.join(unpriced)} (add them under prices:)"
            )
        return self

    def all_models(self) -> list[ModelConfig]:
        """Every model the station may call: the agents', and those of its features (reviewer, grader, ...)."""
        features = [model for key in SECTIONS.names() for model in self.section_at(key).models()]
        return [spec.model for spec in self.agents] + self.tokens.models() + features

    def section(self, kind: type[S]) -> S:
        """A feature's section of this config, typed as the feature defines it."""
        value = self.section_at(kind.key)
        if not isinstance(value, kind):
            raise TypeError(f"config section {kind.key!r} is a {type(value).__name__}, not {kind.__name__}")
        return value

    def section_at(self, key: str) -> Section:
        value = getattr(self, key, None)
        if not isinstance(value, Section):
            raise KeyError(f"this config has no section {key!r}")
        return value

    def resolve_paths(self, config_file: Path) -> None:
        """Every relative file path the config names (replay files, the codex set, each feature's
        own: task folders, data), made absolute against the config file's folder, so that the
        station finds them whatever directory it is run from."""
        for model in self.all_models():
            model.resolve_paths(config_file)
        self.codex.resolve_paths(config_file)
        for key in SECTIONS.names():
            self.section_at(key).resolve_paths(config_file)


def schema() -> type[StationConfig]:
    """The station config with every registered feature's section: built once per set of sections."""
    keys = tuple(SECTIONS.names())
    made = _SCHEMAS.get(keys)
    if made is None:
        sections: dict[str, Any] = {key: (SECTIONS.get(key), Field(default_factory=SECTIONS.get(key))) for key in keys}
        made = _SCHEMAS[keys] = create_model("StationConfig", __base__=StationConfig, **sections)
    return made


_SCHEMAS: dict[tuple[str, ...], type[StationConfig]] = {}


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"invalid station config ({source}):"]
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif "key" in path.rsplit(".", 1)[-1]:
            pass  # a key's name is not echoed: a key pasted where its variable's name belongs would be printed
        elif "input" in e and not isinstance(e["input"], (dict, list)):
            msg = f"{msg} (got {e['input']!r})"
        lines.append(f"  {path}: {msg}")
    return "\n".join(lines)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_config(data: Any, source: str = "<config>", *, stored: bool = False) -> StationConfig:
    """A config from its data. `stored`: the config a station already holds (see STORED)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"invalid station config ({source}): the top level must be a mapping")
    try:
        return schema().model_validate(data, context={STORED: stored})
    except ValidationError as err:
        raise ConfigError(_format_errors(err, source)) from None


def _yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's message in one line: what is wrong, and where."""
    mark = getattr(err, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    return " ".join((f"{where}{what}" + (f" ({context})" if context else "")).split())


def load_config(path: str | Path) -> StationConfig:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read config {p}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config {p} is not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset "
            f"{err.start}); save it as UTF-8 YAML"
        ) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - safe loader subclass
    except yaml.YAMLError as err:
        raise ConfigError(f"config {p} is not valid YAML: {_yaml_problem(err)}") from None
    config = parse_config(data, str(p))
    config.resolve_paths(p)
    return config


def beside(config_file: Path, path: str) -> str:
    """`path` as given in `config_file`: relative to the file's folder, `~` expanded."""
    return str((config_file.parent / Path(path).expanduser()).resolve())
