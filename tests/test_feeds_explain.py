"""Guardrail (notes §6): every fan-out, prune and backfill statement is index-bounded.

Each statement production runs is taken from the function that runs it and planned with EXPLAIN (QUERY PLAN);
a bare table scan of any feeds table fails the test. PostgreSQL plans with enable_seqscan off,
which still picks a Seq Scan when no index can serve the statement, so an empty test database
gives the same verdict as a large one.

Stricter than "no Seq Scan": a walk of a whole index (SQLite `SCAN t USING … INDEX`, PostgreSQL
an Index Scan with no Index Cond) is unbounded too, so it fails unless the statement is an
ordered walk that a LIMIT stops (the sweep's first page).
"""
from __future__ import annotations

import base64
import json
import re
from dataclasses import replace

import pytest

from feather.db import current_dialect, db
from feather.feeds.ingest import batch
from feather.feeds.read import hybrid
from feather.feeds.store import fetches, heavy_authors, items, records, served
from feather.feeds.tasks import authors, backfill, prune
from feather.feeds.tasks import records_sweep as storage
from tests.fixtures.feeds.feedkit import FakeSources, feeds_app, toml

A, S = "did:plc:aaaa", "did:plc:ssss"
POST_URI = f"at://{S}/app.bsky.feed.post/3k"
OTHER_URI = f"at://{A}/app.bsky.feed.post/3j"


@pytest.fixture
def app(make_app, tmp_path):
    extra = "fanoutMaxFollowers = 1000\n"
    return feeds_app(make_app, tmp_path, toml(extra=extra), sources=FakeSources())


def statements(config):
    feed = config.feeds["timeline"]
    target = feed.targets[0]
    post_table = config.collections["post"].table
    follow_table = config.collections["follow"].table
    return {
        # What the author fetch copies into a follower's feed (authors.fan_in).
        "follow backfill": (items.follow_backfill_sql(config, feed, 0, A, S), [post_table, "r", "feed_items"]),
        "cutoff delete": (items.cutoff_delete_sql(A, target.nsid, 200), ["feed_items"]),
        "sweep first page": (prune.actors_page_sql(None, 500), ["feed_items"]),
        "sweep next page": (prune.actors_page_sql(A, 500), ["feed_items"]),
        "bootstrap followees": ((backfill.followees_sql(config, feed), (A,)), [follow_table, "f"]),
        "bootstrap newest": ((backfill.newest_sql(post_table), (S, 200)), [post_table, "r"]),
        "getFeed page": ((f"SELECT r.uri FROM feed_items f JOIN {post_table} r ON r.uri = f.uri"
                          " WHERE f.actor = ? AND f.collection = ? AND (f.time_us < ? OR (f.time_us = ? AND f.uri > ?))"
                          " ORDER BY f.time_us DESC, f.uri ASC LIMIT 50", (A, target.nsid, 5, 5, POST_URI)),
                         ["feed_items", "f", post_table, "r"]),
        "getFeed page by author": ((f"SELECT r.uri FROM feed_items f JOIN {post_table} r ON r.uri = f.uri"
                                    " WHERE f.actor = ? AND f.collection = ? AND r.did = ?"
                                    " ORDER BY f.time_us DESC, f.uri ASC LIMIT 50", (A, target.nsid, S)),
                                   ["feed_items", "f", post_table, "r"]),
        "hybrid union": ((hybrid.union_sql(config, feed, target), (A, target.nsid, "timeline", A)),
                         ["feed_items", follow_table, "fo", post_table, "p", "feed_heavy_authors", "h"]),
        # Admission and bounded storage (FEED_SERVE signed-in / readers).
        "admission followees": ((served.followees_sql(config, follow_table), (A,)), [follow_table, "f"]),
        "fetch queue": ((authors.pending_sql(), (5, 16)), ["feed_fetches"]),
        "fetch followers": ((authors.followers_sql(config, follow_table), (S,)), [follow_table, "r"]),
        "records sweep first page": (storage.authors_page_sql(post_table, None, 500), [post_table]),
        "records sweep next page": (storage.authors_page_sql(post_table, S, 500), [post_table]),
        "records followed probe": ((storage.followed_sql(follow_table), (S,)), [follow_table, "r"]),
        "records drop author": (records.drop_author_sql(post_table, S), [post_table]),
        "records trim author": (records.trim_author_sql(post_table, S, 200), [post_table]),
        "records forget fetches": (fetches.forget_sql(S), ["feed_fetches"]),
        "unserved feed": (items.drop_actor_sql(A), ["feed_items"]),
        # Batch-level ingest (batch.py runs them; store/items.py builds the writes): one statement
        # for a whole batch's rows of each kind.
        "batch fan-out": (items.fan_out_sql(config, feed, [(POST_URI, target.nsid, 1, S, None),
                                                           (OTHER_URI, target.nsid, 2, A, None)]),
                          [follow_table, "r"]),
        "batch heavy probe": (batch.heavy_authors_sql(config, feed, [S, A]), [follow_table, "r"]),
        "mark heavy": (heavy_authors.mark_heavy_sql(feed, [S, A], 1), ["feed_heavy_authors"]),
        "batch backfill": (items.backfills_sql(config, [(target, 50)], [(A, S), (S, A)]),
                           [post_table, "r", "r_n", "feed_items"]),
        "unfollow": (items.unfollow_sql(config, [(A, S, target.nsid)]), ["feed_items", follow_table, "r"]),
        "batch unfollow": (items.unfollows_sql((follow_table,), [(A, S, target.nsid), (S, A, target.nsid)]),
                           ["feed_items", "f", follow_table, "r"]),
        "batch target delete": (items.remove_targets_sql([POST_URI, OTHER_URI]), ["feed_items"]),
        "batch resync": (items.resync_sql([(POST_URI, 1), (OTHER_URI, 2)]), ["feed_items"]),
    }


