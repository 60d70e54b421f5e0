"""Jetstream: one cursor row per subscription, written with the batch it covers."""


def up(m):
    m.execute(
        f"CREATE TABLE jetstream_cursor ("
        f" name TEXT PRIMARY KEY,"
        f" time_us {m.d.bigint} NOT NULL,"
        f" seq {m.d.bigint},"
        f" last_applied_at {m.d.bigint},"
        f" paused_reason TEXT,"
        f" updated_at {m.d.bigint} NOT NULL)"
    )
