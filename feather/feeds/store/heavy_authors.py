"""feed_heavy_authors: this module alone writes it (docs/design.md, "Tables by owner").

An author with more than a feed's `fanoutMaxFollowers` followers is marked here by ingest's batch
(ingest/batch.py decides who); from then on live fan-out skips them and readers merge their posts
from the records store (read/hybrid.py reads the table).
"""
from __future__ import annotations

from feather.feeds.config import Feed


def mark_heavy_sql(feed: Feed, authors: list[str], now: int):
    """Mark authors heavy for feed, one statement; an author already marked keeps their time."""
    values = ", ".join(["(?, ?, ?)"] * len(authors))
    return (f"INSERT INTO feed_heavy_authors (feed, did, since_us) VALUES {values} ON CONFLICT DO NOTHING",
            [v for a in authors for v in (feed.name, a, now)])
