#!/usr/bin/env python3
"""Engine overhead per turn with scripted agents, at 100, 1,000 and 5,000 ticks of history; capsule rooms at scale.

For each history size a demo station (5 scripted agents, short lives, so the history holds
many generations) is run to that tick; then the next 250 turns are timed one by one.
"engine" excludes the time spent inside the scripted model itself.  Prints a table.

The capsule section then fills a station (run to tick 100 first) with 10,000 capsules and
50,000 messages spread over the four capsule rooms (tags, mail memberships, per-session read
marks, pins; fixed seed), times a room listing, a tag search and a read in each room (median
and p90, each call inside a transaction that is rolled back), and times 250 turns of scripted
agents that play in the capsule rooms on that station.  Prints a second table.
Usage: scripts/bench_engine.py [--sizes 100 1000 5000] [--turns 250] [--capsules-only | --no-capsules]
       [--reps 300] [--explain]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rooms.capsule_config import CapsulesConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402

from rooms import capsule_store as cs  # noqa: E402
from rooms.archive import REVIEWER  # noqa: E402
from rooms.capsule_params import ReplyParams, UpdateParams  # noqa: E402
from station.apps.world import Station  # noqa: E402
from station.core.agents import RECURSIVE, Agent, roman  # noqa: E402
from station.core.config import load_config  # noqa: E402
from station.core.engine import Engine  # noqa: E402
from station.core.store import dumps  # noqa: E402
from station.models.scripted import LINEAGE_NAMES, ROOM_PLAYS, ScriptedModel, Situation  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STDERR = Console(stderr=True)

# -- the capsule store to build (acceptance: 10,000 capsules and 50,000 messages) -------------
CAPSULES = {"public_memory": 4000, "archive": 2000, "mail": 3000, "private_memory": 1000}
REPLIES = {"public_memory": 20_000, "archive": 6_000, "mail": 12_000, "private_memory": 2_000}  # archive: 2,000 reviews
SESSIONS = 100          # sessions that ever wrote or read (1..100)
MAIL_SESSIONS = 50      # sessions 1..50 exchange mail
LINEAGES = 20           # private memory collections
TAGS_PER_CAPSULE = (1, 1, 2, 2, 2, 3, 3, 4)
DELETED_CAPSULES = 0.02
DELETED_REPLIES = 0.01
TARGET_MS = 20.0
TURN_TARGET_MS = 5.0
SEED = 20240611
TOPICS = ["neural", "quantum", "graph", "bayesian", "evolutionary", "symbolic", "causal", "sparse", "stochastic",
          "geometric", "spectral", "adversarial", "federated", "recursive", "probabilistic", "topological",
          "combinatorial", "statistical", "distributed", "linguistic"]
KINDS = ["search", "models", "theory", "proofs", "experiments", "optimization", "dynamics", "benchmarks",
         "inference", "methods"]


# -- progress ------------------------------------------------------------------------------------
@contextmanager
def progress_bar() -> Iterator[Progress]:
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=STDERR, transient=True) as bar:
        yield bar


# -- the per-turn measurement (the foundation's table) ---------------------------------------------
class ModelClock:
    """Time spent inside ScriptedModel.complete, to subtract from a turn."""

    def __init__(self) -> None:
        self.spent = 0.0
        original = ScriptedModel.complete
        clock = self

        def timed(model, *a, **k):  # type: ignore[no-untyped-def]
            began = time.perf_counter()
            try:
                return original(model, *a, **k)
            finally:
                clock.spent += time.perf_counter() - began

        ScriptedModel.complete = timed  # type: ignore[method-assign]


def build_history(station: Station, engine: Engine, size: int, label: str) -> float:
    began = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task(f"{label}: building history (ticks)", total=size)
        while station.ctx.tick <= size:
            engine.step()
            bar.update(task, completed=min(size, station.ctx.tick - 1))
    return time.perf_counter() - began


@dataclass
class TurnStats:
    totals: list[float]
    engine: list[float]
    rooms: list[str]

    @property
    def median(self) -> float:
        return statistics.median(self.engine)

    @property
    def p90(self) -> float:
        return statistics.quantiles(self.engine, n=10)[-1]


def measure_turns(station: Station, engine: Engine, clock: ModelClock, turns: int, label: str) -> TurnStats:
    stats = TurnStats([], [], [])
    with progress_bar() as bar:
        task = bar.add_task(f"{label}: timing turns", total=turns)
        while len(stats.totals) < turns:
            clock.spent = 0.0
            t0 = time.perf_counter()
            before = station.store.scalar("SELECT MAX(id) FROM turns") or 0
            engine.step()
            elapsed = time.perf_counter() - t0
            row = station.store.one("SELECT id, room FROM turns ORDER BY id DESC LIMIT 1")
            if row is not None and row["id"] > before:  # a real turn (not the end of a tick)
                stats.totals.append(elapsed * 1000)
                stats.engine.append((elapsed - clock.spent) * 1000)
                stats.rooms.append(row["room"])
                bar.update(task, completed=len(stats.totals))
    return stats


def history_table(sizes: list[int], turns: int, clock: ModelClock, tmp: Path,
                  config_path: Path) -> dict[int, TurnStats]:
    config = load_config(config_path)
    rows, by_size = [], {}
    for size in sorted(sizes):
        station = Station.create(tmp / f"h{size}", config)
        engine = Engine(station)
        build = build_history(station, engine, size, f"{size} ticks")
        stats = measure_turns(station, engine, clock, turns, f"{size} ticks")
        stored = station.store.scalar("SELECT COUNT(*) FROM turns")
        db_mb = (Path(station.dir) / "station.db").stat().st_size / 1e6
        rows.append((size, stored, db_mb, build, stats.median, stats.p90, statistics.median(stats.totals)))
        by_size[size] = stats
        station.close()
    print("| history (ticks) | turns stored | db MB | build s | engine median ms/turn | engine p90 ms | "
          "with scripted model median ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size, stored, db_mb, build, med, p90, total in rows:
        print(f"| {size:,} | {stored:,} | {db_mb:.1f} | {build:.1f} | {med:.2f} | {p90:.2f} | {total:.2f} |")
    base = rows[0][4]
    print(f"\nratio of the largest history's median to the smallest's: {rows[-1][4] / base:.2f}x "
          "(target: within 2x; median target: under 5 ms)")
    return by_size


# -- populating the capsule store ----------------------------------------------------------------
@dataclass
class Identity:
    name: str
    session: int
    lineage: str
    generation: int


@dataclass
class Population:
    tags: list[str]
    tag_weights: list[float]
    identities: dict[int, Identity]
    lineages: list[str]
    mail_counts: Counter = field(default_factory=Counter)  # session -> live mails it may see
    capsule_ids: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)  # room -> (id, number, scope)
    max_number: dict[str, int] = field(default_factory=dict)
    capsules: int = 0
    messages: int = 0
    reads: int = 0
    seconds: float = 0.0


class Words:
    """Deterministic filler text: slices of one long stream of pseudo-words."""

    def __init__(self, rng: random.Random) -> None:
        syllables = ["ka", "lo", "mi", "ne", "ta", "ri", "so", "vu", "pe", "da", "gi", "zo", "fa", "be", "xu", "ly"]
        vocab = sorted({"".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(4000)})
        self.rng = rng
        self.stream = rng.choices(vocab, k=300_000)

    def text(self, n: int) -> str:
        start = self.rng.randrange(len(self.stream) - n)
        return " ".join(self.stream[start:start + n])

    def title(self) -> str:
        return self.text(self.rng.randint(3, 9)).capitalize()


def _identities(station: Station, rng: random.Random) -> tuple[dict[int, Identity], list[str]]:
    """Sessions 1..SESSIONS as recursive authors: the station's own agents where they exist."""
    real: dict[int, Identity] = {}
    for row in station.store.all("SELECT name, session, lineage, data FROM agents WHERE lineage IS NOT NULL "
                                 "ORDER BY session"):
        agent = Agent.from_json(row["data"])
        real[agent.session] = Identity(agent.name, agent.session, agent.lineage or "", agent.generation or 1)
    lineages = sorted({i.lineage for i in real.values()})[:LINEAGES]
    lineages += [n for n in LINEAGE_NAMES if n not in lineages][:LINEAGES - len(lineages)]
    generations = Counter(i.lineage for i in real.values())
    out = {}
    for session in range(1, SESSIONS + 1):
        if session in real:
            out[session] = real[session]
            continue
        lineage = lineages[session % LINEAGES]
        generations[lineage] += 1
        out[session] = Identity(f"{lineage} {roman(generations[lineage])}", session, lineage, generations[lineage])
    return out, lineages


