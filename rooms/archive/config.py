"""The Archive's config sections: `archive` (submissions and surveys) and `reviewer` (the peer review)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from station.core.config import ModelConfig, Section, config_section


class SurveyConfig(Section):
    """The Archive Surveyor: a tool-using model that answers a mature agent's `survey` with a cited report."""

    enabled: bool = Field(False, description="offer the `survey` action in the Archive")
    model: ModelConfig = Field(default_factory=lambda: ModelConfig(name="scripted-surveyor", temperature=0.3))
    wait_ticks: int = Field(
        2, ge=1, description="the tick waits for surveys this many ticks old (counting the request tick)"
    )
    max_turns: int = Field(30, ge=2, le=200, description="model calls per survey before it is given up")
    min_words: int = Field(1000, ge=1, description="the report's least length in words")
    max_words: int = Field(5000, ge=1, description="the report's greatest length in words")
    max_prompt_chars: int = Field(4000, ge=50, le=50_000, description="the longest `prompt` an agent may send")

    @model_validator(mode="after")
    def _bounds_in_order(self) -> SurveyConfig:
        if self.min_words > self.max_words:
            raise ValueError("min_words must not exceed max_words")
        return self


@config_section("archive")
class ArchiveConfig(Section):
    review: Literal["auto", "none"] = Field("auto", description="auto: papers are peer-reviewed first")
    cooldown_ticks: int = Field(20, ge=0, description="ticks between one agent's submissions; 0 disables")
    max_words: int = Field(20_000, gt=0)
    holiday_mode: bool = Field(False, description="no submissions on ticks ending in 9 or 0")
    survey: SurveyConfig = Field(default_factory=SurveyConfig)

    def models(self) -> list[ModelConfig]:
        return [self.survey.model] if self.survey.enabled else []


@config_section("reviewer")
class ReviewerConfig(Section):
    model: ModelConfig = Field(
        default_factory=lambda: ModelConfig(name="scripted-reviewer", temperature=0.3, max_output_tokens=20_000)
    )
    pass_threshold: int = Field(6, ge=1, le=10, description="accept when score >= this")
    max_attempts: int = Field(3, ge=1, le=20, description="reviewer calls per paper before giving up")
    hold_tick: bool = Field(True, description="the next tick starts only when every pending paper is reviewed")
    extra_fields: list[str] = Field(default_factory=list, description="extra YAML fields the verdict must carry")
    history_max: int = Field(15, ge=2, description="reviews kept in the reviewer's dialogue before pruning")
    history_keep: int = Field(10, ge=1)

    @model_validator(mode="after")
    def _keep_below_max(self) -> ReviewerConfig:
        if self.history_keep >= self.history_max:
            raise ValueError("history_keep must be smaller than history_max")
        return self

    def models(self) -> list[ModelConfig]:
        return [self.model]
