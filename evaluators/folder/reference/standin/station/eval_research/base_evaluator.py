"""The evaluator base class a reference-format task subclasses, written from its documented
contract: evaluate_submission(result, eval_id, author) -> (success, score, details[, sort_key]),
what a submission must define (a function, or a file and a command), and the optional hooks
(secondary metric formats, seed batches, progress records). Constructible with or without a task
id, as the paper-era evaluators (super().__init__("1")) and the newer ones (super().__init__()) call it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


@dataclass
class SeedBatchEvaluation:
    """One evaluation of every candidate a submission returned (the reference's seed bank): six
    parallel lists, one entry per candidate."""

    seeds: list[Any]
    scores: Any
    valid: Any
    sort_keys: list[tuple]
    details: list[Any]
    errors: list[str | None]


class ResearchTaskEvaluator(ABC):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.task_id = str(args[0]) if args else None

    @abstractmethod
    def evaluate_submission(self, result: Any, eval_id: str | None = None, author: str | None = None) -> tuple:
        """(success, score, details) or (success, score, details, sort_key); a larger sort key ranks higher."""

    @abstractmethod
    def get_expected_function_name(self) -> str:
        """The function a function-mode submission defines."""

    def get_task_description(self) -> str:
        return ""

    def get_execution_mode(self) -> str:
        return "function"

    def get_submission_filename(self) -> str:
        return "submission.py"

    def get_execution_command(self) -> str:
        raise NotImplementedError("a command-mode evaluator gives its command in get_execution_command()")

    def get_secondary_metrics_format(self) -> dict[str, str | None] | None:
        return None

    def evaluate_seed_batch(self, result: Any, eval_id: str | None = None, author: str | None = None) -> Any:
        raise NotImplementedError("this evaluator scores no seed batches (evaluate_seed_batch)")

    def get_progress_records(self, **_: Any) -> list[dict[str, Any]]:
        return []

    def evaluate_submission_with_formatting(
        self, result: Any, eval_id: str | None = None, author: str | None = None
    ) -> tuple:
        """evaluate_submission, with each formatted metric of a dict of details as (text, raw value)."""
        answer = tuple(self.evaluate_submission(result, eval_id, author))
        return (*answer[:2], self._format_secondary_metrics(answer[2]), *answer[3:])

    def _format_secondary_metrics(self, details: Any) -> Any:
        formats = self.get_secondary_metrics_format()
        if not formats or not isinstance(details, dict):
            return details
        shown: dict[str, Any] = {"Message": details.get("Message", "")}
        for name, value in details.items():
            if name == "Message":
                continue
            if name not in formats:
                shown[name] = value
                continue
            spec = formats[name]
            try:
                text = str(value) if spec is None else format(value, spec)
            except (TypeError, ValueError):
                text = str(value)
            shown[name] = (text, value)
        return shown
