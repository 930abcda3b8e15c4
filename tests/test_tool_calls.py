"""Tool calling through every provider: the station's own clients (a ModelPool's models, as the
station builds them) offer tools and send earlier calls and their results in each provider's
wire format, and read the calls back, to a loopback server that speaks those formats.
"""
from __future__ import annotations

import json

import pytest
from provider_server import Answer, ProviderServer

from station.core.budget import Ledger
from station.core.config import ModelConfig, StationConfig
from station.core.model_api import BudgetExceeded, Tool
from station.models import ModelPool

KEY = "test-key"
PROVIDERS = {
    "anthropic": dict(provider="anthropic", name="claude-test"),
    "openai-responses": dict(provider="openai", name="gpt-test", api="responses"),
    "openai-chat": dict(provider="openai", name="local-test", api="chat"),
    "llama.cpp": dict(provider="openai", name="local-model", api="chat"),
    "gemini": dict(provider="gemini", name="gemini-test"),
}
PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
TOOLS = [Tool("list_files", "List the files under a folder.", PATH),
         Tool("read_file", "Read one file.", PATH),
         Tool("run", "Run a command in the sandbox.",
              {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})]
# A worker's conversation so far: its task, one call of a tool, and that call's result.
HISTORY = [
    {"role": "user", "text": "Make workspace/solution.py pass."},
    {"role": "assistant", "text": "First I look around.",
     "tool_calls": [{"id": "call_a1", "name": "list_files", "arguments": {"path": "workspace"}}]},
    {"role": "tool", "results": [{"id": "call_a1", "name": "list_files", "text": "solution.py\ndata.csv"}]},
]
CALLS = [{"name": "read_file", "arguments": {"path": "workspace/solution.py"}},
         {"name": "run", "arguments": {"command": "python workspace/solution.py --n 26"}}]


@pytest.fixture(scope="module")
def servers():
    with ProviderServer(api_keys={KEY}) as cloud, ProviderServer(flavor="llama.cpp") as local:
        yield {"cloud": cloud, "local": local}


