"""Ingest: store each record and fan it out, inside the engine's batch transaction.

Pure DB work, idempotent under replay: a create/update whose CID is already stored, or a
delete of a URI that is not stored, changes nothing and fans out nothing (Contrail's replay
rule). When the batch applied a feed-mutating record it sets the prune flag in the same
transaction; the prune job reads it (see prune.py for why a flag and not a direct sweep).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from feather.atproto.syntax import is_valid_did
from feather.db import db
from feather.feeds import admission as admission_db
from feather.feeds import authors, fanout, identities, records, schema
from feather.feeds.admission import Admission
from feather.feeds.config import FeedsConfig
from feather.jetstream.events import CommitEvent, IdentityEvent

log = logging.getLogger(__name__)


def _subject(record_text_or_dict) -> str | None:
    value = record_text_or_dict
    if isinstance(value, str):
        value = records.parse_value(value)
    subject = value.get("subject") if isinstance(value, dict) else None
    return subject if is_valid_did(subject) else None


@dataclass
class Priors:
    records: dict  # {uri: (cid, record JSON text, time_us) or None}
    tombstones: dict  # {uri: time_us of its latest delete}


def load_priors(config: FeedsConfig, events) -> Priors:
    """What is stored, and what was deleted, for every URI the batch touches, read up front: two
    SELECTs per collection instead of one or two per event."""
    wanted: dict = {}
    for event in events:
        coll = config.by_nsid(event.collection)
        if coll is not None:
            wanted.setdefault(coll.table, (coll, set()))[1].add(event.uri)
    priors = Priors({}, {})
    for coll, uris in wanted.values():
        ordered = sorted(uris)
        found = records.load_many(coll, ordered)
        priors.records.update((uri, found.get(uri)) for uri in uris)
        priors.tombstones.update(records.tombstones(ordered))
    return priors


def apply_event(config: FeedsConfig, event: CommitEvent, priors: Priors | None = None) -> bool:
    """Store and fan out one commit. True when it changed something (i.e. was not a replay).

    `priors` is the batch's view of stored records and tombstones (see load_priors); this keeps
    it current so a later event in the same batch sees this one.
    """
    coll = config.by_nsid(event.collection)
    if coll is None:
        return False
    nsid, uri = event.collection, event.uri
    if priors is None:
        priors = load_priors(config, [event])
    prior = priors.records[uri]
    if event.operation != "delete" and event.time_us <= priors.tombstones.get(uri, -1):
        return False  # a replayed write from before the record's delete: never resurrect it
    now = records.now_us()
    is_follow = nsid in config.follow_nsids
    is_target = nsid in config.target_nsids
    if event.operation == "delete":
        if prior is None:
            return False
        records.delete(coll, uri)
        records.bury(uri, event.time_us)
        priors.records[uri] = None
        priors.tombstones[uri] = max(event.time_us, priors.tombstones.get(uri, -1))
        if is_target:
            fanout.remove_target(uri)
        if is_follow:
            subject = _subject(prior[1])
            if subject:
                fanout.follow_deleted(config, nsid, event.did, subject)
        return True
    if prior is not None and prior[0] == event.cid:
        return False
    time_us = records.record_time_us(event.record, event.time_us)
    text = records.store(coll, uri=uri, did=event.did, rkey=event.rkey, cid=event.cid, record=event.record,
                         time_us=time_us)
    priors.records[uri] = (event.cid, text, time_us)
    if is_target:
        fanout.fan_out_target(config, nsid, event.did, uri, time_us, updated=prior is not None, now=now)
    if is_follow and event.operation == "create" and prior is None:
        subject = _subject(event.record)
        if subject:
            fanout.follow_created(config, nsid, event.did, subject)
    return True


def mark_dirty() -> None:
    """One primary-key write, and only on the 0 → 1 edge, so busy batches do not churn the row."""
    db.execute_sql("UPDATE feed_prune_state SET dirty = 1 WHERE id = 1 AND dirty = 0")


def apply_batch(config: FeedsConfig, events, admission: Admission | None = None) -> int:
    """The engine's handler for the "global" subscription. Returns how many events changed rows.

    With an admission filter, events that matter to no served actor are dropped first, in memory:
    a batch of only those runs no SQL at all (bar the filter's own version check, at most one
    primary-key read per POLL_SECS).
    """
    if admission is not None:
        admission.refresh()
        events = admission.admit(events)
        if not events:
            return 0
    schema.ensure(config)
    commits = [event for event in events if isinstance(event, CommitEvent)]
    renamed = [event.did for event in events if isinstance(event, IdentityEvent)]
    if renamed:
        identities.forget_handles(renamed)
    priors = load_priors(config, commits)
    changed = 0
    mutating = follows_changed = False
    followed: set[str] = set()
    for event in commits:
        if apply_event(config, event, priors):
            changed += 1
            mutating = mutating or event.collection in config.feed_mutating_nsids
            if event.collection in config.follow_nsids:
                follows_changed = True
                subject = _subject(event.record) if event.operation == "create" else None
                if subject:
                    followed.add(subject)
    if mutating:
        mark_dirty()
    if admission is not None and follows_changed:
        # Other processes (and this one after a takeover) rebuild from the database; the new
        # followees' past records come from their PDS (authors.fetch_tick).
        admission_db.bump()
        authors.request(followed)
    return changed


TOMBSTONE_MARGIN_US = 600_000_000  # far behind any replay: a reconnect resumes 5 s before the cursor


def sweep_tombstones() -> int:
    """Tombstones older than the ingest cursor (minus a margin) can never meet a replay again."""
    from feather.jetstream import store

    cursor = store.load_cursor("global")
    if cursor is None:
        return 0
    with db.atomic():
        return records.sweep_tombstones(cursor.time_us - TOMBSTONE_MARGIN_US)


def handler(config: FeedsConfig, settings=None):
    """One Admission per handler: the ingesting process's in-memory filter (admission.py)."""
    mode = getattr(settings, "feed_serve", "all")
    admission = None if mode == "all" else Admission(config, mode)

    def apply(events) -> None:
        apply_batch(config, events, admission)
    apply.admission = admission
    return apply

