"""The set-based half of ingest: a batch's grouped steps (plan.py) in a fixed number of statements.

Per collection: one multi-row upsert of the records as they stand after the batch, one
multi-row delete, one tombstone upsert. Per feed: one fan-out INSERT … SELECT for all of the
batch's target records (a VALUES table joined to the follow table's subject index), one
backfill INSERT … SELECT for all its new follows (each follow's subject's newest records, per
target), one delete for all its unfollows, one for its deleted targets, one time resync for
its edited targets. Each is chunked only past the database's bound-parameter limit (a 500-event
batch never is). Every statement is built by a `*_sql` function of the table's owning module
(store/items.py, store/heavy_authors.py, store/records.py) so the EXPLAIN guardrail
(tests/test_feeds_explain.py) plans exactly what runs.

Why collapsing a URI's steps to their net effect gives the per-event result (its steps here
never meet a follow change of the same author; plan.py sends those to the ordered path):
- a delete anywhere erases every feed row of the record, so only the writes after the last
  delete matter; they insert for the same (unchanged) followers, and their rows end at the last
  write's time, which the resync first gives any existing rows when a write may have moved it
  (Step.moves_time), and the fan-out then uses (feed_items is unique by (actor, collection, time_us, uri),
  so an existing row is only recognised at its record's current time);
- a follow's backfill reads its subject's records, which no grouped step of this batch changes;
- an unfollow removes the subject's rows only when no follow of the pair remains after the
  steps (store/items.py unfollows_sql); a pair's follows never grow again after one was dropped
  within one call (plan.py cuts there), so that is when the last of its unfollows left none.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from feather import sql
from feather.db import current_dialect
from feather.feeds.config import Feed, FeedsConfig, Target
from feather.feeds.ingest.fanout import unfollow_triples
from feather.feeds.ingest.plan import Step
from feather.feeds.store import heavy_authors, items, records
from feather.feeds.store.schema import subject_expr


@dataclass
class Net:
    """What the grouped steps add up to."""
    upserts: dict = field(default_factory=dict)  # table -> (Collection, {uri: row})
    deletes: dict = field(default_factory=dict)  # table -> (Collection, set of uris)
    tombstones: dict = field(default_factory=dict)  # uri -> latest delete time
    targets: dict = field(default_factory=dict)  # uri -> (nsid, author, time_us, subject) to fan out
    writers: set = field(default_factory=set)  # (nsid, author) of every target write, kept or not
    resync: dict = field(default_factory=dict)  # uri -> time_us its existing feed rows move to
    removed: set = field(default_factory=set)  # target uris whose feed rows all go
    follows: dict = field(default_factory=dict)  # follow nsid -> {(follower, subject)} to backfill
    unfollows: dict = field(default_factory=dict)  # follow nsid -> {(follower, subject)} to remove


def net_effect(steps: list[Step]) -> Net:
    net = Net()
    tail: dict[str, list[Step]] = {}  # a target's writes since its last delete in the batch
    for s in steps:
        uri, table = s.uri, s.coll.table
        if s.deletes:
            net.upserts.get(table, (None, {}))[1].pop(uri, None)
            net.deletes.setdefault(table, (s.coll, set()))[1].add(uri)
            net.tombstones[uri] = max(s.time_us, net.tombstones.get(uri, -1))
            if s.is_target:
                net.removed.add(uri)
                tail[uri] = []
            if s.unfollows:
                net.unfollows.setdefault(s.event.collection, set()).add((s.event.did, s.unfollows))
            continue
        e = s.event
        net.upserts.setdefault(table, (s.coll, {}))[1][uri] = (
            uri, e.did, e.rkey, e.cid, s.text, s.time_us, sql.now_us(), s.arrival)
        net.deletes.get(table, (None, set()))[1].discard(uri)
        if s.is_target:
            tail.setdefault(uri, []).append(s)
            net.writers.add((e.collection, e.did))
            if s.prior is not None and s.coll.reposts is not None and (
                    items.reposted_uri(records.parse_value(s.prior[1])) != items.reposted_uri(e.record)):
                # A repost edited to repost something else: its rows go, and the fan-out below
                # writes them again with the new subject (an insert would keep the old one).
                net.removed.add(uri)
        if s.backfills:
            net.follows.setdefault(e.collection, set()).add((e.did, s.backfills))
        if s.unfollows:  # an edit that moved the follow to another subject
            net.unfollows.setdefault(e.collection, set()).add((e.did, s.unfollows))
    for uri, writes in tail.items():
        if writes:
            last = writes[-1]
            subject = items.reposted_uri(last.event.record) if last.coll.reposts else None
            net.targets[uri] = (last.event.collection, last.event.did, last.time_us, subject)
            if any(w.moves_time for w in writes):
                net.resync[uri] = last.time_us
    return net


# --- statements ---------------------------------------------------------------------------------
# The writes are built in the tables' owning modules (store/items.py, store/heavy_authors.py); the
# heavy-author probe, a read, is built here.

def heavy_authors_sql(config: FeedsConfig, feed: Feed, authors: list[str]):
    """The authors with more than fanoutMaxFollowers followers: an EXISTS past that many index
    entries, so a million followers cost limit+1 reads, not a count of them all."""
    d = current_dialect()
    follow = config.collections[feed.follow].table
    return (f"{d.values_cte('a', ('author',), len(authors))} SELECT a.author FROM a WHERE EXISTS"
            f" (SELECT 1 FROM {follow} r WHERE {subject_expr('r')} = a.author LIMIT 1 OFFSET ?)",
            [*authors, feed.fanout_max_followers])


# --- writing ------------------------------------------------------------------------------------

def _chunked(rows: list, width: int):
    return records.chunks(rows, width)


def write(config: FeedsConfig, steps: list[Step], now: int) -> None:
    """The grouped steps' net effect; the order of these statements is the order that matters:
    records first (backfill reads them), feed-row deletes before the fan-out that may re-add,
    the time resync before the inserts that must meet the resynced rows."""
    if not steps:
        return
    net = net_effect(steps)
    for coll, uris in net.deletes.values():
        if uris:
            records.delete_many(coll, list(uris))
    for coll, rows in net.upserts.values():
        if rows:
            records.store_many(coll, [rows[uri] for uri in sorted(rows)])
    if net.tombstones:
        records.bury_many(net.tombstones)
    if not config.feeds:
        return
    for chunk in _chunked(sorted(net.removed), 1):
        sql.write(*items.remove_targets_sql(chunk))
    # After the records writes: the remaining-follow check sees the follows these steps left.
    # One statement per set of justifying follow tables (one set, with the built-in feeds).
    justifying = items.justifying_tables(config)
    by_tables: dict[tuple[str, ...], list] = {}
    for triple in unfollow_triples(config, net.unfollows):
        by_tables.setdefault(tuple(sorted(justifying[triple[2]])), []).append(triple)
    for tables, triples in sorted(by_tables.items()):
        for chunk in _chunked(triples, 5):
            sql.write(*items.unfollows_sql(tables, chunk))
    for chunk in _chunked(sorted(net.resync.items()), 2):
        sql.write(*items.resync_sql(chunk))
    # Feeds on one follow collection write one set of rows (feed_items has no feed column), so
    # each (follow collection, target) is backfilled and fanned out once, not once per feed: with
    # the built-in feeds that was three fan-outs of every post and fourteen backfills a run.
    # Neither meets the other's rows: a run's backfilled subjects never post in it (plan.py).
    for follow, parts in backfill_targets(config).items():
        pairs = sorted(net.follows.get(config.collections[follow].nsid, ()))
        for chunk in _chunked(pairs, 2 + 2 * len(parts)):  # + each target's nsid and limit
            sql.write(*items.backfills_sql(config, parts, chunk))
    fanned: dict[str, tuple[Feed, set]] = {}  # follow collection -> (a feed on it, the rows)
    for feed in config.feeds.values():
        fanned.setdefault(feed.follow, (feed, set()))[1].update(_fan_out_rows(config, feed, net, now))
    for feed, rows in fanned.values():
        for chunk in _chunked(sorted(rows), 5):
            sql.write(*items.fan_out_sql(config, feed, chunk))


def backfill_targets(config: FeedsConfig) -> dict[str, list[tuple[Target, int]]]:
    """Follow collection -> (target, how many records) once per target of its feeds.

    Every feed backfills a subject's newest records in one order (time, then uri), so the feed
    backfilling most of a target covers what the others would add: the union of what each
    feed's backfill wrote."""
    best: dict[str, dict[str, tuple[Target, int]]] = {}
    for feed in config.feeds.values():
        for target in feed.targets:
            n = min(feed.follow_backfill, target.cap)
            known = best.setdefault(feed.follow, {})
            if target.nsid not in known or n > known[target.nsid][1]:
                known[target.nsid] = (target, n)
    return {follow: [known[nsid] for nsid in sorted(known)] for follow, known in best.items()}


def _fan_out_rows(config: FeedsConfig, feed: Feed, net: Net, now: int) -> list[tuple]:
    """The feed's fan-out rows (uri, nsid, time_us, author, subject); marks its heavy authors."""
    nsids = {t.nsid for t in feed.targets}
    rows = [(uri, nsid, time_us, author, subject) for uri, (nsid, author, time_us, subject)
            in net.targets.items() if nsid in nsids]
    writers = sorted({author for nsid, author in net.writers if nsid in nsids})
    if feed.fanout_max_followers is not None and writers:
        # Every write probes, as it would alone: a post deleted later in the batch still marks
        # its author heavy.
        heavy: set[str] = set()
        for chunk in _chunked(writers, 2):  # + the limit
            statement, params = heavy_authors_sql(config, feed, chunk)
            heavy.update(r[0] for r in sql.rows(statement, params))
        if heavy:
            # Hybrid: readers merge these authors' posts from the records store instead.
            sql.write(*heavy_authors.mark_heavy_sql(feed, sorted(heavy), now))
            rows = [row for row in rows if row[3] not in heavy]
    return rows
