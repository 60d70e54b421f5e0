"""The "bare SQL" baseline of bench/ingest.py: the final rows the feeds store holds after a log,
written by a minimal script, so the ingest table shows how far the service is from what the
database itself can do.

The script keeps the whole state in Python dicts (the records, who follows whom, every timeline
row) and replays the log event by event with the feeds store's rules (plan.py and batch.py, as
each event alone would have them):

- a create or update stores the record (compact JSON, time = min(createdAt, the event's time));
  the same CID again, or a write at or before the URI's tombstone, changes nothing;
- a delete of a stored record removes it and leaves a tombstone; a deleted post leaves every feed;
- a post write reaches every current follower of its author (one row per (uri, actor)); an edit
  that moves its time moves every existing row of it;
- a first follow create copies the subject's newest `followBackfill` records of each target into
  the follower's feed; an unfollow removes the subject's rows of each target from the follower's
  feed unless another follow of the pair remains.

Per batch of the engine's size it computes the net change of each table (rows gone, rows whose
values changed, rows new) and only then, timed, writes it: one prepared `executemany` per table
and kind (on PostgreSQL a server-side PREPARE driven by psycopg2's execute_batch), one transaction
per batch, with the service's pragmas on SQLite. The planning is not timed: the figure is the
database's side alone. tests/test_bench_ingest.py checks that these rows are the service's.

Not written: the full-text index of searchable collections, the other features' tables (sync,
the catalogue, identities) and the cursor. The baseline does less than the service, never more.
"""
from __future__ import annotations

import heapq
import time
from datetime import datetime

import orjson

FOLLOW, POST, REPOST, PROFILE = ("app.bsky.graph.follow", "app.bsky.feed.post", "app.bsky.feed.repost",
                                 "app.bsky.actor.profile")
# The built-in feeds config (feather/feeds/config.py DEFAULT_TOML), which bench/ingest.py runs:
# both feeds follow app.bsky.graph.follow; `timeline` targets posts and reposts, `posts` posts only.
# feed_items has no feed column, so their rows are one set. followBackfill 100, maxItems 200.
TABLES = {FOLLOW: "feed_records_follow", POST: "feed_records_post", REPOST: "feed_records_repost",
          PROFILE: "feed_records_profile"}
TARGETS = (POST, REPOST)
BACKFILL = 100
BATCH_EVENTS = 500  # the engine's batch (feather/jetstream/tuning.py batch_events)
RECORD_COLUMNS = ("uri", "did", "rkey", "cid", "record", "time_us")  # + indexed_at, arrival (clocks)
ITEM_COLUMNS = ("actor", "uri", "collection", "time_us", "subject")


def _time_us(record, source_us: int) -> int:
    created = record.get("createdAt") if isinstance(record, dict) else None
    if not isinstance(created, str):
        return source_us
    try:
        stamp = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return source_us
    if stamp.tzinfo is None:
        return source_us
    return min(int(stamp.timestamp()) * 1_000_000 + stamp.microsecond, source_us)


def _did(value) -> str | None:
    return value if isinstance(value, str) and value.startswith("did:") and len(value) <= 2048 else None


def _reposted(record) -> str | None:
    subject = record.get("subject") if isinstance(record, dict) else None
    uri = subject.get("uri") if isinstance(subject, dict) else None
    return uri if isinstance(uri, str) and uri.startswith("at://") and len(uri) <= 1024 else None


