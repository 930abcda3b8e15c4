"""The study's tables, column by column: the contract between the code that builds them, the code
that measures them, the files `station study` writes and docs/study.md (a test holds the docs to it).

Each table is a list of (column, dtype, meaning). dtypes are pandas': "int64", "Int64" (an integer
that may be missing), "float64", "string", "boolean".

Identities: an agent is a life, that is a session (a guest and the agent it ascended as share one);
`agent` columns hold the session's latest name, which is unique. Two participants are not agents:
"Archive Review System" (the reviewer) and "System" (the task baselines); their session is missing.
"""

from __future__ import annotations

Column = tuple[str, str, str]

LIVES: list[Column] = [
    ("session", "int64", "the life's id (turns.session)"),
    ("agent", "string", "its latest name (a guest that ascended is named by the agent it became)"),
    ("names", "string", "every name it had, oldest first, joined by ' > '"),
    ("lineage", "string", "its lineage (missing for a guest that never ascended)"),
    ("generation", "Int64", "its generation in the lineage (1 founded it; missing for a guest)"),
    ("ancestor", "string", "the agent of the previous generation it inherited from (missing for a founder)"),
    ("model", "string", "the model configured for it"),
    ("kind", "string", "guest (never ascended) or recursive"),
    ("birth_tick", "int64", "tick it was spawned"),
    ("ascend_tick", "Int64", "tick it ascended (missing: never did)"),
    ("end_tick", "Int64", "tick its life ended (missing: still alive at the last tick)"),
    ("end_cause", "string", "why it ended, as the station recorded it (missing: alive)"),
    ("ticks_alive", "int64", "end_tick (or the last tick) minus birth_tick, plus one"),
    ("turns", "int64", "turns it took"),
    ("rooms_visited", "int64", "distinct rooms it took a turn in"),
    ("input_tokens", "int64", "input tokens of its own model calls"),
    ("output_tokens", "int64", "output tokens of its own model calls"),
    ("cost_usd", "float64", "dollars of its own model calls"),
]

SPEND: list[Column] = [
    ("role", "string", "agent (every agent's turns together), reviewer, grader, debugger, ... : who made the calls"),
    ("tick", "Int64", "the tick of the calls: one row per role and tick (missing: calls outside any tick)"),
    ("calls", "int64", "model calls"),
    ("input_tokens", "int64", "input tokens"),
    ("output_tokens", "int64", "output tokens"),
    ("cost_usd", "float64", "dollars"),
]

EDGE_KINDS = ("mail", "reply", "mention", "common", "review", "citation", "built_on", "read", "inheritance")

EDGES: list[Column] = [
    ("tick", "int64", "tick of the act"),
    ("kind", "string", "one of: " + ", ".join(EDGE_KINDS)),
    ("source", "string", "the agent who acted (wrote, cited, read, reviewed, inherited from: see docs/study.md)"),
    ("target", "string", "the agent acted towards"),
    ("source_session", "Int64", "the source's session (missing for the reviewer and System)"),
    ("target_session", "Int64", "the target's session (missing for the reviewer and System)"),
    ("source_lineage", "string", "the source's lineage at the act (missing: a guest, the reviewer, System)"),
    ("target_lineage", "string", "the target's lineage at the act"),
    (
        "record",
        "string",
        "the record that holds the act: mail/N#k, forum/N#k, paper/N, paper/N#k, common/N, "
        "evaluation/N, note/LINEAGE/N: the viewer links it",
    ),
    ("detail", "string", "what the record names: the cited evaluation or paper, how a parent was found, ..."),
]

EVALUATIONS: list[Column] = [
    ("id", "int64", "evaluation id"),
    ("task", "string", "task id"),
    ("author", "string", "the author's agent name (System for a baseline)"),
    ("session", "Int64", "the author's session"),
    ("lineage", "string", "the author's lineage when it submitted"),
    ("tick", "int64", "submission tick"),
    ("finished_tick", "Int64", "tick its result was delivered"),
    ("status", "string", "queued, finished, failed, timed_out, scorer_failed, system_failed"),
    ("score", "float64", "the station's score, higher is better (missing unless finished with success)"),
    ("parent", "Int64", "the evaluation it built on (missing: none found)"),
    (
        "parent_how",
        "string",
        "declared (its title or abstract names it) or detected (most similar code the author could see); missing: none",
    ),
    ("parent_author", "string", "the parent's author"),
    ("parent_lineage", "string", "the parent's lineage"),
    ("best_visible", "float64", "the best score of the task the author could see when it submitted"),
    ("improvement", "float64", "score minus best_visible (missing when either is)"),
    ("new_best", "boolean", "it beat every earlier delivered score of its task when delivered"),
]

TEXTS: list[Column] = [
    ("record", "string", "the record (as in edges.record)"),
    ("kind", "string", "paper, forum, mail, note, common, evaluation (an evaluation's title and abstract)"),
    ("tick", "int64", "tick it was written"),
    ("author", "string", "its author's agent name"),
    ("session", "Int64", "its author's session"),
    ("lineage", "string", "its author's lineage"),
    ("title", "string", "its title (missing for a message without one)"),
    ("text", "string", "its text"),
]

TABLES: dict[str, list[Column]] = {
    "lives": LIVES,
    "spend": SPEND,
    "edges": EDGES,
    "evaluations": EVALUATIONS,
    "texts": TEXTS,
}

