"""The batch writer half of a Stream: queue → batch (1 s or 500 events) → one transaction.

The in-memory cursor is the last *applied* event. A failed batch commits nothing: the writer
throws the queue away, bumps the generation so the reader stops queueing, and reconnects from
the last applied cursor (every handler is idempotent, so the replay is harmless).
"""
from __future__ import annotations

import logging
import time

import gevent
from gevent.queue import Empty

from feather.jetstream import store

log = logging.getLogger(__name__)

BATCH_EVENTS = 500
BATCH_SECS = 1.0
CURSOR_SAVE_SECS = 1.0


def yield_to_io() -> None:
    """Let the hub poll sockets before the next batch.

    A batch holds the loop for as long as its SQL runs. gevent.sleep(0) only queues a callback,
    and the hub runs dozens of callbacks before it polls again, so a writer and reader handing
    off to each other through the queue kept web requests in the same process waiting for the
    whole catch-up. A zero timer fires only after the next poll.
    """
    hub = gevent.get_hub()
    timer = hub.loop.timer(0)
    try:
        hub.wait(timer)
    finally:
        timer.close()


class BatchWriter:
    """Mixed into Stream, which owns the queue, the flags, the socket and the counters."""

    def _write_loop(self) -> None:
        from feather.db import db

        last_save = 0.0
        while True:
            batch = self._next_batch()
            if batch:
                now = time.monotonic()
                last = batch[-1]
                newest = store.Cursor(max(e.time_us for e in batch), last.seq)
                save = now - last_save >= CURSOR_SAVE_SECS or self.stopping.is_set()
                try:
                    # The writer keeps one connection for its life: opening and closing one per
                    # batch cost more than the batch (pragmas on open, a WAL checkpoint on close).
                    db.connect(reuse_if_open=True)
                    with self.app.app_context():
                        store.apply_batch(self.sub, batch, newest if save else None)
                except Exception:
                    # Nothing was committed; reconnect from the last applied cursor and replay.
                    self._close_db()
                    self.stats["batch_failures"] += 1
                    log.exception("jetstream %s: applying a batch of %d failed; replaying", self.sub.name, len(batch))
                    self.generation += 1  # before anything yields: the reader must not queue more
                    self._drain_queue()
                    self.high_water = None  # what was queued is gone: take the replay in full
                    self._close_socket()
                    self.stopping.wait(1.0)
                    continue
                if save:
                    last_save = now
                self.cursor = newest if self.cursor is None else store.Cursor(
                    max(self.cursor.time_us, newest.time_us), newest.seq or self.cursor.seq)
                self.stats["applied"] += len(batch)
                yield_to_io()
            elif self.stopping.is_set():
                self._flush_cursor()
                self._close_db()
                return

    @staticmethod
    def _close_db() -> None:
        from feather.db import db

        try:
            if not db.is_closed():
                db.close()
        except Exception:  # a broken connection is what we are getting rid of
            pass

    def _flush_cursor(self) -> None:
        """On a clean stop, make sure the last applied cursor is on disk."""
        from feather.db import db

        if self.cursor is None:
            return
        try:
            with self.app.app_context(), db.connection_context(), db.atomic():
                store.save_cursor(self.sub.name, self.cursor)
        except Exception:
            log.exception("jetstream %s: could not save the cursor at shutdown", self.sub.name)

    def _next_batch(self) -> list:
        """Up to BATCH_EVENTS events, or whatever arrived within BATCH_SECS of the first one."""
        batch: list = []
        deadline = None
        while len(batch) < BATCH_EVENTS:
            try:
                batch.append(self.queue.get_nowait())  # the common case under load: no timer
            except Empty:
                if deadline is None:
                    timeout = 0.2
                else:
                    timeout = deadline - time.monotonic()
                    if timeout <= 0:
                        break
                try:
                    batch.append(self.queue.get(timeout=timeout))
                except Empty:
                    if deadline is None:
                        if self.stopping.is_set():
                            return batch
                        continue
                    break
            if deadline is None:
                deadline = time.monotonic() + BATCH_SECS
            if self.stopping.is_set() and self.queue.empty():
                break
        return batch

    def _drain_queue(self) -> None:
        while True:
            try:
                self.queue.get_nowait()
            except Empty:
                return
