#!/usr/bin/env python3
"""A thousand model calls at once: wall time, CPU and memory per call, by way of calling.

The loopback provider server of the tests runs in its own process and answers every Chat
Completions request after a simulated latency (default 1 s). Each way of calling sends N calls
at once from a thread pool (as the engine's concurrent turns do), after a warm-up round that
opens the connections; the timed round is the second. Each way runs in a fresh client process
against a fresh server, so that memory and threads do not carry over.

* `sdk-default`: one OpenAI SDK client with the SDK's own connection pool and one thread per
  call: what the station did before endpoints had a bound.
* `station`: the station's model layer (`create_model(...).complete`), `max_in_flight` = N, as
  many threads as `ModelPool.width` says.
* `station-default-bound`: the same at the default `max_in_flight` (100): a thousand calls then
  go a hundred at a time.
* `blocking-pooled`: the alternative to the station's one request loop: the SDK's blocking
  client, each thread doing its own reading and writing, over the same pools of ten
  connections and with the conversation sent as the station sends it.
* `httpx-floor`: the station's way without the SDK: the same loop, pools and threads, the body
  posted with the SDKs' HTTP library and the answer parsed with `json`: the floor under any
  change to the adapters.

Columns: wall seconds of the timed round; client CPU (all threads of the client process) and
server CPU per call; the client's resident memory before the first call and its peak during
the timed round, and the growth per call in flight (threads, connections, buffers); the
most requests the server was serving at once, and the connections it accepted in both rounds.

`--messages 200` sends a conversation of 200 messages (some 200,000 characters) with each call,
as agents do late in a run: the SDKs' own handling of each message then dominates.

Usage: scripts/bench_model_calls.py [--calls 1000] [--latency 1.0] [--messages 1] [--ways station,sdk-default]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WAYS = ("sdk-default", "station", "station-default-bound", "blocking-pooled", "httpx-floor")
PROMPT: list[dict[str, str]] = []  # the conversation each call sends (--messages)


def conversation(messages: int) -> list[dict[str, str]]:
    """`messages` messages of about 1,000 characters, the station's prompt last."""
    turns = [
        {"role": "assistant" if i % 2 else "user", "text": f"Tick {i // 2 + 1}. " + "The lobby is quiet. " * 50}
        for i in range(messages - 1)
    ]
    return [*turns, {"role": "user", "text": "Tick 1. You are in the lobby. What do you do? " * 20}]


def wire() -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["text"]} for m in PROMPT]


def rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS"))


def cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class PeakRss:
    """Samples this process's resident memory every 10 ms while a round runs."""

    def __init__(self) -> None:
        self.peak, self._done = rss_mb(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, rss_mb())

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return max(self.peak, rss_mb())


def calls_by_way(way: str, url: str, calls: int) -> tuple[Any, int]:
    """(a function making one call, the number of threads to make them from)."""
    os.environ["OPENAI_API_KEY"] = "bench-key"
    if way == "sdk-default":
        import openai

        client = openai.OpenAI(api_key="bench-key", base_url=url + "/v1", max_retries=0, timeout=60)
        body = {"model": "bench", "messages": wire(), "max_tokens": 100}
        return (lambda: client.chat.completions.create(**body).choices[0].message.content), calls
    if way in ("station", "station-default-bound"):
        from station.models import ModelPool, create_model

        settings: dict[str, Any] = {"provider": "openai", "name": "bench", "base_url": url + "/v1", "timeout_s": 60}
        if way == "station":
            settings["max_in_flight"] = calls
        model = create_model(ModelPool().get(settings).config)
        width = ModelPool.width([settings] * calls)
        return (lambda: model.complete(PROMPT, system=None, agent="bench").text), width
    if way == "httpx-floor":
        return httpx_floor(url, calls), calls
    return blocking_pooled(url, calls), calls


