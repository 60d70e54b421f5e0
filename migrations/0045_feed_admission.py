"""Feeds admission (FEED_SERVE): who is served, what changed, which authors to fetch, handles.

- feed_actors: actors whose timelines are kept (signed in here, or read a feed under `readers`);
  the feeds config's `actors` are added in memory, not stored.
- feed_admission_state: one version number, bumped by every change to who is served or whom a
  served actor follows, so the process that ingests knows when to rebuild its in-memory filter.
- feed_fetches: authors (and listRecords?actor= collections) to fetch from their PDS, and when
  that last happened. `collection = '*'` is a newly followed author: every target and profile.
- feed_identities: verified handles and when a profile was last looked for, for profiles=true.
- feed_prune_state gains the records sweep's cursor (table short name, then author DID).
"""


def up(m):
    t = m.d.byte_text
    b = m.d.bigint
    m.execute(f"CREATE TABLE feed_actors (did {t} PRIMARY KEY, source TEXT NOT NULL, added_us {b} NOT NULL)")
    m.execute(f"CREATE TABLE feed_admission_state (id INTEGER PRIMARY KEY CHECK (id = 1), version {b} NOT NULL)")
    m.execute("INSERT INTO feed_admission_state (id, version) VALUES (1, 0)")
    m.execute(
        f"CREATE TABLE feed_fetches ("
        f" did {t} NOT NULL,"
        f" collection TEXT NOT NULL,"
        f" requested_us {b} NOT NULL,"
        f" fetched_us {b},"
        f" attempts INTEGER NOT NULL DEFAULT 0,"
        f" PRIMARY KEY (did, collection))"
    )
    # The queue: pending rows (fetched_us IS NULL) oldest first, without reading the done ones.
    m.execute("CREATE INDEX feed_fetches_pending ON feed_fetches (fetched_us, requested_us)")
    m.execute(
        f"CREATE TABLE feed_identities ("
        f" did {t} PRIMARY KEY,"
        f" handle TEXT,"
        f" handle_checked_us {b} NOT NULL DEFAULT 0,"
        f" profile_checked_us {b} NOT NULL DEFAULT 0)"
    )
    m.execute("ALTER TABLE feed_prune_state ADD COLUMN records_table TEXT")
    m.execute(f"ALTER TABLE feed_prune_state ADD COLUMN records_did {t}")
