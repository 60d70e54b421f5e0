"""The scale bench's setup: a database holding what a Feather instance serving S readers would
hold when the timed log starts (bench/scale.py), written with SQL rather than replayed.

Under FEED_SERVE=readers only follows *by* served readers are stored, and posts, reposts and
profiles by them or by someone they follow (feather/feeds/ingest/admission.py). So the setup
writes, on a database made by Feather's own migrations and ensure_schema:

- feed_actors (each reader, source `reader`) and feed_backfills (their first-read backfill done:
  it lists follows from a PDS, which the bench has none of);
- the readers' follow records (Network.follows), through the store's own upsert
  (feather/feeds/store/records.py `store_many`, so they are shaped as the store shapes them);
- the history's posts and reposts by readers and by whom they follow, and the posts those
  reposts show (the read path fetches such a post and the records sweep keeps it while a
  repost row shows it), posts with their full-text index rows (store_many writes those too);
- one profile per stored author;
- feed_items: each stored post and repost in the timeline of every reader following its author,
  each reader's newest `maxItems` (200) kept per collection, as the prune leaves them.

`rows()` computes those rows in Python; tests/test_bench_scale.py compares what the service then
holds after the log with a model of its own.
"""
from __future__ import annotations

import io
import itertools
import time

from bench.scale_network import FOLLOW, POST, PROFILE, REPOST, Item, Network, cid

CAP = 200  # the built-in feeds' maxItems per target
CHUNK = 50_000  # rows per write transaction


class Setup:
    """What the database holds for the served readers before the log: built in memory first."""

    def __init__(self, net: Network, readers: list[int], history: list[Item]):
        self.net, self.readers, self.history = net, readers, history
        self.served = set(readers)
        self.followers: dict[int, list[int]] = {}  # author -> served readers following them
        for r in readers:
            for a in net.follows(r):
                self.followers.setdefault(a, []).append(r)
        self.authors = self.served | set(self.followers)  # whose records admission keeps
        self.posts: set[int] = set()  # history indexes of the stored posts and reposts
        for item in history:
            if item.author in self.authors:
                self.posts.add(item.n)
                if item.subject is not None:
                    self.posts.add(item.subject)  # the post a kept repost shows

    def follow_rows(self):
        """(uri, did, rkey, cid, record JSON, time_us) of every served reader's follows: the JSON
        exactly as records.dumps writes Network.follow_record's record (asserted in the test)."""
        net = self.net
        for r in self.readers:
            did = net.did(r)
            prefix = f"at://{did}/{FOLLOW}/"
            for j, a in enumerate(net.follows(r)):
                rkey = net.follow_rkey(j)
                yield (prefix + rkey, did, rkey, f"bafyreig{r:026d}{j:025d}",
                       f'{{"$type":"{FOLLOW}","createdAt":"{net.follow_iso(j)}","subject":"{net.did(a)}"}}',
                       net.follow_time(j))

    def record_rows(self, kind: str):
        """(collection, uri, did, rkey, cid, record, time_us) of the stored history of one
        collection (POST or REPOST), oldest first."""
        net, items = self.net, self.history
        for n in sorted(self.posts):
            item = items[n]
            if item.kind != kind:
                continue
            did, rkey = net.did(item.author), item.rkey
            if item.kind == POST:
                yield POST, f"at://{did}/{POST}/{rkey}", did, rkey, cid("p", n), net.post_record(n, item.time_us), \
                    item.time_us
            else:
                shown = items[item.subject]
                record = net.repost_record(shown.uri(net), cid("p", shown.n), item.time_us)
                yield REPOST, f"at://{did}/{REPOST}/{rkey}", did, rkey, cid("r", n), record, item.time_us

    def profile_rows(self):
        net = self.net
        t = (self.history[0].time_us if self.history else net.start_us) - 3_600_000_000
        for a in sorted(self.authors):
            did = net.did(a)
            yield PROFILE, f"at://{did}/{PROFILE}/self", did, "self", cid("a", -a), net.profile_record(a, 0), t

    def item_rows(self):
        """feed_items rows (actor, uri, collection, time_us, subject), reader by reader, each
        reader's newest CAP per collection."""
        net, items = self.net, self.history
        by_author: dict[int, list[Item]] = {}
        for n in sorted(self.posts):
            item = items[n]
            if item.author in self.followers:
                by_author.setdefault(item.author, []).append(item)
        for r in self.readers:
            actor = net.did(r)
            mine: dict[str, list[Item]] = {POST: [], REPOST: []}
            for a in net.follows(r):
                for item in by_author.get(a, ()):
                    mine[item.kind].append(item)
            for kind, got in mine.items():
                got.sort(key=lambda i: i.time_us, reverse=True)  # times are distinct: no ties at the cap
                for item in got[:CAP]:
                    subject = None if item.subject is None else items[item.subject].uri(net)
                    yield actor, item.uri(net), kind, item.time_us, subject