# Not listed: served.SERVED_SQL reads feed_actors and auth_grant whole on purpose; it is the
# (capped) served set itself, loaded when it changes, not a statement over stored records. So is
# items.reposted_subjects_sql: the whole partial subject index (served timelines' repost rows
# only, at most served actors × the repost cap), read when admission rebuilds.
ORDERED_WALKS = {"sweep first page", "records sweep first page"}


def _norm(text: str) -> str:
    return re.sub(r"[\s()]|::\w+", "", text)


def _pg_leading_key(index: str) -> tuple[str, str]:
    """(table, normalised first key) of a PostgreSQL index."""
    row = db.execute_sql(
        "SELECT t.relname, pg_get_indexdef(i.indexrelid, 1, true) FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid WHERE c.relname = %s",
        (index,)).fetchone()
    return row[0], _norm(row[1])


def unbounded_scans(lines, names, ordered_walk_ok=False):
    """The plan lines that read a whole table, or a whole index, of one of `names`."""
    bad = []
    if current_dialect().is_sqlite:
        # An ordered walk reads an index, or a WITHOUT ROWID table, in the key order the statement
        # asks for: no temporary B-tree re-sorts what it read.
        in_order = not any("TEMP B-TREE" in line for line in lines)
        for line in lines:
            m = re.match(r"SCAN (\S+)", line)
            if m and m.group(1) in names and not (ordered_walk_ok and ("USING" in line or in_order)):
                bad.append(line)
        return bad
    for i, line in enumerate(lines):
        seq = re.search(r"Seq Scan on (\S+)(?: (\S+))?", line)
        if seq:
            if {seq.group(1), seq.group(2)} & set(names):
                bad.append(line)
            continue
        m = re.search(r"(?:Index Only Scan|Index Scan)(?: Backward)? using (\S+) on|Bitmap Index Scan on (\S+)", line)
        if not m:
            continue
        table, key = _pg_leading_key(m.group(1) or m.group(2))
        if table not in names:
            continue
        depth = len(line) - len(line.lstrip())
        conds = []
        for nxt in lines[i + 1:]:
            if len(nxt) - len(nxt.lstrip()) <= depth or nxt.lstrip().startswith("->"):
                break
            if "Index Cond" in nxt:
                conds.append(_norm(nxt))
        # Bounded only when the condition constrains the index's leading key; a condition on a
        # later column still walks the whole index.
        if not any(key in c for c in conds) and not ordered_walk_ok:
            bad.append(line)
    return bad


def plan(sql, params):
    d = current_dialect()
    if d.is_sqlite:
        return d.explain(db.obj, sql, params)
    with db.atomic():
        db.execute_sql("SET LOCAL enable_seqscan = off")
        return d.explain(db.obj, d.q(sql), params)


