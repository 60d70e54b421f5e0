"""Shared helpers for the graph-sync tests (no tests of its own): a fake clock, an app with a
database connection, an in-memory PDS, and shortcuts for delivering events like the engine does."""
from __future__ import annotations

import pytest

from feather import sql

ALICE = "did:plc:alice"
BOB = "did:plc:bob"
CAROL = "did:plc:carol"
DAVE = "did:plc:dave"
BSKY = "app.bsky.graph.follow"
TANGLED = "sh.tangled.graph.follow"
SIFA = "id.sifa.graph.follow"
SEMBLE = "network.cosmik.follow"
T0 = 1_800_000_000


class Clock:
    def __init__(self, now: int = T0):
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, secs: int) -> int:
        self.now += secs
        return self.now


class Env:
    """One owner's world: the app, the clock, the in-memory PDS and a runner."""

    def __init__(self, app, **budget):
        from feather.sync.memory import MemoryPds
        from feather.sync.pacer import Budget
        from feather.sync.runner import Runner

        self.app = app
        self.settings = app.config["FEATHER"]
        self.clock = Clock()
        self.pds = MemoryPds(self.clock)
        # The instance's own budget unless a test names one: the defaults docs/settings.md promises are
        # then what every runner test spends against (tests/test_sync_budget.py pins them).
        self.budget = Budget(budget["hourly"], budget["daily"], budget.get("cap")) if budget \
            else Budget.from_settings(self.settings)
        self.runner = Runner(self.pds, self.settings, self.clock, self.budget)
        self.seen = 0  # how much of the PDS log has been delivered as events

    def enable(self, owner: str, apps: list[str]) -> dict:
        from feather.sync import backfill, service

        state = service.configure(owner, self.settings, self.clock(), apps=apps, enabled=True)
        while backfill.burst(self.pds, self.clock):
            pass
        return state

    def deliver(self, *events) -> None:
        from feather.db import db
        from feather.sync import handler

        with db.atomic():
            handler.apply_follow_batch(list(events), self.clock())
            handler.apply_profile_batch(self.settings, list(events), self.clock())

    def echo(self) -> int:
        """Deliver every PDS commit not yet delivered (what Jetstream would send), in order."""
        fresh = self.pds.log[self.seen:]
        self.seen = len(self.pds.log)
        if fresh:
            self.deliver(*fresh)
        return len(fresh)

    def follow(self, owner, collection, subject, rkey=None):
        event = self.pds.user_follow(owner, collection, subject, rkey)
        return event

    def run(self, rounds: int = 10) -> int:
        done = 0
        for _ in range(rounds):
            n = self.runner.tick(concurrent=False)
            done += n
            if not n:
                break
        return done

    def queue(self, owner=ALICE):
        return sql.rows("SELECT app, kind, subject, rkey, origin, status FROM sync_queue WHERE"
                        " owner_did = ? ORDER BY id",
                        (owner,))

    def mirror(self, owner=ALICE):
        return sql.rows("SELECT app, rkey, subject, created_by_sync, state FROM sync_follow_mirror WHERE owner_did = ?"
                        " ORDER BY app, rkey", (owner,))


@pytest.fixture
def env(make_app):
    from feather.db import db

    app = make_app()
    with app.app_context(), db.connection_context():
        yield Env(app)
