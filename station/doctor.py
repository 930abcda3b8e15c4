"""`station doctor`: checks each configured model's key and endpoint, and says what works.

It asks each provider about the model (a free metadata request); with `--call` it also sends
one tiny prompt and shows the reply's latency, tokens and cost.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .budget import cost_usd
from .config import ModelConfig, StationConfig
from .models import ModelError, create_model
from .models.remote import DEFAULT_KEY_ENV, api_key

PROBE = "This is a connectivity check. Reply with the single word: ready"


@dataclass
class Finding:
    uses: str
    model: ModelConfig
    key: str
    endpoint: str
    call: str
    ok: bool


def where_key(config: ModelConfig) -> str:
    env = config.api_key_env or DEFAULT_KEY_ENV[config.provider]
    if api_key(config) is not None:
        found = env if os.environ.get(env) else "GOOGLE_API_KEY"
        return f"{found} set"
    if config.provider == "openai" and config.base_url:
        return f"{env} not set (none sent)"
    return f"{env} MISSING"


def check_model(config: ModelConfig, uses: str, *, call: bool, prices: dict) -> Finding:
    if not config.remote:
        return Finding(uses, config, "-", "offline model", "-", True)
    probe = config.model_copy(update={"max_retries": 0, "timeout_s": min(config.timeout_s, 30.0)})
    key = where_key(config)
    if key.endswith("MISSING"):
        return Finding(uses, config, key, "not tried: no key", "-", False)
    try:
        model = create_model(probe)
    except ModelError as err:
        return Finding(uses, config, key, f"FAILED: {err}", "-", False)
    try:
        endpoint = model.check()  # type: ignore[attr-defined]
    except Exception as err:  # noqa: BLE001 - every failure is reported, none is fatal
        return Finding(uses, config, key, f"FAILED: {model.classify(err).message}", "-", False)  # type: ignore

    if not call:
        return Finding(uses, config, key, endpoint, "not tried (--call)", True)
    small = probe.model_copy(update={"max_output_tokens": max(256, (config.thinking_budget or 0) + 256)})
    began = time.monotonic()
    try:
        reply = create_model(small).complete([{"role": "user", "text": PROBE}], system=None, agent="doctor")
    except Exception as err:  # noqa: BLE001
        return Finding(uses, config, key, endpoint, f"FAILED: {err}", False)
    dollars = cost_usd(prices.get(config.name), reply.usage)
    u = reply.usage
    return Finding(uses, config, key, endpoint,
                   f"{reply.text.strip()[:30]!r} in {time.monotonic() - began:.1f} s, {u.input_tokens} in / "
                   f"{u.output_tokens + u.reasoning_tokens} out tokens, ${dollars:.5f}", True)


def diagnose(config: StationConfig, *, call: bool) -> list[Finding]:
    uses: dict[str, tuple[ModelConfig, list[str]]] = {}
    named = [(f"agents[{i}]", spec.model) for i, spec in enumerate(config.agents)] + \
        [("reviewer", config.reviewer.model), ("grader", config.grading.model), ("debugger", config.debugger.model)]
    for use, model in named:
        key = model.model_dump_json()
        uses.setdefault(key, (model, []))[1].append(use)
    return [check_model(model, ", ".join(who), call=call, prices=config.prices) for model, who in uses.values()]


def render(findings: list[Finding]) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table("used by", "provider", "model", "key", "endpoint", "tiny call")
    for f in findings:
        where = f.model.base_url or "default endpoint"
        table.add_row(f.uses, f.model.provider, f"{f.model.name}\n{where}" if f.model.remote else f.model.name,
                      f.key, f.endpoint, f.call, style=None if f.ok else "red")
    console = Console(record=True, width=160)
    with console.capture() as cap:
        console.print(table)
    bad = sum(not f.ok for f in findings)
    return cap.get() + ("all models answer.\n" if not bad else f"{bad} model(s) need attention.\n")