def test_every_fanout_and_prune_statement_is_index_bounded(app):
    d = current_dialect()
    config = app.extensions["feeds"]
    failures = {}
    with app.app_context(), db.connection_context():
        for name, ((sql, params), tables) in statements(config).items():
            lines = plan(sql, params)
            # (has_full_scan knows no ordered walk; unbounded_scans judges those alone.)
            if unbounded_scans(lines, tables, name in ORDERED_WALKS) or (name not in ORDERED_WALKS and any(
                    d.has_full_scan(lines, t) for t in tables)):
                failures[name] = lines
    assert failures == {}


REPOST_URI = f"at://{A}/app.bsky.feed.repost/3r"


def feed_page_sql(config, feed, target, actor):
    """The page statement query.run makes of a feed's source (time sort, a cursor, limit 50)."""
    source = hybrid.feed_source(config, feed, target, actor)
    where = source.where + [f"({source.t} < ? OR ({source.t} = ? AND {source.u} > ?))"]
    return (f"SELECT r.uri {source.from_sql} WHERE {' AND '.join(where)}"
            f" ORDER BY {source.t} DESC, {source.u} ASC LIMIT 50",
            [*source.from_params, *source.where_params, 5, 5, POST_URI])


def repost_statements(config):
    """The built-in config: "Following" reads posts and reposts merged; a replies rule on top."""
    feed = config.feeds["timeline"]
    post, repost = feed.targets
    post_table = config.collections["post"].table
    follow_table = config.collections["follow"].table
    followed = replace(feed, replies="followed")
    return {
        "getFeed page with reposts": (feed_page_sql(config, feed, post, A),
                                      ["feed_items", "f", "g", post_table, "r"]),
        "getFeed page, replies to followed": (feed_page_sql(config, followed, post, A),
                                              ["feed_items", "f", "g", post_table, "r", follow_table, "fo"]),
        "getFeed page, no replies": (feed_page_sql(config, replace(feed, replies="none"), post, A),
                                     ["feed_items", "f", "g", post_table, "r"]),
        "missing reposted records": (items.missing_reposted_sql(repost, post_table, A, 30, 100),
                                     ["feed_items", "f", post_table, "p", "feed_tombstones", "s"]),
        "missing reposted records below a cursor": (items.missing_reposted_sql(repost, post_table, A, 30, 100, 5),
                                                    ["feed_items", "f", post_table, "p", "feed_tombstones", "s"]),
        "batch repost fan-out": (items.fan_out_sql(config, feed, [(REPOST_URI, repost.nsid, 1, A, POST_URI)]),
                                 [follow_table, "r"]),
        "batch repost backfill": (items.backfills_sql(config, [(feed.targets[1], 50)], [(A, S)]),
                                  [config.collections["repost"].table, "r", "r_n", "feed_items"]),
        "bootstrap newest reposts": ((backfill.newest_sql(config.collections["repost"].table,
                                                          items.subject_sql(repost, "r")), (S, 200)),
                                     [config.collections["repost"].table, "r"]),
        "records drop author, reposted kept": (records.drop_author_sql(post_table, S, reposted=True),
                                               [post_table, "feed_items", "g"]),
        "records trim author, reposted kept": (records.trim_author_sql(post_table, S, 200, reposted=True),
                                               [post_table, "feed_items", "g"]),
    }


@pytest.fixture
def repost_app(make_app, tmp_path):
    return feeds_app(make_app, tmp_path, sources=FakeSources())


def test_every_repost_and_replies_statement_is_index_bounded(repost_app):
    d = current_dialect()
    config = repost_app.extensions["feeds"]
    failures = {}
    with repost_app.app_context(), db.connection_context():
        for name, ((sql, params), tables) in repost_statements(config).items():
            lines = plan(sql, params)
            if unbounded_scans(lines, tables) or any(d.has_full_scan(lines, t) for t in tables):
                failures[name] = lines
    assert failures == {}


