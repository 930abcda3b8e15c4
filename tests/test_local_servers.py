"""Local OpenAI-compatible servers (llama.cpp, vLLM, Ollama) out of the box.

The servers are `ProviderServer` flavors on loopback (tests/provider_server.py), spoken to by the
real `openai` SDK: `station doctor` on them (lookup without GET /v1/models/{id}, the context they
serve, whether they answer two requests at once), the default `api`, what a missing Responses
API and a full context say, and a reply cut at max_output_tokens told to the agent, recorded per
turn, shown in the dialogue views and replayed. A last test starts the real
`python -m llama_cpp.server` when llama-cpp-python and a small GGUF model are available.
"""
from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import act, config, session_of, turn, turn_lines
from provider_server import Answer, ProviderServer, Request
from rich.console import Console

from station.apps import cli, report
from station.apps.world import Station
from station.core.config import ModelConfig, parse_config
from station.core.engine import Engine
from station.core.model_api import OVERFLOW, PERMANENT
from station.core.store import Store, canonical_dump
from station.models import ModelError, create_model

ROOT = Path(__file__).resolve().parents[1]
NAME = "qwen-local"


@pytest.fixture(autouse=True)
def no_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # local servers need none


def local_model(server: ProviderServer, **extra) -> dict:
    """A model entry as a user would write it for a local server: no `api`, no key."""
    return {"provider": "openai", "name": NAME, "base_url": server.openai_url, "max_retries": 0,
            "timeout_s": 20, **extra}


def doctor(tmp_path: Path, capsys, model: dict, *, call: bool = True) -> tuple[int, str]:
    path = tmp_path / "station.yaml"
    path.write_text(yaml.safe_dump(config([{"count": 1, "model": model}])))
    code = cli.main(["doctor", str(path)] + (["--call"] if call else []))
    return code, capsys.readouterr().out


def table(out: str) -> list[dict[str, str]]:
    """The doctor's table, one dict per model, each cell's wrapped lines joined again."""
    header, rows = [], []
    for line in out.splitlines():
        if line.startswith("┃"):
            header = [c.strip() for c in line.strip("┃").split("┃")]
        elif line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            if cells[0]:
                rows.append({h: c for h, c in zip(header, cells)})
            else:
                for h, c in zip(header, cells):
                    rows[-1][h] = (rows[-1][h] + " " + c).strip()
    return rows


# -- station doctor ------------------------------------------------------------------------------
def test_doctor_on_a_llama_cpp_server_falls_back_to_the_list_reads_n_ctx_and_sees_one_slot(tmp_path, capsys):
    with ProviderServer(flavor="llama.cpp", known_models={NAME}, n_ctx=4096, one_at_a_time=True,
                        latency_s=1.0) as server:
        code, out = doctor(tmp_path, capsys, local_model(server))
        paths = [r.path for r in server.requests]
    assert code == 0, out
    assert "not found" not in out and "FAILED" not in out
    assert table(out)[0]["endpoint"] == f"model {NAME} is listed by the server"
    assert f"/v1/models/{NAME}" in paths and "/v1/models" in paths and "/props" in paths
    assert "server context: 4,096 tokens (llama.cpp /props n_ctx)" in out
    assert "WARNING: context_limit is not set" in out and "set context_limit: 4096" in out
    assert "WARNING: max_output_tokens 8,192 is more than half" in out
    assert table(out)[0]["tiny call"].startswith("'ok' in ")  # the tiny call
    assert "the server answers one request at a time, so `turns: concurrent` gains nothing with it" in out
    assert [r.path for r in server.requests].count("/v1/chat/completions") == 3  # one call, then two at once
    assert "all models answer; 2 warning(s) above." in out


def test_doctor_is_quiet_when_the_config_matches_the_server(tmp_path, capsys):
    with ProviderServer(flavor="llama.cpp", known_models={NAME}, n_ctx=8192, latency_s=1.0) as server:
        code, out = doctor(tmp_path, capsys, local_model(server, context_limit=8192, max_output_tokens=1024))
    assert code == 0 and "WARNING" not in out
    assert "server context: 8,192 tokens" in out
    assert "the server answers them together" in out
    assert out.rstrip().endswith("all models answer.")


