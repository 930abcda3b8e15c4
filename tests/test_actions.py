"""Tests for station.actions: the reply -> actions parser."""

from __future__ import annotations

import datetime
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from station.core.actions import ParsedAction, parse_actions

A = "/execute_action"


def act(content: str) -> str:
    return A + "{" + content + "}"


def summary(actions: list[ParsedAction]) -> list[tuple]:
    return [(a.name, a.args, a.params, a.error) for a in actions]


def assert_matches(actions: list[ParsedAction], expected: list[tuple]) -> None:
    """Compare (name, args, params, error-prefix-or-None) tuples."""
    got = summary(actions)
    assert len(got) == len(expected), got
    for g, e in zip(got, expected):
        assert g[:3] == e[:3], (got, expected)
        if e[3] is None:
            assert g[3] is None, got
        else:
            assert g[3] is not None and g[3].startswith(e[3]), got


def P(text, expected, max_actions=100, *, id):
    return pytest.param(text, expected, max_actions, id=id)


GOTO_LOBBY = ("goto", "lobby", None, None)

CASES = [
    # --- action syntax -------------------------------------------------------
    P("", [], id="empty-text"),
    P(act("goto mail"), [("goto", "mail", None, None)], id="simple"),
    P(act("read"), [("read", None, None, None)], id="no-args"),
    P("   " + act("goto mail"), [("goto", "mail", None, None)], id="indent-spaces"),
    P("\t " + act("goto mail"), [("goto", "mail", None, None)], id="indent-tab"),
    P("`" + act("goto mail") + "`", [("goto", "mail", None, None)], id="backticks-both"),
    P("  `" + act("goto mail"), [("goto", "mail", None, None)], id="backtick-leading-only"),
    P("``" + act("goto mail") + "``", [], id="double-backtick-not-action"),
    P("I will now " + act("goto mail") + " ok", [], id="mid-line-ignored"),
    P("- " + act("goto mail"), [("goto", "mail", None, None)], id="list-dash"),
    P("- `" + act("help lobby") + "`", [("help", "lobby", None, None)], id="list-dash-backticks"),
    P("  * " + act("goto archive"), [("goto", "archive", None, None)], id="list-star-indented"),
    P("+\t" + act("goto archive"), [("goto", "archive", None, None)], id="list-plus-tab"),
    P("1. " + act("read 3") + "\n2) " + act("read 4"), [("read", "3", None, None), ("read", "4", None, None)],
      id="list-numbered"),
    P("-" + act("goto mail"), [], id="list-marker-needs-a-space"),
    P("- - " + act("goto mail"), [], id="two-list-markers-not-action"),
    P("a. " + act("goto mail"), [], id="letter-list-not-action"),
    P("- see " + act("goto mail"), [], id="list-item-mid-line-ignored"),
    P(act("goto mail") + " then {more} text", [("goto", "mail", None, None)], id="trailing-text-ignored"),
    P(act("GoTo Mail"), [("goto", "Mail", None, None)], id="name-lowercased-args-case-kept"),
    P(act("  create   Some Title  Here  "), [("create", "Some Title  Here", None, None)], id="multi-word-args-trimmed"),
    P(act(""), [("", None, None, "Empty action command")], id="empty-braces"),
    P(act(" \t "), [("", None, None, "Empty action command")], id="whitespace-braces"),
    P(act("goto {mail}"), [], id="nested-braces-not-action"),
    P(act("goto mail{"), [], id="open-brace-inside-not-action"),
    P(A + "{goto mail", [], id="missing-close-brace"),
    P(A + " goto mail", [], id="no-braces"),
    P(
        "\n".join([act("goto mail"), "some prose", act("read 3"), act("goto lobby")]),
        [("goto", "mail", None, None), ("read", "3", None, None), GOTO_LOBBY],
        id="multiple-in-order",
    ),
    P(act("goto Café") + "\n```yaml\ntitle: Ünïcødé ✓\n```", [("goto", "Café", {"title": "Ünïcødé ✓"}, None)], id="unicode"),
    P(act("goto a") + "\x00 junk\n\x00\x00", [("goto", "a", None, None)], id="nul-chars"),
    # --- line endings ----------------------------------------------------------
    P(
        act("create") + "\r\n```yaml\r\ntitle: Hi\r\n```\r\n" + act("goto lobby") + "\r\n",
        [("create", None, {"title": "Hi"}, None), GOTO_LOBBY],
        id="crlf",
    ),
    P(act("goto a") + "\r" + act("goto b"), [("goto", "a", None, None), ("goto", "b", None, None)], id="lone-cr"),
    # --- YAML attachment ---------------------------------------------------------
    P(act("create") + "\n```yaml\ntitle: Hi\nn: 2\n```", [("create", None, {"title": "Hi", "n": 2}, None)], id="yaml-direct"),
    P(act("create") + "\n  ```yaml\n  title: Hi\n  n: 2\n  ```", [("create", None, {"title": "Hi", "n": 2}, None)], id="yaml-indented"),
    P(act("create") + "\n   ```yaml\n   a: 1\n```", [("create", None, {"a": 1}, None)], id="yaml-indented-closed-unindented"),
    P(act("create") + "\n\n   \n```yaml\ntitle: Hi\n```", [("create", None, {"title": "Hi"}, None)], id="yaml-after-blank-lines"),
    P(act("create") + "\nHere you go:\n```yaml\ntitle: Hi\n```", [("create", None, None, None)], id="yaml-after-prose-not-attached"),
    P(act("create") + "\n```yml\ntitle: Hi\n```", [("create", None, {"title": "Hi"}, None)], id="yml-fence"),
    P(act("create") + "\n```YAML  \ntitle: Hi\n```", [("create", None, {"title": "Hi"}, None)], id="uppercase-fence-trailing-space"),
    P(act("create") + "\n```yaml\ntitle: Hi\nbody: x\n\n", [("create", None, {"title": "Hi", "body": "x"}, None)], id="unclosed-final-block-repaired"),
    P(act("create") + "\n```yaml\ntitle: Hi\nbody: x```\n\n", [("create", None, {"title": "Hi", "body": "x"}, None)], id="unclosed-glued-fence-repaired"),
    P(
        act("create") + "\n```yaml\ntitle: Hi\n      ```\n" + act("goto lobby"),
        [("create", None, {"title": "Hi"}, None), GOTO_LOBBY],
        id="closed-by-deeper-indented-fence",
    ),
    P(
        act("create") + "\n```yaml\ntitle: Hi\n  ```\n\nThanks.\n" + act("goto lobby"),
        [("create", None, None, "YAML error"), GOTO_LOBBY],
        id="deeper-fence-is-content-then-prose",
    ),
    P(
        act("create") + "\n  ```yaml\n  a: 1\n ```\n" + act("goto lobby"),
        [("create", None, {"a": 1}, None), GOTO_LOBBY],
        id="closed-by-less-indented-fence",
    ),
    P(
        act("create") + "\n```yaml\na: 1\n```\n```yaml\nb: 2\n```",
        [("create", None, {"a": 1}, None)],
        id="two-blocks-first-attaches",
    ),
    P(
        act("goto a") + "\n" + act("create") + "\n```yaml\nt: 1\n```",
        [("goto", "a", None, None), ("create", None, {"t": 1}, None)],
        id="yaml-attaches-to-nearest-action",
    ),
    P(
        act("create") + "\n```yaml\nbody: |\n  line one\n  line two\ntitle: T\n```",
        [("create", None, {"body": "line one\nline two\n", "title": "T"}, None)],
        id="yaml-literal-block",
    ),
    P(
        act("create") + "\n```yaml\n1: x\n2.5: y\n2024-01-02: z\nnull: n\n```",
        [("create", None, {"1": "x", "2.5": "y", "2024-01-02": "z", "None": "n"}, None)],
        id="non-string-keys",
    ),
    P(act("create") + "\n```yaml\nwhen: 2024-01-02\n```", [("create", None, {"when": datetime.date(2024, 1, 2)}, None)], id="date-value"),
    P(act("") + "\n```yaml\na: 1\n```", [("", None, {"a": 1}, "Empty action command")], id="empty-action-still-gets-yaml"),
    # --- every byte of a block scalar is kept -------------------------------------
    P(
        act("create") + "\n```yaml\ntitle: T\ncontent: |\n  Intro.\n  ```python\n  x = 1\n  ```\n  After.\n```\n"
        + act("goto lobby"),
        [("create", None, {"title": "T", "content": "Intro.\n```python\nx = 1\n```\nAfter.\n"}, None), GOTO_LOBBY],
        id="paper-with-code-fence-at-the-blocks-own-indentation",
    ),
    P(
        act("create") + "\n  ```yaml\n  content: |\n    A\n    ```\n    B\n  ```",
        [("create", None, {"content": "A\n```\nB\n"}, None)],
        id="indented-block-with-fence-inside-scalar",
    ),
    P(
        act("create") + "\n```yaml\ncontent: |\n  A\n  ```python\n  x = 1\n  ```",
        [("create", None, {"content": "A\n```python\nx = 1\n"}, None)],
        id="unclosed-paper-ending-in-code-fence-repaired",
    ),
    P(
        act("create") + "\n```yaml\ncontent: |\n  A\n  ```python\n  x = 1\n```\n  B\n```\n" + act("goto lobby"),
        [("create", None, {"content": "A\n```python\nx = 1\n```\nB\n"}, None), GOTO_LOBBY],
        id="unindented-fence-inside-block-scalar-is-content",
    ),
    P(
        act("create") + "\n```yaml\ncontent: |\n  A\n```\n\nB is prose.\n" + act("goto lobby"),
        [("create", None, {"content": "A\n"}, None), GOTO_LOBBY],
        id="unindented-fence-then-prose-closes",
    ),
    P(
        act("create") + "\n```yaml\ncontent: |\n  A\n```\n  " + act("goto lobby"),
        [("create", None, {"content": "A\n"}, None), GOTO_LOBBY],
        id="unindented-fence-then-indented-action-closes",
    ),
    P(
        act("create") + "\n```yaml\ncontent: |\n  a\n    \n  b  \n```",
        [("create", None, {"content": "a\n  \nb  \n"}, None)],
        id="whitespace-only-and-trailing-spaces-kept",
    ),
    P(
        act("create") + "\n    ```yaml\n    content: |\n      a\n         \n      b\n    ```",
        [("create", None, {"content": "a\n   \nb\n"}, None)],
        id="whitespace-only-line-kept-after-dedent",
    ),
    P(
        act("create") + "\n```yaml\ncontent: |\n  a\n\t\n  b\n```",
        [("create", None, {"content": "a\n\nb\n"}, None)],
        id="tab-only-line-read-leniently",
    ),
    P(
        act("create") + "\n```yaml\ncontent: |\n  Models print <think> first.\n  ```thought\n  " + act("goto exit")
        + "\n  ```\n```\n" + act("goto lobby"),
        [("create", None, {"content": "Models print <think> first.\n```thought\n" + act("goto exit") + "\n```\n"},
          None), GOTO_LOBBY],
        id="thought-syntax-inside-yaml-is-content",
    ),
    # --- YAML errors ---------------------------------------------------------------
    P(
        act("create") + "\n```yaml\ntitle: Re: hi\n```\n" + act("goto lobby"),
        [("create", None, None, "YAML error"), GOTO_LOBBY],
        id="yaml-parse-error",
    ),
    P(act("create") + "\n```yaml\n- a\n- b\n```", [("create", None, None, "YAML error")], id="yaml-list-not-mapping"),
    P(act("create") + "\n```yaml\njust some text\n```", [("create", None, None, "YAML error")], id="yaml-scalar-not-mapping"),
    P(act("create") + "\n```yaml\n```", [("create", None, None, "YAML block is empty")], id="yaml-empty"),
    P(act("create") + "\n```yaml\n\n   \n# only a comment\n```", [("create", None, None, "YAML block is empty")], id="yaml-blank-and-comment"),
    P(act("create") + "\n```yaml\na: &x [*x]\n```", [("create", None, None, "YAML error")], id="yaml-self-referencing-alias"),
    # --- action syntax inside YAML is not an action ---------------------------------
    P(
        act("create") + "\n```yaml\nbody: |\n  " + act("goto exit") + "\n  more\n```\n" + act("goto lobby"),
        [("create", None, {"body": act("goto exit") + "\nmore\n"}, None), GOTO_LOBBY],
        id="action-in-attached-yaml-value",
    ),
    P(
        "Prose first\n```yaml\n" + act("goto exit") + "\n```\n" + act("goto lobby"),
        [GOTO_LOBBY],
        id="action-in-unattached-yaml",
    ),
    P(
        act("goto lobby") + "\ntext\n```yaml\nx: |\n  " + act("goto exit"),
        [GOTO_LOBBY],
        id="indented-action-in-unclosed-yaml-hidden",
    ),
    P(
        act("create") + "\n```yaml\nx: 1\n" + act("goto exit"),
        [("create", None, {"x": 1}, None), ("goto", "exit", None, None)],
        id="unindented-action-ends-unclosed-yaml",
    ),
    P("```text\n" + act("goto lobby") + "\n```", [GOTO_LOBBY], id="non-yaml-fence-does-not-hide"),
    # --- thought blocks --------------------------------------------------------------
    P("```thought\n" + act("goto exit") + "\n```\n" + act("goto lobby"), [GOTO_LOBBY], id="thought-closed"),
    P(act("goto lobby") + "\n```thought\n" + act("goto exit") + "\n", [GOTO_LOBBY], id="thought-unclosed"),
    P("  ```THOUGHT\n" + act("goto exit") + "\n  ```\n" + act("goto lobby"), [GOTO_LOBBY], id="thought-uppercase-indented"),
    P("<think>\n" + act("goto exit") + "\n</think>\n" + act("goto lobby"), [GOTO_LOBBY], id="think-tag"),
    P("<thinking>plan:\n" + act("goto exit") + "</thinking>\n" + act("goto lobby"), [GOTO_LOBBY], id="thinking-tag"),
    P(act("goto lobby") + "\n<THINK>\n" + act("goto exit"), [GOTO_LOBBY], id="think-unclosed"),
    P("<think>\n```yaml\n</think>\n" + act("goto lobby"), [GOTO_LOBBY], id="yaml-fence-inside-thought-ignored"),
    P(act("c") + "\n```yaml <think>\n```\n</think>\n" + act("goto lobby"), [("c", None, None, "YAML block is empty"), GOTO_LOBBY],
      id="think-span-cut-from-a-yaml-opening-line"),
    # --- tags normalisation -----------------------------------------------------------
    P(act("c") + "\n```yaml\ntags: a, b ,, c\n```", [("c", None, {"tags": ["a", "b", "c"]}, None)], id="tags-string"),
    P(act("c") + "\n```yaml\ntags: [' x ', 3, '', y]\n```", [("c", None, {"tags": ["x", "3", "y"]}, None)], id="tags-list"),
    P(act("c") + "\n```yaml\ntags:\n```", [("c", None, {"tags": []}, None)], id="tags-null"),
    P(act("c") + "\n```yaml\ntags: 42\n```", [("c", None, {"tags": ["42"]}, None)], id="tags-number"),
    P(
        act("c") + "\n```yaml\ntags:\n  - ml\n  - 1.5\n  - true\n  - null\n  - '  '\n```",
        [("c", None, {"tags": ["ml", "1.5", "True"]}, None)],
        id="tags-mixed-list",
    ),
    # --- limit ---------------------------------------------------------------------------
    P(
        "\n".join(act(f"goto r{i}") for i in range(5)),
        [("goto", "r0", None, None), ("goto", "r1", None, None), ("goto", "r2", None, None), ("", None, None, "Too many actions")],
        3,
        id="max-actions",
    ),
    P(
        act("create") + "\n```yaml\na: 1\n```\n" + act("goto x"),
        [("create", None, {"a": 1}, None), ("", None, None, "Too many actions")],
        1,
        id="max-actions-keeps-yaml-of-last-kept",
    ),
]


