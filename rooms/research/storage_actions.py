"""The Research Counter's `storage` action and its views: the shared area, each lineage's own
area, and what an immature agent may read of other lineages' (spec research §2.8)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rooms.research.config import ResearchConfig
from station.core.agents import Agent
from station.core.context import Context
from station.core.room import Outcome, action
from station.core.run_types import RunSpec
from station.executors.shares import held as held_in

from . import storage as rs
from .params import StorageParams
from .text import fence

STORAGE_REQUESTS = 5  # storage lists, and reads, shown per view
STORAGE_USAGE = (
    "Usage: storage info | storage list <path> [page] | storage read <path> | storage write <path> "
    "(with a YAML `content`) | storage delete <path>. Paths start with an area: shared/, system/, "
    "lineage/ (yours) or a lineage name."
)


class StorageActions:
    """Mixed into ResearchCounter; uses its visibility rule (`sees_all`) and `storage_root`."""

    if TYPE_CHECKING:  # provided by the room and its leaderboard

        def sees_all(self, ctx: Context, agent: Agent) -> bool: ...
        def storage_root(self, ctx: Context) -> Any: ...
        def state(self, agent: Agent) -> dict[str, Any]: ...

    # -- storage ----------------------------------------------------------------------------------------
    def _own(self, agent: Agent) -> str | None:
        return agent.lineage.lower() if agent.lineage else None

    def may_read(self, ctx: Context, agent: Agent, loc: rs.Location) -> str | None:
        if loc.area != rs.LINEAGE or loc.lineage == self._own(agent):
            return None
        return self.may_read_others(ctx, agent)

    def may_read_others(self, ctx: Context, agent: Agent) -> str | None:
        """Why the agent may not read other lineages' storage, or None (the same rule as the leaderboard's)."""
        stand = self._others_stand(ctx, agent)
        if stand == "closed":
            return "other lineages' storage is closed in this station"
        if stand == "immature":
            return (
                f"other lineages' storage opens to you when you are mature (age {ctx.config.lifecycle.maturity_ticks})"
            )
        return None

    def _others_stand(self, ctx: Context, agent: Agent) -> str:
        """'supervisor', 'closed' (by the station's flag), 'immature' or 'open': where the agent stands
        toward other lineages' storage. The flag binds everyone but supervisors, who review all lineages."""
        if agent.role == "supervisor":
            return "supervisor"
        if not ctx.config.section(ResearchConfig).cross_lineage_storage:
            return "closed"
        return "open" if self.sees_all(ctx, agent) else "immature"

    def may_write(self, ctx: Context, agent: Agent, loc: rs.Location, verb: str) -> str | None:
        if loc.area is None or not loc.parts:
            return f"name the file to {verb}, e.g. shared/notes.md or lineage/helpers.py"
        if loc.area == rs.SYSTEM:
            return "system storage is read-only"
        if loc.area == rs.LINEAGE and loc.lineage != self._own(agent):
            return f"you may {verb} only in shared/ and in your own lineage's folder"
        return None

    @action("storage", params=StorageParams, yaml_required=False)
    def storage(self, ctx: Context, agent: Agent, args: str | None, p: StorageParams | None) -> Outcome:
        """The `storage` action's operations (info, list, read, write, delete): the operation word,
        then its path; each operation checks its own access."""
        op, _, rest = (args or "").strip().partition(" ")
        op, rest = op.lower(), rest.strip()
        if op not in ("info", "list", "read", "write", "delete"):
            return Outcome([STORAGE_USAGE])
        view = self.state(agent).setdefault("storage_view", {})
        if op == "info":
            view["info"] = True
            return Outcome(["Storage information will be shown in the room view next turn."])
        page = 1
        if op == "list":
            words = rest.split()
            if len(words) >= 2 and words[-1].isdigit():
                if len(words[-1]) > 6 or int(words[-1]) < 1:
                    return Outcome(["Storage list refused: the page is a number from 1."])
                page, rest = int(words[-1]), rest[: rest.rstrip().rfind(words[-1])].strip()
        elif not rest:
            return Outcome([f"Storage {op} needs a path, e.g. storage {op} shared/notes.md."])
        try:
            loc = rs.parse_path(rest, agent.lineage)
        except rs.StorageError as err:
            return Outcome([f"Storage {op} refused: {err}."])
        if op in ("list", "read"):
            return self._ask_to_show(ctx, agent, op, rest, loc, page, view)
        problem = self.may_write(ctx, agent, loc, op)
        if problem:
            return Outcome([f"Storage {op} refused: {problem}."])
        if op == "delete":
            try:
                rs.delete_file(self.storage_root(ctx), loc)
            except rs.StorageError as err:
                return Outcome([f"Storage delete refused: {err}."])
            return Outcome([f"Deleted {loc.display}."])
        return self._write(ctx, loc, p.content if p is not None else None)

    def _ask_to_show(
        self, ctx: Context, agent: Agent, op: str, rest: str, loc: rs.Location, page: int, view: dict[str, Any]
    ) -> Outcome:
        """A list or read: checked now, shown in the room view next turn (at most STORAGE_REQUESTS of each)."""
        problem = self.may_read(ctx, agent, loc)
        if problem is None and op == "read" and (loc.area is None or not loc.parts):
            problem = "name a file to read, e.g. shared/notes.md"
        if problem is None:
            try:
                rs.contained(self.storage_root(ctx), loc)
            except rs.StorageError as err:
                problem = str(err)
        if problem:
            return Outcome([f"Storage {op} refused: {problem}."])
        pending = view.setdefault("lists" if op == "list" else "reads", [])
        if len(pending) >= STORAGE_REQUESTS:
            return Outcome(
                [f"Storage {op} skipped: at most {STORAGE_REQUESTS} per turn are shown; ask again next turn."]
            )
        pending.append([rest, page] if op == "list" else rest)
        what = (
            f"The listing of {loc.display}" + (f" (page {page})" if page > 1 else "")
            if op == "list"
            else f"The content of {loc.display}"
        )
        return Outcome([f"{what} will be shown in the room view next turn."])

    def _write(self, ctx: Context, loc: rs.Location, content: object) -> Outcome:
        if content is None:
            return Outcome([f"Storage write needs a ```yaml block with `content:` (the text of {loc.display})."])
        if isinstance(content, (bytes, bytearray)):
            return Outcome(["Storage write refused: binary content cannot be stored; write text."])
        if not isinstance(content, str) or not content:
            return Outcome(["Storage write refused: content must be non-empty text (use a `|` block)."])
        if "\x00" in content:
            return Outcome(["Storage write refused: the content contains NUL characters."])
        cap = ctx.config.section(ResearchConfig).storage_write_max_chars
        if len(content) > cap:
            return Outcome(
                [
                    f"Storage write refused: the content is {len(content):,} characters long; "
                    f"at most {cap:,} are allowed."
                ]
            )
        try:
            created = rs.write_text(self.storage_root(ctx), loc, content)
        except rs.StorageError as err:
            return Outcome([f"Storage write refused: {err}."])
        size = rs.human_size(len(content.encode("utf-8")))
        return Outcome([f"{'Created' if created else 'Overwrote'} {loc.display} ({size})."])

    def _storage_view(self, ctx: Context, agent: Agent) -> str:
        """The storage sections asked for last turn, shown once. What they show comes from the disk, which
        running code also changes, so it is a recorded input: a replayed station shows the same text."""
        state = self.state(agent)
        view = state.pop("storage_view", None)
        if not isinstance(view, dict):
            return ""
        count = int(state.get("storage_views", 0)) + 1
        state["storage_views"] = count
        payload = ctx.obtain(
            f"research-storage/{agent.session}/{count}",
            "research_storage",
            agent.name,
            lambda: {"text": self._storage_sections(ctx, agent, view)},
        )
        return str(payload.get("text", ""))

    def _storage_sections(self, ctx: Context, agent: Agent, view: dict[str, Any]) -> str:
        parts = []
        if view.get("info"):
            parts.append(self._storage_info(ctx, agent))
        if view.get("lists"):
            parts.append(
                "**File Listings**\n\n"
                + "\n\n".join(self._storage_listing(ctx, agent, str(path), int(page)) for path, page in view["lists"])
            )
        if view.get("reads"):
            parts.append(
                "**Read Contents**\n\n"
                + "\n\n".join(self._storage_read(ctx, agent, str(path)) for path in view["reads"])
            )
        return "\n\n".join(parts)

    def _storage_info(self, ctx: Context, agent: Agent) -> str:
        root = self.storage_root(ctx)
        own = self._own(agent)
        areas = [
            ("shared", rs.Location(rs.SHARED), "`storage/shared`", "list, read, write, delete"),
            ("system", rs.Location(rs.SYSTEM), "`storage/system`", "list, read"),
        ]
        if own:
            areas.append(
                (
                    f"{own} (your lineage)",
                    rs.Location(rs.LINEAGE, own),
                    f"`storage/{own}` or `storage/lineage`",
                    "list, read, write, delete",
                )
            )
        lines = [
            "**Storage Information**",
            "",
            "| Area | Path for your code | Files | Size | Actions |",
            "|---|---|---|---|---|",
        ]
        for label, loc, path, rights in areas:
            count, size, complete = rs.area_usage(root, loc)
            lines.append(f"| {label} | {path} | {count}{'' if complete else '+'} | {rs.human_size(size)} | {rights} |")
        lines += ["", self._share_line(ctx, agent)]
        rules = f"research_storage_rules_{self._others_stand(ctx, agent)}"
        lines += ["", ctx.texts.render(rules), "", ctx.texts.render("research_storage_code_example")]
        return "\n".join(lines)

    def _share_line(self, ctx: Context, agent: Agent) -> str:
        """What the agent's runs hold in shared/ (the station's ledger, as the last run's end left it)
        and how much they may: a run that pushes past the share fails and its writes are removed."""
        owner = rs.share_owner(agent.lineage, agent.name)
        held = held_in(self.storage_root(ctx) / rs.SHARED).get(owner, 0)
        share = ctx.config.section(ResearchConfig).storage_share
        whose = "your lineage's" if agent.lineage else "your"
        return (
            f"Shared storage held by {whose} runs: {rs.human_size(held)}, of a share of {share:.0%} of a task's "
            f"storage limit ({rs.human_size(int(share * (RunSpec.max_storage_mb << 20)))} for most tasks). A run "
            "that writes past the share fails, and what it wrote to shared/ is removed."
        )

    def _storage_listing(self, ctx: Context, agent: Agent, path: str, page: int) -> str:
        root = self.storage_root(ctx)
        try:
            loc = rs.parse_path(path, agent.lineage)
            problem = self.may_read(ctx, agent, loc)
            if problem:
                raise rs.StorageError(problem)
            if loc.area is None:
                return self._area_overview(ctx, agent)
            listing = rs.list_files(root, loc)
        except rs.StorageError as err:
            return f"`{path[:200]}`: {err}."
        if listing is None or not listing.files:
            return f"`{loc.display}`: No files found."
        total = len(listing.files)
        pages = -(-total // rs.LIST_PAGE_SIZE)
        if page > pages:
            return f"`{loc.display}` has {pages} page(s) of files; page {page} does not exist."
        size = rs.human_size(sum(s for _, s in listing.files))
        more = "" if listing.complete else f" (the listing stops after {rs.MAX_WALK:,} files)"
        lines = [f"`{loc.display}` (page {page} of {pages}): {total:,} file(s), {size} in all{more}"]
        start = (page - 1) * rs.LIST_PAGE_SIZE
        lines += [f"- {name} ({rs.human_size(s)})" for name, s in listing.files[start : start + rs.LIST_PAGE_SIZE]]
        if page < pages:
            lines.append(f"Next page: `storage list {loc.display} {page + 1}`")
        return "\n".join(lines)

    def _area_overview(self, ctx: Context, agent: Agent) -> str:
        own = self._own(agent)
        lines = [
            "`storage/` holds these areas:",
            "- `shared/`: everyone reads and writes",
            "- `system/`: task files, read-only",
        ]
        if own:
            lines.append(f"- `{own}/` (also `lineage/`): your lineage's folder")
        if self.may_read_others(ctx, agent) is None:
            others = [n for n in rs.lineage_dirs(self.storage_root(ctx)) if n != own]
            if others:
                lines.append("- other lineages (read-only): " + ", ".join(f"`{n}/`" for n in others))
        return "\n".join(lines)

    def _storage_read(self, ctx: Context, agent: Agent, path: str) -> str:
        limit = ctx.config.section(ResearchConfig).storage_read_max_chars
        try:
            loc = rs.parse_path(path, agent.lineage)
            problem = self.may_read(ctx, agent, loc)
            if problem:
                raise rs.StorageError(problem)
            result = rs.read_text(self.storage_root(ctx), loc, limit)
        except rs.StorageError as err:
            return f"`{path[:200]}`: {err}."
        note = f"\n(Only the first {limit:,} characters are shown.)" if result.truncated else ""
        return f"`{loc.display}` ({rs.human_size(result.size)}):\n{fence(result.text)}{note}"
