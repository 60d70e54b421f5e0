"""feed_items, the timelines: this module alone writes it (docs/design.md, "Tables by owner").

Every statement that inserts, moves or deletes timeline rows is built (or run) here; what to
write, and when, stays with its caller:
- ingest's batch (ingest/batch.py write): the fan-out of a batch's target records, its follows'
  backfill, its unfollows, its deleted targets and the time resync of its edited ones;
- the author fetch (tasks/authors.py fan_in): one follow's backfill;
- the first-read backfill (tasks/backfill.py bootstrap): the merged newest rows, one by one;
- the prune (tasks/prune.py): an actor's rows past the cap; an actor nobody serves any more
  loses the whole timeline (the prune sweep, and "delete my data" in personal.py).

Each is built by a `*_sql` function so the EXPLAIN guardrail (tests/test_feeds_explain.py)
plans exactly what runs. The unfollow rule (which rows leave a feed, and which follow tables can
still justify them) lives here too: it is the WHERE of the unfollow delete.
"""
from __future__ import annotations

from feather import sql
from feather.db import current_dialect
from feather.feeds.config import Feed, FeedsConfig, Target
from feather.feeds.store.schema import subject_expr


# --- the unfollow rule --------------------------------------------------------------------------

def justifying_tables(config: FeedsConfig) -> dict[str, set[str]]:
    """Target nsid -> the follow tables of every feed with that target.

    feed_items has no feed column: feeds that share a target share its rows, whichever follow
    collection put them there, so a follow in any of those tables keeps the subject's rows: a
    second follow record of the same subject (Bluesky keeps duplicates), or the same follow on
    another app's graph whose feed shows that target."""
    out: dict[str, set[str]] = {}
    for feed in config.feeds.values():
        for t in feed.targets:
            out.setdefault(t.nsid, set()).add(config.collections[feed.follow].table)
    return out


def unfollow_range(subject: str, nsid: str) -> tuple[str, str]:
    """The uri range of the subject's records of nsid: `0` is the byte after `/`, and uri
    compares byte-wise (d.byte_text)."""
    prefix = f"at://{subject}/{nsid}/"
    return prefix, prefix[:-1] + "0"


def unfollow_clause(config: FeedsConfig, follower: str, subject: str, nsid: str) -> tuple[str, tuple]:
    """One unfollow's WHERE clause: the subject's rows of nsid leave the follower's feed, unless a
    follow still justifies them: the key prefix (actor, collection), then the uri prefix among those
    rows. unfollow_sql ORs one per unfollow.

    Bounded by the follower's own feed of that collection (its cap, between prune sweeps), not by
    how much the subject ever posted or how many others follow them; each remaining-follow check
    is one probe of a follow table's (subject, did) index.

    It runs after the step's own record write, so the follow being dropped is gone (or points
    elsewhere) and any follow the check finds is another one."""
    tables = sorted(justifying_tables(config)[nsid])
    keep = "".join(f" AND NOT EXISTS (SELECT 1 FROM {t} r WHERE {subject_expr('r')} = ? AND r.did = ?)"
                   for t in tables)
    return (f"actor = ? AND collection = ? AND uri >= ? AND uri < ?{keep}",
            (follower, nsid, *unfollow_range(subject, nsid), *([subject, follower] * len(tables))))


# --- reposts ------------------------------------------------------------------------------------

def reposted_uri(record) -> str | None:
    """What a repost record reposts (its subject.uri), as feed_items.subject stores it."""
    subject = record.get("subject") if isinstance(record, dict) else None
    uri = subject.get("uri") if isinstance(subject, dict) else None
    return uri if isinstance(uri, str) and uri.startswith("at://") and len(uri) <= 1024 else None


def subject_sql(target: Target, alias: str) -> str:
    """A target record's feed_items.subject, read from its stored record in SQL (the backfills):
    the same rule as reposted_uri, so a row gets one subject whichever path wrote it."""
    if target.reposts is None:
        return "NULL"
    value = current_dialect().json_path_text(f"{alias}.record", ("subject", "uri"))
    return (f"CASE WHEN substr({value}, 1, 5) = 'at://' AND length({value}) <= 1024"
            f" THEN {value} END")


def reposted_subjects_sql():
    """Every record reposted into someone's timeline (the partial subject index, read alone)."""
    return "SELECT DISTINCT subject FROM feed_items WHERE subject IS NOT NULL", ()


