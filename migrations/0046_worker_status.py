"""Operations: what each process's supervised background work is doing (issue 20).

One row per (kind, name, owner): a stream, a scheduled job or an engine task, as published every
few seconds by the process running it. /health and /admin read it, so a web-only process tells
the truth about workers that run elsewhere; a row whose heartbeat stopped is an owner that died.
`body` is the piece's state as JSON text (the same on both databases).
"""


def up(m):
    b = m.d.bigint
    m.execute(
        f"CREATE TABLE worker_status ("
        f" kind TEXT NOT NULL,"
        f" name TEXT NOT NULL,"
        f" owner TEXT NOT NULL,"  # host:pid of the publishing process
        f" heartbeat_at {b} NOT NULL,"  # Unix seconds
        f" body TEXT NOT NULL,"
        f" PRIMARY KEY (kind, name, owner))"
    )
    m.execute("CREATE INDEX worker_status_heartbeat ON worker_status (heartbeat_at)")
