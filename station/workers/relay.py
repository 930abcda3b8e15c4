"""The model relay of a command-line coder: the only way its model calls leave the sandbox.

A CLI coder (Claude Code, Codex...) runs inside the sandbox with no network and no key. It talks
HTTP to 127.0.0.1 (command_helper.py carries the bytes to this relay's Unix socket, in a folder
the run mounts read-only). The relay, on the trusted side, forwards only the configured provider's
generation requests to the configured endpoint and model with the station's key added here, checks
the station's caps before each call and books what it used under the role "coder", and hands each
exchange to `record` (the station keeps it as an input). `POST /station/submit` is the CLI's
official attempt (`submit_attempt PATH`), answered by `submit`.

Requests are served one at a time on the thread that calls `serve_while`: recording and attempts
use that thread's store, and a CLI's calls are sequential anyway.
"""

from __future__ import annotations

import json
import os
import re
import socketserver
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from station.core.config import ModelConfig
from station.core.model_api import BudgetExceeded, Usage
from station.models.remote import api_key
from station.workers.sandbox_tools import cut

MAX_BODY_BYTES = 16_000_000  # a request or a reply; a CLI's whole context fits well within
RECORD_CHARS = 20_000  # of each request and reply, as recorded (head and tail)
SUBMIT_PATH = "/station/submit"
# provider -> (the generation paths forwarded, the default endpoint, the header the key goes in)
PROVIDERS: dict[str, tuple[str, str, str]] = {
    "anthropic": (r"/v1/messages", "https://api.anthropic.com", "x-api-key"),
    "openai": (r"/v1/responses", "https://api.openai.com/v1", "authorization"),
    "openai-chat": (r"/v1/chat/completions", "https://api.openai.com/v1", "authorization"),
    "gemini": (
        r"/v1(?:beta)?/models/[A-Za-z0-9._-]+:(?:generateContent|streamGenerateContent)",
        "https://generativelanguage.googleapis.com",
        "x-goog-api-key",
    ),
}
PASSED_HEADERS = ("content-type", "accept", "anthropic-version", "anthropic-beta", "openai-beta", "user-agent")

Submit = Callable[[str], dict[str, Any]]  # the path the CLI named -> {"text", "error"}
Record = Callable[[dict[str, Any]], None]  # one exchange, as the station keeps it