def search_statements(app, config):
    """Every statement search runs (store/search.py, read/query.py), from the functions that run
    them: the index writes for a batch of two, the deletes by URI and by the records sweep's
    conditions, and the listRecords and getFeed pages of a search with its cursor (captured from
    query.run)."""
    from feather import sql as sqlmod
    from feather.feeds.read import query
    from feather.feeds.store import search

    d = current_dialect()
    c = config.collections["post"]
    post_table, table = c.table, c.search_table
    index_tables = [post_table, "r", table, "s_k", "feed_items", "f", "g"]
    out = {}
    for i, statement in enumerate(d.search_upsert_sql(table, 2)):
        out[f"search index {i}"] = ((statement, [POST_URI, "a", OTHER_URI, "b"]), index_tables + ["k"])
    for i, statement in enumerate(search.forget_sql(c, "?, ?")):
        out[f"search forget {i}"] = ((statement, [POST_URI, OTHER_URI]), index_tables)
    for name, (statement, params) in {"drop author": records.drop_author_sql(post_table, S, True),
                                      "trim author": records.trim_author_sql(post_table, S, 200, True)}.items():
        for i, forget in enumerate(search.forget_sql(c, records.selected_uris_sql(c, statement))):
            out[f"search forget, {name} {i}"] = ((forget, params), index_tables)
    cursor = base64.urlsafe_b64encode(json.dumps({"t": 5, "u": POST_URI, "v": 0.5, "k": "search"}).encode()).decode()
    params = {"search": '"black cat" OR dog* bird', "cursor": cursor, "limit": "30"}
    feed = config.feeds["timeline"]
    sources = {"listRecords search": query.collection_source(c),
               "listRecords search by author": query.collection_source(c, S),
               "getFeed search with reposts": hybrid.feed_source(config, feed, feed.targets[0], A),
               "getFeed search, posts only": hybrid.feed_source(config, config.feeds["posts"],
                                                                config.feeds["posts"].targets[0], A)}
    real = sqlmod.rows
    for name, source in sources.items():
        seen = []
        sqlmod.rows = lambda statement, p=(), seen=seen: seen.append((statement, list(p))) or []
        try:
            query.run(config, c, params, source)
        finally:
            sqlmod.rows = real
        out[name] = (seen[-1], index_tables)
    return out


def test_every_search_statement_is_index_bounded(repost_app):
    """The full-text side itself is bounded by its own index: on SQLite every read of the FTS5
    table carries a MATCH or a rowid (its index string names M or =), on PostgreSQL the GIN index
    or the URI key is what reads it."""
    d = current_dialect()
    config = repost_app.extensions["feeds"]
    failures = {}
    with repost_app.app_context(), db.connection_context():
        pinned = search_statements(repost_app, config)
        for name, ((sql, params), tables) in pinned.items():
            lines = plan(sql, params)
            fts = [line for line in lines if "VIRTUAL TABLE" in line]
            rest = [line for line in lines if line not in fts]  # (feed_search_post is their prefix)
            if (unbounded_scans(rest, tables) or any(d.has_full_scan(rest, t) for t in tables)
                    or any(not re.search(r"INDEX \d+:\S*[M=]", line) for line in fts)):
                failures[name] = lines
            if d.is_sqlite and name.startswith("getFeed") and not any("INDEX 0:=M" in line for line in fts):
                failures[name] = lines  # a timeline probes the index per row, never every match
    assert len(pinned) == (12 if d.is_sqlite else 8) and failures == {}


def _feed_items_indexes() -> set[str]:
    if current_dialect().is_sqlite:
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'feed_items'"
    else:
        sql = "SELECT indexname FROM pg_indexes WHERE tablename = 'feed_items'"
    return {row[0] for row in db.execute_sql(sql).fetchall()}


# Why each feed_items index exists: a statement that runs on every read or batch and uses it.
# An index no statement here needs is a page write per fan-out row for nothing (migrations 0048,
# 0049). KEY is the page-order unique key: SQLite's WITHOUT ROWID primary key (the table itself,
# no entry in sqlite_master), PostgreSQL's unique index feed_items_page.
JUSTIFIED = {
    "getFeed page": ["KEY"],
    "cutoff delete": ["KEY"],
    "unfollow": ["KEY"],
    "batch unfollow": ["KEY", "feed_items_uri"],  # the key finds the rows, the uri index deletes them
    "batch target delete": ["feed_items_uri"],
    "batch resync": ["feed_items_uri"],
}