def _spread(rng: random.Random, total: int, n: int, alpha: float) -> list[int]:
    """`total` items over `n` slots, heavy-tailed (a few long threads, many short ones)."""
    weights = [min(50.0, rng.paretovariate(alpha)) for _ in range(n)]
    counts = Counter(rng.choices(range(n), weights=weights, k=total))
    return [counts.get(i, 0) for i in range(n)]


def _sorted_ticks(rng: random.Random, start: int, end: int, n: int) -> list[int]:
    return sorted(rng.randint(start, max(start, end)) for _ in range(n))


def populate(station: Station, seed: int) -> Population:
    """Bulk-insert the capsule store, with every derived column as the Capsules API keeps it."""
    began = time.perf_counter()
    rng = random.Random(seed)
    store = station.store
    words = Words(rng)
    tags = [f"{topic}-{kind}" for topic in TOPICS for kind in KINDS]
    rng.shuffle(tags)
    tag_weights = [1 / (rank + 1) ** 0.8 for rank in range(len(tags))]  # Zipf-like popularity
    identities, lineages = _identities(station, rng)
    pop = Population(tags, tag_weights, identities, lineages)
    mail_weights = [0.15 + 2.5 * (i / (MAIL_SESSIONS - 1)) ** 1.5 for i in range(MAIL_SESSIONS)]  # light..busy
    mail_sessions = list(range(1, MAIL_SESSIONS + 1))
    lineage_sessions = defaultdict(list)
    for ident in identities.values():
        lineage_sessions[ident.lineage].append(ident.session)
    now = max(2, station.ctx.tick)

    # The order capsules were created in, across rooms; private notes are 50 per lineage.
    order = [room for room, n in CAPSULES.items() for _ in range(n)]
    rng.shuffle(order)
    private_scopes = [lineages[i % LINEAGES] for i in range(CAPSULES["private_memory"])]
    rng.shuffle(private_scopes)
    first_id = (store.scalar("SELECT MAX(id) FROM capsules") or 0) + 1
    next_number: dict[tuple[str, str], int] = {}
    for row in store.all("SELECT room, scope, MAX(number) FROM capsules GROUP BY room, scope"):
        next_number[(row[0], row[1])] = row[2]
    reply_budget = {room: _spread(rng, REPLIES[room] - (CAPSULES[room] if room == "archive" else 0), n, 1.3)
                    for room, n in CAPSULES.items()}
    seen_in_room: Counter = Counter()

    capsule_rows, message_rows, tag_rows, member_rows, paper_rows = [], [], [], [], []
    reads: dict[int, set[tuple[int, int]]] = defaultdict(set)  # session -> {(capsule id, k)}
    threads: dict[str, list[tuple[int, list[int], int, str]]] = defaultdict(list)  # room -> (id, ks, author, lineage)

    def pick_tags() -> list[str]:
        chosen: list[str] = []
        want = rng.choice(TAGS_PER_CAPSULE)
        while len(chosen) < want:
            tag = rng.choices(tags, weights=tag_weights)[0]
            if tag not in chosen:
                chosen.append(tag)
        return chosen

    with progress_bar() as bar:
        task = bar.add_task("capsules: generating", total=len(order))
        for index, room in enumerate(order):
            capsule_id = first_id + index
            created = 1 + index * (now - 1) // len(order)
            if room == "private_memory":
                lineage = private_scopes[seen_in_room[room]]
                scope = cs.lineage_key(lineage)
                author = identities[rng.choice(lineage_sessions[lineage])]
            elif room == "mail":
                scope = ""
                author = identities[rng.choices(mail_sessions, weights=mail_weights)[0]]
            else:
                scope = ""
                author = identities[rng.randint(1, SESSIONS)]
            n_replies = reply_budget[room][seen_in_room[room]]
            seen_in_room[room] += 1
            number = next_number.get((room, scope), 0) + 1
            next_number[(room, scope)] = number
            title = words.title()
            abstract = words.text(rng.randint(20, 60)) if room in ("public_memory", "archive") or rng.random() < 0.3 \
                else None
            capsule_tags = pick_tags()
            recipients: list[Identity] = []
            if room == "mail":
                while len(recipients) < rng.choices((1, 2, 3), weights=(6, 3, 1))[0]:
                    other = identities[rng.choices(mail_sessions, weights=mail_weights)[0]]
                    if other.session != author.session and other not in recipients:
                        recipients.append(other)
            deleted = rng.random() < DELETED_CAPSULES

            # Messages: the body (k=1), the review for a paper (k=2), then replies.
            body_words = {"public_memory": (60, 400), "archive": (200, 400), "mail": (20, 250),
                          "private_memory": (30, 300)}[room]
            msgs = [(author.name, author.session, author.lineage, author.generation, created, title,
                     words.text(int(rng.triangular(*body_words, body_words[0]))))]
            ticks = _sorted_ticks(rng, created, now, n_replies + (room == "archive"))
            if room == "archive":
                msgs.append((REVIEWER.name, None, REVIEWER.lineage, REVIEWER.generation, ticks.pop(0), "Review",
                             words.text(rng.randint(80, 250))))
            members = [author, *recipients]
            for tick in ticks:
                if room == "mail":
                    who = rng.choice(members)
                elif room == "private_memory":
                    who = identities[rng.choice(lineage_sessions[author.lineage])]
                else:
                    who = identities[rng.randint(1, SESSIONS)]
                    while room == "archive" and who.lineage == author.lineage:  # own lineage may not reply
                        who = identities[rng.randint(1, SESSIONS)]
                msgs.append((who.name, who.session, who.lineage, who.generation, tick,
                             words.title() if rng.random() < 0.2 else None,
                             words.text(int(rng.triangular(10, 250, 40)))))
            live_count = live_words = 0
            ks = []
            for k, (name, session, lin, gen, tick, mtitle, content) in enumerate(msgs, 1):
                gone = deleted or (k > (2 if room == "archive" else 1) and rng.random() < DELETED_REPLIES)
                n_words = cs.word_count(content)
                message_rows.append((capsule_id, k, name, session, lin, gen, tick, mtitle, content, n_words,
                                     int(gone)))
                if not gone:
                    live_count += 1
                    live_words += n_words
                ks.append(k)
                if session is not None:  # the writer has read what it wrote
                    reads[session].add((capsule_id, k))
                    if k == 1:
                        reads[session].add((capsule_id, cs.WHOLE))
            updated = max(m[4] for m in msgs)
            capsule_rows.append((capsule_id, room, scope, number, author.name, author.session, author.lineage,
                                 author.generation, created, updated, title, abstract, dumps(capsule_tags),
                                 dumps([r.name for r in recipients]), int(deleted), live_count, live_words))
            tag_rows += [(t.lower(), capsule_id) for t in dict.fromkeys(capsule_tags)]
            if room == "mail":
                member_rows += [(m.session, capsule_id) for m in members]
                for m in members:
                    if not deleted:
                        pop.mail_counts[m.session] += 1
                    marks = [(capsule_id, cs.WHOLE), (capsule_id, 1)] + [(capsule_id, k) for k in ks[1:]
                                                                          if rng.random() < 0.9]
                    reads[m.session].update(marks)
            if room == "archive":
                paper_rows.append((created, author.name, author.session, author.lineage, author.generation, title,
                                   dumps(capsule_tags), abstract or "", msgs[0][6], "accepted", 1,
                                   rng.randint(5, 10), "accept", msgs[1][4], number))
            threads[room].append((capsule_id, ks, author.session, author.lineage))
            pop.capsule_ids.setdefault(room, []).append((capsule_id, number, scope))
            if index % 250 == 0 or index == len(order) - 1:
                bar.update(task, completed=index + 1)

        # What else each session read: public papers and threads, its lineage's notes.
        task = bar.add_task("read marks: generating", total=SESSIONS)
        for session in range(1, SESSIONS + 1):
            share = rng.uniform(0.03, 0.25)
            for room in ("public_memory", "archive"):
                for capsule_id, ks, _, _ in threads[room]:
                    if rng.random() < share:
                        upto = len(ks) if rng.random() < 0.75 else rng.randint(1, len(ks))
                        reads[session].add((capsule_id, cs.WHOLE))
                        reads[session].update((capsule_id, k) for k in ks[:upto])
            lineage = identities[session].lineage
            for capsule_id, ks, _, owner in threads["private_memory"]:
                if owner == lineage and rng.random() < 0.6:
                    reads[session].add((capsule_id, cs.WHOLE))
                    reads[session].update((capsule_id, k) for k in ks)
            bar.update(task, completed=session)

        read_rows = sorted((s, c, k) for s, items in reads.items() for c, k in items)
        total = sum(map(len, (capsule_rows, message_rows, tag_rows, member_rows, read_rows, paper_rows)))
        task = bar.add_task("inserting rows", total=total)
        done = 0
        with store.transaction():
            for sql, rows in (
                ("INSERT INTO capsules(id, room, scope, number, author, author_session, author_lineage, "
                 "author_generation, created_tick, updated_tick, title, abstract, tags, recipients, deleted, "
                 "message_count, word_count) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", capsule_rows),
                ("INSERT INTO capsule_messages(capsule, k, author, author_session, author_lineage, "
                 "author_generation, tick, title, content, word_count, deleted) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                 message_rows),
                ("INSERT OR IGNORE INTO capsule_tags(tag, capsule) VALUES(?, ?)", tag_rows),
                ("INSERT OR IGNORE INTO capsule_members(session, capsule) VALUES(?, ?)", member_rows),
                ("INSERT OR IGNORE INTO capsule_reads(session, capsule, k) VALUES(?, ?, ?)", read_rows),
                ("INSERT INTO paper_submissions(tick, agent, session, lineage, generation, title, tags, abstract, "
                 "content, status, attempts, score, verdict, decided_tick, capsule_number) "
                 "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", paper_rows),
            ):
                for start in range(0, len(rows), 20_000):
                    store.db.executemany(sql, rows[start:start + 20_000])
                    done += len(rows[start:start + 20_000])
                    bar.update(task, completed=done)
    pop.capsules, pop.messages, pop.reads = len(capsule_rows), len(message_rows), len(read_rows)
    pop.max_number = {room: max(n for _, n, _ in ids) for room, ids in pop.capsule_ids.items()}
    check_consistency(station, rng)
    pop.seconds = time.perf_counter() - began
    return pop


def check_consistency(station: Station, rng: random.Random) -> None:
    """The derived columns equal what the Capsules API computes (its own recount, rolled back)."""
    store = station.store
    bad = store.scalar(
        "SELECT COUNT(*) FROM capsules c WHERE message_count != (SELECT COUNT(*) FROM capsule_messages "
        "WHERE capsule=c.id AND deleted=0) OR word_count != (SELECT COALESCE(SUM(word_count), 0) "
        "FROM capsule_messages WHERE capsule=c.id AND deleted=0) "
        "OR updated_tick < (SELECT MAX(tick) FROM capsule_messages WHERE capsule=c.id)")
    assert bad == 0, f"{bad} capsules with wrong derived counts"
    tagged = store.scalar("SELECT COUNT(*) FROM capsule_tags")
    listed = sum(len({t.lower() for t in cs.Capsule.from_row(r).tags})
                 for r in store.all(f"SELECT {cs.CAPSULE_COLUMNS} FROM capsules"))
    assert tagged == listed, (tagged, listed)
    ids = [r[0] for r in store.all("SELECT id FROM capsules")]
    store.db.execute("BEGIN")
    try:
        for capsule_id in rng.sample(ids, 50):
            before = dict(store.one(f"SELECT {cs.CAPSULE_COLUMNS} FROM capsules WHERE id=?", (capsule_id,)))
            cs.Capsules(store, before["room"], before["scope"])._recount(capsule_id, before["updated_tick"])
            after = dict(store.one(f"SELECT {cs.CAPSULE_COLUMNS} FROM capsules WHERE id=?", (capsule_id,)))
            assert before == after, (before, after)
    finally:
        store.db.execute("ROLLBACK")
    mismatched = store.scalar(
        "SELECT COUNT(*) FROM capsules c WHERE room='mail' AND (SELECT COUNT(*) FROM capsule_members "
        "WHERE capsule=c.id) != 1 + json_array_length(c.recipients)")
    assert mismatched == 0, f"{mismatched} mails whose members are not author + recipients"


def give_pins(station: Station, pop: Population, rng: random.Random) -> None:
    """Active agents pin a few public threads and papers (pins live in the agent record)."""
    ctx = station.ctx
    with station.store.transaction():
        for agent in ctx.agents.active():
            for room in ("public_memory", "archive"):
                numbers = rng.sample(range(1, pop.max_number[room] + 1), rng.randint(1, 4))
                agent.room_state(room)["pins"] = [cs.full_id(room, "", n) for n in numbers]
            ctx.agents.save(agent)


# -- timing single calls -------------------------------------------------------------------------
@dataclass
class Timing:
    what: str
    samples: list[float]
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p90(self) -> float:
        return statistics.quantiles(self.samples, n=10)[-1]


def timed(station: Station, what: str, reps: int, call: Callable[[int], Any], note: str = "") -> Timing:
    """Each call inside its own transaction, rolled back after (search and read write notices)."""
    db = station.store.db
    samples = []
    for i in range(reps):
        db.execute("BEGIN IMMEDIATE")
        try:
            t0 = time.perf_counter()
            call(i)
            samples.append((time.perf_counter() - t0) * 1000)
        finally:
            db.execute("ROLLBACK")
    return Timing(what, samples, note)


def reader(ident: Identity, rng: random.Random, pop: Population) -> Agent:
    """A recursive agent of that identity, with a few pins in the public rooms and one in its notes."""
    agent = Agent(name=ident.name, session=ident.session, kind=RECURSIVE, model={"name": "scripted-newcomer"},
                  birth_tick=1, position=0.0, lineage=ident.lineage, generation=ident.generation)
    for room in ("public_memory", "archive"):
        numbers = rng.sample(range(1, pop.max_number[room] + 1), rng.randint(0, 5))
        agent.room_state(room)["pins"] = [cs.full_id(room, "", n) for n in numbers]
    scope = cs.lineage_key(ident.lineage)
    agent.room_state("private_memory")["pins"] = [cs.full_id("private_memory", scope, rng.randint(1, 50))]
    return agent


def micro_benchmarks(station: Station, pop: Population, reps: int, progress: Progress) -> list[Timing]:
    ctx = station.ctx
    rng = random.Random(SEED + 1)
    page_size = ctx.config.section(CapsulesConfig).page_size
    idents = [pop.identities[s] for s in range(1, SESSIONS + 1)]
    readers = [reader(i, rng, pop) for i in idents]
    # Mail: agents with about 60 mails (the brief's case), and the busiest mailbox.
    near_60 = sorted(pop.mail_counts, key=lambda s: (abs(pop.mail_counts[s] - 60), s))[:5]
    busiest = max(pop.mail_counts, key=lambda s: pop.mail_counts[s])
    member_of: dict[int, list[int]] = defaultdict(list)
    for row in ctx.store.all("SELECT m.session, c.number FROM capsule_members m JOIN capsules c ON c.id=m.capsule "
                             "WHERE c.deleted=0 ORDER BY c.number"):
        member_of[row[0]].append(row[1])
    mailers = {s: reader(pop.identities[s], rng, pop) for s in [*near_60, busiest]}
    for s, agent in mailers.items():
        agent.room_state("mail")["pins"] = [cs.full_id("mail", "", n) for n in rng.sample(member_of[s], 2)]
    rooms = {short: ctx.room(short) for short in CAPSULES}
    tags = pop.tags

    def pick_tag(i: int) -> str:  # half as agents search (popular tags often), half uniformly
        return rng.choices(tags, weights=pop.tag_weights)[0] if i % 2 else rng.choice(tags)

    def pages(count: int) -> int:
        return max(1, -(-count // page_size))

    def render(short: str, agents: list[Agent], count_of: Callable[[Agent], int]) -> Callable[[int], Any]:
        def call(i: int) -> Any:
            agent = agents[i % len(agents)]
            agent.room_state(short)["page"] = rng.randint(1, pages(count_of(agent)))
            return rooms[short].render(ctx, agent)
        return call

    def search(short: str, agents: list[Agent]) -> Callable[[int], Any]:
        return lambda i: rooms[short].search(ctx, agents[i % len(agents)], pick_tag(i), None)

    def read(short: str, agents: list[Agent], numbers: Callable[[Agent], list[int]]) -> Callable[[int], Any]:
        def call(i: int) -> Any:
            agent = agents[i % len(agents)]
            return rooms[short].read(ctx, agent, str(rng.choice(numbers(agent))), None)
        return call

    per_lineage = Counter(scope for _, _, scope in pop.capsule_ids["private_memory"])
    near = [mailers[s] for s in near_60]
    public_n, archive_n = CAPSULES["public_memory"], CAPSULES["archive"]
    plan: list[tuple[str, Callable[[int], Any], str]] = [
        ("public_memory: listing (render)", render("public_memory", readers, lambda a: public_n),
         f"{len(readers)} agents, random page of ~{pages(public_n)}, 0-5 pins"),
        ("archive: listing (render)", render("archive", readers, lambda a: archive_n),
         f"{len(readers)} agents, random page of ~{pages(archive_n)}, 0-5 pins"),
        ("mail: listing (render), ~60 mails", render("mail", near, lambda a: len(member_of[a.session])),
         "agents with " + ", ".join(str(pop.mail_counts[s]) for s in near_60) + " mails, 2 pins, random page"),
        (f"mail: listing (render), busiest ({pop.mail_counts[busiest]} mails)",
         render("mail", [mailers[busiest]], lambda a: len(member_of[a.session])), "random page"),
        ("private_memory: listing (render)",
         render("private_memory", readers, lambda a: per_lineage[cs.lineage_key(a.lineage or "")]),
         f"{LINEAGES} lineages of ~50 notes, 1 pin, random page"),
        ("public_memory: search <tag>", search("public_memory", readers), "half Zipf-popular, half uniform tags"),
        ("archive: search <tag>", search("archive", readers), "as above"),
        ("mail: search <tag>, ~60 mails", search("mail", near), "as above"),
        ("mail: search <tag>, busiest", search("mail", [mailers[busiest]]), "as above"),
        ("private_memory: search <tag>", search("private_memory", readers), "as above"),
        ("public_memory: read N", read("public_memory", readers, lambda a: list(range(1, public_n + 1))),
         "random capsule, whole thread"),
        ("archive: read N", read("archive", readers, lambda a: list(range(1, archive_n + 1))), "as above"),
        ("mail: read N, ~60 mails", read("mail", near, lambda a: member_of[a.session]), "one of the agent's mails"),
        ("private_memory: read N", read("private_memory", readers, lambda a: list(range(1, 51))), "as above"),
    ]
    # Beyond the criterion: writes that touch the same tables (what an agent does after reading).
    by_lineage: dict[str, list[int]] = defaultdict(list)
    for row in ctx.store.all("SELECT author_lineage, number FROM capsules WHERE room='public_memory' AND deleted=0"):
        by_lineage[row[0]].append(row[1])
    editors = [a for a in readers if by_lineage.get(a.lineage or "")]
    text = " ".join(["a reply of about forty words"] * 8)

    def reply(short: str, agents: list[Agent], numbers: Callable[[Agent], list[int]]) -> Callable[[int], Any]:
        def call(i: int) -> Any:
            agent = agents[i % len(agents)]
            return rooms[short].reply(ctx, agent, str(rng.choice(numbers(agent))), ReplyParams(content=text))
        return call

    def update(i: int) -> Any:
        agent = editors[i % len(editors)]
        number = rng.choice(by_lineage[agent.lineage or ""])
        return rooms["public_memory"].update(ctx, agent, str(number), UpdateParams(content=text))

    def preview_all(i: int) -> Any:
        return rooms["public_memory"].preview(ctx, readers[i % len(readers)], "all", None)

    plan += [
        ("(extra) public_memory: reply N", reply("public_memory", readers, lambda a: list(range(1, public_n + 1))),
         "reply notices to the thread's active participants"),
        ("(extra) mail: reply N, ~60 mails", reply("mail", near, lambda a: member_of[a.session]),
         "delivered to the mail's members"),
        ("(extra) public_memory: preview all", preview_all, "the oldest 100 capsules"),
        ("(extra) public_memory: update N (content)", update,
         "by the author's lineage; earlier readers are told (update notices)"),
    ]
    results = []
    task = progress.add_task("capsule rooms: timing calls", total=len(plan))
    for what, call, note in plan:
        for _ in range(10):  # warm the page cache and the statement cache
            timed(station, what, 1, call)
        results.append(timed(station, what, reps, call, note))
        progress.advance(task)
    return results


# -- scripted plays for the capsule rooms (only where the scripted model has none yet) --------------
def register_bench_plays(pop: Population) -> list[str]:
    """Agents that visit a capsule room read, search, page or preview there."""
    added = []
    maxima = dict(pop.max_number)

    def make(short: str) -> Callable[[Situation, random.Random], list[str]]:
        def play(s: Situation, rng: random.Random) -> list[str]:
            gated = short in ("public_memory", "archive")
            if gated and "(immature)" in s.prompt:
                return []
            top = 50 if short == "private_memory" else maxima.get(short, 10)
            r = rng.random()
            if r < 0.35:
                act = f"read {rng.randint(1, top)}"
            elif r < 0.6:
                act = f"search {rng.choices(pop.tags, weights=pop.tag_weights)[0]}"
            elif r < 0.8:
                act = f"page {rng.randint(1, 5)}"
            else:
                act = f"preview {rng.randint(1, top)}"
            return [f"/execute_action{{{act}}}"]
        return play

    for short in CAPSULES:
        if short not in ROOM_PLAYS:
            ROOM_PLAYS[short] = make(short)
            added.append(short)
    return added


# -- query plans ---------------------------------------------------------------------------------
def explain(station: Station, pop: Population) -> None:
    store = station.store
    mailer = max(pop.mail_counts, key=lambda s: pop.mail_counts[s])
    tag = pop.tags[0]
    ids = ",".join(str(i) for i, _, _ in pop.capsule_ids["public_memory"][:10])
    queries = {
        "listing count (public)": ("SELECT COUNT(*) FROM capsules WHERE room=? AND scope=? AND deleted=0 "
                                   "AND number NOT IN (?,?)", ("public_memory", "", 1, 2)),
        "listing page (public)": (f"SELECT {cs.CAPSULE_COLUMNS} FROM capsules WHERE room=? AND scope=? AND deleted=0 "
                                  "AND number NOT IN (?,?) ORDER BY number DESC LIMIT ? OFFSET ?",
                                  ("public_memory", "", 1, 2, 10, 2000)),
        "listing page (mail)": (f"SELECT {cs.CAPSULE_COLUMNS} FROM capsules WHERE room=? AND scope=? AND deleted=0 "
                                "AND id IN (SELECT capsule FROM capsule_members WHERE session=?) "
                                "ORDER BY number DESC LIMIT ? OFFSET ?", ("mail", "", mailer, 10, 0)),
        "search (public)": (f"SELECT {cs.CAPSULE_COLUMNS} FROM capsules WHERE room=? AND scope=? AND deleted=0 "
                            "AND id IN (SELECT capsule FROM capsule_tags WHERE tag=?) ORDER BY number DESC LIMIT ?",
                            ("public_memory", "", tag, 50)),
        "search (mail)": (f"SELECT {cs.CAPSULE_COLUMNS} FROM capsules WHERE room=? AND scope=? AND deleted=0 "
                          "AND id IN (SELECT capsule FROM capsule_members WHERE session=?) "
                          "AND id IN (SELECT capsule FROM capsule_tags WHERE tag=?) ORDER BY number DESC LIMIT ?",
                          ("mail", "", mailer, tag, 50)),
        "preview all (public)": (f"SELECT {cs.CAPSULE_COLUMNS} FROM capsules WHERE room=? AND scope=? AND deleted=0 "
                                 "ORDER BY created_tick, number LIMIT ?", ("public_memory", "", 101)),
        "unread counts": ("SELECT m.capsule, COUNT(*) FROM capsule_messages m JOIN capsule_reads r "
                          "ON r.session=? AND r.capsule=m.capsule AND r.k=m.k "
                          f"WHERE m.deleted=0 AND m.capsule IN ({ids}) GROUP BY m.capsule", (1,)),
        "read marks of one capsule (read_ks)": ("SELECT k FROM capsule_reads WHERE session=? AND capsule=?", (1, 1)),
        "readers of an item (update notices)": ("SELECT session FROM capsule_reads WHERE capsule=? AND k=?", (1, 1)),
        "members of a mail (mail reply)": ("SELECT session FROM capsule_members WHERE capsule=?", (1,)),
    }
    print("\nQuery plans (EXPLAIN QUERY PLAN) and one timing each:")
    for label, (sql, params) in queries.items():
        plan = [r["detail"] for r in store.all("EXPLAIN QUERY PLAN " + sql, params)]
        t0 = time.perf_counter()
        for _ in range(20):
            store.all(sql, params)
        ms = (time.perf_counter() - t0) * 1000 / 20
        print(f"- {label} ({ms:.2f} ms): " + "; ".join(plan))


# -- the capsule section -------------------------------------------------------------------------
def capsule_section(args: argparse.Namespace, clock: ModelClock, tmp: Path, baseline: TurnStats) -> None:
    began = time.perf_counter()
    config = load_config(ROOT / "configs" / "demo.yaml")
    station = Station.create(tmp / "capsules", config)
    engine = Engine(station)
    history = 100
    build_history(station, engine, history, "capsule station")
    pop = populate(station, SEED)
    give_pins(station, pop, random.Random(SEED + 2))
    counts = {r[0]: r[1] for r in station.store.all("SELECT room, COUNT(*) FROM capsules GROUP BY room")}
    n_caps = sum(counts.values())
    n_msgs = station.store.scalar("SELECT COUNT(*) FROM capsule_messages")
    n_tags = station.store.scalar("SELECT COUNT(DISTINCT tag) FROM capsule_tags")
    n_reads = station.store.scalar("SELECT COUNT(*) FROM capsule_reads")
    db_mb = (Path(station.dir) / "station.db").stat().st_size / 1e6
    with progress_bar() as bar:
        timings = micro_benchmarks(station, pop, args.reps, bar)
    added = register_bench_plays(pop)
    turns = measure_turns(station, engine, clock, args.turns, "capsule station")
    capsule_turns = [ms for ms, room in zip(turns.engine, turns.rooms) if room in CAPSULES]

    print(f"\n**Capsule rooms at scale** — {n_caps:,} capsules ("
          + ", ".join(f"{counts.get(r, 0):,} {r}" for r in CAPSULES) + f"), {n_msgs:,} messages "
          f"({pop.capsules:,} and {pop.messages:,} populated, the rest written by the scripted agents in "
          f"{history} ticks), "
          f"{n_tags} tags, {n_reads:,} read marks, {len(pop.mail_counts)} mail sessions; db {db_mb:.0f} MB; "
          f"populated in {pop.seconds:.1f} s (seed {SEED}).\n")
    print("| measurement | reps | median ms | p90 ms | target | ok | workload |")
    print("|---|---:|---:|---:|---:|:-:|---|")
    for t in timings:
        ok = "yes" if t.median < TARGET_MS else "**NO**"
        print(f"| {t.what} | {len(t.samples)} | {t.median:.2f} | {t.p90:.2f} | < {TARGET_MS:.0f} | {ok} | {t.note} |")
    base = baseline.median
    ratio = turns.median / base
    ok = "yes" if turns.median <= TURN_TARGET_MS and ratio <= 2 else "**NO**"
    print(f"| engine per turn, {history}-tick station, no populated store (baseline) | {len(baseline.engine)} | "
          f"{base:.2f} | {baseline.p90:.2f} | ≤ {TURN_TARGET_MS:.0f} | "
          f"{'yes' if base <= TURN_TARGET_MS else '**NO**'} | scripted model time excluded |")
    print(f"| engine per turn, same station with the capsule store | {len(turns.engine)} | {turns.median:.2f} | "
          f"{turns.p90:.2f} | ≤ {TURN_TARGET_MS:.0f} and ≤ 2× baseline | {ok} | "
          f"{ratio:.2f}× baseline; {len(capsule_turns)} of the turns ended in a capsule room |")
    if len(capsule_turns) >= 10:
        print(f"| engine per turn, only turns ending in a capsule room | {len(capsule_turns)} | "
              f"{statistics.median(capsule_turns):.2f} | {statistics.quantiles(capsule_turns, n=10)[-1]:.2f} | "
              f"≤ {TURN_TARGET_MS:.0f} | {'yes' if statistics.median(capsule_turns) <= TURN_TARGET_MS else '**NO**'}"
              " | listing rendered in the prompt, plus the play's action |")
    if added:
        print(f"\n(The scripted model has no play for {', '.join(added)} yet: for this run the benchmark lets agents "
              "read, search, page or preview there.)")
    print(f"capsule section: {time.perf_counter() - began:.0f} s")
    if args.explain or any(t.median >= TARGET_MS for t in timings):
        explain(station, pop)
    station.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--turns", type=int, default=250)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "demo.yaml",
                    help="the station the history table builds (configs/social_demo.yaml has no research task, "
                         "so no sandboxed evaluations: 5,000 ticks build in minutes rather than hours)")
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--capsules-only", action="store_true",
                      help="run only the capsule section (it still times the 100-tick baseline)")
    only.add_argument("--no-capsules", action="store_true", help="skip the capsule section")
    ap.add_argument("--reps", type=int, default=300, help="calls timed per capsule measurement (>= 200)")
    ap.add_argument("--explain", action="store_true", help="print the query plans of the capsule queries")
    args = ap.parse_args()

    began = time.perf_counter()
    clock = ModelClock()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        by_size = {} if args.capsules_only else history_table(args.sizes, args.turns, clock, tmp, args.config)
        if not args.no_capsules:
            baseline = by_size.get(100)
            if baseline is None:  # the foundation's 100-tick figure, timed the same way
                station = Station.create(tmp / "baseline", load_config(ROOT / "configs" / "demo.yaml"))
                engine = Engine(station)
                build_history(station, engine, 100, "baseline, 100 ticks")
                baseline = measure_turns(station, engine, clock, args.turns, "baseline, 100 ticks")
                station.close()
            capsule_section(args, clock, tmp, baseline)
    print(f"\ntotal run time: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
