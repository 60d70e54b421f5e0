"""Hybrid fan-out: authors above a feed's fanoutMaxFollowers are merged at read time.

Fan-out on write costs one row per follower; for an author with a million followers that is a
million inserts per post (docs/design.md, "Decisions"). With `fanoutMaxFollowers` set, such
an author's new posts are not copied; the author is recorded in feed_heavy_authors, and a read
adds, for each heavy author the reader follows, exactly the posts live fan-out would have
copied: those stored after the reader's follow record (`arrival` order). Everything else a
feed holds (follow backfill, first-read bootstrap, posts from while the author was light) is
still in feed_items, so the read is feed_items ∪ heavy posts, deduplicated by URI.

The merged part has no rows to prune, so a hybrid read applies the prune's own rule at read
time: only rows at or above the cap-th newest time_us of the union (ties kept). After a full
prune a fan-out feed holds exactly that set, which is what test_feeds_hybrid.py checks.
"""
from __future__ import annotations

from feather import sql
from feather.feeds.config import Feed, FeedsConfig, Target
from feather.feeds.read import mixed, query, replies, reposts
from feather.feeds.store.schema import subject_expr


def heavy_sql(config: FeedsConfig, feed: Feed, target: Target) -> str:
    """Posts by heavy authors the reader follows, stored after the follow. Params: feed, actor."""
    follow = config.collections[feed.follow].table
    table = config.collections[target.short].table
    return (f"SELECT p.uri AS uri, p.time_us AS time_us FROM {follow} fo"
            f" JOIN feed_heavy_authors h ON h.feed = ? AND h.did = {subject_expr('fo')}"
            f" JOIN {table} p ON p.did = h.did AND p.arrival > fo.arrival"
            f" WHERE fo.did = ?")


def union_sql(config: FeedsConfig, feed: Feed, target: Target) -> str:
    """Params: actor, target nsid, feed name, actor."""
    return ("SELECT uri, time_us FROM feed_items WHERE actor = ? AND collection = ?"
            f" UNION {heavy_sql(config, feed, target)}")


def feed_source(config: FeedsConfig, feed: Feed, target: Target | None, actor: str) -> query.Source:
    """What a read of the feed's target draws from; target None: a mixed feed's every target."""
    source = mixed.feed_source(config, feed, actor) if target is None else _source(config, feed, target, actor)
    replies.restrict(config, feed, actor, source)
    return source


def _source(config: FeedsConfig, feed: Feed, target: Target, actor: str) -> query.Source:
    c = config.collections[target.short]
    if feed.fanout_max_followers is None:
        repost = feed.reposts_of(target)
        if repost is not None:
            return reposts.feed_source(actor, target, repost, c)
        return query.feed_source(actor, target.nsid, c)
    union = union_sql(config, feed, target)
    union_params = [actor, target.nsid, feed.name, actor]
    source = query.Source(f"FROM ({union}) f JOIN {c.table} r ON r.uri = f.uri", list(union_params),
                          t="f.time_us", u="f.uri")
    cap = config.target_caps()[target.nsid]
    row = sql.one(f"SELECT time_us FROM ({union}) u ORDER BY time_us DESC LIMIT 1 OFFSET ?",
                  union_params + [cap - 1])
    if row is not None:
        source.where.append("f.time_us >= ?")
        source.where_params.append(row[0])
    return source