@pytest.fixture(autouse=True)
def fresh(servers, monkeypatch):
    for server in servers.values():
        server.reset()
    for env in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(env, KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    yield
    assert all(server.errors == [] for server in servers.values())


def server_of(servers, which: str) -> ProviderServer:
    return servers["local" if which == "llama.cpp" else "cloud"]


def config(servers, which: str, **extra) -> ModelConfig:
    server = server_of(servers, which)
    base = server.openai_url if which.startswith("openai") or which == "llama.cpp" else server.url
    settings = dict(base_url=base, retry_base_s=0.01, retry_max_s=0.05, max_retries=2, timeout_s=5)
    return ModelConfig(**{**PROVIDERS[which], **settings, **extra})


def generations(server: ProviderServer):
    return [r for r in server.requests if r.method == "POST"]


@pytest.mark.parametrize("which", PROVIDERS)
def test_tools_offered_history_sent_and_calls_read_back_in_each_wire_format(servers, which):
    server = server_of(servers, which)
    server.responder = lambda req: Answer("Now I read it.", tool_calls=CALLS, input_tokens=300, output_tokens=20)
    reply = ModelPool().get(config(servers, which)).complete(HISTORY, system="You are a coder.", agent="coder",
                                                            tools=TOOLS)

    [request] = generations(server)
    assert request.tools == ["list_files", "read_file", "run"]
    assert request.messages == HISTORY  # the call and its result, decoded from the provider's own shapes
    assert request.system == "You are a coder."
    assert reply.text == "Now I read it."
    assert [(c["name"], c["arguments"]) for c in reply.tool_calls] == [(c["name"], c["arguments"]) for c in CALLS]
    assert all("error" not in c for c in reply.tool_calls)
    ids = [c["id"] for c in reply.tool_calls]
    assert len(set(ids)) == 2 and all(ids)
    if which == "gemini":  # Gemini gives no ids: numbered; its signature is kept to be sent back
        assert ids == ["call-1", "call-2"] and reply.tool_calls[0]["signature"]
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (300, 20)
    assert json.loads(json.dumps(reply.to_payload()))["tool_calls"] == reply.tool_calls  # recordable as it is


@pytest.mark.parametrize("which", ["anthropic", "gemini"])
def test_the_signed_thinking_of_a_call_goes_back_with_it(servers, which):
    """Anthropic (with thinking on) and Gemini 3 refuse a history whose calls lost their signatures."""
    server = servers["cloud"]
    server.responder = lambda req: Answer("", thinking="The file first.", tool_calls=CALLS[:1])
    model = ModelPool().get(config(servers, which, **({"thinking_budget": 1024} if which == "anthropic" else {})))
    first = model.complete(HISTORY, system=None, agent="coder", tools=TOOLS)
    [call] = first.tool_calls
    model.complete([*HISTORY, {"role": "assistant", "text": "", "tool_calls": first.tool_calls},
                    {"role": "tool", "results": [{"id": call["id"], "name": "read_file", "text": "print(1)"}]}],
                   system=None, agent="coder", tools=TOOLS)
    body = generations(server)[-1].body
    if which == "gemini":
        assert body["contents"][3]["parts"][0]["thoughtSignature"] == call["signature"]
    else:
        thinking, use = body["messages"][3]["content"]
        assert thinking["thinking"] == "The file first." and thinking["signature"] and use["id"] == call["id"]
    assert generations(server)[-1].messages[3]["tool_calls"][0]["name"] == "read_file"


@pytest.mark.parametrize("which", ["anthropic", "openai-responses", "openai-chat"])
def test_arguments_that_are_not_a_json_object_are_an_error_entry_not_a_failure(servers, which):
    server = server_of(servers, which)
    broken = [{"name": "run", "arguments": "[1, 2]"}]
    if which != "anthropic":  # (Anthropic's SDK cannot even read text that is not JSON: a retried failure)
        broken.append({"name": "read_file", "arguments": '{"path": "workspace/sol'})
    server.responder = lambda req: Answer("", tool_calls=broken)
    reply = ModelPool().get(config(servers, which)).complete(HISTORY, system=None, agent="coder", tools=TOOLS)

    assert len(generations(server)) == 1  # calls without text are an answer: not retried as empty
    assert [c["name"] for c in reply.tool_calls] == [c["name"] for c in broken]
    assert all(c["arguments"] == {} for c in reply.tool_calls)
    assert "not an object" in reply.tool_calls[0]["error"]
    if which != "anthropic":
        assert "not valid JSON" in reply.tool_calls[1]["error"]


def test_anthropic_cache_breakpoints_fall_on_the_last_tool_results(servers):
    ModelPool().get(config(servers, "anthropic")).complete(HISTORY, system="Rules.", agent="coder", tools=TOOLS)
    body = generations(servers["cloud"])[-1].body
    marked = [i for i, m in enumerate(body["messages"]) if "cache_control" in m["content"][-1]]
    assert marked == [0, 2] and body["messages"][2]["content"][-1]["type"] == "tool_result"
    assert body["tools"][0] == {"name": "list_files", "description": "List the files under a folder.",
                                "input_schema": PATH}


def test_a_call_without_tools_sends_none(servers):
    ModelPool().get(config(servers, "openai-chat")).complete(HISTORY[:1], system=None, agent="Guest_1")
    assert "tools" not in generations(servers["cloud"])[-1].body


def test_the_tools_count_against_a_spending_cap_before_the_call(servers):
    cap = StationConfig.model_validate({"budget": {"station_tokens": 600}})
    big = [*TOOLS, Tool("notes", "x" * 4000, PATH)]
    model = ModelPool(Ledger(None, lambda: cap)).get(config(servers, "openai-chat", max_output_tokens=100))
    model.complete(HISTORY, system=None, agent="coder", tools=TOOLS)  # fits
    with pytest.raises(BudgetExceeded):
        model.complete(HISTORY, system=None, agent="coder", tools=big)
    assert len(generations(servers["cloud"])) == 1  # refused before it was sent


def test_a_backup_endpoint_gets_the_tools_too(servers):
    servers["cloud"].fail_next("server_error")
    backups = [{"base_url": servers["local"].openai_url}]
    cfg = config(servers, "openai-chat", name="local-model", max_retries=0, backups=backups)
    servers["local"].responder = lambda req: Answer("", tool_calls=CALLS[:1])
    reply = ModelPool().get(cfg).complete(HISTORY, system=None, agent="coder", tools=TOOLS)
    assert generations(servers["local"])[-1].tools == ["list_files", "read_file", "run"]
    assert reply.tool_calls[0]["name"] == "read_file"


def test_calls_through_the_request_processes_carry_the_tools(servers):
    server = servers["cloud"]
    server.responder = lambda req: Answer("", tool_calls=CALLS) if req.tools else Answer("no tools")
    pool = ModelPool(request_processes=1, providers=lambda: ["openai"])
    try:
        model = pool.get(config(servers, "openai-chat"))
        waited = model.complete(HISTORY, system=None, agent="coder", tools=TOOLS)
        sent = model.submit(HISTORY, system=None, agent="coder", tools=TOOLS).reply()
        plain = model.complete(HISTORY[:1], system=None, agent="Guest_1")
    finally:
        pool.close()
    assert [c["arguments"] for c in waited.tool_calls] == [c["arguments"] for c in CALLS]
    assert [c["name"] for c in sent.tool_calls] == ["read_file", "run"]
    assert plain.text == "no tools" and plain.tool_calls == []
    assert [r.messages for r in generations(server)[:2]] == [HISTORY, HISTORY]


def test_a_replay_file_may_hold_tool_calls(tmp_path):
    calls = [{"id": "call-1", "name": "finish", "arguments": {"report": "done"}}]
    (tmp_path / "replies.jsonl").write_text(json.dumps({"text": "", "tool_calls": calls}) + "\n")
    cfg = ModelConfig(provider="replay", name="replayed", replay_file=str(tmp_path / "replies.jsonl"))
    reply = ModelPool().get(cfg).complete(HISTORY[:1], system=None, agent="coder", tools=TOOLS)
    assert reply.tool_calls == calls


def test_streamed_tool_calls_are_whole_for_each_sdk(servers):
    """The server's streamed calls (the station streams only Anthropic's), as each SDK rebuilds them."""
    import anthropic
    import openai
    from google import genai

    server = servers["cloud"]
    server.responder = lambda req: Answer("ok", tool_calls=CALLS)
    want = [(c["name"], c["arguments"]) for c in CALLS]
    ask = [{"role": "user", "content": "go"}]
    gpt = openai.OpenAI(api_key=KEY, base_url=server.openai_url, max_retries=0)
    chunks = list(gpt.chat.completions.create(model="m", messages=ask, stream=True))
    pieces: dict[int, dict] = {}
    for delta in (c.choices[0].delta for c in chunks if c.choices):
        for piece in delta.tool_calls or ():
            got = pieces.setdefault(piece.index, {"name": "", "arguments": ""})
            got["name"] += piece.function.name or ""
            got["arguments"] += piece.function.arguments or ""
    assert [(p["name"], json.loads(p["arguments"])) for p in pieces.values()] == want
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    with gpt.responses.stream(model="m", input="go") as stream:
        items = stream.get_final_response().output
    assert [(i.name, json.loads(i.arguments)) for i in items if i.type == "function_call"] == want
    with anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0).messages.stream(
            model="m", max_tokens=100, messages=ask) as stream:
        blocks = stream.get_final_message().content
    assert [(b.name, b.input) for b in blocks if b.type == "tool_use"] == want
    gemini = genai.Client(api_key=KEY, http_options={"base_url": server.url})
    parts = [p for c in gemini.models.generate_content_stream(model="m", contents="go")
             for p in c.candidates[0].content.parts]
    assert [(p.function_call.name, p.function_call.args) for p in parts if p.function_call] == want
