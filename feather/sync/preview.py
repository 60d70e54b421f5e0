"""The preview: what turning sync on (or adding apps) would write, computed before anything is written.

Reads only: the owner's follow records on each chosen app (the same listing backfill does) and the
profile records of the subjects an app lacks, through the FollowWriter's anonymous reads. Nothing
is stored, so the owner can look as often as they like and nothing happens until they confirm.

Big accounts are bounded so a page view stays a page view: listing stops after LIST_PAGES pages per
app and profile checks after PROFILE_CHECKS subjects per profile collection; past either bound the
counts are extrapolated and the answer says so (`estimated`, `complete`).
"""
from __future__ import annotations

import math

from gevent.pool import Pool

from feather.atproto.syntax import is_valid_did
from feather.sync import apps as registry
from feather.sync import pacer
from feather.sync.follow_writer import FollowWriter, PdsError

LIST_PAGES = 50  # x 100 records: 5,000 follows per app
PROFILE_CHECKS = 150  # per profile collection (Bluesky and Semble share one)
CHECK_CONCURRENCY = 8
# Bulk following is what gets accounts labeled as spam on Bluesky ("excessive following"): past
# this many new follows on one app the preview suggests spreading them with the daily cap.
LARGE_APP_FOLLOWS = 250


def _listing(writer: FollowWriter, owner: str, app: registry.App) -> tuple[set[str], bool]:
    """The did: subjects the owner follows on app, and whether the listing was complete."""
    subjects: set[str] = set()
    cursor = None
    for _ in range(LIST_PAGES):
        page, cursor = writer.list_follows(owner, app.follow, cursor)
        subjects.update(s for _rkey, s in page if is_valid_did(s))  # Semble collection follows never sync
        if cursor is None:
            return subjects, True
    return subjects, False


def _profiles(writer: FollowWriter, subjects: list[str], collection: str) -> dict[str, bool | None]:
    """subject -> has the profile (None: their PDS did not answer; the runner would retry)."""
    def check(subject: str):
        try:
            return subject, writer.profile_exists(subject, collection)
        except PdsError:
            return subject, None

    if len(subjects) < 2:
        return dict(map(check, subjects))
    # Strangers' PDSes answer slowly: a few at a time, never unbounded.
    return dict(Pool(CHECK_CONCURRENCY).imap_unordered(check, subjects))


def describe_hours(hours: float) -> str:
    if hours <= 0:
        return "no time at all"
    if hours < 1:
        return "under an hour"
    if hours < 48:
        return f"about {math.ceil(hours)} hours"
    return f"about {math.ceil(hours / 24)} days"


def compute(owner: str, keys: list[str], settings, writer: FollowWriter) -> dict:
    """Per app: follows it has, follows enabling would write, subjects that would wait for a profile;
    and how long the writes take at the pace in force. Raises PdsError when the owner's PDS fails."""
    chosen = [registry.BY_KEY[k] for k in keys]
    listed, complete = {}, True
    for app in chosen:
        listed[app.key], done = _listing(writer, owner, app)
        complete = complete and done
    everyone = set().union(*listed.values()) if listed else set()

    estimated = not complete
    verdicts: dict[str, dict[str, bool | None]] = {}  # profile collection -> subject -> verdict
    rows = []
    for app in chosen:
        missing = sorted(everyone - listed[app.key])
        known = verdicts.setdefault(app.profile, {})
        todo = [s for s in missing if s not in known][: max(0, PROFILE_CHECKS - len(known))]
        known.update(_profiles(writer, todo, app.profile))
        checked = [known[s] for s in missing if s in known]
        without = sum(1 for v in checked if v is False)
        if len(checked) < len(missing):  # extrapolate the rest from the share seen so far
            estimated = True
            without = round(without * len(missing) / len(checked)) if checked else 0
        if any(v is None for v in checked):
            estimated = True
        rows.append({"app": app.key, "name": app.name, "following": len(listed[app.key]),
                     "will_follow": len(missing) - without, "will_wait": without})
    return _with_pace(rows, settings, estimated, complete)


def _with_pace(rows: list[dict], settings, estimated: bool, complete: bool) -> dict:
    budget = pacer.Budget.from_settings(settings)
    total = sum(r["will_follow"] for r in rows)
    hours = budget.hours_for(total)  # the points budget is per account, shared by every app
    cap = budget.app_daily_follows
    if cap:
        hours = max([hours] + [r["will_follow"] / cap * 24 for r in rows])
    large = [r for r in rows if r["will_follow"] >= LARGE_APP_FOLLOWS]
    advice = None
    if large and cap is None:
        names = ", ".join(f"{r['will_follow']} on {r['name']}" for r in large)
        advice = (f"This is a large backfill ({names}). Following many accounts at once is what gets accounts "
                  f"labeled as spam on Bluesky. The operator of this instance can spread it over several days "
                  f"with SYNC_APP_DAILY_FOLLOW_CAP (most follows per app per day).")
    elif large:
        advice = (f"At most {cap} follows per app per day (SYNC_APP_DAILY_FOLLOW_CAP), so this backfill is "
                  f"spread over several days.")
    return {"apps": rows, "will_follow": total, "will_wait": sum(r["will_wait"] for r in rows),
            "hours": round(hours, 2), "duration": describe_hours(hours), "daily_follow_cap": cap,
            "large": bool(large), "advice": advice, "estimated": estimated, "complete": complete}
