"""The ingest engine: one Stream per subscription, plus membership and disk-watermark watch.

Features register subscriptions (feather/features.py); the engine merges same-named ones,
refuses what Jetstream would refuse before connecting, and owns the greenlets.
"""
from __future__ import annotations

import logging

import gevent
from gevent.event import Event as Flag

from feather import diskguard
from feather.db import db
from feather.jetstream import hosts, store
from feather.jetstream.consumer import Stream
from feather.jetstream.subscriptions import Subscription, merge
from feather.jetstream.tuning import Tuning
from feather.process.status import Board
from feather.process.supervisor import supervise

log = logging.getLogger(__name__)

WATERMARK_CHECK_SECS = 60.0
MEMBERSHIP_POLL_SECS = 2.0
CLAIM_SECS = 2.0  # how soon a surviving process takes over a dead owner's subscriptions


class _ClaimEverything:
    """For tests and single-process use: this engine owns every subscription."""

    def try_claim(self, name: str) -> bool:
        return True

    def alive(self) -> bool:
        return True


class Engine:
    def __init__(self, app, subscriptions: list[Subscription], claims=None, board: Board | None = None,
                 tuning: Tuning | None = None):
        self.app = app
        self.tuning = tuning or Tuning()  # every stream's sizes, timings and backoff
        self.board = board or Board()
        self.claims = claims or _ClaimEverything()
        settings = app.config["FEATHER"]
        self.settings = settings
        self.subscriptions = merge(subscriptions)
        self.urls = [hosts.subscribe_url(h) for h in settings.featherreader_jetstream_hosts]
        self.streams: dict[str, Stream] = {}
        self.stopping = Flag()
        self.watermark_paused = False
        self._standby_logged: set[str] = set()
        self._prepared: set[str] = set()
        self._greenlets: list[gevent.Greenlet] = []

    def start(self) -> None:
        if not self.subscriptions:
            log.info("jetstream: no feature subscribed; no connection opened")
            return
        if not self.urls:
            raise hosts.HostRefused("FEATHERREADER_JETSTREAM_HOSTS is empty")
        for url in self.urls:  # refuse at start, not in a reconnect loop
            hosts.vet(url, self.settings.featherreader_allow_private_network)
        # Every engine names every subscription, owned here or not: /health can then tell a stream
        # nobody runs from one that was never configured.
        piece = self.board.piece("task", "jetstream-engine")
        piece.state = "running"
        piece.extra["subscriptions"] = [sub.name for sub in self.subscriptions]
        self.check_watermark()
        self.claim_round()
        # Each watcher already catches its own per-round failures; the supervisor catches the rest.
        self._greenlets = [supervise(self.board.piece("task", f"jetstream-{name}"), loop, self.stopping,
                                     self.tuning.backoff)
                           for name, loop in (("watermark", self._watch_watermark),
                                              ("membership", self._watch_membership),
                                              ("claims", self._watch_claims))]

    def claim_round(self) -> None:
        """Start a stream for every subscription this process can claim; drop all if claims were lost."""
        if not self.claims.alive() and self.streams:
            log.warning("jetstream: lost the claim connection; stopping %d stream(s) so another process "
                        "can own them", len(self.streams))
            for stream in list(self.streams.values()):
                stream.stop(timeout=5)
            self.streams.clear()
        for sub in self.subscriptions:
            if sub.name in self.streams or self.stopping.is_set():
                continue
            if not self.claims.try_claim(sub.claim_name):
                if sub.name not in self._standby_logged:
                    log.info("jetstream %s: another process owns this subscription; standing by", sub.name)
                    self._standby_logged.add(sub.name)
                continue
            if not self._prepare(sub):
                continue
            stream = Stream(sub, self.urls, app=self.app, allow_private=self.settings.featherreader_allow_private_network,
                            board=self.board, tuning=self.tuning)
            if self.watermark_paused:
                stream.paused.set()
            self.streams[sub.name] = stream
            stream.start()  # loads the saved cursor: a takeover resumes where the dead owner stopped
            log.info("jetstream %s: claimed; streaming", sub.name)

    def _prepare(self, sub: Subscription) -> bool:
        """A feature's once-per-process step before its stream loads the cursor (extra["prepare"]);
        on failure the stream stays down (its claim kept) and the next claim round tries again."""
        prepare = sub.extra.get("prepare")
        if prepare is None or sub.name in self._prepared:
            return True
        try:
            with self.app.app_context():
                prepare()
        except Exception:
            log.exception("jetstream %s: preparing the stream failed; retrying at the next claim round", sub.name)
            return False
        self._prepared.add(sub.name)
        return True

    def _watch_claims(self) -> None:
        while not self.stopping.wait(CLAIM_SECS):
            try:
                self.claim_round()
            except Exception:
                log.exception("jetstream: claim round failed")

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        for stream in self.streams.values():
            stream.stop(timeout=timeout)
        gevent.killall(self._greenlets, timeout=1)

    def refresh_membership(self, name: str | None = None) -> None:
        """Nudge streams to re-read their DID sets now (in-process callers)."""
        for stream in self.streams.values():
            if name is None or stream.sub.name == name:
                stream.update_membership()

    # --- watchers
    def _watch_membership(self) -> None:
        while not self.stopping.wait(MEMBERSHIP_POLL_SECS):
            for stream in list(self.streams.values()):
                if stream.sub.dids is None and stream.sub.active is None:
                    continue
                try:
                    with self.app.app_context(), db.connection_context():
                        stream.update_membership()
                except Exception:
                    log.exception("jetstream %s: membership refresh failed", stream.sub.name)

    def _watch_watermark(self) -> None:
        while not self.stopping.wait(WATERMARK_CHECK_SECS):
            try:
                self.check_watermark()
            except Exception:
                log.exception("jetstream: watermark check failed")

    def check_watermark(self) -> bool:
        """Pause every stream under disk pressure (feather/diskguard.py: the byte watermark, or by
        default the disk's free space); resume when it is gone. True if paused."""
        with self.app.app_context(), db.connection_context():
            found = diskguard.pressure(self.settings)
            if found is not None and not self.watermark_paused:
                log.warning("jetstream: %s; consumers stop writing and disconnect until it is relieved", found.reason)
                self._set_paused(found.reason)
            elif found is None and self.watermark_paused:
                log.info("jetstream: the disk pressure is relieved; resuming")
                self._set_paused(None)
        return self.watermark_paused

    def _set_paused(self, reason: str | None) -> None:
        self.watermark_paused = reason is not None
        for stream in self.streams.values():
            if reason:
                stream.paused.set()
                stream._close_socket()
            else:
                stream.paused.clear()
        for sub in self.subscriptions:
            try:
                store.set_paused(sub.name, reason)
            except Exception:  # a full disk may refuse even this; the pause holds regardless
                log.warning("jetstream %s: could not record the pause state", sub.name)
