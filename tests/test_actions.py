"""Tests for station.actions: the reply -> actions parser."""

from __future__ import annotations

import datetime
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from station.actions import ParsedAction, parse_actions

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
    P("- " + act("goto mail"), [], id="list-bullet-is-mid-line"),
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
        act("goto lobby") + "\ntext\n```yaml\nx: 1\n" + act("goto exit"),
        [GOTO_LOBBY],
        id="action-in-unclosed-yaml-hidden",
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
        lines.append(draw(indent) + draw(st.sampled_from(["```yaml", "```YML", "``` yaml "])))
        for line in draw(st.lists(inner_line, max_size=6)):
            lines.append(action_line("hidden") if line == "HIDDEN" else line)
        if closed:
            lines.append(draw(indent) + "```")

    for kind in draw(st.lists(st.sampled_from(["action", "action+yaml", "yaml", "prose"]), max_size=15)):
        if kind.startswith("action"):
            lines.append(action_line("visible"))
        if kind.endswith("yaml"):
            lines.extend([""] * draw(st.integers(0, 2)))
            yaml_block(closed=True)
        if kind == "prose":
            lines.append(draw(st.text(alphabet="abcXYZ .,:-", max_size=30)))
    if draw(st.booleans()):
        yaml_block(closed=False)  # an unclosed block runs to the end of the text
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
