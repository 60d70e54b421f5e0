"""Core: a small key/value table for process-wide state (pause flags, job bookkeeping)."""


def up(m):
    m.execute(
        f"CREATE TABLE app_state ("
        f" key TEXT PRIMARY KEY,"
        f" value TEXT NOT NULL,"
        f" updated_at {m.d.bigint} NOT NULL)"
    )
