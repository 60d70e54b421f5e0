"""Graph sync: replay-proof unfollows (issue 13).

After a restart, a host switch or a failed batch the stream replays from cursor - 5 s (and a
sync shard may resume up to the lookback window back). The handler used to forget an observed
delete as soon as it removed the mirror row, so a replayed create brought the row back and the
replayed delete propagated again, against the follows the owner had made since.

- sync_observed_deletes remembers every follow delete the handler saw, keyed like the mirror
  (owner, app, rkey), with the event time. A replayed delete finds it and does nothing; a replayed
  create at or before that time is the create of a record that is gone: ignored.
- sync_follow_mirror.born_us: when the record came to be (create event time, TID time of a listed
  record, or for sync's own writes the time of the follow that caused them). An unfollow observed
  at time T only deletes records born before T: a follow made after the owner's last unfollow of
  that subject is never deleted. 0 means unknown (rows from before this migration): deletable.
- sync_queue.cause_us and sync_waiting.cause_us carry that cause from the event (or listing) to
  the record sync finally writes, through the waiting list.
"""


def up(m):
    b = m.d.bigint
    m.execute(
        f"CREATE TABLE sync_observed_deletes ("
        f" owner_did TEXT NOT NULL REFERENCES sync_sets (owner_did) ON DELETE CASCADE,"
        f" app TEXT NOT NULL,"
        f" rkey TEXT NOT NULL,"
        f" subject TEXT,"  # NULL when the record was never mirrored
        f" time_us {b} NOT NULL,"  # the delete event's time
        f" seen_at {b} NOT NULL,"  # Unix seconds; rows older than the lookback window are swept
        f" PRIMARY KEY (owner_did, app, rkey))"
    )
    m.execute("CREATE INDEX sync_observed_deletes_seen ON sync_observed_deletes (seen_at)")
    m.execute(f"ALTER TABLE sync_follow_mirror ADD COLUMN born_us {b} NOT NULL DEFAULT 0")
    m.execute(f"ALTER TABLE sync_queue ADD COLUMN cause_us {b} NOT NULL DEFAULT 0")
    m.execute(f"ALTER TABLE sync_waiting ADD COLUMN cause_us {b} NOT NULL DEFAULT 0")
