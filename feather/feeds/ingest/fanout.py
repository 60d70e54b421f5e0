"""Which timelines an unfollow reaches: the (follower, subject, target) triples whose rows may go.

The statements themselves belong to feed_items' owner (store/items.py): batch.write deletes the
rows of the triples here with items.unfollows_sql, which keeps whatever another follow still
justifies (items.justifying_tables). The per-event reference the batch is
checked against lives with the tests (tests/fixtures/feeds/oracle.py).
"""
from __future__ import annotations

from feather.feeds.config import FeedsConfig


def unfollow_triples(config: FeedsConfig, dropped: dict[str, set[tuple[str, str]]]) -> list[tuple[str, str, str]]:
    """dropped: follow nsid -> {(follower, subject)} that stopped following through it. The
    (follower, subject, target nsid) whose rows may go: each target of each feed on that follow
    collection (items.unfollow_clause then keeps what another follow justifies)."""
    return sorted({(f, s, t.nsid) for nsid, pairs in dropped.items() for feed in config.feeds.values()
                   if config.collections[feed.follow].nsid == nsid for t in feed.targets for f, s in pairs})
