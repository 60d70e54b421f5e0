"""Timelines' part of "your data" (feather/personal.py), the newest entries on the home page, and
the names the timelines hold, offered to other features (feather/features.py add_people_source).

What is about the person: that their timeline is kept here (feed_actors), the timeline itself
(feed_items: which posts, not the posts), and its backfill bookkeeping. The posts belong to their
authors and stay while someone else served follows them; the person's own public follow records
go with the next records sweep, once they are no longer served (tasks/records_sweep.py).
"""
from __future__ import annotations

import json
import time

from flask import current_app, has_app_context

from feather import sql
from feather.features import add_people_source
from feather.feeds.read.timeline import _display_names
from feather.feeds.store import backfills, generators, items, reader_links, serial, served
from feather.feeds.tasks import backfill
from feather.feeds.store.records import _uri_in, load_many
from feather.personal import Holding, register as add, register_panel

HOME_ENTRIES = 5


def describe(did: str) -> list[str]:
    lines = []
    row = sql.one("SELECT source, added_us FROM feed_actors WHERE did = ?", (did,))
    if row is not None:
        since = time.strftime("%Y-%m-%d", time.gmtime(int(row[1]) / 1_000_000))
        lines.append(f"That your timeline is kept on this server (since {since}).")
    items = sql.scalar("SELECT COUNT(*) FROM feed_items WHERE actor = ?", (did,))
    if items:
        lines.append(f"Your timeline: {items:,} entr{'y' if items == 1 else 'ies'}, each a link to a public "
                     "post by someone you follow and its time.")
    links = len(reader_links.live(did))
    if links:
        lines.append(f"{links} private feed-reader link{'s' if links != 1 else ''} to your timeline.")
    return lines


def export(did: str) -> dict:
    row = sql.one("SELECT source, added_us FROM feed_actors WHERE did = ?", (did,))
    return {
        "served": {"source": row[0], "added_us": row[1]} if row else None,
        "timeline": [{"uri": u, "collection": c, "time_us": t} for u, c, t in sql.execute(
                                                                                          "SELECT uri, collection, time_us FROM feed_items WHERE actor = ? ORDER BY time_us DESC", (did,))],
        "backfills": [{"feed": f, "completed": bool(c)} for f, c in sql.execute(
                                                                                "SELECT feed, completed FROM feed_backfills WHERE actor = ?", (did,))],
    }


def delete(did: str) -> None:
    serial.lock_writes()
    items.drop_actor(did)
    backfills.forget(did)
    if has_app_context():
        backfill.forget_known(current_app, did)  # this process's memory of it, at once
    # What this instance remembers of generator records the person published (the records
    # themselves are in their own repo, theirs to delete).
    generators.forget_publisher(did)
    reader_links.forget(did)  # a feed-reader URL must not outlive the data it reads
    served.forget(did)  # bumps the version: the ingesting process rebuilds its filter


def newest(config, did: str, limit: int = HOME_ENTRIES) -> list[dict]:
    """The newest timeline entries with their text and who wrote them (`name`, `handle`: what
    the store holds, as on /timeline), for the home page (no network call)."""
    found = [{"uri": u, "collection": c, "time_us": t, "author": u.split("/")[2], "text": None} for u, c, t in sql.execute(
                                                                                                                           "SELECT uri, collection, time_us FROM feed_items WHERE actor = ? ORDER BY time_us DESC LIMIT ?",
                                                                                                                           (did, limit))]
    by_collection: dict[str, list[dict]] = {}
    for entry in found:
        by_collection.setdefault(entry["collection"], []).append(entry)
    for nsid, entries in by_collection.items():
        c = config.by_nsid(nsid)
        stored = load_many(c, [e["uri"] for e in entries]) if c else {}
        for e in entries:
            record = json.loads(stored[e["uri"]][1] or "null") if e["uri"] in stored else None
            if isinstance(record, dict) and isinstance(record.get("text"), str):
                e["text"] = record["text"][:280]
    known = people(config, [e["author"] for e in found])
    for e in found:
        e["handle"], e["name"] = known.get(e["author"], (None, None))
        e["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(e["time_us"] / 1_000_000))
        e["iso"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(e["time_us"] / 1_000_000))
    return found


def people(config, dids: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """{did: (verified handle or None, display name or None)} for those of dids the store can name:
    the handle feed_identities holds (unless an identity event has made it unverified since) and the
    display name of the stored profile record, as /timeline shows them. Database reads only."""
    dids = list(dict.fromkeys(d for d in dids if d))
    if not dids:
        return {}
    handles = {did: handle for did, handle, checked in _uri_in(
        "SELECT did, handle, handle_checked_us FROM feed_identities WHERE handle IS NOT NULL AND did IN", dids)
        if checked}
    names = _display_names(config, dids)
    return {did: (handles.get(did), names.get(did)) for did in dids if did in handles or did in names}


def register(app, config) -> None:
    add(app, Holding("timelines", "Timelines", describe, export, delete, order=10))
    # Other features (graph sync's pages) name people by what the timelines already hold.
    add_people_source(app, lambda dids: people(config, dids))
    if not config.feeds:
        return

    def panel(account):
        page = "timeline.page" if "timeline.page" in current_app.view_functions else None
        return "feeds/_home.html", {"entries": newest(config, account.did), "page": page}
    register_panel(app, panel, order=10)
