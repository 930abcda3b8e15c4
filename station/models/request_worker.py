"""A request process (see request_processes.py): reads calls from its pipe, makes each in a
thread of its own with this process's models (retries and backoff included), and writes each
answer (a Reply, or the failure's kind and message) to the other pipe as the call ends.

Worker INDEX of COUNT sends at most its share of each endpoint's `max_in_flight`. Workers are
forked from the zygote (request_zygote.py), which has `preload`ed the SDKs of the providers the
station's config names.
"""

from __future__ import annotations

import importlib
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from station.core.config import ModelConfig
from station.core.model_api import PERMANENT, ModelError
from station.models import create_model
from station.models.request_processes import SWITCHED, WAITING, worker_share

CALLS_AT_ONCE = 10_000  # threads are started as calls come; the endpoints' bounds are what limit them
# The SDK behind each provider, and the HTTP library all of them use. The station's providers'
# SDKs are imported before the first call: two threads importing an SDK's modules at once (one
# making a model, another sending a request) can each get the other's modules half made. Only
# those: all three cost a worker 3 s of CPU at every start, most of it for SDKs never called.
SDKS = {"anthropic": "anthropic", "openai": "openai", "gemini": "google.genai"}
HTTP = "httpx2"


def preload(providers: list[str]) -> set[str]:
    """Import the SDKs of `providers`; the providers whose SDK is now loaded (or needs none)."""
    for name in [HTTP, *(SDKS[p] for p in providers if p in SDKS)]:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # a provider this installation lacks: its calls fail as in the station's process
    return set(providers)


class Worker:
    """Makes the calls read from `incoming`, each in a thread, and writes the answers to `outgoing`."""

    def __init__(self, outgoing: Connection, index: int, count: int, providers: list[str]) -> None:
        self.outgoing, self.index, self.count = outgoing, index, count
        self.loaded = preload(providers)
        self.models: dict[str, Any] = {}
        self.stop = threading.Event()
        self.sending, self.making = threading.Lock(), threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=CALLS_AT_ONCE, thread_name_prefix="call")

    def serve(self, incoming: Connection) -> None:
        """Make calls until told to stop (None) or the station is gone."""
        with self.pool:
            while True:
                try:
                    message = incoming.recv()
                except (EOFError, OSError):
                    break
                if message is None:
                    break
                self.obey(message)
            self.stop.set()  # the calls still waiting to retry end now

    def obey(self, message: tuple[Any, ...]) -> None:
        if message[0] == "stop":
            self.stop.set()
        elif message[0] == "go":
            self.stop.clear()
        elif message[0] == "many":  # messages the station had queued together
            for each in message[1]:
                self.obey(each)
        else:
            self.pool.submit(self.call, *message[1:])

    def send(self, message: tuple[Any, ...]) -> None:
        with self.sending:
            try:
                self.outgoing.send(message)
            except OSError:
                pass  # the station is gone

    def model(self, settings: str) -> Any:
        with self.making:
            if settings not in self.models:
                config = ModelConfig.model_validate_json(settings)
                if config.provider not in self.loaded:  # a model the operator switched to since the start
                    self.loaded |= preload([config.provider])
                share = worker_share(config.max_in_flight, min(self.count, config.max_in_flight), self.index)
                self.models[settings] = create_model(
                    config.model_copy(update={"max_in_flight": share}),
                    stop=self.stop,
                    on_wait=lambda text: self.send((WAITING, True, text)),
                    on_switch=lambda switch: self.send((SWITCHED, True, switch)),
                )
            return self.models[settings]

    def call(self, number: int, settings: str, messages: Any, system: str | None, agent: str, tools: Any) -> None:
        try:  # the station's models are remote ones (they take tools)
            reply = self.model(settings).complete(messages, system=system, agent=agent, tools=tools)
        except ModelError as err:
            self.send((number, False, (err.kind, str(err))))
        except Exception as err:  # noqa: BLE001 - the station decides; this process goes on
            self.send((number, False, (PERMANENT, f"the request process failed: {type(err).__name__}: {err}")))
        else:
            self.send((number, True, reply))