def test_doctor_warns_when_context_limit_is_larger_than_the_server(tmp_path, capsys):
    with ProviderServer(flavor="llama.cpp", known_models={NAME}, n_ctx=4096) as server:
        code, out = doctor(tmp_path, capsys, local_model(server, context_limit=32768, max_output_tokens=512),
                           call=False)
    assert code == 0
    assert ("WARNING: context_limit 32,768 is larger than the server's context (4,096 tokens): set "
            "context_limit: 4096") in out
    assert "not tried (--call)" in out


def test_doctor_names_the_models_a_server_lists_and_still_tries_the_call(tmp_path, capsys):
    # llama.cpp answers whatever the name: the lookup's doubt, then the call's proof.
    with ProviderServer(flavor="llama.cpp", known_models={"Qwen3-8B-Q4_K_M.gguf"}, n_ctx=4096) as server:
        code, out = doctor(tmp_path, capsys, local_model(server, context_limit=4096, max_output_tokens=512))
        assert code == 0
        assert table(out)[0]["endpoint"] == f"model {NAME} is not among the server's models; it lists: " \
                                            "Qwen3-8B-Q4_K_M.gguf"
        assert "the server answered for qwen-local although it does not list it" in out
        code, out = doctor(tmp_path, capsys, local_model(server, context_limit=4096, max_output_tokens=512),
                           call=False)
        assert code == 1 and "need attention" in out  # not listed and not tried: worth a look
    # vLLM refuses a name it does not serve: the call says so, and which models there are.
    with ProviderServer(flavor="vllm", known_models={"Qwen/Qwen3-8B"}, n_ctx=32768) as server:
        code, out = doctor(tmp_path, capsys, local_model(server, context_limit=32768))
    assert code == 1
    assert table(out)[0]["endpoint"].endswith("it lists: Qwen/Qwen3-8B")
    assert "tiny call: FAILED: openai qwen-local: not found" in out
    assert "server context: 32,768 tokens (vLLM max_model_len)" in out


def test_doctor_on_a_server_that_cannot_list_its_models(tmp_path, capsys):
    with ProviderServer(flavor="vllm", listing=False) as server:  # no lookup, no list, so no size either
        code, out = doctor(tmp_path, capsys, local_model(server, context_limit=4096, max_output_tokens=512))
    assert code == 0, out
    assert table(out)[0]["endpoint"] == \
        "the server neither looks models up nor lists them (no /v1/models): the name is not checked"
    assert "the server does not say how large a context it serves" in out
    assert "'ok' in" in out


def test_doctor_reads_ollamas_context(tmp_path, capsys):
    with ProviderServer(flavor="ollama", known_models={NAME}, n_ctx=16384, n_ctx_train=40960) as server:
        code, out = doctor(tmp_path, capsys, local_model(server, context_limit=16384, max_output_tokens=2048),
                           call=False)
        assert code == 0 and table(out)[0]["endpoint"] == f"model {NAME} is available"
        assert "server context: 16,384 tokens (Ollama num_ctx)" in out
        server.n_ctx = None  # no num_ctx: only the model's own context, which Ollama does not serve in full
        code, out = doctor(tmp_path, capsys, local_model(server, context_limit=16384, max_output_tokens=2048),
                           call=False)
    assert "server context: 40,960 tokens (Ollama model_info context_length" in out
    assert "OLLAMA_CONTEXT_LENGTH" in out


def test_doctor_says_when_a_server_has_no_responses_api(tmp_path, capsys):
    with ProviderServer(flavor="llama.cpp", known_models={NAME}, n_ctx=4096) as server:
        code, out = doctor(tmp_path, capsys, local_model(server, api="responses", context_limit=4096,
                                                         max_output_tokens=512))
    assert code == 1
    assert "this server has no Responses API (404 on /v1/responses); set api: chat" in out
    assert "is the model name right" not in out