@pytest.mark.parametrize(("text", "expected", "max_actions"), CASES)
def test_parse_table(text, expected, max_actions):
    assert_matches(parse_actions(text, max_actions=max_actions), expected)


def test_table_is_large_enough():
    assert len(CASES) >= 45


def test_default_limit_is_100():
    actions = parse_actions("\n".join(act(f"goto r{i}") for i in range(101)))
    assert len(actions) == 101
    assert actions[99].args == "r99"
    assert actions[100].name == "" and actions[100].error.startswith("Too many actions")


def test_line_numbers_survive_thoughts_and_crlf():
    text = "intro\r\n<think>a\nb</think>\n" + act("goto a") + "\n```thought\nx\n```\n" + act("goto b")
    assert [(a.args, a.line) for a in parse_actions(text)] == [("a", 4), ("b", 8)]


def test_yaml_text_is_dedented_and_verbatim():
    [action] = parse_actions(act("create") + "\n    ```yaml\n    body: " + act("goto x") + "\n    ```")
    assert action.yaml_text == "body: " + act("goto x")
    assert action.params == {"body": act("goto x")}


def test_colon_numbers_stay_as_written():
    """YAML 1.1 would read `12:45` as 765 (base 60): a tick range an agent wrote unquoted."""
    [action] = parse_actions(act("prune_response") + "\n```yaml\nprune_blocks:\n  - ticks: 12:45\n"
                             "    summary: x\nt: 1:30.5\nn: 0x1f\nf: 1.5\n```")
    assert action.params == {"prune_blocks": [{"ticks": "12:45", "summary": "x"}], "t": "1:30.5", "n": 31, "f": 1.5}


