"""The catalogue's figures for the operator's status page (/admin): aggregates only, no DID.

The network tables are read inside this feature and nowhere else (a test holds every page to
that); /admin asks for these numbers through the `operator_status` hook in feather/features.py.
"""
from __future__ import annotations

from feather import sql
from feather.network import rebuild


def status(settings) -> dict:
    adoption = sql.execute("SELECT max(value), max(observed_at) FROM network_stat").fetchone()
    return {
        "indexing": settings.featherreader_network_index,
        "rows": sql.execute("SELECT count(*) FROM net_subscription").fetchone()[0],
        # At or over the floor: the feeds /network may show. The count says nothing about one feed.
        "feeds_over_floor": sql.execute("SELECT count(*) FROM net_feed_rollup WHERE subscriber_count >= ?",
                                        (settings.featherreader_net_k,)).fetchone()[0],
        "k": settings.featherreader_net_k,
        "rebuild": rebuild.status(),
        "adoption": adoption[0],
        "adoption_observed_at": adoption[1],
    }
