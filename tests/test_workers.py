"""The worker layer: a tool-using session as a walk through recorded inputs, and the sandboxed file tools.

The session is driven by the real scripted coder (or small models of the test's own) against a
toolbox whose submit_attempt compiles the submitted program: the slip of the coder's first version
fails it, the mended one passes. The file tools run in the real local sandbox."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import pytest

from rooms.research.coder_report import SECTIONS  # the sections the station requires
from station.core.model_api import PERMANENT, BudgetExceeded, ModelError, Reply, Tool, Usage
from station.executors import LocalExecutor, Mount
from station.models.scripted_coder import ScriptedCoder
from station.workers.sandbox_tools import SandboxTools, Surface, cut
from station.workers.session import Session, model_call, walk_session

PROGRAM = "import math\n\n\ndef main():\n    return {'score': math.sqrt(6.25)}\n"
OPENING = f"Implement this and submit it.\n\n```python\n{PROGRAM}```\n"
SYSTEM = "You are a research coder."


class Recorder:
    """The recorded inputs of a session (JSON, as the store keeps them); makes missing ones while `makes` lasts."""

    def __init__(self, inputs: dict[str, Any] | None = None, makes: int = 10**6) -> None:
        self.inputs: dict[str, Any] = dict(inputs or {})
        self.kinds: dict[str, str] = {}
        self.makes = makes

    def fetch(self, key: str, kind: str, make: Any) -> dict[str, Any] | None:
        if key in self.inputs:
            return copy.deepcopy(self.inputs[key])
        if self.makes <= 0:
            return None
        self.makes -= 1
        self.inputs[key] = json.loads(json.dumps(make()))
        self.kinds[key] = kind
        return copy.deepcopy(self.inputs[key])


class ToyBox:
    """write_file/read_file on a dict, submit_attempt that compiles the file, finish: the coder's tools in miniature."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.attempts = 0

    def tools(self) -> list[Tool]:
        return [
            Tool(name, name, {"type": "object"}) for name in ("write_file", "read_file", "submit_attempt", "finish")
        ]

    def handle(self, turn: int, index: int, call: dict[str, Any], fetch: Any) -> dict[str, Any] | None:
        return fetch(f"coder/7/tool/{turn}/{index}", "worker_tool", lambda: self.run(call))

    def run(self, call: dict[str, Any]) -> dict[str, Any]:
        name, args = call["name"], call["arguments"]
        if name == "write_file":
            self.files[args["path"]] = args["content"]
            return {"text": f"wrote {len(args['content'])} bytes to {args['path']}", "error": False}
        if name == "read_file":
            return {"text": self.files.get(args["path"], "no such file"), "error": args["path"] not in self.files}
        if name == "submit_attempt":
            self.attempts += 1
            try:
                compile(self.files[args["path"]], args["path"], "exec")
            except SyntaxError as err:
                return {"text": f"Official attempt {self.attempts} of 5: error.\nSyntaxError: {err.msg}", "error": True}
            return {"text": f"Official attempt {self.attempts} of 5: ok.\nScore: 2.5", "error": False}
        return {"text": "Your report is in.", "error": False, "final": True, "report": args["report"]}


class Counted:
    """The models a walk asked for, counted: a replay must ask for none."""

    def __init__(self, make: Any) -> None:
        self.make, self.calls = make, 0

    def __call__(self) -> Any:
        self.calls += 1
        return self.make()


class Toy:
    """A model of the test's own: `play(messages)` gives each reply; the conversations it was sent are kept."""

    name = "toy"

    def __init__(self, play: Any) -> None:
        self.play, self.seen, self.agents = play, [], set()

    def complete(self, messages, *, system, agent, tools=None):
        self.seen.append(copy.deepcopy(messages))
        self.agents.add((agent, tuple(t.name for t in tools)))
        return self.play(messages)