class Relay:
    """An HTTP server on the Unix socket `socket_path` (made mode 0666: the run's uid connects)."""

    def __init__(
        self,
        socket_path: Path,
        *,
        provider: str,
        model: ModelConfig,
        ledger: Any,
        record: Record,
        submit: Submit,
        role: str = "coder",
    ) -> None:
        if provider not in PROVIDERS:
            raise ValueError(f"unknown relay provider {provider!r}; known: {', '.join(PROVIDERS)}")
        self.provider, self.model, self.ledger, self.role = provider, model, ledger, role
        self.record, self.submit = record, submit
        self.refused: str | None = None  # why a call was not made: a station cap (the station pauses)
        self.failure: Exception | None = None  # what broke answering a request (the caller raises it)
        relay = self

        class Handler(_Handler):
            owner = relay

        # bound through the folder's descriptor: a socket's path holds at most 107 bytes, a station's need not
        folder = os.open(socket_path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.server = _UnixServer(f"/proc/self/fd/{folder}/{socket_path.name}", Handler)
        finally:
            os.close(folder)
        os.chmod(socket_path, 0o666)

    def serve_while(self, running: Callable[[], bool], *, stop_file: Path, poll_s: float = 0.2) -> None:
        """Answer requests on this thread until `running()` is false. Once a call was refused for a
        cap (or the station's side broke), `stop_file` is made: the sandbox's helper stops the CLI."""
        self.server.timeout = poll_s
        while running():
            self.server.handle_request()
            if (self.refused is not None or self.failure is not None) and not stop_file.exists():
                stop_file.touch()

    def close(self) -> None:
        self.server.server_close()

    # -- one request ----------------------------------------------------------------------------------
    def answer(self, path: str, query: str, headers: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
        """(status, content type, body) for one POST."""
        if path == SUBMIT_PATH:
            try:
                asked = json.loads(body or b"{}").get("path")
            except (ValueError, AttributeError):
                asked = None
            result = self.submit(asked if isinstance(asked, str) else "")
            return 200, "application/json", json.dumps({"text": result["text"], "error": result["error"]}).encode()
        pattern, default, _ = PROVIDERS[self.provider]
        if not re.fullmatch(pattern, path):
            return _refusal(404, f"the station's relay forwards only {self.provider} generation requests, not {path}")
        if self.refused is not None:
            return _refusal(403, self.refused)
        try:
            asked_for = json.loads(body)
        except ValueError:
            return _refusal(400, "the request body is not JSON")
        if not isinstance(asked_for, dict):
            return _refusal(400, "the request body is not a JSON object")
        # the configured model answers, whatever the CLI names: its price is what the caps and spend count
        if self.provider == "gemini":
            path = re.sub(r"/models/[^/:]+:", f"/models/{self.model.name}:", path)
        else:
            asked_for["model"] = self.model.name
        text = json.dumps(asked_for, ensure_ascii=False)
        body = text.encode("utf-8")
        try:
            reservation = self.ledger.reserve(self.role, self.model, [{"role": "user", "text": text}], None)
        except BudgetExceeded as err:
            self.refused = f"the station's budget stops the coder's calls: {err}"
            return _refusal(403, self.refused)
        status, kind, reply = self._forward(path, query, headers, body, default)
        usage = parse_usage(self.provider, kind, reply) if status == 200 else None
        cost = self.ledger.settle(reservation, self.model, usage)
        self.record(
            {
                "path": path,
                "status": status,
                "request": cut(text, RECORD_CHARS),
                "response": cut(reply.decode("utf-8", "replace"), RECORD_CHARS),
                "usage": asdict(usage) if usage is not None else None,
                "cost_usd": cost,
                "model": self.model.name,
            }
        )
        return status, kind, reply

    def _forward(
        self, path: str, query: str, headers: dict[str, str], body: bytes, default: str
    ) -> tuple[int, str, bytes]:
        base = (self.model.base_url or default).rstrip("/")
        if self.provider.startswith("openai") and base.endswith("/v1"):
            base = base[: -len("/v1")]  # OpenAI's base URLs name the version, as the CLI's path does
        kept = "&".join(p for p in query.split("&") if p and not p.startswith("key="))
        url = base + path + (f"?{kept}" if kept else "")
        sent = {name: headers[name] for name in PASSED_HEADERS if name in headers}
        key = api_key(self.model)
        if key is not None:
            header = PROVIDERS[self.provider][2]
            sent[header] = f"Bearer {key}" if header == "authorization" else key
        request = urllib.request.Request(url, data=body, headers=sent, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.model.timeout_s) as response:  # noqa: S310 - the operator's URL
                return response.status, response.headers.get("content-type", ""), _read(response)
        except urllib.error.HTTPError as err:
            return err.code, err.headers.get("content-type", ""), _read(err)
        except (OSError, ValueError) as err:
            return _refusal(502, f"the station's relay could not reach {base}: {err}")


def _read(response: Any) -> bytes:
    data = response.read(MAX_BODY_BYTES + 1)
    return data[:MAX_BODY_BYTES]


def _refusal(status: int, message: str) -> tuple[int, str, bytes]:
    body = {"type": "error", "error": {"type": "station_relay", "message": message}}
    return status, "application/json", json.dumps(body).encode()


class _UnixServer(socketserver.UnixStreamServer):
    def handle_error(self, request: Any, client_address: Any) -> None:  # a client that went away: nothing to do
        pass


class _Handler(BaseHTTPRequestHandler):
    """One request per connection: the relay serves one connection at a time, so a client's idle
    keep-alive connection must not hold up the next (submit_attempt's, say)."""

    owner: Relay
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds a client may take to send its request

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._send(*_refusal(405, "the station's relay takes POST requests only"))

    def do_POST(self) -> None:
        length = self.headers.get("content-length")
        if length is None or not length.isdigit():
            return self._send(*_refusal(411, "the station's relay needs a Content-Length"))
        if int(length) > MAX_BODY_BYTES:
            return self._send(*_refusal(413, f"the request is over {MAX_BODY_BYTES:,} bytes"))
        body = self.rfile.read(int(length))
        path, _, query = self.path.partition("?")
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            answer = self.owner.answer(path, query, headers, body)
        except Exception as err:  # noqa: BLE001 - the station's side broke (a pause, a stop): its caller raises it
            self.owner.failure = self.owner.failure or err
            answer = _refusal(500, "the station could not answer this request; the coder is stopped")
        self._send(*answer)

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.close_connection = True
        self.send_response(status)
        self.send_header("content-type", kind or "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)


# -- what a reply used, in each provider's words ----------------------------------------------------------
def parse_usage(provider: str, content_type: str, body: bytes) -> Usage | None:
    """The usage a reply (JSON, or a stream of server-sent events) reports; None if it says none."""
    objects: list[dict[str, Any]] = []
    text = body.decode("utf-8", "replace")
    streamed = "event-stream" in content_type
    for line in text.splitlines() if streamed else [text]:
        if streamed and not line.startswith("data:"):
            continue
        data = line[5:].strip() if streamed else line
        if not data or data == "[DONE]":
            continue
        try:
            found = json.loads(data)
        except ValueError:
            continue
        if isinstance(found, dict):
            objects.append(found)
    parse = {
        "anthropic": _anthropic_usage,
        "openai": _responses_usage,
        "openai-chat": _chat_usage,
        "gemini": _gemini_usage,
    }[provider]
    return parse(objects)


def _n(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _get(found: Any, *path: str) -> Any:
    for part in path:
        found = found.get(part) if isinstance(found, dict) else None
    return found


def _anthropic_usage(objects: list[dict[str, Any]]) -> Usage | None:
    merged: dict[str, Any] = {}  # message_start holds the input, message_delta the output
    for found in objects:
        usage = _get(found, "message", "usage") if found.get("type") == "message_start" else found.get("usage")
        if isinstance(usage, dict):
            merged.update({k: v for k, v in usage.items() if v is not None})
    if not merged:
        return None
    read, written = _n(merged.get("cache_read_input_tokens")), _n(merged.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=_n(merged.get("input_tokens")) + read + written,
        output_tokens=_n(merged.get("output_tokens")),
        cached_input_tokens=read,
        cache_write_tokens=written,
    )


def _responses_usage(objects: list[dict[str, Any]]) -> Usage | None:
    usage = None
    for found in objects:
        usage = _get(found, "response", "usage") or found.get("usage") or usage
    if not isinstance(usage, dict):
        return None
    reasoning = _n(_get(usage, "output_tokens_details", "reasoning_tokens"))
    return Usage(
        input_tokens=_n(usage.get("input_tokens")),
        output_tokens=max(0, _n(usage.get("output_tokens")) - reasoning),
        cached_input_tokens=_n(_get(usage, "input_tokens_details", "cached_tokens")),
        reasoning_tokens=reasoning,
    )


def _chat_usage(objects: list[dict[str, Any]]) -> Usage | None:
    usage = None
    for found in objects:
        usage = found.get("usage") or usage
    if not isinstance(usage, dict):
        return None
    reasoning = _n(_get(usage, "completion_tokens_details", "reasoning_tokens"))
    return Usage(
        input_tokens=_n(usage.get("prompt_tokens")),
        output_tokens=max(0, _n(usage.get("completion_tokens")) - reasoning),
        cached_input_tokens=_n(_get(usage, "prompt_tokens_details", "cached_tokens")),
        reasoning_tokens=reasoning,
    )


def _gemini_usage(objects: list[dict[str, Any]]) -> Usage | None:
    usage = None
    for found in objects:
        usage = found.get("usageMetadata") or usage
    if not isinstance(usage, dict):
        return None
    return Usage(
        input_tokens=_n(usage.get("promptTokenCount")),
        output_tokens=_n(usage.get("candidatesTokenCount")),
        cached_input_tokens=_n(usage.get("cachedContentTokenCount")),
        reasoning_tokens=_n(usage.get("thoughtsTokenCount")),
    )
