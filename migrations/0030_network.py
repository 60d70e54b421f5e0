"""Network catalogue (docs/design.md, "The network catalogue"): every table is a droppable projection.

Times are µs since the epoch (BIGINT) so ordering and eviction are exact on both databases;
`feed_url` compares byte-wise (d.byte_text) so `ORDER BY feed_url` is the same everywhere.
"""


def up(m):
    t, big = m.d.byte_text, m.d.bigint
    # Capability 1: one adoption count per (key, relay). The count, never the DIDs.
    m.execute(
        f"CREATE TABLE network_stat ("
        f" key TEXT NOT NULL, source TEXT NOT NULL, value {big} NOT NULL,"
        f" truncated INTEGER NOT NULL DEFAULT 0, observed_at TEXT NOT NULL,"
        f" PRIMARY KEY (key, source))"
    )
    # One indexed public subscription record. rev_us orders writes from the live stream
    # (the event's time_us) against the rebuild (its pre-backfill cursor): newer wins.
    m.execute(
        f"CREATE TABLE net_subscription ("
        f" did TEXT NOT NULL, rkey TEXT NOT NULL, feed_url {t} NOT NULL, created_at TEXT,"
        f" indexed_at {big} NOT NULL, rev_us {big} NOT NULL,"
        f" PRIMARY KEY (did, rkey))"
    )
    m.execute("CREATE INDEX net_subscription_feed ON net_subscription (feed_url, did)")
    m.execute("CREATE INDEX net_subscription_indexed ON net_subscription (indexed_at, did, rkey)")
    m.execute(
        f"CREATE TABLE net_feed_rollup ("
        f" feed_url {t} PRIMARY KEY, subscriber_count INTEGER NOT NULL,"
        f" first_seen {big} NOT NULL, last_seen {big} NOT NULL)"
    )
    m.execute("CREATE INDEX net_feed_rollup_count ON net_feed_rollup (subscriber_count DESC, feed_url)")
    m.execute("CREATE INDEX net_feed_rollup_first ON net_feed_rollup (first_seen DESC, feed_url)")
    m.execute(f"CREATE TABLE network_state (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at {big} NOT NULL)")
    m.execute(f"CREATE TABLE net_optout (did TEXT PRIMARY KEY, created_at {big} NOT NULL)")
    # The attribution opt-in set: only these accounts may ever be named next to a feed.
    m.execute(f"CREATE TABLE net_attribution (did TEXT PRIMARY KEY, handle TEXT, created_at {big} NOT NULL)")
    # Deletes seen on the live stream, so a rebuild running beside it cannot resurrect them.
    m.execute(
        f"CREATE TABLE net_tombstone (did TEXT NOT NULL, rkey TEXT NOT NULL, time_us {big} NOT NULL,"
        f" PRIMARY KEY (did, rkey))"
    )
    m.execute("CREATE INDEX net_tombstone_time ON net_tombstone (time_us)")
    # The rebuild's work list: one row per enumerated DID, checkpointed as each finishes.
    m.execute(
        f"CREATE TABLE net_backfill_queue (did TEXT PRIMARY KEY, state TEXT NOT NULL,"
        f" records INTEGER NOT NULL DEFAULT 0, updated_at {big} NOT NULL)"
    )
    m.execute("CREATE INDEX net_backfill_queue_state ON net_backfill_queue (state, did)")
