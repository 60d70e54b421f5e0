"""What a stream reports about itself: host, connection, errors, throughput and lag.

Kept apart from the socket loop so consumer.py stays about reading. `snapshot()` is what
feather.process.status publishes for /health and /admin.
"""
from __future__ import annotations

import time
from collections import deque

RATE_WINDOW_SECS = 60
# A reader's first step (the membership query of a DID-filtered stream) can outlast the first
# status publish; until it has tried a host or gone idle the stream is starting, not failing.
# Past this it is judged anyway: a reader stuck before its first step must not hide.
STARTING_GRACE_SECS = 15.0


class StreamObserver:
    def __init__(self):
        self.created_at = time.time()
        self.began = False  # the reader tried a host, went idle or hit an error
        self.host: str | None = None
        self.connected_since: float | None = None
        self.disconnected_since: float | None = time.time()  # not connected yet counts from start
        self.ever_connected = False
        self.idle_reason: str | None = None  # e.g. no account to follow: not connecting is correct
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.last_applied_at: float | None = None
        self.applied_lag_secs: float | None = None  # how far behind the last batch was when applied
        self._buckets: deque[list[int]] = deque()  # [second, events applied in it]
        self._first_second: int | None = None  # the second of this process's first applied batch

    def trying(self, host: str) -> None:
        """The host being tried: shown before any connection succeeds (an unreachable one too)."""
        self.began = True
        if self.connected_since is None:
            self.host = host

    def connected(self, host: str) -> None:
        self.host = host
        self.connected_since = time.time()
        self.disconnected_since = None
        self.ever_connected = True
        self.idle_reason = None

    def disconnected(self, reason: str | None) -> None:
        if self.connected_since is not None or self.disconnected_since is None:
            self.disconnected_since = time.time()
        self.connected_since = None
        if reason:
            self.error(reason)

    def error(self, reason: str) -> None:
        self.began = True
        self.last_error, self.last_error_at = reason[:300], time.time()

    def idle(self, reason: str | None) -> None:
        self.began = True
        self.idle_reason = reason

    def starting(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return not self.began and now - self.created_at < STARTING_GRACE_SECS

    def applied(self, count: int, newest_time_us: int) -> None:
        now = time.time()
        self.last_applied_at = now
        self.applied_lag_secs = max(0.0, now - newest_time_us / 1e6)
        second = int(now)
        if self._first_second is None:
            self._first_second = second
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += count
        else:
            self._buckets.append([second, count])
        self._trim(second)

    def events_per_sec(self, now: float | None = None) -> float:
        """Events applied per second over the last minute, or over the seconds since the first
        batch when that is shorter: a stream catching up at 4,500 events/s ten seconds after a
        start read 750 when every rate was divided by the whole minute."""
        second = int(time.time() if now is None else now)
        self._trim(second)
        span = RATE_WINDOW_SECS if self._first_second is None else \
            max(1, min(RATE_WINDOW_SECS, second - self._first_second + 1))
        return round(sum(n for _, n in self._buckets) / span, 2)

    def _trim(self, second: int) -> None:
        while self._buckets and self._buckets[0][0] <= second - RATE_WINDOW_SECS:
            self._buckets.popleft()

    def lag_secs(self, cursor_time_us: int | None, backlog: bool) -> float | None:
        """Seconds the stream is behind the wall clock.

        With events received and not yet applied, it is how old the last applied event is.
        With nothing waiting, it is how far behind the last batch was when it was applied: a
        quiet stream (a rare collection, a small DID set) is caught up, not lagging.
        """
        if backlog and cursor_time_us:
            return round(max(0.0, time.time() - cursor_time_us / 1e6), 1)
        return None if self.applied_lag_secs is None else round(self.applied_lag_secs, 1)

    def snapshot(self, cursor_time_us: int | None, backlog: bool, paused: bool) -> dict:
        return {
            "host": self.host,
            "connected": self.connected_since is not None,
            "connected_since": self.connected_since,
            "disconnected_since": self.disconnected_since,
            "ever_connected": self.ever_connected,
            "starting": self.starting(),
            "idle": self.idle_reason,
            "paused": paused,
            "cursor_time_us": cursor_time_us,
            "lag_secs": self.lag_secs(cursor_time_us, backlog),
            "events_per_sec": self.events_per_sec(),
            "last_applied_at": self.last_applied_at,
        }


# --- folding a Stream's parts into its published row (kept here so consumer.py stays the socket loop)
def refresh(stream) -> None:
    """Fold reader, writer and socket facts into the stream's row (feather.process.status publishes it)."""
    state = stream.state
    p, parts = stream.piece, (stream.reader_piece, stream.writer_piece)
    p.restarts = sum(x.restarts for x in parts)
    p.streak = max(x.streak for x in parts)
    p.state = ("stopped" if state.stopping.is_set() else
               "retrying" if any(x.state == "retrying" for x in parts) else "running")
    p.retrying_since = min((x.retrying_since for x in parts if x.retrying_since), default=None)
    errors = [(x.last_error_at, x.last_error) for x in parts if x.last_error]
    if state.obs.last_error:
        errors.append((state.obs.last_error_at, state.obs.last_error))
    if errors:
        p.last_error_at, p.last_error = max(errors)
    cursor = state.cursor.time_us if state.cursor else None
    p.extra = {**state.obs.snapshot(cursor, state.backlog(), stream.paused.is_set()),
               "stats": dict(state.stats), "subscribed": subscribed(stream)}


def subscribed(stream) -> str:
    """Which events the stream asks for, as /admin shows it: every DID, or how many."""
    if stream.sub.dids is None:
        return "every DID"
    sent = stream.sent_dids
    if sent is None or not stream.connected.is_set():
        return "by DID (none now)"
    return f"{len(sent):,} DIDs"