def test_yaml_error_has_line_number():
    [action] = parse_actions(act("create") + "\n```yaml\na: 1\ntitle: Re: x\n```")
    assert action.error.startswith("YAML error") and "line 2" in action.error


def test_to_json_makes_values_safe():
    text = act("c") + "\n```yaml\nd: 2024-01-02\nb: !!binary aGk=\ns: !!set {x: null}\nf: .nan\n1: [1, 2]\n```"
    data = parse_actions(text)[0].to_json()
    assert data["params"] == {"d": "2024-01-02", "b": "hi", "s": ["x"], "f": "nan", "1": [1, 2]}
    assert set(data) == {"name", "args", "params", "error", "line"}
    json.dumps(data)


def test_rejects_non_str():
    with pytest.raises(TypeError):
        parse_actions(None)  # type: ignore[arg-type]


# --- property-based tests --------------------------------------------------------------

FRAGMENTS = [
    "```", "```yaml", "  ```yaml", "```yml", "```YAML", "```thought", "```THOUGHT x", "  ```", "```python",
    "<think>", "</think>", "<thinking>", "</thinking>", "`", "``", "{", "}", "{}",
    act("goto lobby"), act(""), act("  "), "`" + act("read 1") + "`", "\t" + act("Create Title"),
    "x " + act("goto exit"), A + "{", A + "{a{b}}", act("c") + "```",
    "title: hello", "tags: a, b", "tags: [1, null]", "body: |", "  text line", "- item", "a: &x [*x]",
    "d: 2024-01-01", "b: !!binary aGk=", "s: !!set {a: null}", "f: .inf", "t: 2001-12-14t21:59:43.10-05:00",
    "k: [", "key: : :", "? [a]\n: b", "", "   ", "hello world", "\x00", "\r",
    "```yaml <think>", "</think>```", "- " + act("goto a"), "1) `" + act("read 2") + "`", "content: |", "    ```",
]