def coder_walk(
    recorder: Recorder, get_model: Any | None, opening: str = OPENING, toolbox: ToyBox | None = None, **kw: Any
) -> Session | None:
    call = None if get_model is None else model_call(get_model, "coder")
    toolbox = toolbox or ToyBox()
    kw.setdefault("max_turns", 12)
    return walk_session("coder/7", recorder.fetch, system=SYSTEM, opening=opening, toolbox=toolbox, call=call, **kw)


@pytest.fixture(scope="module")
def coded():
    """The scripted coder's whole session, recorded."""
    recorder = Recorder()
    model = Counted(ScriptedCoder)
    session = coder_walk(recorder, model)
    return session, recorder, model


def test_the_scripted_coder_fails_mends_and_finishes_with_a_report(coded):
    session, recorder, model = coded
    assert session.end == "finished"
    played = [[c["name"] for c in turn.reply["tool_calls"]] for turn in session.turns]
    assert played == [["write_file"], ["submit_attempt"], ["read_file"], ["write_file"], ["submit_attempt"], ["finish"]]
    assert "improt math" in session.turns[0].reply["tool_calls"][0]["arguments"]["content"]
    assert session.turns[1].results[0]["error"] and "SyntaxError" in session.turns[1].results[0]["text"]
    assert session.turns[3].reply["tool_calls"][0]["arguments"]["content"] == PROGRAM
    assert not session.turns[4].results[0]["error"]
    report = session.final["report"]
    assert [s for s in SECTIONS if f"## {s}" not in report] == []
    assert "2.5" in report.split("## Final Result")[1].split("##")[0] and "done" in report.split("## Final Status")[1]
    turns = [f"coder/7/turn/{n}" for n in range(1, 7)]
    tools = [f"coder/7/tool/{n}/0" for n in range(1, 7)]
    assert sorted(recorder.inputs) == sorted(turns + tools)
    assert {recorder.kinds[k] for k in turns} == {"worker_turn"} and {recorder.kinds[k] for k in tools} == {
        "worker_tool"
    }
    assert model.calls == 6 and session.turns[0].reply["model"] == "scripted-coder"
    assert session.turns[0].reply["usage"]["input_tokens"] > 0


def test_a_replay_rebuilds_the_session_with_no_model_call(coded):
    session, recorder, _ = coded
    replayed = coder_walk(Recorder(recorder.inputs, makes=0), None)
    assert replayed == session


def test_a_walk_stopped_at_a_missing_input_resumes_to_the_same_session(coded):
    session, _, _ = coded
    partial = Recorder(makes=5)  # turn 1, its write, turn 2, its attempt, turn 3: then the station stops
    model, workspace = Counted(ScriptedCoder), ToyBox()  # its files outlive the stop, as a workspace on disk does
    assert coder_walk(partial, model, toolbox=workspace) is None
    assert sorted(partial.inputs) == [
        "coder/7/tool/1/0",
        "coder/7/tool/2/0",
        "coder/7/turn/1",
        "coder/7/turn/2",
        "coder/7/turn/3",
    ]
    resumed = Recorder(partial.inputs)
    assert coder_walk(resumed, model, toolbox=workspace) == session
    assert model.calls == 6  # no model call made twice


def test_without_a_program_the_coder_finishes_at_once_blocked():
    session = coder_walk(Recorder(), ScriptedCoder, opening="Make it faster, somehow.")
    assert session.end == "finished" and len(session.turns) == 1
    report = session.final["report"]
    assert "blocked" in report.split("## Final Status")[1] and "no program" in report


def reply(*calls: dict[str, Any], text: str = "") -> Reply:
    ids = [{"id": f"c{i}", **call} for i, call in enumerate(calls)]
    return Reply(text=text, usage=Usage(10, 5), tool_calls=ids)


