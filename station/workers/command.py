"""One start of an installed command-line coder in the sandbox, its model calls relayed by the station.

The CLI runs as a fresh sandbox run of the station's executor (command mode, the worker's surfaces
as mounts, the run's own loopback up) through command_helper.py. A channel folder, made here and
mounted read-only at CHANNEL, holds the prompt file, the relay's socket and, once the station wants
the CLI stopped, `stop`. While the run goes on, this thread serves the relay (relay.py): the CLI's
model calls and its official attempts.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from station.core.config import ModelConfig
from station.core.run_types import Mount, RunResult, RunSpec
from station.workers.relay import Record, Relay, Submit
from station.workers.sandbox_tools import Surface

HELPER = Path(__file__).with_name("command_helper.py")
HELPER_FILE = "station_command.py"
CHANNEL = ".relay"  # the channel's mount, relative to the CLI's working dir
OUTPUT_BYTES = 1_000_000  # of the CLI's output, captured per stream


@dataclasses.dataclass
class Spawned:
    """What one start of the CLI came to: the run's result, and why the relay refused a call (a
    station cap: the station pauses), if it did."""

    result: RunResult
    refused: str | None


def run_cli(
    executor: Any,
    surfaces: list[Surface],
    channel: Path,
    *,
    argv: list[str],
    prompt: str,
    provider: str,
    model: ModelConfig,
    ledger: Any,
    record: Record,
    submit: Submit,
    timeout_s: float,
    spec: Callable[[RunSpec], RunSpec] | None = None,
    label: str = "worker-command",
) -> Spawned:
    """Start the CLI once and serve its relay on this thread until the run ends. `channel`: a folder
    of the session's, made afresh (what a killed station left there goes)."""
    shutil.rmtree(channel, ignore_errors=True)
    channel.mkdir(mode=0o755, parents=True)
    try:
        channel.chmod(0o755)
        (channel / "prompt.md").write_text(prompt, encoding="utf-8")
        (channel / "prompt.md").chmod(0o644)
        relay = Relay(
            channel / "relay.sock", provider=provider, model=model, ledger=ledger, record=record, submit=submit
        )
        try:
            run = _spec(surfaces, channel, argv, timeout_s, label)
            run = spec(run) if spec is not None else run
            run = dataclasses.replace(run, timeout_s=timeout_s, loopback=True)
            done: list[RunResult] = []
            broke: list[Exception] = []  # the executor itself failed: raised here, as the machine's fault

            def go() -> None:
                try:
                    done.append(executor.run(run))
                except Exception as err:  # noqa: BLE001 - handed to the caller below
                    broke.append(err)

            runner = threading.Thread(target=go, name=label, daemon=True)
            runner.start()
            relay.serve_while(runner.is_alive, stop_file=channel / "stop")
            runner.join()
        finally:
            relay.close()
        if relay.failure is not None:
            raise relay.failure
        if broke:
            raise broke[0]
        return Spawned(done[0], relay.refused)
    finally:
        shutil.rmtree(channel, ignore_errors=True)


def _spec(surfaces: list[Surface], channel: Path, argv: list[str], timeout_s: float, label: str) -> RunSpec:
    config = json.dumps({"argv": argv, "channel": CHANNEL}, ensure_ascii=True)
    encoded = base64.b64encode(config.encode("ascii")).decode("ascii")  # no quote or backslash can appear
    return RunSpec(
        code=f'{HELPER.read_text(encoding="utf-8")}\n\nmain("{encoded}")\n',
        mode="command",
        entry=f"python -I {HELPER_FILE}",
        filename=HELPER_FILE,
        mounts=[*(Mount(s.source, s.target, s.writable) for s in surfaces), Mount(channel, CHANNEL)],
        timeout_s=timeout_s,
        max_output_bytes=OUTPUT_BYTES,
        label=label,
    )
