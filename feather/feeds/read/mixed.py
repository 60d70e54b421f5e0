"""A mixed feed (`mixed = true`): every target in one timeline, newest first ("Everything").

feed_items already holds each target's rows side by side, in one key (actor, collection, time_us,
uri); a mixed read takes all of the reader's rows of the feed's targets and joins each to its
record in whichever records table holds it. `r` is then a union of the targets' tables, each
limited to the URIs the reader's feed names (one primary-key probe per row, bounded by the
caps), with a `collection` column saying which it came from. A repost target still merges into
the collection it reposts (the rules of read/reposts.py: a record once, at its newest row).
"""
from __future__ import annotations

from feather.feeds.config import Feed, FeedsConfig
from feather.feeds.read import query, reposts

COLUMNS = "uri, cid, did, rkey, record, time_us"


def feed_source(config: FeedsConfig, feed: Feed, actor: str) -> query.Source:
    parts, params = [], []
    nsids = [t.nsid for t in feed.targets]
    for target in feed.shown:
        table = config.collections[target.short].table
        repost = feed.reposts_of(target)
        if repost is not None:
            picked = "SELECT COALESCE(subject, uri) FROM feed_items WHERE actor = ? AND collection IN (?, ?)"
            picked_params = [actor, target.nsid, repost.nsid]
        else:
            picked = "SELECT uri FROM feed_items WHERE actor = ? AND collection = ?"
            picked_params = [actor, target.nsid]
        parts.append(f"SELECT {COLUMNS}, CAST(? AS TEXT) AS collection FROM {table} WHERE uri IN ({picked})")
        params += [target.nsid, *picked_params]
    union = " UNION ALL ".join(parts)
    where = ["f.actor = ?", f"f.collection IN ({', '.join('?' * len(nsids))})"]
    where_params = [actor, *nsids]
    has_reposts = any(feed.reposts_of(t) for t in feed.shown)
    if has_reposts:
        for target in feed.shown:
            repost = feed.reposts_of(target)
            if repost is not None:
                newest, newest_params = reposts.newest_clause(target, repost)
                where.append(f"(f.collection NOT IN (?, ?) OR {newest})")
                where_params += [target.nsid, repost.nsid, *newest_params]
    shown = "COALESCE(f.subject, f.uri)" if has_reposts else "f.uri"
    return query.Source(f"FROM feed_items f JOIN ({union}) r ON r.uri = {shown}", params, where, where_params,
                        t="f.time_us", u="f.uri", reposts=has_reposts, mixed=True)

