"""One writer of the feeds tables at a time on PostgreSQL.

The ingest batch writes feed_items by record: a deleted post's rows and an edit's time resync
reach across every follower's timeline at once. The prune sweep, the records sweep, the first-read
backfill and "delete my data" write the same rows by actor, fifty actors to a transaction. Two
transactions that lock one set of rows in those two orders deadlock, and PostgreSQL then aborts
one after `deadlock_timeout` (1 s); when that is the ingest batch, the writer restarts and replays
the batch. Under a full index this struck at every prune tick: the whole service's ingest on
PostgreSQL fell from about 3,200 to 2,300-2,700 events/s with a `deadlock detected` error in the
log every ten seconds (bench/service.py).

So every transaction that writes feed_items, a records table or feed_tombstones takes this
transaction-level advisory lock before its first write to them, and they queue instead. The
waits are short: a batch and a fifty-actor slice each take tens of milliseconds. SQLite already
lets one writer in at a time, so there it is nothing.
"""
from __future__ import annotations

from feather import sql
from feather.db import current_dialect
from feather.locks import lock_key

LOCK_NAME = "feeds-writes"
_KEY = lock_key(LOCK_NAME)  # hashed once: every ingest batch takes it


def lock_writes() -> None:
    """Call inside the transaction, before its first write to a feeds table; held until commit."""
    statement = current_dialect().xact_lock_sql(_KEY)
    if statement is not None:
        sql.execute(statement)
