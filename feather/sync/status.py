"""What the owner sees: listing progress in records per app, each app's next write and why it waits,
follows waiting for a profile, and failures with their reason and next retry. Database reads only.

`overview(owner, sync_set, settings, now)` is the part of GET /api/sync and of the page's progress
fragment that explains; service.state() adds it to the counters. People are named through the
people cache (feather/sync/people.py), never by a network call here. Times read "14:05 UTC (in 12
minutes)", relative to `now`; sentences are plain words (a test fails on an internal word).
`group_activity` turns the activity rows into the page's lines: "19 people have no Sifa profile
yet; …" once, with the names, instead of nineteen lines that differ only by the person.
"""
from __future__ import annotations

from feather import sql
from feather.sync import apps as registry
from feather.sync import pacer, people
from feather.sync.preview import LIST_PAGES
from feather.sync.runner import listing_done

# The words live in words.py; views and service reach them as status.* (one import for a page).
from feather.sync.words import (  # noqa: F401
    _queue_words,
    _waiting_words,
    activity_words,
    app_name,
    app_names,
    clock,
    number,
    pause_words,
    plural,
    relative,
    when,
    write_words,
)

RECENT_FAILURES = 10  # failures listed by name; the rest are counted
FAILED_SHOWN_DAYS = 30


def budget_free_at(owner: str, budget: pacer.Budget, points: int, now: int) -> tuple[int | None, str]:
    """When spending `points` fits both rolling windows again (now when it fits now; None: never), and
    which window decides ("hourly" or "daily"). Mirrors pacer.Budget.allows."""
    spent = sql.rows("SELECT at, SUM(points) FROM sync_activity WHERE owner_did = ? AND at > ? AND points > 0"
                     " GROUP BY at ORDER BY at", (owner, now - pacer.DAY))

    def free_at(window: int, limit: int) -> int | None:
        if points > limit:
            return None
        inside = [(at, int(p)) for at, p in spent if at > now - window]
        total = sum(p for _, p in inside)
        if total + points <= limit:
            return now
        for at, p in inside:
            total -= p
            if total + points <= limit:
                return at + window  # that second's points leave the window then
        return now

    hourly, daily = free_at(pacer.HOUR, budget.hourly), free_at(pacer.DAY, budget.daily)
    if hourly is None or daily is None:
        return None, "hourly" if hourly is None else "daily"
    return (hourly, "hourly") if hourly >= daily else (daily, "daily")


def cap_free_at(owner: str, app: str, cap: int | None, now: int) -> int:
    """When the per-app daily follow cap lets the next follow go (now when it does)."""
    if cap is None or cap <= 0:
        return now
    ats = [r[0] for r in sql.rows("SELECT at FROM sync_activity WHERE owner_did = ? AND app = ? AND kind = 'follow'"
                                  " AND at > ? ORDER BY at", (owner, app, now - pacer.DAY))]
    return ats[len(ats) - cap] + pacer.DAY if len(ats) >= cap else now


# --- listing
def remember_following(owner: str, result: dict, now: int) -> None:
    """Keep the preview's per-app count of follows: the "of about N" of the next listing."""
    for row in result.get("apps", []):
        complete = bool(result.get("complete")) or row["following"] < (LIST_PAGES - 1) * 100
        sql.execute("INSERT INTO sync_app_counts (owner_did, app, following, complete, measured_at)"
                    " VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (owner_did, app) DO UPDATE SET following = excluded.following,"
                    " complete = excluded.complete, measured_at = excluded.measured_at",
                    (owner, row["app"], row["following"], int(complete), now))


def forget_following(owner: str) -> None:
    sql.execute("DELETE FROM sync_app_counts WHERE owner_did = ?", (owner,))