# -- the default api and the Responses 404 --------------------------------------------------------
def test_a_base_url_without_api_means_chat_completions():
    assert ModelConfig(provider="openai", name="m", base_url="http://127.0.0.1:8080/v1").api == "chat"
    assert ModelConfig(provider="openai", name="m").api == "responses"
    explicit = ModelConfig(provider="openai", name="m", base_url="http://127.0.0.1:8080/v1", api="responses")
    assert explicit.api == "responses"
    assert ModelConfig.model_validate(explicit.model_dump()).api == "responses"  # as a station stores it
    with ProviderServer(flavor="llama.cpp") as server:
        reply = create_model(ModelConfig(**local_model(server))).complete(
            [{"role": "user", "text": "hi"}], system=None, agent="Guest_1")
        assert reply.text == "ok" and reply.finish_reason == "stop"
        assert [r.path for r in server.requests] == ["/v1/chat/completions"]


def test_a_404_from_v1_responses_says_to_set_api_chat():
    with ProviderServer(flavor="llama.cpp") as server:
        model = create_model(ModelConfig(**local_model(server, api="responses")))
        with pytest.raises(ModelError) as err:
            model.complete([{"role": "user", "text": "hi"}], system=None, agent="Guest_1")
    assert err.value.kind == PERMANENT
    assert "this server has no Responses API" in str(err.value) and "set api: chat" in str(err.value)
    assert "model name" not in str(err.value)
    with ProviderServer(known_models={"gpt-known"}) as server:  # a real Responses API: the name is wrong
        model = create_model(ModelConfig(**local_model(server, api="responses")))
        with pytest.raises(ModelError) as err:
            model.complete([{"role": "user", "text": "hi"}], system=None, agent="Guest_1")
    assert "is the model name right?" in str(err.value) and "Responses API" not in str(err.value)


# -- a full context -------------------------------------------------------------------------------
LONG = [{"role": "user", "text": "word " * 2000}]  # 10,000 characters: 2,500 tokens to the fake server


def test_llama_cpps_context_error_names_both_numbers_and_the_configured_limit():
    with ProviderServer(flavor="llama.cpp", n_ctx=1024) as server:
        model = create_model(ModelConfig(**local_model(server, context_limit=32768)))
        with pytest.raises(ModelError) as err:
            model.complete(LONG, system=None, agent="Guest_1")
        assert len(server.requests) == 1  # not retried
    message = str(err.value)
    assert err.value.kind == OVERFLOW
    assert "the server's limit is 1,024 tokens, this request had 2,500" in message
    assert "context_limit in the config is 32,768; set context_limit to 1024 or less" in message
    assert "exceeds the available context size" in message


def test_vllms_context_error_names_both_numbers_too():
    with ProviderServer(flavor="vllm", n_ctx=2048) as server:
        model = create_model(ModelConfig(**local_model(server, max_output_tokens=512)))
        with pytest.raises(ModelError) as err:
            model.complete(LONG, system=None, agent="Guest_1")
    assert err.value.kind == OVERFLOW
    assert "the server's limit is 2,048 tokens, this request had 3,012" in str(err.value)
    assert "context_limit is not set; set context_limit to 2048 or less" in str(err.value)


def test_an_agent_whose_prompt_overflows_ends_and_the_record_names_the_numbers(tmp_path):
    with ProviderServer(flavor="llama.cpp", n_ctx=300) as server:
        st = Station.create(tmp_path / "st", parse_config(config([{"count": 1, "model": local_model(
            server, context_limit=300, max_output_tokens=64)}])))
        try:
            Engine(st).run(until_tick=1)
            agent = st.agents.get("Guest_1")
            assert agent.exit_reason == "context window overflow"
            payload = st.store.get_input(f"reply/1/{agent.session}/0")
        finally:
            st.close()
    assert "the server's limit is 300 tokens, this request had" in payload["overflow"]
    assert "context_limit in the config is 300" in payload["overflow"]


