"""The Test Chamber's config section: the grader's model and attempts."""

from __future__ import annotations

from pydantic import Field

from station.core.config import ModelConfig, Section, config_section


@config_section("grading")
class GradingConfig(Section):
    model: ModelConfig = Field(default_factory=lambda: ModelConfig(name="scripted-grader"))
    max_attempts: int = Field(3, ge=1, le=20, description="grader calls before giving up")
    show_criteria: bool = True

    def models(self) -> list[ModelConfig]:
        return [self.model]