fragment_text = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=12), max_size=40).flatmap(
    lambda parts: st.sampled_from(["\n", "\r\n", ""]).map(lambda sep: sep.join(parts))
)


def check_result(actions, max_actions=100):
    assert isinstance(actions, list)
    assert len(actions) <= max_actions + 1
    for action in actions:
        assert isinstance(action, ParsedAction)
        json.dumps(action.to_json(), allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_arbitrary_text(text):
    check_result(parse_actions(text))


@settings(max_examples=300, deadline=None)
@given(fragment_text, st.integers(min_value=0, max_value=5))
def test_never_raises_on_fragment_grammar(text, max_actions):
    check_result(parse_actions(text, max_actions=max_actions), max_actions)


# Lines that may sit inside a yaml block: never a bare ``` fence (that would close it).
inner_line = st.one_of(
    st.sampled_from(["title: x", "body: |", "  more text", "", "   ", "- item", "```python", "```yml", "tags: a, b"]),
    st.text(alphabet="abc :-#'\"", max_size=15),
    st.just("HIDDEN"),
)
indent = st.sampled_from(["", "  ", "\t", "    "])
action_wrap = st.sampled_from(["{}", "`{}`", "`{}", "{} trailing words"])


@st.composite
def reply_with_hidden_actions(draw):
    """Build a reply; action lines inside yaml blocks are hidden_<n>, the rest visible_<n>."""
    lines: list[str] = []
    visible: list[str] = []
    counter = iter(range(10_000))

    def action_line(kind: str) -> str:
        name = f"{kind}_{next(counter)}"
        if kind == "visible":
            visible.append(name)
        return draw(indent) + draw(action_wrap).format(act(name + " arg"))

    def yaml_block(closed: bool) -> None:
        opening = draw(indent)
        lines.append(opening + draw(st.sampled_from(["```yaml", "```YML", "``` yaml "])))
        for line in draw(st.lists(inner_line, max_size=6)):
            if line != "HIDDEN":
                lines.append(line)
            else:  # an unclosed block holds only actions indented deeper than its fence
                lines.append(action_line("hidden") if closed else opening + " " + action_line("hidden"))
        if closed:
            lines.append(draw(st.sampled_from(["", opening])) + "```")  # never deeper than the opening

    for kind in draw(st.lists(st.sampled_from(["action", "action+yaml", "yaml", "prose"]), max_size=15)):
        if kind.startswith("action"):
            lines.append(action_line("visible"))
        if kind.endswith("yaml"):
            lines.extend([""] * draw(st.integers(0, 2)))
            yaml_block(closed=True)
        if kind == "prose":
            lines.append(draw(st.text(alphabet="abcXYZ .,:-", max_size=30)))
    if draw(st.booleans()):
        yaml_block(closed=False)  # an unclosed block holds its deeper lines to the end of the text
    return "\n".join(lines), visible


@settings(max_examples=300, deadline=None)
@given(reply_with_hidden_actions())
def test_actions_inside_yaml_are_never_actions(case):
    text, visible = case
    actions = parse_actions(text)
    names = [a.name for a in actions]
    assert not any(name.startswith("hidden") for name in names)
    assert names == visible
    check_result(actions)


# --- `prune_response 441:458`: ticks on the action line, through the real room -----------------

def test_prune_response_takes_a_tick_range_as_its_argument(tmp_path) -> None:
    from helpers import executed_lines, make_station, prompt_at, recursive, replay_model, stored, yaml_block

    from station.core.engine import Engine

    refused = "\n".join([
        act("prune_response 1:5"),  # tick 1 is protected, 2 is now and 5 the future
        act("prune_response"),  # no ticks at all
        act("prune_response 3"), yaml_block("prune_blocks:\n  - ticks: 4"),  # both forms at once
    ])
    # The replay model sends its n-th line as the n-th reply still in the context, so once
    # ticks 3-4 are pruned line 5 comes again at tick 7 (refused: already pruned).
    replies = [act("goto token_management"), refused, "FILLER-B", "FILLER-C",
               "- `" + act("prune_response 3:4") + "`", "1. " + act("prune_response 6")]
    model = replay_model(tmp_path / "r.jsonl", replies, pad=4)
    st = make_station(tmp_path / "s", [recursive(model)], tokens={"prune_cooldown_ticks": 0})
    engine = Engine(st)
    engine.run(until_tick=4)
    lines = executed_lines(prompt_at(st, 3))
    assert "Nothing was pruned: block 1 (1-5): includes the current or a future tick (now 2)" in lines, lines
    assert any("no ticks were given" in line for line in lines), lines
    assert any("not both" in line for line in lines), lines
    assert stored(st, "Spiro I")["pruned"] == []

    engine.run(until_tick=6)
    # The same as a prune_blocks entry with ticks "3-4" and an empty summary: complete removal.
    assert stored(st, "Spiro I")["pruned"] == [{"ticks": [3, 4], "summary": ""}]
    assert "Pruned 1 block(s), 2 tick(s): 3-4: complete removal." in prompt_at(st, 6)
    context = "\n".join(m["text"] for m in st.conversations.context(1, stored(st, "Spiro I")["pruned"]))
    assert "FILLER-B" not in context and "- Station Tick: 3" not in context and "- Station Tick: 4" not in context
    assert "System: Pruned Ticks 3-4" not in context  # no summary: nothing takes their place
    assert "- Station Tick: 5" in context

    engine.run(until_tick=9)
    assert "tick(s) [3, 4] are already pruned" in prompt_at(st, 8)
    assert stored(st, "Spiro I")["pruned"] == [{"ticks": [3, 4], "summary": ""}, {"ticks": [6, 6], "summary": ""}]
    assert "Pruned 1 block(s), 1 tick(s): 6-6: complete removal." in prompt_at(st, 9)