def test_a_session_that_never_finishes_ends_at_its_turn_limit():
    toy = Toy(lambda m: reply({"name": "read_file", "arguments": {"path": "x"}}))
    session = coder_walk(Recorder(), lambda: toy, max_turns=3)
    assert session.end == "turn_limit" and len(session.turns) == 3 and session.final is None
    assert toy.agents == {
        ("coder", ("write_file", "read_file", "submit_attempt", "finish"))
    }  # spend booked as the coder's
    assert toy.seen[2][-1]["role"] == "tool" and toy.seen[2][-1]["results"][0]["text"] == "no such file"


def test_failing_calls_are_recorded_and_end_the_session_after_so_many_in_a_row():
    def play(messages):
        if len(toy.seen) in (1, 3, 4, 5):
            raise ModelError("503 overloaded")
        return reply({"name": "read_file", "arguments": {"path": "x"}})

    toy = Toy(play)
    recorder = Recorder()
    session = coder_walk(recorder, lambda: toy, max_model_errors=3)
    assert session.end == "model_failed" and len(session.turns) == 5
    assert [bool(t.reply.get("error")) for t in session.turns] == [True, False, True, True, True]
    assert recorder.inputs["coder/7/turn/1"]["error"] == "503 overloaded"
    assert toy.seen[0] == toy.seen[1]  # the failed call added nothing to the conversation


def test_a_permanent_failure_or_a_budget_stop_is_not_recorded():
    for failure in (ModelError("bad key", kind=PERMANENT), BudgetExceeded("cap")):

        def play(messages, failure=failure):
            raise failure

        recorder = Recorder()
        with pytest.raises(type(failure)):
            coder_walk(recorder, lambda play=play: Toy(play))
        assert recorder.inputs == {}


def test_bad_calls_are_answered_with_errors_and_a_reply_without_tools_with_a_reminder():
    def play(messages):
        if len(toy.seen) == 1:
            return Reply(text="I think I am done.", usage=Usage(10, 5))
        if len(toy.seen) == 2:
            return reply(
                {"name": "rm_rf", "arguments": {}},
                {"name": "read_file", "arguments": {}, "error": "arguments were not JSON: {'path"},
                {"name": "read_file", "arguments": "x"},
            )
        return reply({"name": "finish", "arguments": {"report": "r"}})

    toy = Toy(play)
    session = coder_walk(Recorder(), lambda: toy)
    assert session.end == "finished" and len(session.turns) == 3
    assert toy.seen[1][-1]["role"] == "user" and "tool" in toy.seen[1][-1]["text"]
    told = toy.seen[2][-1]["results"]
    assert [r["id"] for r in told] == ["c0", "c1", "c2"]
    assert "There is no tool 'rm_rf'" in told[0]["text"] and "finish" in told[0]["text"]
    assert "not JSON" in told[1]["text"] and "must be a JSON object" in told[2]["text"]
    assert all(r["error"] for r in session.turns[1].results)


# -- the sandboxed file tools ---------------------------------------------------------------------
SECRET_KEY = "sk-ant-test-never-seen-0123456789"


class CountedExecutor:
    """The real executor, its runs counted: bad arguments must never reach it."""

    def __init__(self, executor: LocalExecutor) -> None:
        self.executor, self.runs = executor, 0

    def run(self, spec):
        self.runs += 1
        return self.executor.run(spec)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    root = tmp_path_factory.mktemp("worker")
    station = root / "station"
    station.mkdir()
    (station / "secret.txt").write_text("the station's private data")
    workspace, records = root / "workspace", root / "records"
    workspace.mkdir()
    records.mkdir()
    (records / "eval-3.txt").write_text("Eval #3 scored 2.41\n")
    (workspace / "station_link").symlink_to(station)
    (workspace / "etc_link").symlink_to("/etc")
    return root


@pytest.fixture(scope="module")
def sandbox(host, tmp_path_factory):
    executor = LocalExecutor(hide=[host / "station"], scratch_base=tmp_path_factory.mktemp("scratch"))
    if executor.mode == "process":
        pytest.skip("no sandbox here: mounts are links and nothing is read-only in 'process' mode")
    surfaces = [Surface("workspace", host / "workspace", writable=True), Surface("records", host / "records")]
    return CountedExecutor(executor), surfaces


