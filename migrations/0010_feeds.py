"""Feeds: the fan-out table, first-read backfill claims, the prune state and hybrid bookkeeping.

The per-collection records tables depend on the feeds config, so feather/feeds/schema.py
creates them (idempotently) on first use; only the config-independent tables live here.
`uri`/`actor` compare byte-wise on both databases (d.byte_text) so keyset order and the
unfollow prefix range `uri >= 'at://S/nsid/' AND uri < 'at://S/nsid0'` mean the same thing.
"""


def up(m):
    t = m.d.byte_text
    m.execute(
        f"CREATE TABLE feed_items ("
        f" actor {t} NOT NULL,"
        f" uri {t} NOT NULL,"
        f" collection TEXT NOT NULL,"
        f" time_us {m.d.bigint} NOT NULL,"
        f" PRIMARY KEY (actor, uri))"
    )
    # Read path and per-actor cutoff delete: (actor, collection) ordered by time, uri tie-break.
    m.execute("CREATE INDEX feed_items_actor_coll_time ON feed_items (actor, collection, time_us DESC, uri)")
    m.execute("CREATE INDEX feed_items_actor_time ON feed_items (actor, time_us DESC)")
    # A target delete removes the record from every feed: `WHERE uri = ?` must not scan.
    m.execute("CREATE INDEX feed_items_uri ON feed_items (uri)")
    m.execute(
        f"CREATE TABLE feed_backfills ("
        f" actor {t} NOT NULL,"
        f" feed TEXT NOT NULL,"
        f" completed INTEGER NOT NULL DEFAULT 0,"
        f" retries INTEGER NOT NULL DEFAULT 0,"
        f" last_error TEXT,"
        f" started_at {m.d.bigint},"
        f" PRIMARY KEY (actor, feed))"
    )
    # Singleton: the rolling sweep cursor, the "a tick mutated a feed" flag and the recovery clock.
    m.execute(
        f"CREATE TABLE feed_prune_state ("
        f" id INTEGER PRIMARY KEY CHECK (id = 1),"
        f" actor {t},"
        f" dirty INTEGER NOT NULL DEFAULT 0,"
        f" last_full_pass_ms {m.d.bigint} NOT NULL DEFAULT 0,"
        f" last_slice_ms {m.d.bigint} NOT NULL DEFAULT 0)"
    )
    m.execute("INSERT INTO feed_prune_state (id) VALUES (1)")
    # Hybrid fan-out: authors whose posts a feed stopped copying (sticky, so reads keep merging
    # what was skipped even if the author later drops under fanoutMaxFollowers).
    m.execute(
        f"CREATE TABLE feed_heavy_authors ("
        f" feed TEXT NOT NULL,"
        f" did {t} NOT NULL,"
        f" since_us {m.d.bigint} NOT NULL,"
        f" PRIMARY KEY (feed, did))"
    )