def load(app, setup: Setup) -> dict:
    """Write setup into the app's database (migrated, schema ensured). Seconds per part."""
    from feather.db import current_dialect, db  # noqa: PLC0415  the caller made the app
    from feather.feeds.store import records, search  # noqa: PLC0415
    from feather.sql import now_us  # noqa: PLC0415

    config = app.extensions["feeds"]
    sqlite = current_dialect().is_sqlite
    if not sqlite:
        from psycopg2 import extensions, extras  # noqa: PLC0415  only on PostgreSQL
    if sqlite:  # this connection only, and only for the setup: 1 GiB of page cache
        db.execute_sql("PRAGMA cache_size = -1048576")
    now = now_us()
    arrival = itertools.count(now)  # strictly increasing, as records.next_arrival()
    took: dict[str, float] = {}
    counts: dict[str, int] = {}

    def bulk(table: str, columns: tuple[str, ...], rows, after=None) -> int:
        """Plain inserts of whole rows, CHUNK a transaction: executemany on SQLite, COPY on PostgreSQL."""
        count, batch = 0, []
        for row in itertools.chain(rows, [None]):
            if row is not None:
                batch.append(row)
                if len(batch) < CHUNK:
                    continue
            if not batch:
                break
            with db.atomic():
                if sqlite:
                    db.connection().executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES"
                                                f" ({', '.join('?' * len(columns))})", batch)
                elif extensions.get_wait_callback() is None:
                    db.cursor().copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN",
                                            io.StringIO("".join(_copy_line(row) for row in batch)))
                else:  # psycopg2 refuses COPY under gevent's wait callback (a patched test process)
                    extras.execute_values(db.cursor(), f"INSERT INTO {table} ({', '.join(columns)}) VALUES %s",
                                          batch, page_size=1000)
                if after is not None:
                    after(batch)
            count += len(batch)
            batch = []
        return count

    def record_rows(rows):
        """(uri, did, rkey, cid, record, time_us) -> the records tables' whole rows (records.COLUMNS)."""
        for uri, did, rkey, c, record, t in rows:
            yield uri, did, rkey, c, record if isinstance(record, str) else records.dumps(record), t, now, next(arrival)

    def by_kind(kind: str):
        return (row[1:] for row in setup.record_rows(kind))

    tables = sorted({c.table for c in config.collections.values()} | {"feed_items"})
    started = time.perf_counter()
    dropped = drop_indexes(tables)
    counts["actors"] = bulk("feed_actors", ("did", "source", "added_us"),
                            ((setup.net.did(r), "reader", now) for r in setup.readers))
    bulk("feed_backfills", ("actor", "feed", "completed"), ((setup.net.did(r), "timeline", 1) for r in setup.readers))
    took["readers"] = time.perf_counter() - started
    started = time.perf_counter()
    counts["follows"] = bulk(config.by_nsid(FOLLOW).table, records.COLUMNS, record_rows(setup.follow_rows()))
    took["follows"] = time.perf_counter() - started
    started = time.perf_counter()
    post = config.by_nsid(POST)
    counts["posts"] = bulk(post.table, records.COLUMNS, record_rows(by_kind(POST)),
                           after=lambda batch: search.index(post, [(row[0], row[4]) for row in batch]))
    counts["reposts"] = bulk(config.by_nsid(REPOST).table, records.COLUMNS, record_rows(by_kind(REPOST)))
    counts["profiles"] = bulk(config.by_nsid(PROFILE).table, records.COLUMNS,
                              record_rows(row[1:] for row in setup.profile_rows()))
    took["records"] = time.perf_counter() - started
    started = time.perf_counter()
    counts["items"] = bulk("feed_items", ("actor", "uri", "collection", "time_us", "subject"), setup.item_rows())
    took["items"] = time.perf_counter() - started
    started = time.perf_counter()
    with db.atomic():
        for statement in dropped:
            db.execute_sql(statement)
    took["indexes"] = time.perf_counter() - started
    if not sqlite:
        # An instance's PostgreSQL has had autovacuum's ANALYZE; a bulk load has not. (SQLite
        # is never analyzed by Feather, so neither is it here.)
        started = time.perf_counter()
        db.execute_sql("ANALYZE")
        took["analyze"] = time.perf_counter() - started
    return {"took": took, "counts": counts}