class Model:
    """The feeds store's tables as dicts, changed event by event."""

    def __init__(self):
        self.records = {table: {} for table in TABLES.values()}  # uri -> (uri, did, rkey, cid, text, time_us)
        self.stones: dict[str, int] = {}
        self.by_author = {nsid: {} for nsid in TARGETS}  # did -> set of uris
        self.followers: dict[str, dict[str, int]] = {}  # subject -> {follower: live follow records}
        self.items: dict[tuple[str, str], tuple] = {}  # (uri, actor) -> (collection, time_us, subject)
        self.item_actors: dict[str, set[str]] = {}  # uri -> actors with a row of it
        self.actor_items: dict[str, set[str]] = {}  # actor -> uris in their feed
        self.before: dict[tuple[str, str], tuple | None] = {}  # this batch's touched rows, as they were

    def _touch(self, key) -> None:
        if key not in self.before:
            self.before[key] = self.items.get(key)

    # --- feed_items ---------------------------------------------------------------------------
    def _add(self, uri, actor, nsid, time_us, subject) -> None:
        if (uri, actor) not in self.items:  # ON CONFLICT DO NOTHING
            self._touch((uri, actor))
            self.items[(uri, actor)] = (nsid, time_us, subject)
            self.item_actors.setdefault(uri, set()).add(actor)
            self.actor_items.setdefault(actor, set()).add(uri)

    def _drop(self, uri, actor) -> None:
        self._touch((uri, actor))
        del self.items[(uri, actor)]
        self.item_actors[uri].discard(actor)
        self.actor_items[actor].discard(uri)

    def _unfollow(self, follower: str, subject: str) -> None:
        if self.followers.get(subject, {}).get(follower):
            return  # another follow of the pair still justifies the rows
        for nsid in TARGETS:
            prefix = f"at://{subject}/{nsid}/"
            for uri in [u for u in self.actor_items.get(follower, ()) if u.startswith(prefix)]:
                if self.items[(uri, follower)][0] == nsid:
                    self._drop(uri, follower)

    def _follow_count(self, subject: str | None, follower: str, step: int) -> None:
        if subject is None:
            return
        counts = self.followers.setdefault(subject, {})
        counts[follower] = counts.get(follower, 0) + step
        if counts[follower] <= 0:
            del counts[follower]

    # --- one event ----------------------------------------------------------------------------
    def apply(self, frame: dict) -> None:
        commit = frame.get("commit")
        if frame.get("kind") != "commit" or not commit or commit.get("collection") not in TABLES:
            return
        did, nsid, rkey, op = frame["did"], commit["collection"], commit["rkey"], commit["operation"]
        table = self.records[TABLES[nsid]]
        uri = f"at://{did}/{nsid}/{rkey}"
        prior = table.get(uri)
        if op == "delete":
            if prior is None:
                return  # a delete of what is not stored: a replay
            del table[uri]
            self.stones[uri] = max(frame["time_us"], self.stones.get(uri, -1))
            if nsid in TARGETS:
                self.by_author[nsid][did].discard(uri)
                for actor in list(self.item_actors.get(uri, ())):
                    self._drop(uri, actor)
            if nsid == FOLLOW:
                subject = _did(orjson.loads(prior[4]).get("subject"))
                self._follow_count(subject, did, -1)
                if subject is not None:
                    self._unfollow(did, subject)
            return
        if frame["time_us"] <= self.stones.get(uri, -1) or (prior is not None and prior[3] == commit["cid"]):
            return
        record = commit["record"]
        text = orjson.dumps(record).decode()
        time_us = _time_us(record, frame["time_us"])
        table[uri] = (uri, did, rkey, commit["cid"], text, time_us)
        if nsid == FOLLOW:
            before = _did(orjson.loads(prior[4]).get("subject")) if prior is not None else None
            after = _did(record.get("subject"))
            self._follow_count(before, did, -1)
            self._follow_count(after, did, +1)
            if before is not None and before != after:
                self._unfollow(did, before)
            if op == "create" and prior is None and after is not None:
                for target in TARGETS:
                    uris = self.by_author[target].get(after, ())
                    stored = self.records[TABLES[target]]
                    newest = heapq.nsmallest(BACKFILL, uris, key=lambda u, s=stored: (-s[u][5], u))
                    for u in newest:
                        rec = stored[u]
                        subject = _reposted(orjson.loads(rec[4])) if target == REPOST else None
                        self._add(u, did, target, rec[5], subject)
        if nsid in TARGETS:
            self.by_author[nsid].setdefault(did, set()).add(uri)
            subject = _reposted(record) if nsid == REPOST else None
            if prior is not None and nsid == REPOST and _reposted(orjson.loads(prior[4])) != subject:
                for actor in list(self.item_actors.get(uri, ())):  # reposts something else now
                    self._drop(uri, actor)
            if prior is None or prior[5] != time_us:  # the edit's time resync
                for actor in self.item_actors.get(uri, ()):
                    old = self.items[(uri, actor)]
                    self._touch((uri, actor))
                    self.items[(uri, actor)] = (old[0], time_us, old[2])
            for follower in self.followers.get(did, ()):
                self._add(uri, follower, nsid, time_us, subject)

    # --- what the tables hold -----------------------------------------------------------------
    def snapshot_records(self, keys) -> dict:
        return {(t, uri): self.records[t].get(uri) for t, uri in keys}

    def item_rows(self) -> list[tuple]:
        return sorted((actor, uri, nsid, t, subject) for (uri, actor), (nsid, t, subject) in self.items.items())

    def record_rows(self, table: str) -> list[tuple]:
        return sorted(self.records[table].values())


