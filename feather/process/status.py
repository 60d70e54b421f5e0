"""The process's supervised pieces, published to `worker_status` for /health and /admin.

Workers may run in another process than the one answering /health (a `flask worker`, a second
gunicorn worker on SQLite, several machines on PostgreSQL), so the truth lives in the database:
every PUBLISH_SECS the process running the workers upserts one row per piece with a heartbeat.
A row whose heartbeat is older than STALE_SECS belongs to a process that stopped publishing.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Callable

from feather import sql
from feather.db import db
from feather.process.supervisor import Piece

log = logging.getLogger(__name__)

PUBLISH_SECS = 2.0
STALE_SECS = 30.0
FORGET_SECS = 86400  # rows of processes gone this long are deleted


def owner_name() -> str:
    """hostname:pid: tells an operator which process runs what; /admin shows it, /health never does
    (feather/process/verdict.py `public`)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Board:
    """Every piece this process supervises; `sources` add live facts (a stream's lag) at publish."""

    def __init__(self):
        self.pieces: dict[tuple[str, str], Piece] = {}
        self.sources: list[Callable[[], None]] = []
        self.owner = owner_name()

    def piece(self, kind: str, name: str) -> Piece:
        key = (kind, name)
        if key not in self.pieces:
            self.pieces[key] = Piece(kind, name)
        return self.pieces[key]

    def drop(self, kind: str, name: str) -> None:
        self.pieces.pop((kind, name), None)

    def publish(self) -> None:
        """Upsert every piece's state (caller provides the connection)."""
        for refresh in list(self.sources):
            refresh()
        now = sql.now_s()
        with db.atomic():
            for piece in list(self.pieces.values()):
                sql.execute("INSERT INTO worker_status (kind, name, owner, heartbeat_at, body) VALUES (?, ?, ?, ?, ?)"
                            " ON CONFLICT (kind, name, owner) DO UPDATE SET heartbeat_at = excluded.heartbeat_at,"
                            " body = excluded.body",
                            (piece.kind, piece.name, self.owner, now, json.dumps(piece.snapshot(), default=str)))
            sql.execute("DELETE FROM worker_status WHERE heartbeat_at < ?", (now - FORGET_SECS,))

    def withdraw(self) -> None:
        """On a clean stop: this process runs nothing any more."""
        sql.execute("DELETE FROM worker_status WHERE owner = ?", (self.owner,))


def read(now: float | None = None) -> dict[str, dict[str, list[dict]]]:
    """{kind: {name: [body, …]}} of rows with a live heartbeat, freshest first (caller's connection)."""
    now = time.time() if now is None else now
    rows = sql.rows("SELECT kind, name, owner, heartbeat_at, body FROM worker_status"
                    " WHERE heartbeat_at >= ? ORDER BY kind, name, heartbeat_at DESC", (int(now - STALE_SECS),))
    out: dict[str, dict[str, list[dict]]] = {}
    for kind, name, owner, heartbeat, body in rows:
        try:
            state = json.loads(body)
        except ValueError:
            continue
        state.update(owner=owner, heartbeat_at=heartbeat)
        out.setdefault(kind, {}).setdefault(name, []).append(state)
    return out
