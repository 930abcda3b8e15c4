#!/usr/bin/env python3
"""Prompt size and prompt-cache share of the two prompt styles (`prompt.style: full | compact`).

1. First prompt: what a new guest's first model call carries (the system prompt plus the first
   station message), counted with a real tokenizer (OpenAI's o200k_base through `tiktoken`)
   when one can be loaded offline, and with the station's own estimate (4 characters a token).
2. Cached share: a station of scripted agents (the social demo's world, no research) runs for
   N ticks against the loopback provider server of the tests, through the real `openai` SDK
   (Chat Completions, what local servers such as vLLM or llama.cpp speak). The loopback server
   has no cache of its own: it reports whatever cached-token count its responder gives. The
   responder here plays the scripted policy and simulates a provider's automatic prefix cache
   over the exact requests it receives (system prompt and messages, in tokens): the cached part
   of a request is its longest token prefix shared with any earlier request, counted in whole
   blocks. Two caches are shown: "block 16" (vLLM's prefix caching: 16-token blocks, any
   length) and "1024+128" (OpenAI's: nothing below 1,024 tokens, then 128-token steps). The
   first is what the station records in its turns table (checked against the bench's tally).
   "Steady" leaves out the first ticks, where every conversation is new.

The real tokenizer: `tiktoken` with its o200k_base vocabulary, which it normally downloads on
first use. Offline, this script finds the vocabulary file in the `bpe-openai` wheel from PyPI
(it ships o200k_base.tiktoken.gz), or in a file named by --vocab, places it in a private
tiktoken cache and lets tiktoken check it against its own SHA-256; failing that, it counts with
the station's estimate and says so. Neither package is a dependency of the station:

    pip install --target /tmp/toklib tiktoken && pip install --no-deps --target /tmp/toklib bpe-openai
    PYTHONPATH=/tmp/toklib .venv/bin/python scripts/bench_prompt.py

Usage: scripts/bench_prompt.py [--ticks 20] [--agents 3] [--context-limit 32768] [--vocab FILE]
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the loopback provider server and the test helpers

from helpers import config, demo_config  # noqa: E402
from provider_server import Answer, ProviderServer, Request  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from station.apps.world import Station  # noqa: E402
from station.core.config import parse_config  # noqa: E402
from station.core.engine import Engine  # noqa: E402
from station.core.model_api import MESSAGE_OVERHEAD, estimate_conversation  # noqa: E402
from station.core.prompt import system_prompt  # noqa: E402
from station.models.scripted import ScriptedModel  # noqa: E402

STYLES = ("full", "compact")
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
STEADY_FROM_TICK = 6  # ticks before this one are the warm-up ("steady" leaves them out)
OUT = Console(width=132)


# -- counting tokens --------------------------------------------------------------------------
@dataclass
class Counter:
    name: str
    encode: Callable[[str], list[Any]]

    def count(self, text: str) -> int:
        return len(self.encode(text))


def _vocab_file(explicit: str | None) -> Path | None:
    if explicit:
        return Path(explicit)
    spec = importlib.util.find_spec("bpe_openai")  # located, not imported: only its data file is read
    if spec and spec.origin:
        found = Path(spec.origin).parent / "data" / "o200k_base.tiktoken.gz"
        if found.exists():
            return found
    return None


def real_tokenizer(vocab: str | None) -> tuple[Counter | None, str]:
    """o200k_base through tiktoken, with the vocabulary found offline; (None, why) otherwise."""
    try:
        import tiktoken
    except ImportError:
        return None, "tiktoken is not installed"
    source = _vocab_file(vocab)
    if source is not None:
        data = source.read_bytes()
        if source.suffix == ".gz":
            data = gzip.decompress(data)
        cache = Path(tempfile.mkdtemp(prefix="tiktoken-cache-"))
        (cache / hashlib.sha1(O200K_URL.encode()).hexdigest()).write_bytes(data)
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)  # tiktoken checks the file's SHA-256 itself
        origin = f"vocabulary from {source}"
    elif os.environ.get("TIKTOKEN_CACHE_DIR"):
        origin = "vocabulary from TIKTOKEN_CACHE_DIR"
    else:
        return None, "no o200k_base vocabulary found (install bpe-openai, or pass --vocab)"
    try:
        encoding = tiktoken.get_encoding("o200k_base")
    except Exception as err:  # noqa: BLE001 - a bad file or a failed download: say why, fall back
        return None, f"tiktoken could not load o200k_base: {err}"
    return Counter("o200k_base", lambda text: encoding.encode(text, disallowed_special=())), origin


def estimate_counter() -> Counter:
    return Counter("estimate", lambda text: [text[i:i + 4] for i in range(0, len(text), 4)])


def request_tokens(counter: Counter, system: str | None, messages: list[dict[str, str]]) -> list[list[Any]]:
    """The request as a provider tokenizes it: one token list per message (with role markers)."""
    wire = ([{"role": "system", "text": system}] if system else []) + messages
    return [[f"<{m['role']}>", *counter.encode(m["text"]), "<end>"] for m in wire]


# -- the first prompt -------------------------------------------------------------------------
def first_prompt(style: str, counter: Counter | None, context_limit: int, workdir: Path) -> dict[str, Any]:
    """A new guest's first model call, from an offline station of one scripted agent (the
    default config: the research codex, lives of 300 ticks, 50 ticks alone; no research task)."""
    model = {"provider": "scripted", "name": "scripted-newcomer", "context_limit": context_limit,
             "max_output_tokens": 1024}
    cfg = config([{"count": 1, "kind": "guest", "model": model}], name=f"first-{style}", prompt={"style": style})
    st = Station.create(workdir / f"first-{style}", parse_config(cfg))
    Engine(st).run(ticks=1)
    row = st.store.one("SELECT agent, prompt FROM turns ORDER BY tick, rowid LIMIT 1")
    agent = st.ctx.agents.get(row["agent"])
    system = system_prompt(st.ctx, agent) or ""
    user = row["prompt"]
    st.close()
    result = {"system_chars": len(system), "user_chars": len(user),
              "estimate": estimate_conversation([{"role": "user", "text": user}], system or None)}
    if counter is not None:
        result.update(system_tokens=counter.count(system) if system else 0, user_tokens=counter.count(user))
        result["tokens"] = result["system_tokens"] + result["user_tokens"] + MESSAGE_OVERHEAD * (2 if system else 1)
    return result


# -- the cached share -------------------------------------------------------------------------
@dataclass
class PrefixCache:
    """A provider's automatic prefix cache, by token blocks; remembers every request it served."""

    block: int
    minimum: int = 0
    seen: dict[bytes, int] = field(default_factory=dict)  # prefix (whole messages) -> its tokens
    following: dict[bytes, list[list[Any]]] = field(default_factory=dict)  # prefix -> next messages

    def serve(self, messages: list[list[Any]]) -> int:
        """Tokens of this request read from the cache; then the request is cached too."""
        digest, shared, matched, keys = hashlib.sha256(), 0, True, [b""]
        total = 0
        for tokens in messages:
            key = keys[-1]
            if matched:
                candidates = self.following.get(key, [])
                best = max((_common(tokens, other) for other in candidates), default=0)
                shared = total + best
                matched = best == len(tokens)
            digest.update(repr(tokens).encode())
            keys.append(digest.digest())
            total += len(tokens)
            following = self.following.setdefault(key, [])
            if tokens not in following:
                following.append(tokens)
        cached = (shared // self.block) * self.block
        if cached < self.minimum:
            cached = 0
        return min(cached, total - 1) if total else 0


def _common(a: list[Any], b: list[Any]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # binary search on the first difference (slices compare in C)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class Tally:
    input: int = 0
    cached: dict[str, int] = field(default_factory=dict)
    steady_input: int = 0
    steady_cached: dict[str, int] = field(default_factory=dict)
    first_input: int = 0  # the first call of each conversation (a new guest's first turn)
    first_cached: dict[str, int] = field(default_factory=dict)


def responder(counter: Counter, caches: dict[str, PrefixCache], tally: Tally, seed: int):
    policy = ScriptedModel("scripted-bench", seed)
    primary = next(iter(caches))

    def respond(request: Request) -> Answer:
        reply = policy.complete(request.messages, system=request.system, agent="bench")
        tokens = request_tokens(counter, request.system, request.messages)
        prompt = sum(len(t) for t in tokens)
        hits = {name: cache.serve(tokens) for name, cache in caches.items()}
        tick = _tick(request.messages)
        steady, first = tick >= STEADY_FROM_TICK, len(request.messages) == 1
        tally.input += prompt
        tally.steady_input += prompt if steady else 0
        tally.first_input += prompt if first else 0
        for name, hit in hits.items():
            tally.cached[name] = tally.cached.get(name, 0) + hit
            tally.steady_cached[name] = tally.steady_cached.get(name, 0) + (hit if steady else 0)
            tally.first_cached[name] = tally.first_cached.get(name, 0) + (hit if first else 0)
        return Answer(reply.text, input_tokens=prompt, cached_tokens=hits[primary],
                      output_tokens=counter.count(reply.text) + 2)
    return respond


def _tick(messages: list[dict[str, str]]) -> int:
    for message in reversed(messages):
        found = re.search(r"^- Station Tick: (\d+)", message["text"], re.MULTILINE)
        if message["role"] == "user" and found:
            return int(found.group(1))
    return 0


def cached_share(style: str, counter: Counter, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    caches = {"block 16": PrefixCache(block=16), "1024+128": PrefixCache(block=128, minimum=1024)}
    tally = Tally()
    os.environ.setdefault("OPENAI_API_KEY", "loopback-bench-key")
    with ProviderServer() as server:
        server.responder = responder(counter, caches, tally, seed=7)
        model = {"provider": "openai", "api": "chat", "name": "local-bench", "base_url": server.openai_url,
                 "context_limit": args.context_limit, "max_output_tokens": 1024, "timeout_s": 30,
                 "max_retries": 2, "retry_base_s": 0.05, "retry_max_s": 0.2}
        cfg = demo_config(name=f"cache-{style}", prompt={"style": style}, engine={"backup_every_ticks": 0},
                          agents=[{"count": args.agents, "kind": "guest", "model": model}])
        st = Station.create(workdir / f"cache-{style}", parse_config(cfg))
        stopped = Engine(st).run(ticks=args.ticks)
        recorded = st.store.one("SELECT COUNT(*) AS turns, SUM(input_tokens) AS input, "
                                "SUM(cached_input_tokens) AS cached FROM turns")
        st.close()
    return {"tally": tally, "recorded": dict(recorded), "stopped": stopped, "calls": len(server.requests)}


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--context-limit", type=int, default=32768, help="the agents' model window")
    parser.add_argument("--vocab", help="an o200k_base.tiktoken file (or .gz) to count with")
    args = parser.parse_args()

    counter, origin = real_tokenizer(args.vocab)
    if counter is None:
        OUT.print(f"[yellow]No real tokenizer ({origin}): counting with the station's estimate "
                  "(4 characters a token) instead.[/]")
    else:
        OUT.print(f"Tokenizer: tiktoken o200k_base ({origin}).")
    workdir = Path(tempfile.mkdtemp(prefix="bench-prompt-"))

    table = Table(title="A new guest's first model call (system prompt + first station message)")
    for column in ("style", "system chars", "message chars", "o200k tokens", "station estimate"):
        table.add_column(column, justify="right")
    for style in STYLES:
        first = first_prompt(style, counter, args.context_limit, workdir)
        real = (f"{first['tokens']:,} ({first['system_tokens']:,} + {first['user_tokens']:,})"
                if "tokens" in first else "-")
        table.add_row(style, f"{first['system_chars']:,}", f"{first['user_chars']:,}", real, f"{first['estimate']:,}")
    OUT.print(table)

    table = Table(title=f"Cached share of input tokens: {args.agents} scripted guests, {args.ticks} ticks, "
                        f"Chat Completions on the loopback server, window {args.context_limit:,}")
    for column in ("style", "calls", "input tokens", "all: b16", "all: 1k+", "steady: b16", "steady: 1k+",
                   "1st calls: b16", "recorded"):
        table.add_column(column, justify="right")
    counting = counter or estimate_counter()
    for style in STYLES:
        run = cached_share(style, counting, args, workdir)
        t, rec = run["tally"], run["recorded"]
        table.add_row(style, f"{run['calls']:,}", f"{t.input:,}",
                      _pct(t.cached["block 16"], t.input), _pct(t.cached["1024+128"], t.input),
                      _pct(t.steady_cached["block 16"], t.steady_input),
                      _pct(t.steady_cached["1024+128"], t.steady_input),
                      _pct(t.first_cached["block 16"], t.first_input),
                      _pct(rec["cached"] or 0, rec["input"] or 0))
    OUT.print(table)
    OUT.print(f"Shares of input tokens served from the simulated cache. b16: vLLM-like prefix cache, 16-token "
              f"blocks; 1k+: OpenAI-like, nothing below 1,024 tokens, then 128-token steps. all: every agent "
              f"call (turns and their exchanges: codex reading, tests; the grader is offline); steady: calls "
              f"from tick {STEADY_FROM_TICK} on; 1st calls: the first call of each new guest; recorded: the "
              f"station's turns table (b16), as the SDK read the usage off the wire.")


if __name__ == "__main__":
    main()
