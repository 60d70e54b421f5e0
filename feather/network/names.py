"""The names /network may show: opted-in accounts' handles, re-verified so they stay theirs.

A handle is a pointer that can move: after a change, the old one may belong to someone else.
So a name is shown only while its two-way check (DID document → handle → back to the DID) is
fresh; an #identity event on the live stream clears it at once (apply.py), and the maintenance
tick re-checks the oldest few each minute. Until then the page shows the DID, which cannot lie.
"""
from __future__ import annotations

import logging

from feather.db import db
from feather.network import store

log = logging.getLogger(__name__)

RECHECK_US = 24 * 3600 * 1_000_000  # each handle is verified again at least daily
FRESH_US = 2 * RECHECK_US  # shown as a handle while verified within this (one failed check is tolerated)
PER_TICK = 10


def fresh_since(now_us: int) -> int:
    return now_us - FRESH_US


def refresh(resolver, now_us: int, limit: int = PER_TICK) -> int:
    """Re-verify the handles checked longest ago; returns how many were checked."""
    dids = store.attributions_to_check(now_us - RECHECK_US, limit)
    for did in dids:
        try:
            handle = resolver.resolve_identity(did).handle  # None unless it resolves back to did
        except Exception as exc:  # unreachable PLC or PDS: keep the old check; it ages out if this persists
            log.info("network: an attribution handle could not be re-verified: %s", type(exc).__name__)
            continue
        with db.atomic():
            store.set_attribution_handle(did, handle, now_us)
    return len(dids)
