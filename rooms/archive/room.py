"""Archive Room: peer-reviewed papers (spec capsules §6.3, with the clean fixes of §12).

With `archive.review: auto` a paper is not published when written: it becomes a submission
that the reviewer hook judges; only accepted papers appear here, with the review appended.
The cooldown counts every paper an agent submitted that is pending or accepted, deleted or
not, so neither queueing several papers nor deleting one dodges it. Published papers are
final: nobody edits them; other lineages may reply to discuss them. With `archive.survey`
enabled, mature agents may also ask the Archive Surveyor for a cited survey (`survey`;
survey_store.py holds the request's rules, surveyor.py the worker that writes it).
"""

from __future__ import annotations

import json
from typing import Any

from rooms.archive.config import ArchiveConfig, ReviewerConfig
from rooms.archive.events import PaperSubmitted
from station.core.agents import Agent
from station.core.context import Context
from station.core.room import Outcome, action, register_room

from .. import capsule_store as cs
from ..capsule_params import Limits, PaperParams
from ..capsule_store import Author, Capsule, Capsules
from ..capsules import CapsuleRoom
from . import survey_store
from .reviewer import Reviewer
from .survey_store import SurveyParams
from .surveyor import Surveyor

REVIEWER = Author("Archive Review System", None, "System", 0)
HIGH_QUALITY_SCORE = 8


