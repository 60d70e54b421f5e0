"""What a feature asks of the ingest engine: a subscription, and handlers for its batches.

A subscription is one websocket. Features that share one (the "global" stream) register
subscriptions with the same name; the engine merges their collections and handlers, so one
batch reaches every handler inside one transaction.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from feather.atproto.syntax import is_valid_nsid
from feather.jetstream.events import Event

MAX_COLLECTIONS = 100  # Jetstream's limit on wantedCollections
MAX_DIDS = 10_000  # Jetstream's limit on wantedDids


class SubscriptionError(ValueError):
    """A subscription Jetstream would refuse; raised at registration, not in a 400 loop."""


@dataclass(frozen=True)
class Handler:
    feature: str
    apply_batch: Callable[[list[Event]], None]  # runs inside the batch transaction; DB work only
    collections: frozenset[str] | None = None  # commit collections it wants (NSIDs or `prefix.*`); None = all
    identity_and_account: bool = False  # whether identity/account events reach it

    def wants(self, event: Event) -> bool:
        if event.kind != "commit":
            return self.identity_and_account
        if self.collections is None:
            return True
        return collection_matches(event.collection, self.collections)


@dataclass
class Subscription:
    name: str  # also the cursor's key: "global", "network", "sync:3"
    collections: list[str]
    handlers: list[Handler]
    dids: Callable[[], Sequence[str]] | None = None  # current membership; None = every DID
    max_lookback_us: int | None = None
    on_gap: Callable[[int], None] | None = None  # told the saved cursor when it is older than the window
    extra: dict = field(default_factory=dict)
    # Whether the stream should be connected now; None = always. A stream that goes inactive
    # closes its socket and waits; when it comes back it resumes from its *saved* cursor, which
    # whoever switched it off and on (feeds' narrowing, feather/feeds/ingest/narrow.py) places.
    active: Callable[[], bool] | None = None
    claim: str | None = None  # the claim's name when several streams must live in one process
    # With `dids`: when the membership changed, the stream position from which the DIDs that just
    # joined matter (None: from now on). options_update never replays, so such a change reconnects
    # from there instead (feeds' narrowing: the author of a record just reposted).
    rewind: Callable[[], int | None] | None = None

    @property
    def claim_name(self) -> str:
        return f"jetstream:{self.claim or self.name}"


def collection_matches(collection: str, wanted: frozenset[str] | set[str] | Sequence[str]) -> bool:
    for pattern in wanted:
        if pattern.endswith(".*"):
            if collection.startswith(pattern[:-1]):
                return True
        elif collection == pattern:
            return True
    return False


def validate(sub: Subscription) -> None:
    if not sub.name or len(sub.name) > 64:
        raise SubscriptionError(f"subscription name {sub.name!r} must be 1-64 characters")
    if len(sub.collections) > MAX_COLLECTIONS:
        raise SubscriptionError(
            f"subscription {sub.name}: {len(sub.collections)} collections exceed Jetstream's limit of {MAX_COLLECTIONS}")
    for collection in sub.collections:
        if collection.endswith(".*"):
            continue
        if not is_valid_nsid(collection):
            raise SubscriptionError(f"subscription {sub.name}: {collection!r} is not a valid NSID")
    if not sub.handlers:
        raise SubscriptionError(f"subscription {sub.name} has no handler")


def validate_dids(name: str, dids: Sequence[str]) -> list[str]:
    unique = sorted(set(dids))
    if len(unique) > MAX_DIDS:
        raise SubscriptionError(f"subscription {name}: {len(unique)} DIDs exceed Jetstream's limit of {MAX_DIDS}")
    return unique


def merge(subs: Sequence[Subscription]) -> list[Subscription]:
    """Fold same-named subscriptions into one; their DID filters must agree."""
    merged: dict[str, Subscription] = {}
    for sub in subs:
        have = merged.get(sub.name)
        if have is None:
            merged[sub.name] = Subscription(sub.name, list(sub.collections), list(sub.handlers), sub.dids,
                                            sub.max_lookback_us, sub.on_gap, dict(sub.extra), sub.active, sub.claim,
                                            sub.rewind)
            continue
        if have.dids is not None or sub.dids is not None:
            raise SubscriptionError(f"subscription {sub.name}: only DID-unfiltered subscriptions can be shared")
        if have.active is not None or sub.active is not None or have.claim != sub.claim:
            raise SubscriptionError(f"subscription {sub.name}: a stream switched on and off cannot be shared")
        have.collections.extend(c for c in sub.collections if c not in have.collections)
        have.handlers.extend(sub.handlers)
        if sub.on_gap is not None or sub.max_lookback_us is not None:
            raise SubscriptionError(f"subscription {sub.name}: a shared subscription cannot set a lookback")
    for sub in merged.values():
        validate(sub)
    return list(merged.values())
