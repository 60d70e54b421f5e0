"""What a stream's reader (consumer.py) and writer (writer.py) share, and nothing else.

Both are handed the same StreamState when the stream is built; neither reaches into the other.
The reader puts (generation, event) on the queue and moves the high-water mark; the writer takes
batches off it, moves the applied cursor and, when a batch fails, bumps the generation so the
reader stops queueing (an event queued under an older generation is dropped by the writer,
whatever order the greenlets ran in).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from gevent.event import Event as Flag
from gevent.queue import Queue

from feather.jetstream.observe import StreamObserver
from feather.jetstream.store import Cursor


@dataclass(eq=False)
class StreamState:
    queue: Queue  # (generation, event), bounded by Tuning.queue_size
    stopping: Flag = field(default_factory=Flag)
    obs: StreamObserver = field(default_factory=StreamObserver)
    stats: Counter = field(default_factory=Counter)
    cursor: Cursor | None = None  # the last *applied* event, in memory
    # Newest event handed to the writer, and from which host: (host index, time_us, seq). Replay
    # after a reconnect to the same host re-sends what we already queued; skipping it is what lets
    # a slow writer make progress when the 5 s overlap alone holds more events than the queue.
    high_water: tuple[int, int, int | None] | None = None
    generation: int = 0  # bumped by the writer when it throws away queued events

    def backlog(self) -> bool:
        """Events received and not yet applied."""
        hw, cursor = self.high_water, self.cursor
        if not self.queue.empty():
            return True
        if hw is None or cursor is None:
            return False
        return (hw[2] or 0) > (cursor.seq or 0) if hw[2] is not None else hw[1] > cursor.time_us