def use(tools: SandboxTools, name: str, **arguments: Any) -> dict[str, Any]:
    return tools.run({"id": "c0", "name": name, "arguments": arguments})


def test_a_file_written_in_the_workspace_is_there_for_the_next_run_and_the_records_are_readable(sandbox, host):
    executor, surfaces = sandbox
    tools = SandboxTools(executor, surfaces)
    wrote = use(tools, "write_file", path="workspace/pkg/solution.py", content="import math\nx = 1\nprint(x)\n")
    assert wrote == {"text": "wrote 27 bytes to workspace/pkg/solution.py", "error": False}
    assert (host / "workspace" / "pkg" / "solution.py").read_text() == "import math\nx = 1\nprint(x)\n"
    read = use(tools, "read_file", path="workspace/pkg/solution.py", offset=2, limit=1)
    assert read == {"text": "x = 1\n\n[lines 2-2 of 3; read on with offset]", "error": False}
    listed = use(tools, "list_files")["text"].splitlines()
    assert listed == [
        "records/",
        "records/eval-3.txt  (20 bytes)",
        "workspace/",
        "workspace/etc_link -> /etc",
        "workspace/pkg/",
        "workspace/pkg/solution.py  (27 bytes)",
        f"workspace/station_link -> {host / 'station'}",
    ]
    found = use(tools, "search", pattern=r"scored \d")
    assert found == {"text": "records/eval-3.txt:1: Eval #3 scored 2.41", "error": False}


def test_writes_outside_the_workspace_fail_in_the_sandbox(sandbox, host):
    executor, surfaces = sandbox
    tools = SandboxTools(executor, surfaces)
    for path in ("records/forged.txt", "notes.txt", "workspace/../records/x.txt", "workspace/station_link/x.txt"):
        refused = use(tools, "write_file", path=path, content="x")
        assert refused["error"] and "outside the writable folders (workspace)" in refused["text"], path
    # the tool's own check aside, the sandbox itself refuses: a command writing there is stopped by the kernel
    ran = use(tools, "run", command="echo x > records/forged.txt; echo x > /usr/forged; echo x > /etc/forged")
    assert ran["error"] and ran["text"].count("Read-only file system") == 3
    assert sorted(p.name for p in (host / "records").iterdir()) == ["eval-3.txt"]
    assert sorted(p.name for p in (host / "station").iterdir()) == ["secret.txt"]