# -- a reply cut at max_output_tokens -------------------------------------------------------------
CUT_REPLY = "\n".join([act("goto codex"), "Now a long explanation of my plans. " * 30, act("goto mail")])


def cutting(request: Request) -> Answer:
    return Answer(CUT_REPLY)


def test_a_cut_reply_is_told_to_the_agent_recorded_shown_and_replayed(tmp_path, capsys):
    with ProviderServer(cutting, flavor="llama.cpp", n_ctx=65536) as server:
        model = local_model(server, context_limit=65536, max_output_tokens=50)  # 200 characters get through
        st = Station.create(tmp_path / "st", parse_config(config([{"count": 1, "model": model}])))
        try:
            Engine(st).run(until_tick=2)
            first, second = turn(st, 1), turn(st, 2)
            session = session_of(st, "Guest_1")
        finally:
            st.close()
        sent = [r for r in server.requests if r.method == "POST"]
    assert sent[0].body["max_tokens"] == 50
    # tick 1: the reply came back cut after 50 tokens; the action before the cut ran, the one after it never came
    assert first["finish_reason"] == "length" and first["output_tokens"] == 50
    assert first["reply"] == CUT_REPLY[:200]
    assert first["room"] == "codex"
    notice = ("Your last reply was cut off after 50 tokens (the model's max_output_tokens limit); anything after "
              "the cut, actions included, was not received.")
    assert notice in second["prompt"]  # the next prompt tells the agent
    assert notice in sent[1].messages[-1]["text"]  # and that is what the model was sent
    assert notice not in first["prompt"]

    assert cli.main(["dialogue", str(tmp_path / "st"), "Guest_1", "--tick", "1"]) == 0
    assert "reply cut off at max_output_tokens (50 tokens)" in capsys.readouterr().out
    st = Station.open(tmp_path / "st")
    try:
        console = Console(record=True, width=200)
        report.print_dialogue(st.store, "Guest_1", tick=1, full=False, console=console)
        assert "reply cut off at max_output_tokens (50 tokens)" in console.export_text()
    finally:
        st.close()

    from helpers import web_client

    from station.apps.web.app import create_app
    page = web_client(create_app(tmp_path / "st")).get("/agents/Guest_1?tick=1").text
    assert "cut off at max_output_tokens (50 tokens): actions after the cut were not received" in page

    # the finish reason is part of the recorded reply: a replay, with no server, rebuilds the same world
    assert cli.main(["replay", str(tmp_path / "st"), str(tmp_path / "replayed")]) == 0
    capsys.readouterr()
    stores = [Store(tmp_path / d) for d in ("st", "replayed")]
    try:
        original, replayed = (canonical_dump(s) for s in stores)
        assert replayed == original
        cols = original["turns"][0]
        assert [r[cols.index("finish_reason")] for r in original["turns"][1:]] == ["length", "length"]
        payload = stores[1].get_input(f"reply/1/{session}/0")
        assert payload["finish_reason"] == "length"
    finally:
        for s in stores:
            s.close()


def test_a_cut_reply_inside_an_exchange_is_told_too(tmp_path):
    reading = "\n".join([act("goto codex"), act("read"), "I read on and on and on. " * 40])
    with ProviderServer(lambda req: Answer(reading), flavor="llama.cpp") as server:
        st = Station.create(tmp_path / "st", parse_config(config([{"count": 1, "model": local_model(
            server, context_limit=65536, max_output_tokens=50)}])))
        try:
            Engine(st).run(until_tick=1)
            first = turn(st, 1)
            lines = turn_lines(st, "Guest_1", 1)
        finally:
            st.close()
    assert json.loads(first["internal"])  # the codex reading ran as an exchange
    notices = [line for line in lines if line.startswith("Your last reply was cut off after 50 tokens")]
    assert len(notices) == 1 + len(json.loads(first["internal"]))  # the turn's reply, and each step's


