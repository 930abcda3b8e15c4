"""Model providers. The engine asks a ModelPool for the model of a config; it imports no SDK."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, cast

from station.core.config import ModelConfig
from station.core.model_api import (
    SCRIPTED_POLICIES,
    BudgetExceeded,
    Message,
    Model,
    ModelError,
    Reply,
    Tool,
    ToolModel,
    Usage,
    estimate_conversation,
)
from station.core.plugins import PROVIDERS
from station.core.registry import UnknownName
from station.models import (  # noqa: F401 - they register their policies
    scripted_administrator,
    scripted_coder,
    scripted_debugger,
    scripted_grader,
    scripted_reviewer,
    scripted_surveyor,
)
from station.models.branch_seed import branch_seeded
from station.models.endpoint import EndpointKey, known_limit
from station.models.fallback import FallbackModel, Switch
from station.models.remote import endpoint_key
from station.models.replay import ReplayModel
from station.models.request_processes import RequestProcesses
from station.models.scripted import ScriptedModel

__all__ = [
    "PROVIDERS",
    "BudgetExceeded",
    "Message",
    "Model",
    "ModelError",
    "ModelPool",
    "PooledModel",
    "Reply",
    "SentCall",
    "Usage",
    "create_model",
]


def create_model(
    config: ModelConfig,
    *,
    stop: threading.Event | None = None,
    on_wait: Callable[[str], None] | None = None,
    processes: RequestProcesses | None = None,
    on_switch: Callable[[Switch], None] | None = None,
) -> Model:
    """The model of `config`. With `processes`, a remote model's calls are made there (and a
    model with backups chooses its endpoint there); `on_switch` hears of each change of endpoint."""
    try:
        make = PROVIDERS.get(config.provider)
    except UnknownName as err:
        raise ModelError(str(err), permanent=True) from None
    if processes is not None and config.remote:
        return make(config, stop=stop, on_wait=on_wait, processes=processes)
    if config.backups:
        return FallbackModel(config, lambda each: make(each, stop=stop, on_wait=on_wait), on_switch or (lambda s: None))
    return make(config, stop=stop, on_wait=on_wait)


@PROVIDERS.register("scripted")
def _scripted(config: ModelConfig, **_: Any) -> Model:
    """The offline policies: a system role's by its name prefix (scripted-grader...), else an agent's."""
    role = next((prefix for prefix in SCRIPTED_POLICIES.names() if config.name.startswith(prefix)), None)
    if role is not None:
        return SCRIPTED_POLICIES.get(role)(config.name)
    return ScriptedModel(config.name, config.seed)


@PROVIDERS.register("replay")
def _replay(config: ModelConfig, **_: Any) -> Model:
    return ReplayModel(config.name, config.replay_file or "")


# The SDK clients load only when a station uses them.
PROVIDERS.lazy("anthropic", "station.models.anthropic_model:AnthropicModel")
PROVIDERS.lazy("openai", "station.models.openai_model:OpenAIModel")
PROVIDERS.lazy("gemini", "station.models.gemini_model:GeminiModel")


class PooledModel:
    """A model as the station uses it: made on first call, budget-checked before each call and
    booked after. Made lazily so that a replay, or counting tokens, never needs a provider key.
    """

    def __init__(
        self, config: ModelConfig, ledger: Any, make: Callable[[], Model], processes: RequestProcesses | None = None
    ) -> None:
        self.config, self.ledger, self._make, self.processes = config, ledger, make, processes
        self.name = config.name
        self._inner: Model | None = None
        self._lock = threading.Lock()

    @property
    def inner(self) -> Model:
        with self._lock:
            if self._inner is None:
                self._inner = self._make()
            return self._inner

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        if self.config.remote:  # an estimate, scaled by the engine with what the provider reported
            return estimate_conversation(messages, system)
        return self.inner.count_tokens(messages, system=system)

    def complete(
        self, messages: list[Message], *, system: str | None, agent: str, tools: list[Tool] | None = None
    ) -> Reply:
        inner = self._made()
        reservation = self.ledger.reserve(agent, self.config, messages, with_tools(system, tools))
        try:
            if tools is None:  # models that offer no tools need not take the keyword
                reply = inner.complete(messages, system=system, agent=agent)
            else:
                reply = cast(ToolModel, inner).complete(messages, system=system, agent=agent, tools=tools)
        except BaseException as err:
            self._failed(reservation, err)
            raise
        return self._booked(reservation, reply)

    @property
    def sends_ahead(self) -> bool:
        """Whether `submit` can send a call without a thread waiting for it (request processes)."""
        return self.processes is not None and self.config.remote

    def submit(
        self, messages: list[Message], *, system: str | None, agent: str, tools: list[Tool] | None = None
    ) -> SentCall:
        """`complete` without waiting (only where `sends_ahead`): the budget is checked now (a
        cap raises here); the reply is booked when it is taken (`SentCall.reply`)."""
        assert self.processes is not None
        self._made()  # a missing key is told here, as `complete` tells it
        reservation = self.ledger.reserve(agent, self.config, messages, with_tools(system, tools))
        return SentCall(self, reservation, self.processes.submit(self.config, messages, system, agent, tools))

    def _made(self) -> Model:
        try:
            return self.inner
        except ModelError as err:  # e.g. no key: which settings failed, for the operator's fix
            err.config = getattr(err, "config", None) or self.config
            raise

    def _failed(self, reservation: Any, err: BaseException) -> None:
        self.ledger.settle(reservation, self.config, None)
        if isinstance(err, ModelError):
            err.config = getattr(err, "config", None) or self.config

    def _booked(self, reservation: Any, reply: Reply) -> Reply:
        cost = self.ledger.settle(
            reservation, self.config, reply.usage, latency_s=reply.latency_s, retries=reply.retries
        )
        if self.config.remote or cost:
            reply.cost_usd = round(cost, 8)
        return reply


def with_tools(system: str | None, tools: list[Tool] | None) -> str | None:
    """The system prompt as a budget reservation counts it: the tools' schemas are sent with it."""
    if not tools:
        return system
    return (system or "") + json.dumps([vars(tool) for tool in tools])


