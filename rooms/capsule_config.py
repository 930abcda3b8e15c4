"""The capsule rooms' config section: the limits the four of them share."""

from __future__ import annotations

from pydantic import Field

from station.core.config import Section, config_section


@config_section("capsules")
class CapsulesConfig(Section):
    """Limits shared by the four capsule rooms (private and public memory, archive, mail)."""

    page_size: int = Field(10, ge=1, le=100)
    max_range: int = Field(100, ge=1, le=10_000, description="most ids one read/preview/pin may name")
    max_title_chars: int = Field(200, ge=10, le=2000)
    max_abstract_words: int = Field(500, ge=10)
    max_message_words: int = Field(20_000, ge=10, description="a body or reply (archive: archive.max_words)")
    max_message_chars: int = Field(200_000, ge=100)
    max_tags: int = Field(10, ge=0, le=100)
    max_recipients: int = Field(50, ge=1)
