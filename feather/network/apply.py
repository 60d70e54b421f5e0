"""The live projection: Jetstream events for the rss subscription collection → net_subscription.

Runs inside the engine's batch transaction (with the cursor): database work only, no network,
idempotent under replay. What is kept of a record is its canonical feed URL and createdAt;
title, siteUrl, folder and fetchHint are never read, let alone stored (docs/design.md, "The network catalogue").
"""
from __future__ import annotations

import logging
from typing import Callable

from feather.jetstream.events import Event
from feather.network import privacy, store
from feather.network.relay import COLLECTION

log = logging.getLogger(__name__)

# An account in one of these states has no public records any more; forget it.
GONE_STATUSES = frozenset({"deleted", "takendown"})


def record_fields(record) -> tuple[str | None, str | None]:
    """(canonical feed URL or None when it must not be indexed, createdAt or None)."""
    if not isinstance(record, dict):
        return None, None
    created = record.get("createdAt")
    created = created if isinstance(created, str) and len(created) <= 64 else None
    return privacy.indexable(record.get("url")), created


def handler(settings) -> Callable[[list[Event]], None]:
    max_rows = settings.featherreader_net_max_rows
    max_per_did = settings.featherreader_net_max_records_per_did

    def apply_batch(events: list[Event]) -> None:
        touched: set[str] = set()
        # Consent first: every DID's lock before any row is written (store.lock_did), in one order.
        opted_out: dict[str, bool] = {}
        for did in sorted({e.did for e in events if e.kind == "commit" and e.collection == COLLECTION}):
            store.lock_did(did)
            opted_out[did] = store.is_opted_out(did)
        inserted = False
        for event in events:
            if event.kind == "account":
                if not event.active and event.status in GONE_STATUSES:
                    store.delete_did(event.did, touched)
                continue
            if event.kind == "identity":
                # The handle may have moved to someone else: never show it again unverified.
                store.forget_attribution_handle(event.did)
                continue
            if event.kind != "commit" or event.collection != COLLECTION:
                continue
            if opted_out[event.did]:
                continue  # consent: never index an opted-out account, not even for a moment
            if event.operation == "delete":
                store.delete(event.did, event.rkey, event.time_us, touched)
                continue
            url, created = record_fields(event.record)
            if url is None:
                # A record we may not index (private URL, not a feed) replaces whatever it was.
                store.delete(event.did, event.rkey, event.time_us, touched)
                continue
            inserted |= store.upsert(event.did, event.rkey, url, created, event.time_us,
                                     max_per_did=max_per_did, touched=touched)
        if inserted:
            evicted = store.evict_over_cap(max_rows, touched)
            if evicted:
                log.info("network: evicted the %d oldest rows to stay under FEATHERREADER_NET_MAX_ROWS=%d",
                         evicted, max_rows)
        if touched:
            store.refresh_rollup(touched)

    return apply_batch