def httpx_floor(url: str, calls: int) -> Any:
    """The station's way (the request loop, pools of ten, a thread per call) without the SDK: the
    JSON body posted with the SDKs' HTTP library and the answer read with `json`. What is left
    is the floor that no change to the adapters can go under."""
    import httpx2

    from station.models import loop
    from station.models.endpoint import POOL_SIZE

    limits = httpx2.Limits(max_connections=POOL_SIZE, max_keepalive_connections=POOL_SIZE)
    clients = [httpx2.AsyncClient(limits=limits, timeout=60) for _ in range(-(-calls // POOL_SIZE))]
    body = json.dumps({"model": "bench", "messages": wire(), "max_tokens": 100})
    headers = {"authorization": "Bearer bench-key", "content-type": "application/json"}
    slots, lock = list(range(calls)), threading.Lock()

    async def post(client: Any) -> str:
        answer = await client.post(url + "/v1/chat/completions", content=body, headers=headers)
        return json.loads(answer.content)["choices"][0]["message"]["content"]

    def call() -> str:
        with lock:
            slot = slots.pop()
        try:
            return loop.run(post(clients[slot // POOL_SIZE]))
        finally:
            with lock:
                slots.append(slot)

    return call


def blocking_pooled(url: str, calls: int) -> Any:
    import httpx2
    import openai

    from station.models.endpoint import POOL_SIZE
    from station.models.openai_model import conversation_as_is

    limits = httpx2.Limits(max_connections=POOL_SIZE, max_keepalive_connections=POOL_SIZE)
    clients = [
        openai.OpenAI(
            api_key="bench-key",
            base_url=url + "/v1",
            max_retries=0,
            http_client=httpx2.Client(limits=limits, timeout=60),
        )
        for _ in range(-(-calls // POOL_SIZE))
    ]
    slots, lock = list(range(calls)), threading.Lock()
    sent = conversation_as_is({"model": "bench", "messages": wire(), "max_tokens": 100}, "messages", [])

    def call() -> str:
        with lock:
            slot = slots.pop()
        try:
            return clients[slot // POOL_SIZE].chat.completions.create(**sent).choices[0].message.content
        finally:
            with lock:
                slots.append(slot)

    return call


def run_way(way: str, url: str, server_pid: int, calls: int) -> dict[str, Any]:
    call, threads = calls_by_way(way, url, calls)
    result: dict[str, Any] = {"way": way, "threads": threads}
    idle = rss_mb()  # the model made, no call yet
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for timed in (False, True):
            cpu0, server0 = time.process_time(), cpu_s(server_pid)
            peak, began = PeakRss(), time.perf_counter()
            answers = list(pool.map(lambda _: call(), range(calls)))
            wall = time.perf_counter() - began
            if timed:
                top = peak.stop()
                result.update(
                    wall_s=wall,
                    client_ms=(time.process_time() - cpu0) / calls * 1000,
                    server_ms=(cpu_s(server_pid) - server0) / calls * 1000,
                    rss_idle_mb=idle,
                    rss_peak_mb=top,
                    kb_per_call=(top - idle) * 1024 / min(calls, threads),
                    ok=sum(a == "ok" for a in answers),
                )
            else:
                peak.stop()
    return result


def serve(latency: float) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "provider_server.py"), "--latency", str(latency)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def one_way(way: str, calls: int, latency: float, messages: int) -> dict[str, Any]:
    """Runs one way in a fresh client process against a fresh server."""
    server, url = serve(latency)
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", way, url, str(server.pid), str(calls), str(messages)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        server.stdin.close()  # type: ignore[union-attr]  # the server stops, and says what it saw
        said = server.stdout.read()  # type: ignore[union-attr]
        server.wait(timeout=30)
    return {**json.loads(out.strip().splitlines()[-1]), **json.loads(said.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000, help="calls at once")
    parser.add_argument("--latency", type=float, default=1.0, help="simulated seconds per call")
    parser.add_argument("--ways", default=",".join(WAYS), help=f"comma-separated, of {', '.join(WAYS)}")
    parser.add_argument("--messages", type=int, default=1, help="messages in each call's conversation")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        way, url, server_pid, calls, messages = args.child
        PROMPT.extend(conversation(int(messages)))
        print(json.dumps(run_way(way, url, int(server_pid), int(calls))))
        return
    rows = [one_way(way, args.calls, args.latency, args.messages) for way in args.ways.split(",")]
    load = os.getloadavg()[0]
    print(
        f"\n{args.calls} calls at once, {args.messages} messages each, {args.latency:g} s latency, "
        f"{os.cpu_count()} cores, load {load:.1f}\n"
    )
    print(
        "| way | threads | wall (s) | client CPU per call (ms) | server CPU per call (ms) | RSS idle (MB) "
        "| RSS peak (MB) | KB per call in flight | most in flight at the server | connections | answered |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['way']} | {r['threads']} | {r['wall_s']:.2f} | {r['client_ms']:.2f} | {r['server_ms']:.2f} | "
            f"{r['rss_idle_mb']:.0f} | {r['rss_peak_mb']:.0f} | {r['kb_per_call']:.0f} | {r['peak_in_flight']} | "
            f"{r['connections']} | {r['ok']}/{args.calls} |"
        )


if __name__ == "__main__":
    main()
