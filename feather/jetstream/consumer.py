"""One subscription's stream: its socket loop (the reader, here) and its batch writer, as two greenlets.

reader: websocket → decode → bounded queue. A full queue drops the connection instead of
        blocking the socket or growing memory; Jetstream replays from the cursor.
writer: queue → batch → apply_batch in one transaction with the cursor (writer.py).
They share a StreamState (state.py) and nothing else; the sizes and timings are the Tuning the
engine hands the stream (tuning.py).
The in-memory cursor is the last *applied* event, so a reconnect never skips what is still
in the queue, and replay overlap is harmless because every handler is idempotent.
"""
from __future__ import annotations

import json
import logging
import time

import gevent
import websocket
from gevent.event import Event as Flag
from gevent.queue import Full, Queue

from feather.db import answers_awaited, db
from feather.jetstream import hosts, observe, store
from feather.jetstream.events import MAX_FRAME_BYTES, DecodeError, decode
from feather.jetstream.state import StreamState
from feather.jetstream.subscriptions import Subscription, validate_dids
from feather.jetstream.tuning import Tuning
from feather.jetstream.writer import Writer, yield_to_io
from feather.outbound.websocket import FrameTooLarge, open_websocket
from feather.process.status import Board
from feather.process.supervisor import Piece, supervise

log = logging.getLogger(__name__)


