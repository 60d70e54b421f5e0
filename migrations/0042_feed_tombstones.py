"""Feeds: delete tombstones, so a cursor replay cannot resurrect a record that was since deleted.

After a crash the stream replays from the saved cursor (minus 5 s). A replayed create of a record
that a later event deleted would otherwise be stored again and fanned out with today's state (a
follow backfilling posts made after it was deleted), and its replayed delete does not always undo
that. A create or update whose event is older than the URI's tombstone is a replay: skipped.
Tombstones behind the ingest cursor can never matter again and are swept (feeds-tombstones job).
"""


def up(m):
    t = m.d.byte_text
    b = m.d.bigint
    m.execute(f"CREATE TABLE feed_tombstones (uri {t} PRIMARY KEY, time_us {b} NOT NULL)")
    m.execute("CREATE INDEX feed_tombstones_time ON feed_tombstones (time_us)")