class SentCall:
    """A call sent ahead (PooledModel.submit). Its reply is booked by whoever takes it, in that
    thread: the thread that reads the workers' answers must never wait for the ledger's lock."""

    def __init__(self, model: PooledModel, reservation: Any, future: Future[Reply]) -> None:
        self.model, self.reservation, self.future = model, reservation, future

    def reply(self) -> Reply:
        """The reply (waiting for it), booked; or the failure it ended with, raised."""
        try:
            reply = self.future.result()
        except BaseException as err:
            self.model._failed(self.reservation, err)
            raise
        return self.model._booked(self.reservation, reply)


class ModelPool:
    """One model per distinct config, shared by the agents (and threads) that use it, with one
    ledger that meters every call: budgets are checked before it and spend is booked after.
    """

    def __init__(
        self,
        ledger: Any = None,
        *,
        stop: threading.Event | None = None,
        on_wait: Callable[[str], None] | None = None,
        request_processes: int = 0,
        providers: Callable[[], Iterable[str]] = lambda: (),
        branch_seed: int | None = None,
    ) -> None:
        from station.core.budget import Ledger
        from station.core.config import StationConfig

        self.ledger = ledger if ledger is not None else Ledger(None, StationConfig)
        self.on_wait = on_wait or (lambda text: None)
        self._models: dict[str, PooledModel] = {}
        self._by_dict: dict[str, PooledModel] = {}
        self._lock = threading.Lock()
        # engine.request_processes: the provider calls are made in that many processes
        self.processes = (
            RequestProcesses(
                request_processes, on_wait=lambda text: self.on_wait(text), providers=providers, on_switch=self.switched
            )
            if request_processes
            else None
        )
        self.stop = stop or threading.Event()
        self.branch_seed = branch_seed  # a multistart branch's (station meta 'branch_seed'): see branch_seed.py

    @property
    def stop(self) -> threading.Event:
        """Set when the station stops: calls waiting to retry give up (ModelError, interrupted)."""
        return self._stop

    @stop.setter
    def stop(self, event: threading.Event) -> None:
        self._stop = event
        if self.processes is not None:
            self.processes.watch(event)

    def get(self, config: ModelConfig | dict[str, Any]) -> PooledModel:
        if isinstance(config, dict):  # an agent's settings, asked for every turn: validated once
            seen = json.dumps(config, sort_keys=True, default=str)
            found = self._by_dict.get(seen)
            if found is None:
                found = self._by_dict[seen] = self.get(ModelConfig.model_validate(config))
            return found
        cfg = branch_seeded(config, self.branch_seed)
        key = cfg.model_dump_json()
        with self._lock:
            if key not in self._models:
                self._models[key] = PooledModel(
                    cfg,
                    self.ledger,
                    lambda: create_model(
                        cfg,
                        stop=self.stop,
                        on_wait=lambda text: self.on_wait(text),
                        processes=self.processes,
                        on_switch=self.switched,
                    ),
                    self.processes,
                )
            return self._models[key]

    def switched(self, switch: Switch) -> None:
        """A model's calls moved to another endpoint (backups): recorded, and told like a wait."""
        self.ledger.record_switch(switch)
        self.on_wait(switch.text())

    @staticmethod
    def width(models: Iterable[PooledModel | ModelConfig | dict[str, Any]]) -> int:
        """How many of these calls (one model, or its config, per call; repeats welcome) can
        usefully run at once: on each remote endpoint as many as its `max_in_flight` lets
        through, and one for all the offline models together (they compute in this process: more
        threads gain nothing). Callers size their thread pools by it; the bound itself is kept
        inside each call, whoever makes it."""
        calls: Counter[EndpointKey] = Counter()
        bounds: dict[EndpointKey, int] = {}
        offline = 0
        for model in models:
            cfg = model.config if isinstance(model, PooledModel) else model
            cfg = cfg if isinstance(cfg, ModelConfig) else ModelConfig.model_validate(cfg)
            if not cfg.remote:
                offline = 1
                continue
            key = endpoint_key(cfg)
            calls[key] += 1
            bounds[key] = min(bounds.get(key, cfg.max_in_flight), known_limit(key) or cfg.max_in_flight)
        return max(1, offline + sum(min(count, bounds[key]) for key, count in calls.items()))

    def forget(self, config: ModelConfig | dict[str, Any]) -> None:
        """Drop the model made for these settings (they were changed): a later `get` of them makes
        a fresh one, and the settings that replaced them get their own."""
        cfg = config if isinstance(config, ModelConfig) else ModelConfig.model_validate(config)
        cfg = branch_seeded(cfg, self.branch_seed)
        with self._lock:
            self._models.pop(cfg.model_dump_json(), None)
            self._by_dict = {seen: model for seen, model in self._by_dict.items() if model.config != cfg}

    def close(self) -> None:
        if self.processes is not None:
            self.processes.close()
        self.ledger.close()