def _uses(lines: list[str], indexes: set[str]) -> list[str]:
    used = {i for i in indexes if any(re.search(rf"\b{i}\b", line) for line in lines)}
    # feed_items is the only WITHOUT ROWID table these statements read; "f" is its alias in getFeed.
    if current_dialect().is_sqlite and any(re.search(r"\b(feed_items|f) USING PRIMARY KEY\b", line) for line in lines):
        used.add("KEY")
    return sorted(used)


# The same for the feeds that show reposts (the built-in config): the page's "a newer row shows
# this record" probes use the partial subject index (reposts of it) and, for its own row, the uri
# index (SQLite) or the page key's (actor, collection) prefix (PostgreSQL; both are bounded).
JUSTIFIED_REPOSTS = {
    "getFeed page with reposts": ["KEY", "feed_items_subject"],
}


def test_every_feed_items_index_is_the_one_a_pinned_statement_uses(app, repost_app):
    config = app.extensions["feeds"]
    key = "KEY" if current_dialect().is_sqlite else "feed_items_page"
    with app.app_context(), db.connection_context():
        indexes = _feed_items_indexes()
        pinned = statements(config)
        uses = {name: _uses(plan(*pinned[name][0]), indexes) for name in JUSTIFIED}
    with repost_app.app_context(), db.connection_context():
        pinned = repost_statements(repost_app.extensions["feeds"])
        uses.update({name: [i for i in _uses(plan(*pinned[name][0]), indexes) if i != "feed_items_uri"]
                     for name in JUSTIFIED_REPOSTS})
    expected = {name: sorted(key if index == "KEY" else index for index in used)
                for name, used in {**JUSTIFIED, **JUSTIFIED_REPOSTS}.items()}
    assert uses == expected
    assert indexes | ({"KEY"} if key == "KEY" else set()) == {i for used in expected.values() for i in used}


def test_feed_items_rows_live_in_page_order_and_are_unique_by_it(app):
    """The table is its page key on SQLite (no rowid table and key index beside it), and the key
    is what makes a second insert of the same row a no-op on both databases."""
    with app.app_context(), db.connection_context():
        if current_dialect().is_sqlite:
            ddl = db.execute_sql("SELECT sql FROM sqlite_master WHERE name = 'feed_items'").fetchone()[0]
            assert ddl.rstrip().endswith("WITHOUT ROWID")
        insert = current_dialect().q("INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?)"
                                     " ON CONFLICT DO NOTHING")
        added = [db.execute_sql(insert, (A, POST_URI, "app.bsky.feed.post", 5)).rowcount for _ in range(2)]
    assert added == [1, 0]


def test_the_guardrail_catches_a_bare_scan(app):
    """The negative example: Contrail's old global prune, a window over the whole table."""
    bad = ("DELETE FROM feed_items WHERE uri IN (SELECT uri FROM (SELECT uri, ROW_NUMBER() OVER"
           " (PARTITION BY actor, collection ORDER BY time_us DESC) AS rn FROM feed_items) x WHERE rn > 200)")
    with app.app_context(), db.connection_context():
        lines = plan(bad, ())
        whole_index = plan("SELECT count(*) FROM feed_items WHERE time_us > 5", ())
    assert unbounded_scans(lines, ["feed_items"]) != []
    assert unbounded_scans(whole_index, ["feed_items"]) != []


def test_only_collections_served_by_list_records_keep_a_time_index(app):
    """(time_us, uri) serves listRecords over a whole collection and nothing else; follows and
    profiles are private by default, so their tables skip that write per ingested record."""
    with app.app_context(), db.connection_context():
        if current_dialect().is_sqlite:
            sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'feed_records_%_time'"
        else:
            sql = "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'feed_records_%_time'"
        names = sorted(row[0] for row in db.execute_sql(current_dialect().q(sql)).fetchall()
                       if not row[0].endswith("_did_time"))
    assert names == ["feed_records_post_time"]


