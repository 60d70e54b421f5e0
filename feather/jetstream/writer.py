"""The batch writer of a Stream: queue → batch (Tuning.batch_events or batch_secs) → one transaction.

The in-memory cursor is the last *applied* event. A failed batch commits nothing: the writer
throws the queue away, bumps the generation so the reader stops queueing, and has the reader
reconnect from the last applied cursor (every handler is idempotent, so the replay is harmless).
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import gevent
from gevent.queue import Empty

from feather.db import db
from feather.jetstream import store
from feather.jetstream.state import StreamState
from feather.jetstream.subscriptions import Subscription
from feather.jetstream.tuning import Tuning
from feather.process.supervisor import Piece

log = logging.getLogger(__name__)


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


class Writer:
    """Applies one stream's queued events; `run` is its supervised loop.

    drop_connection closes the reader's socket: after a failed batch the reader must reconnect
    from the last applied cursor, and closing the socket is what wakes it.
    """

    def __init__(self, state: StreamState, sub: Subscription, app, piece: Piece, tuning: Tuning,
                 drop_connection: Callable[[], None]):
        self.state = state
        self.sub = sub
        self.app = app
        self.piece = piece
        self.tuning = tuning
        self.drop_connection = drop_connection
        self._failed_upto: store.Cursor | None = None  # the newest event of the batch that started the streak

    def run(self) -> None:
        state = self.state
        last_save = 0.0
        unsaved = False  # an applied cursor not on disk yet
        self._close_db()  # after a supervised restart: start from a fresh connection
        while True:
            batch = self.next_batch()
            if not batch and unsaved and not state.stopping.is_set():
                # The stream went quiet right after a batch the once-a-second rule did not save:
                # save now, so /health and a restart see the last applied position. Stamped before
                # the save, as a batch is: once its commit is visible the clock may have moved on.
                stamp = time.monotonic()
                unsaved = not self._save_idle_cursor()
                if not unsaved:
                    last_save = stamp
            if batch:
                now = time.monotonic()
                newest = store.Cursor(max(e.time_us for e in batch), batch[-1].seq)
                save = now - last_save >= self.tuning.cursor_save_secs or state.stopping.is_set()
                if not self._apply(batch, newest if save else None, newest):
                    continue
                if save:
                    last_save = now
                unsaved = not save
                state.cursor = newest if state.cursor is None else store.Cursor(
                    max(state.cursor.time_us, newest.time_us), newest.seq or state.cursor.seq)
                state.stats["applied"] += len(batch)
                state.obs.applied(len(batch), newest.time_us)
                if self.piece.streak and _covers(state.cursor, self._failed_upto):
                    # Recovered once the failed batch itself is applied, not when the replayed
                    # overlap before it is: a batch failing on every replay stays one streak.
                    self.piece.recovered()
                yield_to_io()
            elif state.stopping.is_set():
                self._flush_cursor()
                self._close_db()
                return

    def _apply(self, batch: list, cursor: store.Cursor | None, newest: store.Cursor) -> bool:
        """One transaction; on failure nothing was committed and the stream replays it."""
        state = self.state
        try:
            # The writer keeps one connection for its life: opening and closing one per
            # batch cost more than the batch (pragmas on open, a WAL checkpoint on close).
            db.connect(reuse_if_open=True)
            with self.app.app_context():
                store.apply_batch(self.sub, batch, cursor)
            return True
        except Exception as exc:
            state.generation += 1  # before anything yields: the reader must not queue more
            self._close_db()
            state.stats["batch_failures"] += 1
            # Logged with its traceback once per streak: a batch that fails on every replay
            # would otherwise fill the log.
            if not self.piece.streak:
                self._failed_upto = newest
            self.piece.failed(exc, f"applying a batch of {len(batch)} events; nothing of it "
                                   "was committed, replaying from the last applied cursor")
            self._drain_queue()
            state.high_water = None  # what was queued is gone: take the replay in full
            self.drop_connection()
            state.stopping.wait(1.0)
            return False

    @staticmethod
    def _close_db() -> None:
        try:
            if not db.is_closed():
                db.close()
        except Exception:  # a broken connection is what we are getting rid of
            pass

    def _save_idle_cursor(self) -> bool:
        try:
            db.connect(reuse_if_open=True)
            with self.app.app_context(), db.atomic():
                store.save_cursor(self.sub.name, self.state.cursor)
            return True
        except Exception as exc:  # the next batch saves it anyway; say so once
            self._close_db()
            self.state.obs.error(f"could not save the cursor: {exc}")
            return False

    def _flush_cursor(self) -> None:
        """On a clean stop, make sure the last applied cursor is on disk."""
        if self.state.cursor is None:
            return
        try:
            with self.app.app_context(), db.connection_context(), db.atomic():
                store.save_cursor(self.sub.name, self.state.cursor)
        except Exception:
            log.exception("jetstream %s: could not save the cursor at shutdown", self.sub.name)

    def next_batch(self) -> list:
        """Up to batch_events events, or whatever arrived within batch_secs of the first one."""
        state, queue = self.state, self.state.queue
        batch: list = []
        deadline = None
        while len(batch) < self.tuning.batch_events:
            try:
                item = queue.get_nowait()  # the common case under load: no timer
            except Empty:
                if deadline is None:
                    timeout = 0.2
                else:
                    timeout = deadline - time.monotonic()
                    if timeout <= 0:
                        break
                try:
                    item = queue.get(timeout=timeout)
                except Empty:
                    if deadline is None:
                        return batch  # idle: the caller may save the cursor, or stop
                    break
            generation, event = item
            if generation != state.generation:
                # Queued by a reader that had not yet seen a failed batch (its put completed after
                # the drain): applying it would move the cursor past the events being replayed.
                continue
            batch.append(event)
            if deadline is None:
                deadline = time.monotonic() + self.tuning.batch_secs
            if state.stopping.is_set() and queue.empty():
                break
        return batch

    def _drain_queue(self) -> None:
        while True:
            try:
                self.state.queue.get_nowait()
            except Empty:
                return