def reposted_subjects() -> set[str]:
    return {row[0] for row in sql.rows(*reposted_subjects_sql())}


def missing_reposted_sql(repost: Target, reposted_table: str, actor: str, limit: int, window: int,
                         before_us: int | None = None):
    """Of the reader's newest `window` repost rows (at or before `before_us`, the page's cursor
    time, when given), those whose reposted record is not stored (nor known deleted). The window
    keeps a read's cost to a page's worth of rows: unbounded, a reader whose reposts all show
    walked every repost row they have, on every read."""
    older, below = (" AND f.time_us <= ?", [before_us]) if before_us is not None else ("", [])
    return (f"SELECT w.subject FROM (SELECT f.subject, f.time_us, f.uri FROM feed_items f"
            f" WHERE f.actor = ? AND f.collection = ? AND f.subject IS NOT NULL{older}"
            f" ORDER BY f.time_us DESC, f.uri ASC LIMIT ?) w"
            f" WHERE NOT EXISTS (SELECT 1 FROM {reposted_table} p WHERE p.uri = w.subject)"
            f" AND NOT EXISTS (SELECT 1 FROM feed_tombstones s WHERE s.uri = w.subject)"
            f" ORDER BY w.time_us DESC, w.uri ASC LIMIT ?",
            (actor, repost.nsid, *below, window, limit))


# --- ingest's batch statements (ingest/batch.py) -------------------------------------------------

def fan_out_sql(config: FeedsConfig, feed: Feed, rows: list[tuple]):
    """rows: (uri, nsid, time_us, author, subject). Every follower of each author gets the record."""
    d = current_dialect()
    follow = config.collections[feed.follow].table
    return (f"{d.values_cte('t', ('uri', 'collection', 'time_us', 'author', 'subject'), len(rows))}"
            f" INSERT INTO feed_items (actor, uri, collection, time_us, subject)"
            f" SELECT r.did, t.uri, t.collection, t.time_us, t.subject FROM t, {follow} r"
            f" WHERE {subject_expr('r')} = t.author ON CONFLICT DO NOTHING", [v for row in rows for v in row])


def backfills_sql(config: FeedsConfig, parts: list[tuple[Target, int]], pairs: list[tuple[str, str]]):
    """Each (follower, subject), for each (target, n): the subject's newest n records of that
    target (newest first with the uri tie-break, as follow_backfill_sql does for one pair), one
    arm each of one INSERT over one VALUES table of the pairs.

    One statement instead of one per target: "Everything" alone has eleven targets, most with no
    records, and on PostgreSQL each statement is a round trip and a plan (about 1 ms a
    statement, 13 s of a 60 s full-index run). Each arm is a bounded newest-per-row read
    (tests/test_feeds_explain.py)."""
    d = current_dialect()
    arms, params = [], []
    for target, n in parts:
        table = config.collections[target.short].table
        join = d.newest_per_row(table, "r", "r_n.did = v.subject", "r_n.time_us DESC, r_n.uri ASC")
        arms.append(f"SELECT v.actor, r.uri, ?, r.time_us, {subject_sql(target, 'r')} FROM v {join} WHERE true")
        params += [target.nsid, n]
    return (f"{d.values_cte('v', ('actor', 'subject'), len(pairs))}"
            f" INSERT INTO feed_items (actor, uri, collection, time_us, subject) {' UNION ALL '.join(arms)}"
            f" ON CONFLICT DO NOTHING", [*(v for pair in pairs for v in pair), *params])


def unfollow_sql(config: FeedsConfig, triples: list[tuple[str, str, str]]):
    """(follower, subject, target nsid): one key prefix each (unfollow_clause). The per-event
    reference (tests/fixtures/feeds/oracle.py) runs it one triple at a time; a batch runs
    unfollows_sql, which the property tests hold to the same rows."""
    clauses, params = [], []
    for triple in triples:
        clause, values = unfollow_clause(config, *triple)
        clauses.append(f"({clause})")
        params += values
    return f"DELETE FROM feed_items WHERE {' OR '.join(clauses)}", params


