"""The SQLite file's connections, kept open between uses instead of opened per request.

Opening a connection and running its ten pragmas (db.SQLITE_PRAGMAS) cost a getFeed request
about 1.15 ms, and closing it 0.37 ms, more than the page's own statements (bench/getfeed.py
--profile, docs/performance.md "Issue 36"). peewee's pool hands a greenlet a connection at
`connect()` and takes it back at `close()` (peewee's connection state is per greenlet once gevent
has patched threading), so one connection is never used by two greenlets at once: a request
holds its connection from before_request to teardown, as before; only the pragmas and the
open/close are saved. A connection handed back inside a transaction is rolled back first
(peewee's _can_reuse), so a request that failed mid-transaction cannot leak it to the next.

There is no cap on connections in use (SQLite has no server to protect, and a greenlet waiting
for one inside a request would only add latency); what the pool bounds is what it keeps idle:
each connection may hold up to the `cache_size` pragma's 32 MiB of page cache, so at most
MAX_IDLE wait between uses (the oldest goes first) and none lives longer than STALE_SECS.
"""
from __future__ import annotations

import heapq

from playhouse.pool import PooledSqliteDatabase, locked

# A gevent worker holds a connection only while a request runs Python (SQLite calls never yield),
# so a handful cover one worker's requests, its streams and its jobs; a burst beyond it opens more.
MAX_IDLE = 8
STALE_SECS = 300  # a connection older than this is closed when next handed back (its cache freed)


class SqlitePool(PooledSqliteDatabase):
    def __init__(self, database: str, max_idle: int = MAX_IDLE, **kwargs):
        self.max_idle = max_idle
        super().__init__(database, max_connections=None, stale_timeout=STALE_SECS, **kwargs)

    @locked
    def _close(self, conn, close_conn=False):
        super()._close(conn, close_conn)
        while len(self._connections) > self.max_idle:
            _stamp, _counter, oldest = heapq.heappop(self._connections)
            self._close_raw(oldest)

    def idle(self) -> int:
        """Connections waiting in the pool."""
        return len(self._connections)
