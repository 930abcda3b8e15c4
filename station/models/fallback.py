"""Backup endpoints of a model (`backups:` in its config): which endpoint its calls go to.

The endpoints are the model's own (the base) and its backups, in order, in a loop: base, backup
1, backup 2, base again. Every model config that names the same endpoints shares one default, in
the process: a failing endpoint is the provider's news, not one agent's.

* A call goes to the current default, with that endpoint's usual retries. When it still fails
  with a transient failure (no connection, 5xx, a 429 quota), it is tried at the next endpoint
  of the loop, and so on, each endpoint once; only when every one failed does the call fail.
* Each call's outcome at the default counts for the default: when more than 70% of its last 10
  calls (those since it became the default, at most 10) failed, the default moves to the next
  endpoint, and calls stop trying the failing one first.
* While the default is not the base, the base is tried with one small call every
  `backup_probe_s` seconds; when it answers, it is the default again.

Each move is told to `on_switch` (the station records it and shows it); the replies themselves
are recorded as any reply, so a replay, which calls no model, gives the same world.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from station.core.config import ModelConfig
from station.core.model_api import TRANSIENT, Message, Model, ModelError, Reply, Tool, ToolModel, estimate_conversation
from station.models.endpoint import EndpointKey
from station.models.remote import endpoint_key

WINDOW = 10  # the calls the rule looks at
FAILED_SHARE = 0.7  # more than this share of them failed: the endpoint is given up for the next
PROBE = "This is a connectivity check. Reply with the single word: ready"
PROBE_OUTPUT_TOKENS = 256


@dataclass(frozen=True)
class Switch:
    """The default endpoint of a model's calls moved (sent between processes: plain fields)."""

    provider: str
    model: str
    endpoint: int  # 0 the base, n backup n
    base_url: str  # where calls now go ("" for the provider's own)
    reason: str

    def text(self) -> str:
        where = self.base_url or "the provider's own endpoint"
        return f"{self.provider} {self.model}: calls now go to {endpoint_name(self.endpoint)} ({where}): {self.reason}"


def endpoint_name(index: int) -> str:
    return "the base" if index == 0 else f"backup {index}"


def endpoint_configs(config: ModelConfig) -> list[ModelConfig]:
    """The base and each backup as a model config of its own (without backups)."""
    base = config.model_copy(update={"backups": []})
    return [base] + [
        base.model_copy(update={"base_url": b.base_url, "api_key_env": b.api_key_env or config.api_key_env})
        for b in config.backups
    ]


class Chain:
    """The shared default of one list of endpoints, and the health of the one in use."""

    def __init__(self, size: int, probe_every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.size, self.probe_every_s, self.clock = size, probe_every_s, clock
        self.current = 0
        self.outcomes: deque[bool] = deque(maxlen=WINDOW)  # of the current default's calls: True failed
        self.left_base_at = 0.0  # when the base was last left or probed
        self.probing = False
        self._lock = threading.Lock()

    def record(self, index: int, failed: bool) -> bool:
        """One call's outcome on endpoint `index`; True when it moved the default on."""
        with self._lock:
            if index != self.current:  # the default moved while the call was out: old news
                return False
            self.outcomes.append(failed)
            if sum(self.outcomes) <= FAILED_SHARE * len(self.outcomes):
                return False
            self.current = (self.current + 1) % self.size
            self.outcomes.clear()
            self.left_base_at = self.clock()
            return True

    def probe_due(self) -> bool:
        """Whether this caller should probe the base now (one caller at a time, once per period)."""
        with self._lock:
            if self.current == 0 or self.probing or self.clock() - self.left_base_at < self.probe_every_s:
                return False
            self.probing = True
            return True

    def probed(self, answered: bool) -> bool:
        """The probe's outcome; True when the base is the default again."""
        with self._lock:
            self.probing = False
            self.left_base_at = self.clock()
            if not answered or self.current == 0:
                return False
            self.current = 0
            self.outcomes.clear()
            return True


_CHAINS: dict[tuple[EndpointKey, ...], Chain] = {}
_CHAINS_LOCK = threading.Lock()


def chain_for(endpoints: list[ModelConfig], probe_every_s: float) -> Chain:
    """The process's chain of these endpoints; where configs disagree, the shortest probe period holds."""
    keys = tuple(endpoint_key(c) for c in endpoints)
    with _CHAINS_LOCK:
        found = _CHAINS.get(keys)
        if found is None:
            found = _CHAINS[keys] = Chain(len(keys), probe_every_s)
        found.probe_every_s = min(found.probe_every_s, probe_every_s)
        return found


class FallbackModel:
    """A remote model with backups: each call goes to the chain's default endpoint."""

    def __init__(
        self,
        config: ModelConfig,
        make: Callable[[ModelConfig], Model],
        on_switch: Callable[[Switch], None],
        chain: Chain | None = None,
    ) -> None:
        self.config, self.name, self.on_switch = config, config.name, on_switch
        self.endpoints = endpoint_configs(config)
        # every endpoint is made now: a backup's missing key is told at the first call, not at the outage
        self.models = [_made(make, c, i) for i, c in enumerate(self.endpoints)]
        base = self.endpoints[0]
        self.probe_model = make(
            base.model_copy(
                update={"max_retries": 0, "max_output_tokens": PROBE_OUTPUT_TOKENS + (base.thinking_budget or 0)}
            )
        )
        self.chain = chain or chain_for(self.endpoints, config.backup_probe_s)

    def count_tokens(self, messages: list[Message], *, system: str | None) -> int:
        return estimate_conversation(messages, system)  # as every remote model: scaled by the engine

    def complete(
        self, messages: list[Message], *, system: str | None, agent: str, tools: list[Tool] | None = None
    ) -> Reply:
        self._probe_if_due()
        first = self.chain.current
        for step in range(len(self.models)):  # the default, then the next ones in the loop
            index = (first + step) % len(self.models)
            try:
                reply = self.models[index].complete(messages, system=system, agent=agent, tools=tools)
            except ModelError as err:
                if err.kind != TRANSIENT:
                    raise
                if self.chain.record(index, failed=True):
                    self._told(f"{endpoint_name(index)} failed {short_share(err)}")
                if step == len(self.models) - 1:
                    raise ModelError(f"every endpoint failed; the last, {endpoint_name(index)}: {err}") from err
                continue
            self.chain.record(index, failed=False)
            return reply
        raise AssertionError("unreachable")

    def _probe_if_due(self) -> None:
        if not self.chain.probe_due():
            return
        try:
            self.probe_model.complete([{"role": "user", "text": PROBE}], system=None, agent="probe")
        except ModelError:
            self.chain.probed(answered=False)
            return
        if self.chain.probed(answered=True):
            self._told("the base answered a probe call")

    def _told(self, reason: str) -> None:
        index = self.chain.current
        url = self.endpoints[index].base_url or ""
        self.on_switch(Switch(self.config.provider, self.name, index, url, reason))


def _made(make: Callable[[ModelConfig], Model], config: ModelConfig, index: int) -> ToolModel:
    try:
        return cast(ToolModel, make(config))  # a provider's model: they all take tools
    except ModelError as err:  # e.g. a backup's key is not set: say which endpoint
        if not index:
            raise
        where = f"{endpoint_name(index)} ({config.base_url or 'the provider default'})"
        raise ModelError(f"{where}: {err}", kind=err.kind) from None


def short_share(err: ModelError) -> str:
    """Why an endpoint was left, in a few words (the error's first line, cut)."""
    first = (str(err).splitlines() or [""])[0]
    return f"(more than {FAILED_SHARE:.0%} of its last calls; the last: {first[:160]})"