GROUPS = (("feed_items", "feed_items"), ("feed_records_", "records"), ("feed_search_", "search"))


def sizes() -> dict:
    """Bytes in use now: the whole database (as the disk guard counts it), its feed_items rows, and
    by part (each table with its indexes): feed_items, the records tables, the search index, other."""
    from feather import sql  # noqa: PLC0415  the caller made the app
    from feather.db import current_dialect, db  # noqa: PLC0415
    from feather.jetstream import store  # noqa: PLC0415

    if current_dialect().is_sqlite:
        db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        owner = dict(sql.rows("SELECT name, tbl_name FROM sqlite_master"))
        tables = sql.rows("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
        tables = [(owner.get(name, name), size) for name, size in tables]
    else:
        tables = sql.rows("SELECT tablename, pg_total_relation_size(quote_ident(tablename)) FROM pg_tables"
                          " WHERE schemaname = current_schema()")
    parts = dict.fromkeys([g for _, g in GROUPS] + ["other"], 0)
    for table, size in tables:
        parts[next((g for prefix, g in GROUPS if table.startswith(prefix)), "other")] += int(size)
    return {"total": store.db_size_bytes(), "parts": parts, "items": sql.scalar("SELECT count(*) FROM feed_items")}


def _copy_value(value) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, int):
        return str(value)
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _copy_line(row) -> str:
    """One row in COPY's text format."""
    return "\t".join(map(_copy_value, row)) + "\n"


def drop_indexes(tables: list[str]) -> list[str]:
    """Drop the secondary indexes of tables (not those behind a primary key or constraint) and
    return the statements that make them again, exactly as the migrations and ensure_schema
    wrote them: a bulk load then builds each in one sorted pass instead of one random insert per
    row. An index grown by random inserts is less dense, so a long-running instance's indexes
    can be larger than the setup's (docs/performance.md, "Scale", allows for it)."""
    from feather import sql  # noqa: PLC0415  the caller made the app
    from feather.db import current_dialect, db  # noqa: PLC0415

    marks = ", ".join("?" * len(tables))
    if current_dialect().is_sqlite:
        rows = sql.rows(f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
                        f" AND tbl_name IN ({marks})", tables)
    else:
        rows = sql.rows(f"SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
                        f" AND tablename IN ({marks}) AND indexname NOT IN (SELECT conname FROM pg_constraint)",
                        tables)
    with db.atomic():
        for name, _ in rows:
            db.execute_sql(f"DROP INDEX {name}")
    return [statement for _, statement in rows]