def test_the_host_its_keys_and_planted_links_stay_out_of_reach(sandbox, host, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    executor, surfaces = sandbox
    data = host / "task-data"  # a caller's own mount and environment, on every run (the coder's task data)
    data.mkdir(exist_ok=True)
    (data / "info.txt").write_text("the task's public data")
    task = lambda spec: dataclasses.replace(
        spec, mounts=[*spec.mounts, Mount(data, "task_data")], env={"TASK": "circles"}
    )
    tools = SandboxTools(executor, surfaces, spec=task)
    station = host / "station"
    for path in (str(station / "secret.txt"), "workspace/station_link/secret.txt", "workspace/etc_link/hostname"):
        refused = use(tools, "read_file", path=path)
        assert refused["error"] and "outside the folders you can see" in refused["text"], path
    ran = use(tools, "run", command=f"env; cat {station}/secret.txt; cat workspace/station_link/secret.txt; ls /etc")
    assert "TASK=circles" in ran["text"]
    assert use(tools, "read_file", path="task_data/info.txt") == {"text": "the task's public data", "error": False}
    assert SECRET_KEY not in ran["text"] and "ANTHROPIC" not in ran["text"]
    assert "private data" not in ran["text"] and ran["text"].count("No such file or directory") == 2
    assert "shadow" not in ran["text"]  # the run's own /etc, not the host's


def test_a_command_is_stopped_at_its_time_limit(sandbox):
    executor, surfaces = sandbox
    ran = use(
        SandboxTools(executor, surfaces, command_timeout_s=1), "run", command="echo started; sleep 30", timeout_s=600
    )
    assert ran["error"] and ran["text"].startswith("started") and "timed out after 1 s" in ran["text"]


def test_bad_arguments_are_errors_that_never_reach_the_sandbox(sandbox):
    executor, surfaces = sandbox
    tools = SandboxTools(executor, surfaces)
    before = executor.runs
    bad = {
        ("read_file", json.dumps({})): "`path` is required",
        ("read_file", json.dumps({"path": 3})): "`path` must be a string",
        ("read_file", json.dumps({"path": "a", "offset": 0})): "`offset` must be an integer of at least 1",
        ("run", json.dumps({"command": "x" * 10_001})): "`command` is 10,001 bytes; at most 10,000",
        ("run", json.dumps({"command": "ls", "timeout_s": True})): "`timeout_s` must be a number",
        ("write_file", json.dumps({"path": "workspace/a", "content": "é" * 500_001})): "at most 1,000,000",
        ("write_file", json.dumps({"path": "workspace/a\x00b", "content": ""})): "must not hold a NUL",
        ("search", json.dumps({"pattern": "x", "flags": "i"})): "unknown argument(s) flags",
        ("delete", json.dumps({})): "unknown tool 'delete'",
    }
    for (name, arguments), expected in bad.items():
        result = use(tools, name, **json.loads(arguments))
        assert result["error"] and expected in result["text"], (name, result)
    recorder = Recorder()
    told = tools.handle(3, 1, {"id": "c1", "name": "run", "arguments": {}}, recorder.fetch, "coder/9")
    assert recorder.inputs == {"coder/9/tool/3/1": told} and recorder.kinds == {"coder/9/tool/3/1": "worker_tool"}
    assert executor.runs == before


def test_the_tools_say_what_each_sees_and_outputs_are_cut_head_and_tail(sandbox):
    executor, surfaces = sandbox
    tools = {t.name: t for t in SandboxTools(executor, surfaces, command_timeout_s=45).tools()}
    assert sorted(tools) == ["list_files", "read_file", "run", "search", "write_file"]
    assert "workspace (writable), records (read-only)" in tools["read_file"].description
    assert "records" not in tools["write_file"].description and "45 s" in tools["run"].description
    assert tools["write_file"].parameters["required"] == ["path", "content"]
    text = cut("a" * 600 + "b" * 600, 100)
    assert text.startswith("a" * 50 + "\n[... 1,100 characters cut ...]\n") and text.endswith("b" * 50)


class ZeroesBox(ToyBox):
    """A submit_attempt that also runs the program far enough to hit a misspelt numpy name, as Python says it."""

    def run(self, call: dict[str, Any]) -> dict[str, Any]:
        found = super().run(call)
        if call["name"] == "submit_attempt" and not found["error"] and "np.zeroes" in self.files[call["arguments"]["path"]]:
            return {
                "text": f"Official attempt {self.attempts} of 5: error.\nAttributeError: module 'numpy' has no "
                "attribute 'zeroes'. Did you mean: 'zeros'?",
                "error": True,
            }
        return found


def test_the_scripted_coder_mends_the_agents_own_misspelt_name_from_pythons_hint_in_a_third_attempt() -> None:
    program = "import numpy as np\n\n\ndef main():\n    return {'score': float(np.zeroes(3).sum()) + 2.5}\n"
    toolbox, recorder = ZeroesBox(), Recorder()
    session = coder_walk(recorder, ScriptedCoder, opening=f"Do this.\n\n```python\n{program}```\n", toolbox=toolbox)
    assert session is not None and session.end == "finished" and toolbox.attempts == 3
    assert "np.zeros(3)" in toolbox.files["workspace/solution.py"] and "zeroes" not in toolbox.files["workspace/solution.py"]
    assert "score of 2.5" in session.final["report"] and "`zeroes` -> `zeros`" in session.final["report"]