def _listings(owner: str, now: int) -> dict[str, dict]:
    """The newest backfill listing of each app, with the preview's count when known."""
    expected = {r[0]: r[1:] for r in sql.rows("SELECT app, following, complete, measured_at FROM sync_app_counts"
                                              " WHERE owner_did = ?", (owner,))}
    latest = {r[0]: r[1:] for r in sql.rows("SELECT app, status, listed, attempts, not_before, last_error"
                                            " FROM sync_backfill_tasks WHERE owner_did = ? AND kind = 'backfill'"
                                            " ORDER BY id", (owner,))}
    out = {}
    for app, (status, listed, attempts, not_before, error) in latest.items():
        following, complete, measured_at = expected.get(app, (None, 0, None))
        failing = status == "pending" and bool(error) and not_before > now
        out[app] = {"status": "done" if status == "done" else "listing", "records": listed,
                    "expected": following, "expected_complete": bool(complete), "measured_at": measured_at,
                    "attempts": attempts if failing else 0, "error": error if failing else None,
                    "retry_at": not_before if failing else None}
        out[app]["summary"] = _listing_words(out[app])
    return out


def _listing_words(listing: dict) -> str:
    records, expected = listing["records"], listing["expected"]
    if listing["status"] == "done":
        return f"{plural(records, 'follow')} listed"
    if expected and expected > records:
        about = "about" if listing["expected_complete"] else "more than"
        return f"{number(records)} of {about} {plural(expected, 'follow')} listed"
    return f"{plural(records, 'follow')} listed so far"


def listing_failures(owner: str, now: int) -> list[dict]:
    """Listings (backfill or the daily check) waiting to retry after a failure."""
    found = sql.rows("SELECT app, kind, attempts, not_before, last_error FROM sync_backfill_tasks WHERE owner_did = ?"
                     " AND status = 'pending' AND last_error IS NOT NULL AND not_before > ? ORDER BY id", (owner, now))
    return [{"kind": "listing", "app": app, "subject": None, "attempts": attempts, "error": error,
             "retry_at": not_before,
             "message": f"Could not list your {app_name(app)} follows ({'tried ' + plural(attempts, 'time')}):"
                        f" {error}. Trying again at {when(not_before, now)}."}
            for app, _kind, attempts, not_before, error in found]


# --- the queue
def _next_write(sync_set, app: str, head, leased: bool, budget: pacer.Budget, now: int, who: str) -> dict:
    """When the head row of the lane is written, and why not sooner. The reasons mirror the runner's."""
    _id, kind, subject, attempts, not_before, error = head
    if sync_set.paused:
        return {"at": None, "reason": "paused", "message": pause_words(sync_set.pause_reason)}
    if leased:
        return {"at": now, "reason": "writing", "message": f"Writing now: {write_words(kind, who, app)}."}
    if kind == "follow" and not listing_done(sync_set.owner_did, app):
        return {"at": None, "reason": "listing",
                "message": f"Waits until your {app_name(app)} follows are listed, so nobody is followed twice."}
    waits = [(now, "ready", "Next write within a few seconds.")]
    if sync_set.parked_until > now:
        waits.append((sync_set.parked_until, "rate_limited",
                      f"Your PDS asked Feather to wait until {when(sync_set.parked_until, now)}."))
    if not_before > now:
        if attempts:
            text = (f"Could not {write_words(kind, who, app)} (try {attempts} of {pacer.MAX_ATTEMPTS}): {error}."
                    f" Trying again at {when(not_before, now)}.")
        else:
            text = f"Your PDS refused Feather's sign-in ({error}); trying again at {when(not_before, now)}."
        waits.append((not_before, "backoff", text))
    points = pacer.CREATE_POINTS if kind == "follow" else pacer.DELETE_POINTS
    free, window = budget_free_at(sync_set.owner_did, budget, points, now)
    limit = budget.hourly if window == "hourly" else budget.daily
    if free is None:
        waits.append((None, "budget", f"One write costs more than the {window} budget of {limit} points."))
    elif free > now:
        waits.append((free, "budget", f"Feather's {window} write budget for your account ({number(limit)} points)"
                                      f" is used up until {when(free, now)}."))
    if kind == "follow" and budget.app_daily_follows is not None:
        free = cap_free_at(sync_set.owner_did, app, budget.app_daily_follows, now)
        if free > now:
            waits.append((free, "daily_cap", f"At most {plural(budget.app_daily_follows, 'new follow')} a day on"
                                             f" {app_name(app)}; the next one at {when(free, now)}."))
    never = [w for w in waits if w[0] is None]
    at, reason, text = never[0] if never else max(waits, key=lambda w: w[0])
    return {"at": at, "reason": reason, "message": text}


