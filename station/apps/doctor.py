"""`station doctor`: checks each configured model's key and endpoint, and says what works.

A model with `backups:` is checked at each of its endpoints, the base and every backup, one row
each. It asks each provider about the model (a free metadata request). A server without a per-model
lookup (llama.cpp, vLLM) is asked for its list of models instead; one that cannot list them is
said to, which is no failure by itself. For a server at `base_url` it also reads the context size
the server serves, where the server tells (llama.cpp's /props, vLLM's max_model_len, Ollama's
/api/show, llama.cpp's n_ctx_train), and warns when `context_limit` is unset or larger.

With `--call` it always sends one tiny prompt, whatever the lookup said, and shows the reply's
latency, tokens and cost; for a server at `base_url` it then sends two at once, to tell whether
the server answers more than one request at a time (`turns: concurrent` needs that to gain).
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rooms.archive.config import ArchiveConfig, ReviewerConfig
from rooms.research.config import DebuggerConfig, ResearchConfig
from rooms.test.config import GradingConfig
from station.core.budget import cost_usd
from station.core.config import ModelConfig, MultistartConfig, StationConfig
from station.core.model_api import LENGTH
from station.models import ModelError, create_model
from station.models.fallback import endpoint_configs
from station.models.remote import DEFAULT_KEY_ENV, api_key, short

PROBE = "This is a connectivity check. Reply with the single word: ready"
LOOKUP_TIMEOUT_S = 10.0  # metadata requests: a healthy server answers at once
CALL_TIMEOUT_S = 60.0  # a local server may load the model on its first request
SERIAL_RATIO = 1.6  # of two calls sent at once, the slower took this many times the faster: one at a time
SHOWN_MODELS = 8  # of a server's list, when the configured model is not on it
CELL_CHARS = 90  # longer endpoint and call texts are shortened in the table and given whole below it


@dataclass
class Finding:
    uses: str
    model: ModelConfig
    key: str
    endpoint: str
    call: str
    ok: bool
    notes: list[str] = field(default_factory=list)  # context size, warnings, concurrency: shown under the table


@dataclass
class Lookup:
    text: str
    state: str  # "ok", "failed", "unlisted" (the server lists other models), "unknown" (it cannot say)
    entries: list[dict[str, Any]] | None = None  # the server's /v1/models list, when it was read


def where_key(config: ModelConfig) -> str:
    env = config.api_key_env or DEFAULT_KEY_ENV[config.provider]
    if api_key(config) is not None:
        found = env if os.environ.get(env) else "GOOGLE_API_KEY"
        return f"{found} set"
    if config.provider == "openai" and config.base_url:
        return f"{env} not set (none sent)"
    return f"{env} MISSING"


def _status(err: Exception) -> int | None:
    code = getattr(err, "status_code", None)
    if code is None:
        code = getattr(err, "code", None)  # google-genai
    return code if isinstance(code, int) else None


def look_up(model: Any, config: ModelConfig) -> Lookup:
    """The model asked about by name; where the server has no such lookup, its list of models."""
    try:
        return Lookup(model.check(), "ok")
    except Exception as err:  # noqa: BLE001 - every failure is reported, none is fatal
        failure = model.classify(err)
        if config.provider != "openai" or _status(err) != 404:
            return Lookup(f"FAILED: {failure.message}", "failed")
    try:
        entries = model.listed_models()
    except Exception:  # noqa: BLE001
        return Lookup(
            "the server neither looks models up nor lists them (no /v1/models): the name is not checked", "unknown"
        )
    names = [str(e.get("id")) for e in entries]
    if config.name in names:
        return Lookup(f"model {config.name} is listed by the server", "ok", entries)
    shown = ", ".join(names[:SHOWN_MODELS]) + (
        f" and {len(names) - SHOWN_MODELS} more" if len(names) > SHOWN_MODELS else ""
    )
    return Lookup(
        f"model {config.name} is not among the server's models; it lists: {shown or 'none'}", "unlisted", entries
    )


# -- the context a server serves ----------------------------------------------------------------
def _get_json(url: str, config: ModelConfig, body: dict[str, Any] | None = None) -> Any:
    """One small JSON request to the server (None if it fails in any way)."""
    headers = {"accept": "application/json"}
    key = api_key(config)
    if key:
        headers["authorization"] = f"Bearer {key}"
    data = None
    if body is not None:
        data, headers["content-type"] = json.dumps(body).encode(), "application/json"
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=LOOKUP_TIMEOUT_S) as answer:  # noqa: S310 - the configured server
            return json.loads(answer.read(1_000_000))
    except Exception:  # noqa: BLE001 - a route the server lacks, or anything else: not reported
        return None


def _dig(value: Any, *path: str) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _tokens(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def server_context(model: Any, config: ModelConfig, entries: list[dict[str, Any]] | None) -> tuple[int, str] | None:
    """(tokens, where they were read) of the context the server serves, best source first."""
    root = re.sub(r"/v1/?$", "", (config.base_url or "").rstrip("/"))
    n_ctx = _tokens(_dig(_get_json(f"{root}/props", config), "default_generation_settings", "n_ctx"))
    if n_ctx:
        return n_ctx, "llama.cpp /props n_ctx"
    if entries is None:
        try:
            entries = model.listed_models()
        except Exception:  # noqa: BLE001
            entries = []
    mine = [e for e in entries if e.get("id") == config.name] or (entries if len(entries) == 1 else [])
    entry = mine[0] if mine else {}
    if _tokens(entry.get("max_model_len")):
        return entry["max_model_len"], "vLLM max_model_len"
    if _tokens(entry.get("context_length")):  # OpenRouter and other proxies
        return entry["context_length"], "/v1/models context_length"
    show = _get_json(f"{root}/api/show", config, {"model": config.name})
    if isinstance(show, dict):
        found = re.search(r"(?m)^\s*num_ctx\s+(\d+)", str(show.get("parameters") or ""))
        if found and int(found.group(1)) > 0:
            return int(found.group(1)), "Ollama num_ctx"
        trained = [_tokens(v) for k, v in (show.get("model_info") or {}).items() if k.endswith(".context_length")]
        if trained and trained[0]:
            return trained[0], (
                "Ollama model_info context_length: the model's own; Ollama serves only "
                "OLLAMA_CONTEXT_LENGTH (a few thousand by default) unless num_ctx is set"
            )
    if _tokens(_dig(entry, "meta", "n_ctx_train")):
        return entry["meta"][
            "n_ctx_train"
        ], "/v1/models meta.n_ctx_train: the model's trained context; the server may serve less"
    return None


def context_notes(config: ModelConfig, found: tuple[int, str] | None) -> list[str]:
    if found is None:
        return [
            "the server does not say how large a context it serves: set context_limit to it (llama.cpp "
            "--n_ctx / -c, vLLM --max-model-len, Ollama OLLAMA_CONTEXT_LENGTH)"
        ]
    size, source = found
    notes = [f"server context: {size:,} tokens ({source})"]
    limit = config.context_limit
    if limit is None:
        notes.append(
            f"WARNING: context_limit is not set, so agents are not warned before the server's "
            f"{size:,} tokens fill up, and a full context ends their session with an error: "
            f"set context_limit: {size}"
        )
    elif limit > size:
        notes.append(
            f"WARNING: context_limit {limit:,} is larger than the server's context ({size:,} tokens): "
            f"set context_limit: {size} (or serve a larger context)"
        )
    if config.max_output_tokens * 2 > size:
        notes.append(
            f"WARNING: max_output_tokens {config.max_output_tokens:,} is more than half the server's "
            f"context ({size:,} tokens), which the conversation and the reply share (vLLM refuses a "
            f"request whose prompt plus max_output_tokens exceeds it): lower it"
        )
    return notes


# -- calls --------------------------------------------------------------------------------------
def _timed(model: Any) -> tuple[Any, float]:
    began = time.monotonic()
    reply = model.complete([{"role": "user", "text": PROBE}], system=None, agent="doctor")
    return reply, time.monotonic() - began


def tiny_call(model: Any, config: ModelConfig, prices: dict) -> tuple[str, bool]:
    try:
        reply, seconds = _timed(model)
    except Exception as err:  # noqa: BLE001
        return f"FAILED: {err}", False
    dollars = cost_usd(prices.get(config.name), reply.usage)
    u = reply.usage
    text = (
        f"{reply.text.strip()[:30]!r} in {seconds:.1f} s, {u.input_tokens} in / "
        f"{u.output_tokens + u.reasoning_tokens} out tokens, ${dollars:.5f}"
    )
    if reply.finish_reason == LENGTH:
        text += f"; cut off at max_output_tokens ({model.config.max_output_tokens})"
    return text, True


def concurrency_note(model: Any) -> str:
    """Two calls at once: a server that answers one request at a time makes one of them wait."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="doctor") as pool:
        futures = [pool.submit(_timed, model) for _ in range(2)]
        try:
            times = sorted(f.result()[1] for f in futures)
        except Exception as err:  # noqa: BLE001
            return f"two calls at once: FAILED: {short(str(err), 200)}"
    fast, slow = times
    if slow >= SERIAL_RATIO * max(fast, 0.001):
        return (
            f"two calls at once took {fast:.2f} s and {slow:.2f} s: the server answers one request at a time, "
            f"so `turns: concurrent` gains nothing with it"
        )
    return f"two calls at once took {fast:.2f} s and {slow:.2f} s: the server answers them together"


