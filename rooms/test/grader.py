"""Test grading: after the last turn of a tick, each pending answer is graded by the grading model.

Grading is stateless (one fresh request per answer), every verdict is a recorded input, an
unparseable verdict is asked for again, and after `grading.max_attempts` the attempt is
closed as failed with a note to the agent and an alert for the operator, so a broken grader
can never hold the station.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from rooms.test.config import GradingConfig
from rooms.test.events import EntranceTestGraded
from station.core.context import Context, Hook, InputRequest, request_hash
from station.core.events import OperatorAlert, TickEnding, on

YAML_BLOCK = re.compile(r"```ya?ml\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)
PASS_LINE = re.compile(r"\bpass\s*:\s*(true|false|yes|no)\b", re.IGNORECASE)


def parse_grade(text: str) -> tuple[bool, str] | None:
    """(passed, comment) from the grader's reply, or None if it gave no usable verdict."""
    block = YAML_BLOCK.search(text)
    if block:
        try:
            data = yaml.safe_load(block.group(1))
        except yaml.YAMLError:
            data = None
        if isinstance(data, dict) and "pass" in data:
            value = data["pass"]
            passed = value if isinstance(value, bool) else str(value).strip().lower() in ("true", "yes")
            return passed, str(data.get("comment", "")).strip()
    line = PASS_LINE.search(text)
    if line:
        return line.group(1).lower() in ("true", "yes"), "(verdict read from free text)"
    return None


def key_terms_line(test: Any) -> str:
    if not test.key_terms:
        return ""
    groups = "; ".join(" or ".join(f'"{t}"' for t in group) for group in test.key_terms)
    return f"Key terms a passing answer is expected to contain (one from each group): {groups}"


class TestGrader(Hook):
    name = "grader"
    order = 40

    @on(TickEnding)
    def grade_pending(self, ctx: Context, agent: str | None, event: TickEnding) -> None:
        rows = ctx.store.all("SELECT * FROM test_attempts WHERE status='pending' ORDER BY id")
        self._fetch_verdicts(ctx, rows)
        for row in rows:
            self.grade(ctx, row)

    def _fetch_verdicts(self, ctx: Context, rows: list[Any]) -> None:
        """Ask for every verdict the grading below will read, round by round, all of a round at
        once: a tick where many guests took tests waits for the slowest verdict, not their sum."""
        waiting = [row for row in rows if self._test(ctx, row) is not None]
        for call in range(1, ctx.config.section(GradingConfig).max_attempts + 1):
            ctx.obtain_all(self._request(ctx, row, call) for row in waiting)
            waiting = [row for row in waiting if parse_grade(self._verdict_text(ctx, row, call)) is None]

    @staticmethod
    def _test(ctx: Context, row: Any) -> Any:
        return next((t for t in ctx.texts.tests if t.id == row["test_id"]), None)

    @staticmethod
    def _verdict_text(ctx: Context, row: Any, call: int) -> str:
        return (ctx.store.get_input(f"grade/{row['id']}/{call}") or {}).get("text") or ""

    def _request(self, ctx: Context, row: Any, call: int) -> InputRequest:
        test = self._test(ctx, row)
        prompt = ctx.texts.render(
            "grader_prompt",
            title=test.title,
            goal=test.goal,
            question=test.question,
            criteria=test.pass_criteria,
            key_terms=key_terms_line(test),
            answer=row["answer"],
        )
        system = ctx.texts.render("grader_system")
        model = ctx.models.get(ctx.config.section(GradingConfig).model)

        def produce() -> dict:
            return model.complete([{"role": "user", "text": prompt}], system=system, agent="grader").to_payload()

        return (
            f"grade/{row['id']}/{call}",
            "verdict",
            row["agent"],
            produce,
            request_hash([{"role": "user", "text": prompt}]),
        )

    def grade(self, ctx: Context, row: Any) -> None:
        test = self._test(ctx, row)
        if test is None:
            self._close(ctx, row, "fail", "this test no longer exists", 0)
            return
        attempts = ctx.config.section(GradingConfig).max_attempts
        for call in range(1, attempts + 1):
            reply = ctx.obtain(*self._request(ctx, row, call))
            verdict = parse_grade(reply.get("text") or "")
            if verdict is not None:
                passed, comment = verdict
                self._close(ctx, row, "pass" if passed else "fail", comment or "(no comment)", call, test)
                return
        self._close(
            ctx,
            row,
            "error",
            f"the grader gave no usable verdict after {attempts} tries; take the test again",
            attempts,
            test,
        )
        ctx.emit(OperatorAlert("test grading failed", details={"attempt": row["id"]}), row["agent"])

    def _close(self, ctx: Context, row: Any, status: str, comment: str, calls: int, test: Any = None) -> None:
        ctx.store.execute(
            "UPDATE test_attempts SET status=?, graded_tick=?, comment=?, grader_calls=? WHERE id=?",
            (status, ctx.tick, comment, calls, row["id"]),
        )
        agent = ctx.agents.active_of_session(row["session"])
        if agent is None:
            return
        verdict = "PASS" if status == "pass" else "FAIL"
        criteria = (
            f"Pass criteria: {test.pass_criteria}"
            if test is not None and ctx.config.section(GradingConfig).show_criteria
            else ""
        )
        text = ctx.texts.render(
            "test_result",
            test_id=row["test_id"],
            title=test.title if test else row["test_id"],
            tick=ctx.tick,
            verdict=verdict,
            criteria=criteria,
            comment=comment,
        )
        agent.room_state("test").setdefault("unseen_results", []).append(
            f"Test {row['test_id']}: {verdict} at tick {ctx.tick}. {comment}"
        )
        ctx.agents.save(agent)
        ctx.notify(agent, text, "test_result")
        ctx.emit(EntranceTestGraded(row["test_id"], status), agent.name)
