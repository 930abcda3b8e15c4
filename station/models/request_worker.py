"""A request process (see request_processes.py): reads calls from stdin, makes each in a thread
of its own with this process's models (retries and backoff included), and writes each answer
(a Reply, or the failure's kind and message) to stdout as the call ends.

Run as `python -m station.models.request_worker INDEX COUNT`: worker INDEX of COUNT, which sends
at most its share of each endpoint's `max_in_flight`.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from station.core.config import ModelConfig
from station.core.model_api import PERMANENT, ModelError
from station.models import create_model
from station.models.request_processes import WAITING, worker_share

CALLS_AT_ONCE = 10_000  # threads are started as calls come; the endpoints' bounds are what limit them
# Imported before the first call: two threads importing an SDK's modules at once (one making a
# model, another sending a request) can each get the other's modules half made.
SDKS = ("httpx2", "anthropic", "openai", "google.genai")


def preload() -> None:
    for name in SDKS:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # a provider this installation lacks: its calls fail as in the station's process


def serve(incoming: Connection, outgoing: Connection, index: int, count: int) -> None:
    """Make calls until told to stop (None) or the station is gone."""
    models: dict[str, Any] = {}
    stop = threading.Event()
    sending, making = threading.Lock(), threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with sending:
            try:
                outgoing.send(message)
            except OSError:
                pass  # the station is gone

    def model(settings: str) -> Any:
        with making:
            if settings not in models:
                config = ModelConfig.model_validate_json(settings)
                share = worker_share(config.max_in_flight, min(count, config.max_in_flight), index)
                models[settings] = create_model(
                    config.model_copy(update={"max_in_flight": share}),
                    stop=stop,
                    on_wait=lambda text: send((WAITING, True, text)),
                )
            return models[settings]

    def call(number: int, settings: str, messages: Any, system: str | None, agent: str) -> None:
        try:
            reply = model(settings).complete(messages, system=system, agent=agent)
        except ModelError as err:
            send((number, False, (err.kind, str(err))))
        except Exception as err:  # noqa: BLE001 - the station decides; this process goes on
            send((number, False, (PERMANENT, f"the request process failed: {type(err).__name__}: {err}")))
        else:
            send((number, True, reply))

    with ThreadPoolExecutor(max_workers=CALLS_AT_ONCE, thread_name_prefix="call") as pool:
        while True:
            try:
                message = incoming.recv()
            except (EOFError, OSError):
                break
            if message is None:
                break
            if message[0] == "stop":
                stop.set()
            elif message[0] == "go":
                stop.clear()
            else:
                pool.submit(call, *message[1:])
        stop.set()  # the calls still waiting to retry end now


if __name__ == "__main__":
    # The pipes are stdin and stdout; anything printed goes to stderr instead of into the answers.
    answers = os.dup(1)
    os.dup2(2, 1)
    preload()
    serve(Connection(0, writable=False), Connection(answers, readable=False), int(sys.argv[1]), int(sys.argv[2]))