def test_an_unfollow_is_bounded_by_the_followers_feed_of_one_collection(app):
    """The page key has no (actor, uri) prefix any more: an unfollow must name the collection, or
    it reads the follower's whole feed of every collection."""
    config = app.extensions["feeds"]
    with app.app_context(), db.connection_context():
        pinned = statements(config)
        plans = {name: plan(*pinned[name][0]) for name in ("unfollow", "batch unfollow")}
    if current_dialect().is_sqlite:
        searched = {name: sorted({line for line in lines if line.startswith("SEARCH feed_items")})
                    for name, lines in plans.items()}
        searched["batch unfollow"] = sorted(line for line in plans["batch unfollow"]
                                            if line.startswith(("SEARCH feed_items", "SEARCH f ")))
        assert searched == {
            "unfollow": ["SEARCH feed_items USING PRIMARY KEY (actor=? AND collection=?)"],
            # The rows are found by their key prefix (f), then deleted by (uri, actor).
            "batch unfollow": ["SEARCH f USING PRIMARY KEY (actor=? AND collection=?)",
                               "SEARCH feed_items USING COVERING INDEX feed_items_uri (uri=? AND actor=?)"]}
    else:
        # (The batch's delete by (uri, actor) of the rows found is not a read of a feed.)
        conds = {name: [c for c in map(_norm, lines) if "IndexCond" in c and "actor=" in c
                        and not c.startswith("IndexCond:uri=f.uri")] for name, lines in plans.items()}
        assert all(c and all("collection=" in x for x in c) for c in conds.values()), conds


def test_an_unfollows_remaining_follow_check_probes_the_subject_index_by_subject_and_follower(app):
    """An unfollow keeps the subject's rows while another follow record of the pair remains: one
    probe of the (subject, did) index per unfollow, not a walk of every follower of the subject."""
    config = app.extensions["feeds"]
    with app.app_context(), db.connection_context():
        pinned = statements(config)
        plans = {name: plan(*pinned[name][0]) for name in ("unfollow", "batch unfollow")}
    if current_dialect().is_sqlite:
        probes = {name: [line for line in lines if line.startswith("SEARCH r")] for name, lines in plans.items()}
        assert probes == {"unfollow": ["SEARCH r USING INDEX feed_records_follow_subject (<expr>=? AND did=?)"],
                          # One probe per row of the VALUES table, in one plan for all of them.
                          "batch unfollow": ["SEARCH r USING INDEX feed_records_follow_subject"
                                             " (<expr>=? AND did=?)"]}, plans
    else:
        conds = {name: [_norm(line) for line in lines if "Index Cond" in line and "'subject'" in line]
                 for name, lines in plans.items()}
        assert {name: len(c) for name, c in conds.items()} == {"unfollow": 1, "batch unfollow": 1}, plans
        assert all("did=" in c for cs in conds.values() for c in cs), plans


def test_a_scan_that_walks_an_index_is_not_a_bare_table_scan():
    from feather.dialect import POSTGRESQL, SQLITE

    assert SQLITE.has_full_scan(["SCAN feed_items"], "feed_items")
    assert not SQLITE.has_full_scan(["SCAN feed_items USING COVERING INDEX feed_items_actor"], "feed_items")
    assert not SQLITE.has_full_scan(["SEARCH feed_items USING INDEX feed_items_actor (actor=?)"], "feed_items")
    assert POSTGRESQL.has_full_scan(["  ->  Seq Scan on feed_items  (cost=0.00..1.00 rows=1 width=8)"], "feed_items")
    assert not POSTGRESQL.has_full_scan(["Index Scan using feed_items_pkey on feed_items"], "feed_items")


def test_every_labels_cache_statement_is_index_bounded(app):
    """The labels cache (store/labels.py): its reads and the replace name rows by the primary key
    (labeler, subject); the trims walk the time indexes from their start."""
    from feather.feeds.store import labels as label_cache

    src, uris = "did:plc:labeler", [POST_URI, OTHER_URI, A]
    pinned = {f"labels load {i}": (statement, params) for i, (statement, params)
              in enumerate(label_cache.load_sql(src, uris))}
    pinned["labels replace"] = (label_cache.REPLACE_SQL, (src, POST_URI))
    pinned.update({f"labels trim {i}": pair for i, pair in enumerate(label_cache.trim_sql(5))})
    tables = ["feed_labels", "feed_label_checks"]
    failures = {}
    with app.app_context(), db.connection_context():
        for name, (statement, params) in pinned.items():
            lines = plan(statement, params)
            if unbounded_scans(lines, tables) or any(current_dialect().has_full_scan(lines, t) for t in tables):
                failures[name] = lines
    assert len(pinned) == 5 and failures == {}