class Batch:
    """One transaction's net writes."""

    def __init__(self):
        self.record_deletes: dict[str, list] = {}  # table -> [(uri,)]
        self.record_upserts: dict[str, list] = {}  # table -> [(uri, did, rkey, cid, record, time_us)]
        self.stones: list[tuple] = []  # (uri, time_us)
        self.item_deletes: list[tuple] = []  # (uri, actor)
        self.item_updates: list[tuple] = []  # (time_us, subject, collection, uri, actor)
        self.item_inserts: list[tuple] = []  # (actor, uri, collection, time_us, subject)


def plan(frames: list[dict], batch_events: int = BATCH_EVENTS) -> tuple[Model, list[Batch]]:
    """The log replayed into a Model, and each batch's net writes against the state before it."""
    model = Model()
    batches = []
    for start in range(0, len(frames), batch_events):
        chunk = frames[start:start + batch_events]
        rec_keys = set()
        for f in chunk:
            c = f.get("commit")
            if f.get("kind") == "commit" and c and c.get("collection") in TABLES:
                rec_keys.add((TABLES[c["collection"]], f"at://{f['did']}/{c['collection']}/{c['rkey']}"))
        rec_before = model.snapshot_records(rec_keys)
        stones_before = dict(model.stones)
        model.before = {}
        for f in chunk:
            model.apply(f)
        b = Batch()
        for (t, uri), old in sorted(rec_before.items()):
            new = model.records[t].get(uri)
            if new is None and old is not None:
                b.record_deletes.setdefault(t, []).append((uri,))
            elif new is not None and new != old:
                b.record_upserts.setdefault(t, []).append(new)
        b.stones = sorted((u, t) for u, t in model.stones.items() if stones_before.get(u) != t)
        for key, old in model.before.items():
            new = model.items.get(key)
            if old is None and new is not None:
                b.item_inserts.append((key[1], key[0], *new))
            elif old is not None and new is None:
                b.item_deletes.append(key)
            elif new != old:
                b.item_updates.append((new[1], new[2], new[0], *key))
        b.item_deletes.sort()
        b.item_updates.sort()
        b.item_inserts.sort()
        batches.append(b)
    return model, batches


# --- the timed writer ------------------------------------------------------------------------------

def _statements(q):
    upsert = (" ON CONFLICT (uri) DO UPDATE SET cid = excluded.cid, record = excluded.record,"
              " time_us = excluded.time_us, indexed_at = excluded.indexed_at, arrival = excluded.arrival")
    out = {}
    for table in TABLES.values():
        out[("del", table)] = q(f"DELETE FROM {table} WHERE uri = ?")
        out[("up", table)] = q(f"INSERT INTO {table} (uri, did, rkey, cid, record, time_us, indexed_at, arrival)"
                               f" VALUES (?, ?, ?, ?, ?, ?, ?, ?){upsert}")
    out["stone"] = q("INSERT INTO feed_tombstones (uri, time_us) VALUES (?, ?)"
                     " ON CONFLICT (uri) DO UPDATE SET time_us = excluded.time_us")
    out["item_del"] = q("DELETE FROM feed_items WHERE uri = ? AND actor = ?")
    out["item_up"] = q("UPDATE feed_items SET time_us = ?, subject = ?, collection = ? WHERE uri = ? AND actor = ?")
    out["item_ins"] = q("INSERT INTO feed_items (actor, uri, collection, time_us, subject) VALUES (?, ?, ?, ?, ?)")
    return out