def overview(owner: str, sync_set, settings, now: int) -> dict:
    """The explaining part of the state: per_app, next_write, problems (docs/api.md, "Graph sync")."""
    if sync_set is None:
        return {"per_app": [], "next_write": None, "problems": []}
    budget = pacer.Budget.from_settings(settings)
    pending: dict[str, dict[str, int]] = {}
    for app, kind, n in sql.rows("SELECT app, kind, COUNT(*) FROM sync_queue WHERE owner_did = ? AND status = 'pending'"
                                 " GROUP BY app, kind", (owner,)):
        pending.setdefault(app, {})[kind] = n
    heads = {r[0]: r[1:] for r in sql.rows(
        "SELECT app, id, kind, subject, attempts, not_before, last_error FROM sync_queue WHERE id IN ("
        " SELECT MIN(id) FROM sync_queue WHERE owner_did = ? AND status = 'pending' GROUP BY app)", (owner,))}
    leased = {r[0] for r in sql.rows("SELECT app FROM sync_lanes WHERE owner_did = ? AND leased_by IS NOT NULL"
                                     " AND lease_until >= ?", (owner, now))}
    waiting = {r[0]: r[1:] for r in sql.rows("SELECT app, COUNT(*), MIN(next_check_at) FROM sync_waiting"
                                             " WHERE owner_did = ? GROUP BY app", (owner,))}
    failed = dict(sql.rows("SELECT app, COUNT(*) FROM sync_queue WHERE owner_did = ? AND status = 'failed'"
                           " AND updated_at > ? GROUP BY app", (owner, now - FAILED_SHOWN_DAYS * pacer.DAY)))
    retrying = sql.rows("SELECT app, kind, subject, attempts, not_before, last_error FROM"
                        " sync_queue WHERE owner_did = ?"
                        " AND status = 'pending' AND attempts > 0 ORDER BY updated_at DESC, id DESC LIMIT ?",
                        (owner, RECENT_FAILURES))
    gave_up = sql.rows("SELECT app, kind, subject, attempts, last_error FROM sync_queue WHERE owner_did = ?"
                       " AND status = 'failed' AND updated_at > ? ORDER BY updated_at DESC, id DESC LIMIT ?",
                       (owner, now - FAILED_SHOWN_DAYS * pacer.DAY, RECENT_FAILURES))
    dids = [h[2] for h in heads.values()] + [r[2] for r in retrying] + [r[2] for r in gave_up]
    names = people.labels(dids, now)
    listings = _listings(owner, now)

    per_app = []
    for key in sync_set.apps:
        kinds = pending.get(key, {})
        count = sum(kinds.values())
        head = heads.get(key)
        nxt = None
        if head is not None and sync_set.enabled:
            nxt = _next_write(sync_set, key, head, key in leased, budget, now, names[head[2]])
            nxt.update(subject=head[2], subject_name=names[head[2]])
        waits, next_check = waiting.get(key, (0, None))
        app = registry.BY_KEY.get(key)
        live = app is not None and registry.watched_live(app, settings)
        per_app.append({
            "app": key, "name": app_name(key),
            "listing": listings.get(key, {"status": "none", "records": 0, "expected": None, "expected_complete": False,
                                          "measured_at": None, "attempts": 0, "error": None, "retry_at": None,
                                          "summary": "Not listed yet"}),
            "queue": {"pending": count, "follows": kinds.get("follow", 0), "unfollows": kinds.get("unfollow", 0),
                      "failed": failed.get(key, 0), "next": nxt,
                      "summary": _queue_words(kinds) if count else "Nothing waiting to be written."},
            "waiting": {"count": waits, "next_check_at": next_check,
                        "message": _waiting_words(waits, key, next_check, live, now) if waits else None},
        })
    timed = [a["queue"]["next"] | {"app": a["app"], "name": a["name"]} for a in per_app if a["queue"]["next"]]
    soonest = sorted(timed, key=lambda n: (n["at"] is None, n["at"] or 0))
    problems = listing_failures(owner, now)
    for app, kind, subject, attempts, not_before, error in retrying:
        problems.append({"kind": "write", "app": app, "subject": subject, "subject_name": names[subject],
                         "attempts": attempts, "error": error, "retry_at": not_before,
                         "message": f"Could not {write_words(kind, names[subject], app)} (try {attempts} of"
                                    f" {pacer.MAX_ATTEMPTS}): {error}. Trying again at {when(not_before, now)}."})
    for app, kind, subject, attempts, error in gave_up:
        problems.append({"kind": "failed", "app": app, "subject": subject, "subject_name": names[subject],
                         "attempts": attempts, "error": error, "retry_at": None,
                         "message": f"Could not {write_words(kind, names[subject], app)}: {error}."
                                    f" Feather gave up after {plural(attempts, 'try', 'tries')}."})
    return {"per_app": per_app, "next_write": soonest[0] if soonest else None, "problems": problems}