def check_model(config: ModelConfig, uses: str, *, call: bool, prices: dict) -> Finding:
    if not config.remote:
        return Finding(uses, config, "-", "offline model", "-", True)
    probe = config.model_copy(update={"max_retries": 0, "timeout_s": min(config.timeout_s, LOOKUP_TIMEOUT_S)})
    key = where_key(config)
    if key.endswith("MISSING"):
        return Finding(uses, config, key, "not tried: no key", "-", False)
    try:
        model = create_model(probe)
    except ModelError as err:
        return Finding(uses, config, key, f"FAILED: {err}", "-", False)
    lookup = look_up(model, config)
    notes = (
        context_notes(config, server_context(model, config, lookup.entries))
        if config.provider == "openai" and config.base_url
        else []
    )
    if not call:
        return Finding(uses, config, key, lookup.text, "not tried (--call)", lookup.state in ("ok", "unknown"), notes)
    small = probe.model_copy(
        update={
            "timeout_s": min(config.timeout_s, CALL_TIMEOUT_S),
            "max_output_tokens": max(256, (config.thinking_budget or 0) + 256),
        }
    )
    caller = create_model(small)
    text, answered = tiny_call(caller, config, prices)
    if answered and lookup.state == "unlisted":
        notes.append(
            f"the server answered for {config.name} although it does not list it (some servers answer "
            f"with whatever model they loaded, whatever the name)"
        )
    if answered and config.base_url:
        notes.append(concurrency_note(caller))
    return Finding(uses, config, key, lookup.text, text, answered, notes)


