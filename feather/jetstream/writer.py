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


def _covers(cursor, failed) -> bool:
    if failed is None or cursor is None:
        return True
    if failed.seq is not None and cursor.seq is not None:
        return cursor.seq >= failed.seq
    return cursor.time_us >= failed.time_us


class BatchWriter:
    """Mixed into Stream, which owns the queue, the flags, the socket and the counters.

    The queue holds (generation, event): an event queued under an older generation (before a
    batch failed) is dropped by the writer, whatever the order the greenlets ran in.
    """

    _failed_upto = None  # the newest event of the batch that started the current failure streak

    def _write_loop(self) -> None:
        from feather.db import db

        last_save = 0.0
        unsaved = False  # an applied cursor not on disk yet
        self._close_db()  # after a supervised restart: start from a fresh connection
        while True:
            batch = self._next_batch()
            if not batch and unsaved and not self.stopping.is_set():
                # The stream went quiet right after a batch the once-a-second rule did not save:
                # save now, so /health and a restart see the last applied position.
                unsaved = not self._save_idle_cursor()
                if not unsaved:
                    last_save = time.monotonic()
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
                except Exception as exc:
                    # Nothing was committed; reconnect from the last applied cursor and replay.
                    self.generation += 1  # before anything yields: the reader must not queue more
                    self._close_db()
                    self.stats["batch_failures"] += 1
                    # Logged with its traceback once per streak: a batch that fails on every replay
                    # would otherwise fill the log.
                    if not self.writer_piece.streak:
                        self._failed_upto = newest
                    self.writer_piece.failed(exc, f"applying a batch of {len(batch)} events; nothing of it "
                                                  "was committed, replaying from the last applied cursor")
                    self._drain_queue()
                    self.high_water = None  # what was queued is gone: take the replay in full
                    self._close_socket()
                    self.stopping.wait(1.0)
                    continue
                if save:
                    last_save = now
                unsaved = not save
                self.cursor = newest if self.cursor is None else store.Cursor(
                    max(self.cursor.time_us, newest.time_us), newest.seq or self.cursor.seq)
                self.stats["applied"] += len(batch)
                self.obs.applied(len(batch), newest.time_us)
                if self.writer_piece.streak and _covers(self.cursor, self._failed_upto):
                    # Recovered once the failed batch itself is applied, not when the replayed
                    # overlap before it is: a batch failing on every replay stays one streak.
                    self.writer_piece.recovered()
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

    def _save_idle_cursor(self) -> bool:
        from feather.db import db

        try:
            db.connect(reuse_if_open=True)
            with self.app.app_context(), db.atomic():
                store.save_cursor(self.sub.name, self.cursor)
            return True
        except Exception as exc:  # the next batch saves it anyway; say so once
            self._close_db()
            self.obs.error(f"could not save the cursor: {exc}")
            return False

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
                item = self.queue.get_nowait()  # the common case under load: no timer
            except Empty:
                if deadline is None:
                    timeout = 0.2
                else:
                    timeout = deadline - time.monotonic()
                    if timeout <= 0:
                        break
                try:
                    item = self.queue.get(timeout=timeout)
                except Empty:
                    if deadline is None:
                        return batch  # idle: the caller may save the cursor, or stop
                    break
            generation, event = item
            if generation != self.generation:
                # Queued by a reader that had not yet seen a failed batch (its put completed after
                # the drain): applying it would move the cursor past the events being replayed.
                continue
            batch.append(event)
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