class Stream:
    """One subscription: this class is its reader, and owns the Writer it shares a StreamState with."""

    def __init__(self, sub: Subscription, urls: list[str], *, app, allow_private: bool, board: Board | None = None,
                 tuning: Tuning | None = None):
        self.sub = sub
        self.urls = urls
        self.allow_private = allow_private
        self.tuning = tuning or Tuning()
        self.state = StreamState(Queue(maxsize=self.tuning.queue_size))
        self.paused = Flag()  # set while the disk watermark holds us off
        self.ws: websocket.WebSocket | None = None
        self.sent_dids: list[str] | None = None
        self.host_index = 0
        self.closed_for: str | None = None  # why this process closed the socket itself, if it did
        self.rewind_to: int | None = None  # a position to replay from before the next connect
        self.replay_until = 0  # frames up to this time_us came again because of a rewind (stats["replayed"])
        self.first_seen: store.Cursor | None = None  # first event this process received
        self.connected = Flag()
        # Reader and writer are supervised apart; the stream's row on the board sums them up.
        self.board = board or Board()
        self.piece = self.board.piece("stream", sub.name)
        self.reader_piece, self.writer_piece = Piece("reader", sub.name), Piece("writer", sub.name)
        self.writer = Writer(self.state, sub, app, self.writer_piece, self.tuning, drop_connection=self._close_socket)
        self.board.sources.append(self.refresh_status)
        self._greenlets: list[gevent.Greenlet] = []

    # The counters and the applied cursor, for callers holding the stream rather than its state
    # (the features' tests set a cursor to see where a reconnect would resume).
    @property
    def stats(self):
        return self.state.stats

    @property
    def cursor(self) -> store.Cursor | None:
        return self.state.cursor

    @cursor.setter
    def cursor(self, value: store.Cursor | None) -> None:
        self.state.cursor = value

    # --- lifecycle
    def start(self) -> None:
        with db.connection_context():
            self.state.cursor = store.load_cursor(self.sub.name)
        backoff = self.tuning.backoff
        self._greenlets = [supervise(self.reader_piece, self._read_loop, self.state.stopping, backoff),
                           supervise(self.writer_piece, self.writer.run, self.state.stopping, backoff)]

    def stop(self, timeout: float = 10.0) -> None:
        self.state.stopping.set()
        self._close_socket()
        gevent.joinall(self._greenlets, timeout=timeout)
        gevent.killall([g for g in self._greenlets if not g.dead], timeout=1)
        if self.refresh_status in self.board.sources:
            self.board.sources.remove(self.refresh_status)
        self.board.drop("stream", self.sub.name)

    def refresh_status(self) -> None:
        observe.refresh(self)

    # --- reader
    def _connect_cursor(self) -> int | None:
        start, gap = store.resume_point(self.state.cursor, self.first_seen, self.sub.max_lookback_us,
                                        int(time.time() * 1_000_000))
        if gap is not None:
            self._report_gap(gap)
        return start

    def _report_gap(self, saved: int) -> None:
        log.warning("jetstream %s: saved cursor %d is older than the %d µs window; events in the gap are "
                    "not replayed", self.sub.name, saved, self.sub.max_lookback_us)
        self.stats["gaps"] += 1
        if self.sub.on_gap is not None:
            try:
                self.sub.on_gap(saved)
            except Exception:
                log.exception("jetstream %s: gap callback failed", self.sub.name)

    def _membership(self) -> list[str] | None:
        if self.sub.dids is None:
            return None
        return validate_dids(self.sub.name, list(self.sub.dids()))

    def _switched_off(self) -> bool:
        return self.sub.active is not None and not self.sub.active()

    def _resume_saved(self) -> None:
        """Back from idle: start from the saved cursor, which the switch may have placed (forward
        or back), once the writer has applied what the last connection queued (else its cursor
        would move past the placed one)."""
        deadline = time.monotonic() + 30
        while self.state.backlog() and time.monotonic() < deadline and not self.state.stopping.is_set():
            self.state.stopping.wait(0.05)
        with db.connection_context():
            self.state.cursor = store.load_cursor(self.sub.name)
        self.state.high_water, self.first_seen = None, None

    def _take_rewind(self) -> bool:
        at = self.sub.rewind() if self.sub.rewind is not None else None
        if at is not None:
            self.rewind_to = at if self.rewind_to is None else min(self.rewind_to, at)
        return at is not None

    def _rewind(self) -> None:
        """Set the saved cursor back to rewind_to once the writer has applied what the last
        connection queued (its saves only move forward, and would pass the rewind)."""
        deadline = time.monotonic() + 30
        while self.state.backlog() and time.monotonic() < deadline and not self.state.stopping.is_set():
            self.state.stopping.wait(0.05)
        if self.state.high_water is not None:
            self.replay_until = max(self.replay_until, self.state.high_water[1])
        with db.connection_context(), db.atomic():
            if store.rewind_cursor(self.sub.name, self.rewind_to):
                self.stats["rewinds"] += 1
                log.info("jetstream %s: replaying from %d, where DIDs that just joined began to matter",
                         self.sub.name, self.rewind_to)
        self.rewind_to = None

    def _read_loop(self) -> None:
        try:
            self._read_forever()
        finally:  # a crash must not leave a socket open behind the supervisor's restart
            if self.connected.is_set():
                self.connected.clear()
                self.state.obs.disconnected(None)
            self._close_socket()

    def _retry(self, attempt: int, counter: str, level: int, what: str, then: str = "retry",
               exc_info: bool = False) -> int:
        """A failed step of the reader: count it, log it with the delay, wait the backoff out (or
        until the stream stops). Returns the next attempt number."""
        self.stats[counter] += 1
        delay = self.tuning.backoff(attempt)
        log.log(level, "jetstream %s: %s; %s in %.1fs", self.sub.name, what, then, delay, exc_info=exc_info)
        self.state.stopping.wait(delay)
        return attempt + 1

    def _read_forever(self) -> None:
        state, attempt, host_index = self.state, 0, self.host_index
        obs, stopping = state.obs, state.stopping
        idled = False
        while not stopping.is_set():
            if self.paused.is_set():
                self.stats["paused_checks"] += 1
                stopping.wait(1.0)
                continue
            try:
                if self._switched_off():
                    obs.idle("switched off: other streams carry these events")
                    self.stats["idle_checks"] += 1
                    idled = True
                    stopping.wait(1.0)
                    continue
                dids = self._membership()
                self._take_rewind()
            except Exception as exc:
                # A database error or a shard over Jetstream's DID limit: a fault to retry with
                # backoff, never a silent death of this reader (its users would stop syncing).
                obs.error(f"could not build the subscription: {exc}")
                attempt = self._retry(attempt, "membership_failures", logging.ERROR,
                                      f"could not build the subscription ({exc})", exc_info=attempt == 0)
                continue
            if dids is not None and not dids:
                # An empty wantedDids means *every* DID to Jetstream: never connect like that.
                obs.idle("no account to follow")
                self.stats["idle_checks"] += 1
                idled = True
                stopping.wait(1.0)
                continue
            if idled or self.rewind_to is not None:
                try:
                    if self.rewind_to is not None:
                        self._rewind()
                    self._resume_saved()
                except Exception as exc:
                    attempt = self._retry(attempt, "membership_failures", logging.ERROR,
                                          f"could not read the saved cursor ({exc})")
                    continue
                idled = False
            host = self.urls[host_index]
            obs.trying(host)
            url = hosts.with_params(host, self.sub.collections, dids, self._connect_cursor(), MAX_FRAME_BYTES)
            try:
                # The guarded socket (feather.outbound.websocket): vetted, pinned, no redirects, capped
                # frames. No websocket-client locks: only this greenlet reads, and the rare
                # options_update writes, a different direction (gevent allows one of each). UTF-8 is
                # checked by decode(), per frame: websocket-client's check costs 3x the receive time.
                self.ws = open_websocket(url, allow_private_network=self.allow_private,
                                         timeout=self.tuning.recv_timeout_secs, max_frame_bytes=MAX_FRAME_BYTES)
            except Exception as exc:
                obs.error(f"connect to {host} failed: {exc}")
                host_index = (host_index + 1) % len(self.urls)
                attempt = self._retry(attempt, "connect_failures", logging.WARNING, f"connect to {host} failed ({exc})")
                continue
            if state.high_water is not None and state.high_water[0] != host_index:
                state.high_water = None  # another instance numbers time differently: rely on idempotency
            self.host_index = host_index
            self.sent_dids = dids
            self.stats["connects"] += 1
            self.connected.set()
            obs.connected(host)
            received_before, connected_at = self.stats["received"], time.time()
            reason = self._receive(self.ws)
            self.connected.clear()
            self._close_socket()
            if stopping.is_set():
                obs.disconnected(None)
                break
            if self.closed_for is not None:  # closed on purpose: the loop's top says what comes next
                log.info("jetstream %s: closed the connection: %s", self.sub.name, self.closed_for)
                obs.disconnected(None)
                self.closed_for, attempt = None, 0
                continue
            obs.disconnected(f"disconnected from {host}: {reason}")
            if (self.stats["received"] > received_before
                    or time.time() - connected_at >= self.tuning.stable_connection_secs):
                # Only a connection that delivered events (or held up a while on a quiet stream)
                # resets the backoff: a host that accepts and drops at once must not be hammered.
                attempt = 0
            attempt = self._retry(attempt, "disconnects", logging.WARNING, f"disconnected ({reason})", "reconnecting")

    def _receive(self, ws: websocket.WebSocket) -> str:
        state, stats, stopping = self.state, self.state.stats, self.state.stopping
        generation = state.generation
        grace = self.tuning.queue_full_grace_secs
        every, awaited = self.tuning.reader_yield_frames, self.tuning.reader_yield_frames_awaited
        since = 0  # frames since the reader last let the loop poll
        while not stopping.is_set() and not self.paused.is_set():
            try:
                opcode, frame = ws.recv_data()  # bytes: decoding is the pure step's job
            except FrameTooLarge as exc:  # discarded by the socket layer unread; the socket is fine
                stats["oversized"] += 1
                log.warning("jetstream %s: %s (%d so far)", self.sub.name, exc, stats["oversized"])
                continue
            except websocket.WebSocketTimeoutException:
                return "no frame or ping within the receive timeout"
            except Exception as exc:  # closed, reset, 1006: all mean reconnect
                return f"{type(exc).__name__}: {exc}"
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                return "server closed the connection"
            if opcode != websocket.ABNF.OPCODE_TEXT:
                stats["ignored"] += 1  # we never ask for compression, so binary is noise
                continue
            stats["frames"] += 1  # what the subscription costs on the wire (/admin, bench/narrow.py)
            stats["bytes"] += len(frame)
            since += 1
            limit = awaited if awaited and answers_awaited() else every
            if limit and since >= limit:
                since = 0
                yield_to_io()  # Tuning.reader_yield_frames(_awaited)
            try:
                event = decode(frame)
            except DecodeError as exc:
                stats["malformed"] += 1
                log.warning("jetstream %s: skipped a malformed frame (%s); %d so far",
                            self.sub.name, exc, stats["malformed"])
                continue
            if event is None:
                stats["ignored"] += 1
                continue
            if generation != state.generation:
                state.high_water = None
                return "a batch failed; replaying from the last applied cursor"
            if event.time_us <= self.replay_until:
                stats["replayed"] += 1  # on the wire twice: the price of a rewind (bench/narrow.py)
            if self._already_queued(event):
                stats["replay_skipped"] += 1
                continue
            try:
                if grace > 0:
                    state.queue.put((generation, event), timeout=grace)
                else:
                    state.queue.put_nowait((generation, event))
            except Full:
                stats["queue_full"] += 1
                log.warning("jetstream %s: queue full (%d events); dropping the connection to let "
                            "Jetstream replay (%d times so far)", self.sub.name, self.tuning.queue_size,
                            stats["queue_full"])
                return "queue full"
            if generation != state.generation:  # the writer threw the queue away while we waited
                state.high_water = None
                return "a batch failed; replaying from the last applied cursor"
            state.high_water = (self.host_index, event.time_us, event.seq)
            if self.first_seen is None:
                self.first_seen = store.Cursor(event.time_us, event.seq)
            stats["received"] += 1
        return "stopping" if stopping.is_set() else "paused"

    def _already_queued(self, event) -> bool:
        hw = self.state.high_water
        if hw is None:
            return False
        if event.seq is not None and hw[2] is not None:
            return event.seq <= hw[2]  # v2: time_us is not unique, the sequence is
        return event.seq is None and event.time_us <= hw[1]

    def _close_socket(self) -> None:
        ws, self.ws = self.ws, None
        if ws is not None:
            # Send the close frame, then close the socket outright: waiting for the server's
            # reply would mean reading while the reader greenlet reads, and a plain close also
            # wakes that reader at once (gevent cancels its wait).
            try:
                ws.send_close()
            except Exception:
                pass
            try:
                ws.shutdown()
            except Exception:
                pass

    def update_membership(self) -> bool:
        """Send options_update when the DID set changed; the socket and its cursor stay as they are."""
        if not self.connected.is_set() or self.ws is None:
            return False
        if self._switched_off():
            self.closed_for = "switched off: other streams carry these events"
            self._close_socket()
            return True
        if self.sub.dids is None:
            return False
        dids = self._membership()
        if dids == self.sent_dids:
            return False
        if not dids:
            self.closed_for = "no account left to follow"  # never widen to "all DIDs"
            self._close_socket()
            return True
        if self._take_rewind():
            # What the new members wrote since they began to matter never came, and options_update
            # does not replay: reconnect from there (the read loop sets the cursor back first).
            self.closed_for = "DIDs joined: replaying from before they did"
            self._close_socket()
            return True
        message = {"type": "options_update",
                   "payload": {"wantedCollections": self.sub.collections, "wantedDids": dids}}
        try:
            self.ws.send(json.dumps(message))
        except Exception as exc:
            log.warning("jetstream %s: options_update failed (%s); reconnecting", self.sub.name, exc)
            self._close_socket()
            return False
        self.sent_dids = dids
        self.stats["options_updates"] += 1
        return True