def diagnose(config: StationConfig, *, call: bool) -> list[Finding]:
    uses: dict[str, tuple[ModelConfig, list[str]]] = {}
    named = [(f"agents[{i}]", spec.model) for i, spec in enumerate(config.agents)] + [
        ("reviewer", config.section(ReviewerConfig).model),
        ("grader", config.section(GradingConfig).model),
        ("debugger", config.section(DebuggerConfig).model),
    ]
    administrator = config.section(MultistartConfig).administrator.model  # unset: the reviewer's
    named += [("multistart administrator", administrator)] if administrator else []
    survey = config.section(ArchiveConfig).survey
    named += [("archive surveyor", survey.model)] if survey.enabled else []
    research = config.section(ResearchConfig)
    named += [("research coder", research.coder.model)] if research.mode == "coder" else []
    for use, model in named:
        key = model.model_dump_json()
        uses.setdefault(key, (model, []))[1].append(use)
    return [
        check_model(endpoint, ", ".join(who) + (f" (backup {i})" if i else ""), call=call, prices=config.prices)
        for model, who in uses.values()
        for i, endpoint in enumerate(endpoint_configs(model))  # the base, then each backup
    ]


def _cell(text: str) -> str:
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 12].rstrip() + "… (below)"


def render(findings: list[Finding]) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table("used by", "provider", "model", "key", "endpoint", "tiny call")
    details: list[tuple[Finding, list[str]]] = []
    for f in findings:
        where = f.model.base_url or "default endpoint"
        long = [
            f"{name}: {text}"
            for name, text in (("endpoint", f.endpoint), ("tiny call", f.call))
            if len(text) > CELL_CHARS
        ]  # a server's long error reads better whole, below the table
        table.add_row(
            f.uses,
            f.model.provider,
            f"{f.model.name}\n{where}" if f.model.remote else f.model.name,
            f.key,
            _cell(f.endpoint),
            _cell(f.call),
            style=None if f.ok else "red",
        )
        if long or f.notes:
            details.append((f, long + f.notes))
    console = Console(record=True, width=160)
    with console.capture() as cap:
        console.print(table)
    notes = "".join(f"{f.uses} ({f.model.name}):\n" + "".join(f"  - {n}\n" for n in lines) for f, lines in details)
    bad = sum(not f.ok for f in findings)
    warned = sum(n.startswith("WARNING") for f in findings for n in f.notes)
    verdict = "all models answer" if not bad else f"{bad} model(s) need attention"
    return cap.get() + notes + verdict + (f"; {warned} warning(s) above" if warned else "") + ".\n"