# --- the activity list as the page shows it
WHO = "\x00person\x00"  # stands for the person while two rows' sentences are compared


class Activity(list):
    """The activity rows, newest first (the shape of GET /api/sync/activity), and `groups`: the
    page's lines, where consecutive rows of one kind and app that differ only by the person read
    as one line with a count and the names (group_activity)."""

    groups: list[dict]


def group_activity(rows: list[dict], names: dict[str, str], words) -> list[dict]:
    """Lines for the page from rows newest first. words(row, who) is the row's sentence naming the
    person `who`. A line: at (its newest row), first_at (its oldest), kind, app, message, count and
    people (the names, newest first; empty for a row about nobody)."""
    lines: list[dict] = []
    for row in rows:
        subject = row["subject"]
        shape = words(row, WHO) if subject else None
        last = lines[-1] if lines else None
        if (shape and last and last["_shape"] == shape and (last["kind"], last["app"]) == (row["kind"], row["app"])
                and subject not in last["_subjects"]):
            last["_subjects"].append(subject)
            last["people"].append(_capital(names.get(subject, people.UNKNOWN)))
            last["count"] += 1
            last["first_at"] = row["at"]
            last["message"] = _group_words(row, last["count"], words)
            continue
        lines.append({"at": row["at"], "first_at": row["at"], "kind": row["kind"], "app": row["app"],
                      "message": row["message"], "count": 1,
                      "people": [_capital(names.get(subject, people.UNKNOWN))] if subject else [],
                      "_shape": shape, "_subjects": [subject]})
    for line in lines:
        del line["_shape"], line["_subjects"]
    return lines


def _capital(label: str) -> str:
    return label[:1].upper() + label[1:] if label.startswith("someone") else label


def _group_words(row: dict, count: int, words) -> str:
    who = f"{number(count)} people"
    if row["kind"] == "waiting":
        return f"{who} have no {app_name(row['app'])} profile yet; Feather follows them when they join."
    text = words(row, who)  # "Followed 3 people on Tangled.", "Could not follow 3 people on Sifa: …"
    return text.replace("whether it was written", "whether each was written") if row["kind"] == "interrupted" else text