def test_a_whole_reply_records_stop_and_no_notice(tmp_path):
    with ProviderServer(lambda req: Answer(act("goto codex")), flavor="llama.cpp") as server:
        st = Station.create(tmp_path / "st", parse_config(config([{"count": 1, "model": local_model(
            server, context_limit=32768, max_output_tokens=512)}])))
        try:
            Engine(st).run(until_tick=2)
            first, second = turn(st, 1), turn(st, 2)
        finally:
            st.close()
    assert first["finish_reason"] == "stop"
    assert "cut off" not in second["prompt"]


# -- the real llama-cpp-python server, where it is installed --------------------------------------
def _small_gguf() -> Path | None:
    named = os.environ.get("STATION_TEST_GGUF")
    if named:
        return Path(named) if Path(named).is_file() else None
    for folder in (Path.home() / ".cache" / "huggingface" / "hub", Path.home() / "models", ROOT / "models"):
        if folder.is_dir():
            small = [p for p in folder.rglob("*.gguf") if p.stat().st_size < 1_500_000_000]
            if small:
                return min(small, key=lambda p: p.stat().st_size)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_real_llama_cpp_python_server(tmp_path, capsys):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python (module llama_cpp) is not installed: the real server cannot be started")
    gguf = _small_gguf()
    if gguf is None:
        pytest.skip("no small GGUF model found (set STATION_TEST_GGUF to one's path)")
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", NAME,
                               "--n_ctx", "2048", "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        assert server.poll() is None, server.stderr.read() if server.stderr else ""
        model = {"provider": "openai", "name": NAME, "base_url": base, "context_limit": 2048,
                 "max_output_tokens": 256, "timeout_s": 300, "max_retries": 2}
        code, out = doctor(tmp_path, capsys, model)
        assert code == 0, out
        assert "listed by the server" in out or "is available" in out
        cut = create_model(ModelConfig(**{**model, "max_output_tokens": 4})).complete(
            [{"role": "user", "text": "Count from one to fifty in words."}], system=None, agent="Guest_1")
        assert cut.finish_reason == "length"
        print(json.dumps({"doctor": out}))  # visible with -s
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def test_the_llama_cpp_flavor_speaks_as_llama_cpp_does():
    import httpx2

    with ProviderServer(flavor="llama.cpp", known_models={NAME}, n_ctx=1024, n_ctx_train=40960) as server, \
            httpx2.Client(base_url=server.url) as http:
        missing = http.get(f"/v1/models/{NAME}")
        assert missing.status_code == 404
        assert missing.json() == {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
        assert http.post("/v1/responses", json={"model": NAME, "input": "hi"}).status_code == 404
        listed = http.get("/v1/models").json()
        assert [e["id"] for e in listed["data"]] == [NAME] and listed["data"][0]["meta"]["n_ctx_train"] == 40960
        assert http.get("/props").json()["default_generation_settings"]["n_ctx"] == 1024
        refused = http.post("/v1/chat/completions", json={"model": NAME, "messages": [
            {"role": "user", "content": LONG[0]["text"]}]})
        assert refused.status_code == 400
        assert refused.json()["error"] == {
            "code": 400, "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error", "n_prompt_tokens": 2500, "n_ctx": 1024}
        short = http.post("/v1/chat/completions", json={"model": "any-name", "max_tokens": 3,
                                                        "messages": [{"role": "user", "content": "hi"}]}).json()
        assert short["choices"][0]["finish_reason"] == "stop"  # "ok" is 1 token; any model name is served
        assert short["choices"][0]["message"]["content"] == "ok"
        server.responder = lambda req: Answer("twelve chars" * 10)
        cut = http.post("/v1/chat/completions", json={"model": NAME, "max_tokens": 3,
                                                      "messages": [{"role": "user", "content": "hi"}]}).json()
        assert cut["choices"][0]["finish_reason"] == "length"
        assert (cut["choices"][0]["message"]["content"], cut["usage"]["completion_tokens"]) == ("twelve chars", 3)
