"""Supervision: nothing in the background dies silently.

Every long-running greenlet (a stream's reader and writer, the engine's watchers) runs under
`supervise`, and every scheduled job under `run_job`. An unexpected exception is logged once per
streak with its traceback (a loop failing every 5 s must not bury the log), the piece is
restarted after a backoff, and its state is kept in a `Piece` that `feather.process.status` publishes
for /health and /admin.
"""
from __future__ import annotations

import logging
import random
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import gevent
from gevent.event import Event as Flag

log = logging.getLogger(__name__)

BACKOFF_MIN, BACKOFF_MAX, JITTER = 1.0, 60.0, 0.25


def backoff_delay(attempt: int, rand=random.random) -> float:
    """1 s, 2 s, 4 s … capped at 60 s, each ±25 %."""
    base = min(BACKOFF_MAX, BACKOFF_MIN * (2 ** max(0, attempt)))
    return base * (1 + JITTER * (2 * rand() - 1))


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


@dataclass
class Piece:
    """What an operator needs to know about one supervised piece of background work."""

    kind: str  # "stream" | "job" | "task"
    name: str
    state: str = "starting"  # starting | running | retrying | stopped
    started_at: float | None = None
    retrying_since: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    restarts: int = 0
    streak: int = 0  # failures in a row; 0 once the piece runs (or a job succeeds) again
    # jobs
    runs: int = 0
    failures: int = 0
    last_run_at: float | None = None
    last_ok_at: float | None = None
    last_duration_ms: float | None = None
    skipped: int = 0
    next_try_at: float | None = None  # while retrying: when the next attempt is due
    extra: dict = field(default_factory=dict)  # what the piece itself reports (a stream's host, lag …)

    def failed(self, exc: BaseException, what: str) -> None:
        """Record a failure; log its traceback only when it starts a streak."""
        now = time.time()
        self.streak += 1
        self.failures += 1
        self.last_error = _describe(exc)
        self.last_error_at = now
        if self.streak == 1:
            self.retrying_since = now
            log.error("%s %s failed: %s\n%s", self.kind, self.name, what,
                      "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip())
        else:
            log.debug("%s %s failed again (%d in a row): %s", self.kind, self.name, self.streak, self.last_error)

    def recovered(self) -> None:
        """The piece is doing its work again: the streak (and its retry clock) ends."""
        if self.streak:
            log.info("%s %s recovered after %d failure(s) in a row", self.kind, self.name, self.streak)
        self.streak = 0
        self.retrying_since = self.next_try_at = None
        self.state = "running"

    def snapshot(self) -> dict:
        body = {k: v for k, v in self.__dict__.items() if k not in ("extra", "kind", "name")}
        body.update(self.extra)
        return body


def supervise(piece: Piece, target: Callable[[], None], stopping: Flag,
              delay: Callable[[int], float] | None = None) -> gevent.Greenlet:
    """Run target in a greenlet; restart it with backoff whenever it raises or returns early.

    target is a loop that returns only once `stopping` is set; returning before that is a bug
    too (a loop that fell through), and is treated like an exception. A piece that has run
    STABLE_SECS since its last start ends its streak even if it never calls recovered().
    """

    def loop() -> None:
        while not stopping.is_set():
            piece.state, piece.started_at = "running", time.time()
            try:
                target()
                if stopping.is_set():
                    break
                raise RuntimeError("the loop returned while the service was running")
            except gevent.GreenletExit:
                raise
            except Exception as exc:
                if stopping.is_set():
                    break
                if piece.streak and time.time() - (piece.started_at or 0) >= STABLE_SECS:
                    piece.recovered()
                piece.failed(exc, "restarting")
                piece.state = "retrying"
                piece.restarts += 1
                wait = (delay or backoff_delay)(piece.streak - 1)
                piece.next_try_at = time.time() + wait
                stopping.wait(wait)
        piece.state = "stopped"

    return gevent.spawn(loop)


STABLE_SECS = 60.0


def run_job(piece: Piece, func: Callable[[], None], delay: Callable[[int], float] | None = None) -> bool:
    """One scheduled run: timed and recorded; a failing job waits out a backoff before it runs again.

    Returns True when the run succeeded. Runs due while a failing job backs off are skipped
    (counted), so a job failing every 5 s is retried at 1, 2, 4 … 60 s instead, and logs once.
    """
    now = time.time()
    if piece.streak and piece.next_try_at is not None and now < piece.next_try_at:
        piece.skipped += 1
        return False
    started = time.monotonic()
    piece.last_run_at, piece.runs = now, piece.runs + 1
    try:
        func()
    except Exception as exc:
        piece.last_duration_ms = round((time.monotonic() - started) * 1000, 1)
        piece.failed(exc, "it will run again after a backoff")
        piece.state = "retrying"
        piece.next_try_at = time.time() + (delay or backoff_delay)(piece.streak - 1)
        return False
    piece.last_duration_ms = round((time.monotonic() - started) * 1000, 1)
    piece.last_ok_at = time.time()
    piece.recovered()
    return True
