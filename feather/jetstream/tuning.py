"""A stream's tuning: the sizes and timings its reader and writer work by, in one frozen value.

The engine is built with one (`Engine(..., tuning=Tuning())`) and hands it to every stream; a
test that needs a small queue or a fast reconnect builds its own, e.g.
`dataclasses.replace(Tuning(), queue_size=20, backoff=lambda attempt: 0.05)`, instead of
patching module globals. The defaults are what production runs with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from feather.process.supervisor import backoff_delay


@dataclass(frozen=True)
class Tuning:
    # Events between socket and writer. Bounded so a slow writer costs a reconnect (Jetstream
    # replays from the cursor), never memory: a full queue drops the connection.
    queue_size: int = 1024
    # How long the reader waits for room before dropping the connection. One batch period: a queue
    # that a flush empties is momentary (replay arrives faster than any writer); one that stays
    # full is the sustained fullness the drop is for. 0 drops at once.
    queue_full_grace_secs: float = 1.0
    # While it drains a backlog (a catch-up: the socket always has the next frame) the reader lets
    # the loop poll after this many frames. Otherwise it decoded until the queue was full (a whole
    # batch): a web request in the same process waited for all of it. 0 never yields between frames.
    reader_yield_frames: int = 32
    # The same while a greenlet of the process waits for a PostgreSQL answer (db.answers_awaited):
    # the writer's answer, once it has arrived, waits for the reader's next yield. Every 4 frames
    # the full index applied 7 % more than at 32; always every 4 looked like 6 % off the
    # reader-bound default mode, about the size of the noise (docs/performance.md, "Issue 36,
    # fourth pass"), so it is only while an answer is awaited. 0: as reader_yield_frames.
    reader_yield_frames_awaited: int = 4
    # A batch is one transaction: 500 events or one second of them, whichever comes first. Larger
    # batches hold the event loop (and a SQLite write lock) longer; smaller ones pay a commit each.
    batch_events: int = 500
    batch_secs: float = 1.0
    # The cursor rides along with a batch at most this often: saving it is a write of its own.
    cursor_save_secs: float = 1.0
    # Jetstream pings every 30 s; silence this long means a dead socket.
    recv_timeout_secs: float = 75.0
    # A connection that held this long resets the reconnect backoff even if it delivered nothing
    # (a quiet stream); one that drops sooner must not let a flapping host be hammered.
    stable_connection_secs: float = 60.0
    # attempt (0, 1, …) → seconds to wait before retrying a connect, a membership query or a
    # restart of the reader or writer. The default doubles from 1 s to 60 s, with jitter.
    backoff: Callable[[int], float] = backoff_delay
