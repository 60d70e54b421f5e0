"""The words the owner's page and GET /api/sync use: numbers, plurals, times ("14:05 UTC (in 12
minutes)"), app names, pause reasons and one plain sentence per activity row. Pure functions of
their arguments; status.py and service.activity() call them with what they read."""
from __future__ import annotations

import time

from feather.sync import apps as registry
from feather.sync import pacer


def number(n: int) -> str:
    return f"{n:,}"


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def clock(at: int, now: int) -> str:
    """"14:05 UTC" today, "3 Mar, 14:05 UTC" this year, "3 Mar 2027, 14:05 UTC" otherwise."""
    t, n = time.gmtime(at), time.gmtime(now)
    hm = time.strftime("%H:%M UTC", t)
    if t[:3] == n[:3]:
        return hm
    day = f"{t.tm_mday} {time.strftime('%b', t)}" + ("" if t.tm_year == n.tm_year else f" {t.tm_year}")
    return f"{day}, {hm}"


def relative(at: int, now: int) -> str:
    secs = at - now
    size = abs(secs)
    if size < 60:
        return "in under a minute" if secs > 0 else "just now"
    if size < 90 * 60:
        amount = plural(int(size / 60 + 0.5), "minute")
    elif size < 36 * 3600:
        amount = plural(int(size / 3600 + 0.5), "hour")
    else:
        amount = plural(int(size / 86400 + 0.5), "day")
    return f"in {amount}" if secs > 0 else f"{amount} ago"


def when(at: int, now: int) -> str:
    return f"{clock(at, now)} ({relative(at, now)})"


def app_name(key: str) -> str:
    found = registry.BY_KEY.get(key)
    return found.name if found else key


def app_names(keys) -> str:
    names = [app_name(k) for k in keys]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1] if names else ""


def pause_words(reason: str | None) -> str:
    if reason == "paused by you":
        return "You paused sync."
    if reason == "signed out":
        return "Paused because Feather can no longer write for you: sign in again and sync resumes."
    if reason == "missing write permission":
        return "Paused because Feather lacks permission to write your follows: press Resume to grant it."
    return f"Paused: {reason}." if reason else "Paused."


def write_words(kind: str, who: str, app: str) -> str:
    return f"{'unfollow' if kind == 'unfollow' else 'follow'} {who} on {app_name(app)}"


# --- budget


def _queue_words(kinds: dict[str, int]) -> str:
    parts = [plural(kinds[k], k) for k in ("follow", "unfollow") if kinds.get(k)]
    return " and ".join(parts) + " to write."


def _waiting_words(count: int, app: str, next_check: int | None, live: bool, now: int) -> str:
    who = "person has" if count == 1 else "people have"
    joined = "as soon as they create one" if live else "once they create one"
    check = f" (next check {when(next_check, now)})" if next_check else ""
    return f"{number(count)} {who} no {app_name(app)} profile yet: Feather follows them there {joined}{check}."


# --- activity
def activity_words(row: dict, names: dict[str, str], now: int, retry: dict | None = None,
                   parked_until: int = 0) -> str:
    """One activity row as a sentence. retry: {"try", "reason", "next_at"} for retry and error rows."""
    kind, app, detail = row["kind"], row["app"], row["detail"] or ""
    who = names.get(row["subject"] or "", "")
    sentence_who = who[:1].upper() + who[1:] if who.startswith("someone") else who  # never a person's own name
    write, _, reason = detail.partition(": ") if kind in ("failed", "error") else ("", "", detail)
    write = write or ("unfollow" if row["points"] == pacer.DELETE_POINTS else "follow")
    retry = retry or {}
    again = f" Trying again at {when(retry['next_at'], now)}." if retry.get("next_at") else ""
    simple = {
        "follow": f"Followed {who} on {app_name(app)}.",
        "unfollow": f"Unfollowed {who} on {app_name(app)}.",
        "sending": f"Sending to your PDS: {write_words(write, who, app)}.",
        "interrupted": f"Interrupted while sent to your PDS: {write_words(write, who, app)}. Feather checks"
                       f" whether it was written before trying again.",
        "waiting": f"{sentence_who} has no {app_name(app)} profile yet; Feather follows them there when they join.",
        "rate_limited": "Your PDS asked Feather to slow down"
                        + (f" until {clock(parked_until, now)}." if parked_until > row["at"] else "."),
        "failed": f"Could not {write_words(write, who, app)}: {reason}. Feather gave up.",
        "error": f"Could not {write_words(write, who, app)}: something went wrong inside Feather ({reason});"
                 f" nothing reached your PDS.{again}",
        "retry": f"Could not {write_words(write, who, app)}"
                 + (f" (try {retry['try']} of {pacer.MAX_ATTEMPTS})" if retry.get("try") else "")
                 + (f": {retry.get('reason') or reason}." if retry.get("reason") or reason else ".") + again,
        "paused": pause_words(detail) if detail != "paused by you" else "You paused sync.",
        "resumed": "Sync resumed.",
        "enabled": f"Sync turned on for {app_names([k for k in detail.split(',') if k])}.",
        "disabled": "Sync turned off. Nothing already written was undone.",
    }
    if kind == "backfill_done":
        count = detail.split(" ", 1)[0]
        return (f"Finished listing your follows: {plural(int(count), 'follow')} to write." if count.isdigit()
                else "Finished listing your follows.")
    return simple.get(kind) or kind.replace("_", " ").capitalize() + "."