def _batch_rows(b: Batch):
    """(statement key, rows) in the order a batch writes them; record rows gain the two clocks."""
    now = time.time_ns() // 1000
    for table, rows in b.record_deletes.items():
        yield ("del", table), rows
    for table, rows in b.record_upserts.items():
        yield ("up", table), [(*r, now, now) for r in rows]
    yield "stone", b.stones
    yield "item_del", b.item_deletes
    yield "item_up", b.item_updates
    yield "item_ins", b.item_inserts


def write_sqlite(path: str, batches: list[Batch], pragmas: dict) -> float:
    """Seconds to write every batch, one transaction each; a PASSIVE checkpoint about once a
    second, as the service's checkpointer does beside its writer."""
    import sqlite3  # noqa: PLC0415  the child's own connection

    conn = sqlite3.connect(path, isolation_level=None)
    for name, value in pragmas.items():
        conn.execute(f"PRAGMA {name} = {value}")
    statements = _statements(lambda s: s)
    started = last_checkpoint = time.perf_counter()
    for b in batches:
        conn.execute("BEGIN")
        for key, rows in _batch_rows(b):
            if rows:
                conn.executemany(statements[key], rows)
        conn.execute("COMMIT")
        if time.perf_counter() - last_checkpoint >= 1.0:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            last_checkpoint = time.perf_counter()
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


def write_postgres(url: str, batches: list[Batch]) -> float:
    """Seconds to write every batch, one transaction each, through server-side prepared statements
    (PREPARE once, EXECUTE per row, sent 100 rows a round trip by execute_batch)."""
    import psycopg2  # noqa: PLC0415  the child's own connection
    from psycopg2.extras import execute_batch  # noqa: PLC0415

    conn = psycopg2.connect(url)
    cur = conn.cursor()
    names, executes = {}, {}
    for i, (key, statement) in enumerate(_statements(lambda s: s).items()):
        marks = statement.count("?")
        numbered = statement
        for n in range(1, marks + 1):
            numbered = numbered.replace("?", f"${n}", 1)
        names[key] = f"bare_{i}"
        cur.execute(f"PREPARE bare_{i} AS {numbered}")
        executes[key] = f"EXECUTE bare_{i} ({', '.join(['%s'] * marks)})"
    conn.commit()
    started = time.perf_counter()
    for b in batches:
        for key, rows in _batch_rows(b):
            if rows:
                execute_batch(cur, executes[key], rows, page_size=100)
        conn.commit()
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


# --- reading the tables back (the test's comparison) --------------------------------------------------

def table_rows(connect) -> dict[str, list[tuple]]:
    """Every row the baseline writes, read back through a DB-API connection: the records tables'
    RECORD_COLUMNS, feed_items' ITEM_COLUMNS and feed_tombstones, each sorted."""
    conn = connect()
    try:
        cur = conn.cursor()
        out = {}
        for table in TABLES.values():
            cur.execute(f"SELECT {', '.join(RECORD_COLUMNS)} FROM {table}")
            out[table] = sorted(tuple(r) for r in cur.fetchall())
        cur.execute(f"SELECT {', '.join(ITEM_COLUMNS)} FROM feed_items")
        out["feed_items"] = sorted(tuple(r) for r in cur.fetchall())
        cur.execute("SELECT uri, time_us FROM feed_tombstones")
        out["feed_tombstones"] = sorted(tuple(r) for r in cur.fetchall())
        return out
    finally:
        conn.close()


def connector(database: str):
    """A DB-API connect() for a Feather DATABASE_URL (sqlite:///path or postgresql://…)."""
    if database.startswith("sqlite:///"):
        import sqlite3  # noqa: PLC0415

        return lambda: sqlite3.connect(database.removeprefix("sqlite:///"))
    import psycopg2  # noqa: PLC0415

    return lambda: psycopg2.connect(database)