@register_room
class ArchiveRoom(CapsuleRoom):
    short, name = "archive", "Archive Room"
    lobby_order = 60
    maturity_gated = True
    required = ("title", "abstract", "content")
    empty_listing = "No papers have been published yet."
    update_notices = True

    def hooks(self, config: Any) -> list[Any]:
        return [Reviewer(self), Surveyor()]

    def help_values(self, ctx: Context) -> dict[str, Any]:
        survey = ctx.config.section(ArchiveConfig).survey
        return {
            "pass_threshold": ctx.config.section(ReviewerConfig).pass_threshold,
            "cooldown_ticks": ctx.config.section(ArchiveConfig).cooldown_ticks,
            "max_words": ctx.config.section(ArchiveConfig).max_words,
            "survey_help": ctx.texts.render(
                "survey_help",
                survey_min_words=survey.min_words,
                survey_max_words=survey.max_words,
                survey_prompt_chars=survey.max_prompt_chars,
            )
            if survey.enabled
            else "",
        }

    def unoffered(self, ctx: Context) -> frozenset[str]:
        return frozenset() if ctx.config.section(ArchiveConfig).survey.enabled else frozenset({"survey"})

    def header(self, ctx: Context, agent: Agent) -> str:
        return ctx.texts.render("survey_header") if ctx.config.section(ArchiveConfig).survey.enabled else ""

    def limits(self, ctx: Context) -> Limits:
        return Limits(ctx, max_words=ctx.config.section(ArchiveConfig).max_words)

    # -- submitting -----------------------------------------------------------------------
    @action("create", params=PaperParams)
    def create(self, ctx: Context, agent: Agent, args: str | None, p: PaperParams) -> Outcome:
        cfg = ctx.config.section(ArchiveConfig)
        problem = (
            self.may_create(ctx, agent)
            or self._holiday(ctx)
            or self._cooldown(ctx, agent)
            or self._source_private(ctx, agent, p)
        )
        if problem:
            return Outcome([f"Paper not submitted: {problem}."])
        if cfg.review == "none":
            return self.create_capsule(ctx, agent, p)
        missing = self.missing(p)
        if missing:
            return Outcome([f"Paper not submitted: missing or empty field(s): {', '.join(missing)}."])
        tags, problem = self.check_fields(ctx, p)
        if problem:
            return Outcome([f"Paper not submitted: {problem}."])
        cur = ctx.store.execute(
            "INSERT INTO paper_submissions(tick, agent, session, lineage, generation, title, tags, abstract, content)"
            " VALUES(?,?,?,?,?,?,?,?,?)",
            (
                ctx.tick,
                agent.name,
                agent.session,
                agent.lineage,
                agent.generation,
                (p.title or "").strip(),
                json.dumps(tags),
                (p.abstract or "").strip(),
                p.content,
            ),
        )
        ctx.emit(PaperSubmitted(int(cur.lastrowid or 0)), agent.name)
        return Outcome(
            [
                f"Paper '{(p.title or '').strip()}' submitted for review (submission {cur.lastrowid}). You will be "
                f"told the verdict; it is published if it scores at least "
                f"{ctx.config.section(ReviewerConfig).pass_threshold}/10."
            ]
        )

    # -- surveys ---------------------------------------------------------------------------
    @action("survey", params=SurveyParams)
    def survey(self, ctx: Context, agent: Agent, args: str | None, p: SurveyParams) -> Outcome:
        problem = survey_store.refusal(ctx, agent, p)
        if problem:
            return Outcome([f"Survey not requested: {problem}."])
        number = survey_store.request(ctx, agent, p.prompt.strip())
        wait = ctx.config.section(ArchiveConfig).survey.wait_ticks
        return Outcome([ctx.texts.render("survey_requested", number=number, wait_ticks=wait)])

    def after_create(self, ctx: Context, agent: Agent, capsule: Capsule) -> list[str]:
        """Published directly (review off): recorded as an accepted submission and announced."""
        body = Capsules(ctx.store, self.short).message(capsule, 1)
        ctx.store.execute(
            "INSERT INTO paper_submissions(tick, agent, session, lineage, generation, title, tags, abstract, content,"
            " status, decided_tick, capsule_number) VALUES(?,?,?,?,?,?,?,?,?,'accepted',?,?)",
            (
                ctx.tick,
                agent.name,
                agent.session,
                agent.lineage,
                agent.generation,
                capsule.title,
                json.dumps(capsule.tags),
                capsule.abstract or "",
                body.content if body else "",
                ctx.tick,
                capsule.number,
            ),
        )
        ctx.broadcast(
            ctx.texts.render(
                "archive_new", author=agent.name, number=capsule.number, title=capsule.title, words=capsule.word_count
            ),
            "publication",
            exclude=[agent.name],
        )
        return []

    def _holiday(self, ctx: Context) -> str | None:
        if ctx.config.section(ArchiveConfig).holiday_mode and ctx.tick % 10 in (9, 0):
            return "the Archive takes no submissions on ticks ending in 9 or 0 (holiday); try again next tick"
        return None

    def _cooldown(self, ctx: Context, agent: Agent) -> str | None:
        cooldown = ctx.config.section(ArchiveConfig).cooldown_ticks
        if cooldown <= 0:
            return None
        latest = ctx.store.scalar(
            "SELECT MAX(tick) FROM paper_submissions WHERE agent=? AND status IN ('pending', 'accepted')", (agent.name,)
        )
        if latest is None or latest <= ctx.tick - cooldown:
            return None
        left = cooldown - (ctx.tick - latest)
        return (
            f"you submitted a paper at tick {latest}; the next one is possible in {left} tick(s). "
            "Keep experimenting meanwhile: a stronger paper is worth the wait"
        )

    def _source_private(self, ctx: Context, agent: Agent, p: PaperParams) -> str | None:
        """`source_private: N` takes the content from the lineage's private capsule N."""
        source = p.source_private
        if source is None:
            return None
        if p.content is not None:
            return "give either content or source_private, not both"
        if isinstance(source, bool) or not isinstance(source, (int, str)) or not str(source).strip().isdigit():
            return "source_private must be one private capsule number, e.g. source_private: 4"
        if not agent.lineage:
            return "only an agent with a lineage has private notes to draw from"
        caps = Capsules(ctx.store, "private_memory", cs.lineage_key(agent.lineage))
        capsule = caps.get(int(str(source).strip()))
        if capsule is None or capsule.deleted:
            return f"your lineage has no private capsule {source}"
        parts = [m.content.strip() for m in caps.messages(capsule) if m.content.strip()]
        if not parts:
            return f"private capsule {source} has no text"
        p.content = "\n\n".join(parts)
        return None

    # -- publishing (called by the reviewer hook) -------------------------------------------
    def publish(self, ctx: Context, submission: Any, review_text: str) -> int:
        """Publish an accepted submission under its stored author (who may have left); returns its number."""
        author = Author(submission["agent"], submission["session"], submission["lineage"], submission["generation"])
        caps = Capsules(ctx.store, self.short)
        capsule = caps.create(
            author,
            ctx.tick,
            title=submission["title"],
            content=submission["content"],
            abstract=submission["abstract"],
            tags=json.loads(submission["tags"]),
            created_tick=submission["tick"],
        )
        k = caps.add_message(capsule, REVIEWER, ctx.tick, title="Review", content=review_text)
        cs.mark_read(
            ctx.store, submission["session"], [(capsule.id, cs.WHOLE), (capsule.id, 1), (capsule.id, k)], ctx.tick
        )
        return capsule.number

    # -- rules --------------------------------------------------------------------------
    def _paper_part(self, capsule: Capsule, message: cs.Message | None) -> bool:
        return message is None or message.k == 1 or message.author == REVIEWER.name

    def may_reply(self, ctx: Context, agent: Agent, capsule: Capsule) -> str | None:
        if agent.is_guest:
            return "only recursive agents may reply to papers"
        if agent.lineage and agent.lineage == capsule.author_lineage:
            return (
                "a published paper cannot be extended by its own lineage; submit a new paper for new "
                "results (other lineages may reply to discuss it)"
            )
        return None

    def may_edit(
        self, ctx: Context, agent: Agent, capsule: Capsule, message: cs.Message | None, verb: str
    ) -> str | None:
        if self._paper_part(capsule, message) and not (verb == "delete" and message is None):
            return (
                "published papers and their reviews are final; submit a revised paper instead"
                if verb == "update"
                else "a paper's text and review cannot be deleted separately"
            )
        return super().may_edit(ctx, agent, capsule, message, verb)

    def after_reply(self, ctx: Context, agent: Agent, capsule: Capsule, k: int) -> list[str]:
        caps = Capsules(ctx.store, self.short)
        involved = {capsule.author, *(m.author for m in caps.messages(capsule))} - {agent.name, REVIEWER.name}
        told = []
        for target in (ctx.agents.get(n) for n in ctx.agents.active_names() if n in involved):
            if target is not None and ctx.is_mature(target):
                ctx.notify(
                    target,
                    ctx.texts.render(
                        "archive_reply", author=agent.name, number=capsule.number, k=k, title=capsule.title
                    ),
                    "archive",
                )
                told.append(target.name)
        return [f"Notified: {', '.join(told)}."] if told else []

    # -- what others read from the archive ------------------------------------------------
    def lineage_credits(self, ctx: Context) -> dict[str, float]:
        """One credit per accepted paper scoring 8 or more (lineage selection by evolution)."""
        rows = ctx.store.all(
            "SELECT lineage, COUNT(*) FROM paper_submissions WHERE status='accepted' AND score>=? "
            "AND lineage IS NOT NULL GROUP BY lineage",
            (HIGH_QUALITY_SCORE,),
        )
        return {r[0]: float(r[1]) for r in rows}

    def status_counts(self, ctx: Context) -> dict[str, Any]:
        counts = super().status_counts(ctx)
        rows = {r[0]: r[1] for r in ctx.store.all("SELECT status, COUNT(*) FROM paper_submissions GROUP BY status")}
        counts["papers"] = {s: rows.get(s, 0) for s in ("pending", "accepted", "rejected", "failed")}
        if ctx.config.section(ArchiveConfig).survey.enabled:
            found = {r[0]: r[1] for r in ctx.store.all("SELECT status, COUNT(*) FROM surveys GROUP BY status")}
            counts["surveys"] = {s: found.get(s, 0) for s in ("open", "delivered", "failed")}
        return counts
