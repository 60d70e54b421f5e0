"""Pruning (docs/design.md, "Timelines"): keep the newest cap rows per (actor, target), in bounded slices.

How "a tick applied a feed-mutating record" reaches the sweep: apply_batch sets
feed_prune_state.dirty in the batch's own transaction (one primary-key row, written only on the
0→1 edge), and the `feeds-prune` job reads it every PRUNE_TICK_SECS. So the ingest transaction
never pays for a sweep, a crash between batch and sweep loses nothing (the flag is durable),
the sweep runs at most one slice per 10 s however busy the stream is, and the same job also
serves the recovery timer on an idle stream. Every statement here is index-bounded
(feed_items' unique key (actor, collection, time_us DESC, uri); see test_feeds_explain.py).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from feather import sql
from feather.db import db
from feather.feeds.config import FeedsConfig
from feather.feeds.store import items, prune_state, serial, served
from feather.feeds.store.prune_state import PruneState
from feather.feeds.tasks import records_sweep

log = logging.getLogger(__name__)

SWEEP_BATCH_ACTORS = 50  # actors per write transaction, so ingest never waits on a whole slice
SLICE_MIN_INTERVAL_MS = 10_000  # Contrail's FEED_SWEEP_INTERVAL_MS


@dataclass(frozen=True)
class SweepResult:
    pruned: int
    next_cursor: str | None
    done: bool


def actors_page_sql(cursor: str | None, budget: int):
    if cursor is None:
        return "SELECT DISTINCT actor FROM feed_items ORDER BY actor LIMIT ?", (budget,)
    return "SELECT DISTINCT actor FROM feed_items WHERE actor > ? ORDER BY actor LIMIT ?", (cursor, budget)


def prune_actor(actor: str, caps: dict[str, int]) -> int:
    """Contrail's pruneActorFeed: the number of rows deleted for this actor."""
    deleted = 0
    for nsid, cap in sorted(caps.items()):
        deleted += items.cutoff_delete(actor, nsid, cap)  # Contrail's actorCutoffDelete
    return deleted


def sweep(caps: dict[str, int], cursor: str | None, budget: int, keep: set[str] | None = None) -> SweepResult:
    """Contrail's sweepFeedItems: up to `budget` actors after `cursor`; a full page is not done.

    With `keep` (the served set, when FEED_SERVE is not `all`), an actor outside it loses its
    whole timeline."""
    if not caps or budget <= 0:
        return SweepResult(0, None, True)
    statement, params = actors_page_sql(cursor, budget)
    actors = [row[0] for row in sql.rows(statement, params)]
    if not actors:
        return SweepResult(0, None, True)
    pruned = 0
    for start in range(0, len(actors), SWEEP_BATCH_ACTORS):
        with db.atomic():
            serial.lock_writes()
            for actor in actors[start:start + SWEEP_BATCH_ACTORS]:
                if keep is not None and actor not in keep:
                    pruned += items.drop_actor(actor)  # nobody serves them: no timeline
                else:
                    pruned += prune_actor(actor, caps)
    done = len(actors) < budget
    return SweepResult(pruned, None if done else actors[-1], done)


# --- the persisted state (store/prune_state.py) ------------------------------------------------

def load_state() -> PruneState:
    return prune_state.load()


def run_slice(caps: dict[str, int], budget: int, keep: set[str] | None = None) -> SweepResult:
    """Contrail's runFeedPruneSlice: load the cursor, sweep one slice, save where it stopped."""
    result = sweep(caps, load_state().cursor, budget, keep)
    with db.atomic():
        prune_state.save_cursor(result.next_cursor)
    return result


def _slice_and_stamp(caps: dict[str, int], settings, now_ms: int, keep: set[str] | None = None) -> SweepResult:
    result = run_slice(caps, settings.feed_prune_sweep_actors, keep)
    with db.atomic():
        prune_state.stamp_slice(now_ms)
        if result.done:
            # The recovery clock measures from the last *completed* full pass, not the last slice.
            prune_state.stamp_full_pass(now_ms)
    return result


def prune_tick(config: FeedsConfig, settings, now_ms: int | None = None) -> SweepResult | None:
    """The scheduled tick (every 10 s): one slice when the stream dirtied a feed at least 10 s
    after the last slice, or when a recovery pass is due (also on an idle stream); else nothing."""
    now_ms = sql.now_ms() if now_ms is None else now_ms
    caps = config.target_caps()
    if not caps:
        return None
    with db.atomic():
        state = load_state()
        dirty_due = state.dirty and now_ms - state.last_slice_ms >= SLICE_MIN_INTERVAL_MS
        recovery_due = now_ms - state.last_full_pass_ms >= settings.feed_prune_recovery_interval_ms
        if not (dirty_due or recovery_due):
            return None
        if dirty_due:
            # Cleared before the slice: a batch committing meanwhile sets it again for the next tick.
            prune_state.clear_dirty()
    keep = served.served_set(config) if settings.feed_serve != served.ALL else None
    result = _slice_and_stamp(caps, settings, now_ms, keep)
    if keep is not None:
        swept = records_sweep.sweep_slice(config, settings.feed_prune_sweep_actors)
        if swept.removed:
            log.info("feeds records sweep: %d records nobody needs removed", swept.removed)
    if result.pruned:
        log.info("feeds prune: %d rows over cap deleted (pass %s)", result.pruned,
                 "complete" if result.done else f"continues after {result.next_cursor}")
    return result