# What the metrics make of those tables (station/study/network.py, ideas.py, diversity.py, lineages.py).
# A window is `window` ticks wide; windows start at tick 1 (1..w, w+1..2w, ...), the last one may be shorter.

NETWORK: list[Column] = [
    ("window_start", "int64", "first tick of the window"),
    ("window_end", "int64", "last tick of the window"),
    ("nodes", "int64", "agents with an edge in the window"),
    ("edges", "int64", "distinct directed agent pairs with an edge in the window"),
    ("acts", "int64", "edge rows (acts) in the window"),
    ("density", "float64", "edges / (nodes * (nodes - 1))"),
    ("reciprocity", "float64", "share of edges whose reverse is also an edge"),
    ("mean_degree_centrality", "float64", "mean over nodes of (in + out distinct neighbours) / (nodes - 1)"),
    ("max_betweenness", "float64", "the highest normalised betweenness centrality"),
    ("communities", "int64", "communities found by Louvain (seeded) on the undirected graph"),
    ("modularity", "float64", "modularity of that partition"),
    (
        "cross_lineage_share",
        "float64",
        "share of acts between agents of two different lineages, among acts whose both ends have a lineage",
    ),
]

CENTRALITY: list[Column] = [
    ("window_start", "int64", "first tick of the window"),
    ("agent", "string", "the agent"),
    ("lineage", "string", "its lineage"),
    ("in_degree", "int64", "distinct agents with an edge to it"),
    ("out_degree", "int64", "distinct agents it has an edge to"),
    ("degree_centrality", "float64", "(in_degree + out_degree) / (nodes - 1)"),
    ("betweenness", "float64", "normalised betweenness centrality (directed)"),
    ("community", "int64", "its community (numbered by size, largest 0)"),
]

IDEA_TREE: list[Column] = [
    ("id", "int64", "evaluation id"),
    ("parent", "Int64", "the evaluation it built on"),
    ("root", "int64", "the first ancestor: an evaluation that built on none"),
    ("depth", "int64", "steps from the root (a root is 0)"),
    ("descendants", "int64", "evaluations that built on it, directly or not"),
    ("cross_lineage", "boolean", "its parent's lineage differs from its own"),
]

CITATIONS: list[Column] = [
    ("record", "string", "the cited paper (paper/N) or evaluation (evaluation/N)"),
    ("author", "string", "its author"),
    ("lineage", "string", "its author's lineage"),
    ("published_tick", "int64", "tick it was published (a paper) or delivered (an evaluation)"),
    ("citations", "int64", "citation edges naming it, from other agents"),
    ("first_cited_tick", "Int64", "tick of the first of them (missing: never cited)"),
    ("delay", "Int64", "first_cited_tick - published_tick"),
]

DIVERSITY: list[Column] = [
    ("window_start", "int64", "first tick of the window"),
    ("window_end", "int64", "last tick of the window"),
    ("texts", "int64", "texts written in the window"),
    ("mean_similarity", "float64", "mean cosine similarity of TF-IDF vectors over pairs of those texts"),
    ("diversity", "float64", "1 - mean_similarity"),
    ("directions", "int64", "distinct research directions (clusters) among those texts"),
]

DIRECTIONS: list[Column] = [
    ("direction", "int64", "cluster number (largest 0)"),
    ("terms", "string", "its top TF-IDF terms, joined by ', '"),
    ("texts", "int64", "texts in it"),
    ("authors", "int64", "distinct authors of them"),
    ("first_tick", "int64", "tick of its first text"),
    ("last_tick", "int64", "tick of its last text"),
]

LINEAGES: list[Column] = [
    ("lineage", "string", "the lineage"),
    ("founded_tick", "int64", "birth tick of its founder"),
    ("generations", "int64", "lives in it (each generation is one life)"),
    ("heirs", "int64", "lives that inherited it (generations - 1): its offspring"),
    ("share_of_lives", "float64", "its lives / every recursive life of the station"),
    ("mean_ticks_alive", "float64", "mean lifetime of its lives"),
    ("evaluations", "int64", "evaluations its lives submitted"),
    ("scored", "int64", "of them, finished with a score"),
    ("best_score", "float64", "its best score"),
    ("mean_score", "float64", "mean of its scores"),
    ("new_bests", "int64", "its evaluations that set a new best of their task"),
    ("papers", "int64", "papers of it published"),
    ("cost_usd", "float64", "dollars its lives spent"),
]

COST: list[Column] = [
    ("window_start", "int64", "first tick of the window"),
    ("window_end", "int64", "last tick of the window"),
    ("cost_usd", "float64", "dollars spent by every role in the window"),
    ("tokens", "int64", "input plus output tokens in the window"),
    ("best_score", "float64", "the station's best score at the window's end (first task)"),
    ("progress", "float64", "best_score minus the best before the window"),
    ("cost_per_progress", "float64", "cost_usd / progress (missing when progress is 0)"),
]

SUMMARY: list[Column] = [
    ("metric", "string", "the metric's name"),
    ("value", "float64", "its value over the whole station"),
    ("meaning", "string", "what it is, in a line"),
]

METRIC_TABLES: dict[str, list[Column]] = {
    "network": NETWORK,
    "centrality": CENTRALITY,
    "idea_tree": IDEA_TREE,
    "citations": CITATIONS,
    "diversity": DIVERSITY,
    "directions": DIRECTIONS,
    "lineages": LINEAGES,
    "cost": COST,
    "summary": SUMMARY,
}
