"""Pacing: how many PDS write points sync may spend for an account, and when to retry.

Bluesky's PDS allows 5,000 points an hour and 35,000 a day per account (create 3, update 2,
delete 1). Sync keeps to its own smaller share (SYNC_HOURLY_POINTS / SYNC_DAILY_POINTS) so the
owner's own posting never runs into the limit. Spending is recorded in sync_activity when the
write is sent; a write the PDS refused before doing anything (429, 401) is refunded.
An exhausted budget only makes the lane wait: it never disables or pauses anything.
"""
from __future__ import annotations

from dataclasses import dataclass

from feather import sql

CREATE_POINTS = 3
DELETE_POINTS = 1
HOUR = 3600
DAY = 86400
MAX_ATTEMPTS = 5
BACKOFF_BASE_SECS = 60  # 1, 2, 4, 8 minutes between the five attempts
BACKOFF_MAX_SECS = 3600


def cost(kind: str) -> int:
    return CREATE_POINTS if kind == "follow" else DELETE_POINTS


def spent(owner: str, since: int) -> int:
    """Points recorded after `since` (exclusive), i.e. inside the window (since, now]."""
    return sql.scalar("SELECT SUM(points) FROM sync_activity WHERE owner_did = ? AND at > ?", (owner, since), default=0)


@dataclass(frozen=True)
class Budget:
    hourly: int
    daily: int
    app_daily_follows: int | None = None

    @classmethod
    def from_settings(cls, settings) -> "Budget":
        return cls(settings.sync_hourly_points, settings.sync_daily_points, settings.sync_app_daily_follow_cap)

    def allows(self, owner: str, points: int, now: int) -> bool:
        """True when spending `points` now keeps both rolling windows within budget."""
        if spent(owner, now - HOUR) + points > self.hourly:
            return False
        return spent(owner, now - DAY) + points <= self.daily

    def app_cap_allows(self, owner: str, app: str, now: int) -> bool:
        if self.app_daily_follows is None:
            return True
        written = sql.scalar("SELECT COUNT(*) FROM sync_activity WHERE owner_did = ? AND at > ? AND app = ?"
                             " AND kind = 'follow'", (owner, now - DAY, app), default=0)
        return written < self.app_daily_follows

    def hours_for(self, follows: int) -> float:
        """How long `follows` creates take at this pace (the preview's estimate)."""
        points = follows * CREATE_POINTS
        by_hour = points / self.hourly
        by_day = points / self.daily * 24
        return max(by_hour, by_day)


def backoff_secs(attempts: int) -> int:
    """Delay before the next try after `attempts` failed ones: 60 s, 120 s, 240 s, 480 s … capped."""
    return min(BACKOFF_MAX_SECS, BACKOFF_BASE_SECS * (2 ** max(0, attempts - 1)))


def rate_limit_until(reset_at: float | None, now: int) -> int:
    """When a 429 lets the account go again; a PDS that named no reset time gets a minute."""
    if reset_at is None or reset_at <= now:
        return now + 60
    return int(reset_at) + 1