def unfollows_sql(tables: tuple[str, ...], triples: list[tuple[str, str, str]]):
    """unfollow_sql's rows for many (follower, subject, target nsid) of targets that `tables`
    justify (justifying_tables), as one VALUES table joined to the key prefix (actor,
    collection) with the uri range among those rows, and the same remaining-follow probes.

    The same rows as ORing one unfollow_clause per triple (tests/test_feeds_batch.py applies both),
    with one plan for any number of them: PostgreSQL planned each OR'd clause and its probes
    separately, 5 ms for a batch's 33 (three unfollows of "Everything"'s eleven targets), more
    than it then took to run."""
    d = current_dialect()
    keep = "".join(f" AND NOT EXISTS (SELECT 1 FROM {t} r WHERE {subject_expr('r')} = v.subject AND r.did = v.actor)"
                   for t in tables)
    rows = [(follower, nsid, *unfollow_range(subject, nsid), subject) for follower, subject, nsid in triples]
    return (f"{d.values_cte('v', ('actor', 'collection', 'lo', 'hi', 'subject'), len(rows))}"
            f" DELETE FROM feed_items WHERE (uri, actor) IN (SELECT f.uri, f.actor FROM v JOIN feed_items f"
            f" ON f.actor = v.actor AND f.collection = v.collection AND f.uri >= v.lo AND f.uri < v.hi"
            f" WHERE true{keep})", [x for row in rows for x in row])


def remove_targets_sql(uris: list[str]):
    """The records' own rows. Rows of reposts of them stay (their reposter's, to prune or unfollow)
    but show nothing: a read joins a repost row to the record it shows, which is gone. Deleting
    them here would make a post's delete depend on the order of other URIs' reposts in a batch."""
    return f"DELETE FROM feed_items WHERE uri IN ({', '.join('?' * len(uris))})", list(uris)


def resync_sql(times: list[tuple[str, int]]):
    """Rows of these records take the record's time (only rows that differ are written): a
    VALUES table joined on the uri index, so a batch of new records costs one probe each."""
    d = current_dialect()
    return (f"{d.values_cte('v', ('uri', 'time_us'), len(times))}"
            f" UPDATE feed_items SET time_us = v.time_us FROM v"
            f" WHERE feed_items.uri = v.uri AND feed_items.time_us <> v.time_us", [x for row in times for x in row])


# --- one follow, one actor ----------------------------------------------------------------------

def follow_backfill_sql(config: FeedsConfig, feed: Feed, target_index: int, follower: str, subject: str):
    """The subject's newest `followBackfill` records (never more than the target's cap): what the
    author fetch (tasks/authors.py fan_in) copies into one follower's feed."""
    target = feed.targets[target_index]
    table = config.collections[target.short].table
    n = min(feed.follow_backfill, target.cap)
    return (f"INSERT INTO feed_items (actor, uri, collection, time_us, subject)"
            f" SELECT ?, r.uri, ?, r.time_us, {subject_sql(target, 'r')} FROM {table} r WHERE r.did = ?"
            f" ORDER BY r.time_us DESC, r.uri ASC LIMIT ? ON CONFLICT DO NOTHING",
            (follower, target.nsid, subject, n))


def insert(actor: str, uri: str, nsid: str, time_us: int, subject: str | None = None) -> int:
    """One row (the first-read bootstrap's); 1 if it was not there yet."""
    return sql.execute("INSERT INTO feed_items (actor, uri, collection, time_us, subject)"
                       " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", (actor, uri, nsid, time_us, subject)).rowcount


def cutoff_delete_sql(actor: str, nsid: str, cap: int):
    """Contrail's actorCutoffDelete: rows older than the cap-th newest go; ties with it stay."""
    return ("DELETE FROM feed_items WHERE actor = ? AND collection = ? AND time_us < ("
            "SELECT time_us FROM feed_items WHERE actor = ? AND collection = ?"
            " ORDER BY time_us DESC LIMIT 1 OFFSET ?)",
            (actor, nsid, actor, nsid, max(0, cap - 1)))


def cutoff_delete(actor: str, nsid: str, cap: int) -> int:
    return sql.execute(*cutoff_delete_sql(actor, nsid, cap)).rowcount


def drop_actor_sql(actor: str):
    """The actor's whole timeline (feed_items' primary key prefix)."""
    return "DELETE FROM feed_items WHERE actor = ?", (actor,)


def drop_actor(actor: str) -> int:
    return sql.execute(*drop_actor_sql(actor)).rowcount
