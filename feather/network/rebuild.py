"""Rebuild from empty: relay enumeration → each DID's PDS → listRecords, checkpointed.

Order of work, and why it cannot leave a gap or resurrect a delete:
  1. The pre-backfill cursor T0 is recorded first. The live "network" stream already covers
     everything from T0 on (its cursor is seeded before it first connects; see __init__), so
     the live stream runs beside the rebuild instead of waiting for it: an unreachable relay
     or PDS never keeps live indexing off.
  2. DIDs from every relay go into net_backfill_queue (the checkpoint table).
  3. Two greenlets take pending DIDs; each DID is fetched (≤ 1 request/s per host, a hard
     timeout, through the guarded client) and then written in ONE transaction together with
     its "done" mark, so a restart resumes at the first unfinished DID. A failing DID is
     marked failed and skipped, never retried in a loop.
  4. Rows written here carry rev_us = T0: anything the live stream wrote or deleted after T0
     is newer and wins (store.upsert / tombstones).
A failed enumeration leaves status "retry"; the job tries again at its next run, or once the
relay's Retry-After has passed when it asked for longer.
"""
from __future__ import annotations

import email.utils
import logging
import time
from typing import Callable

import gevent
import gevent.pool

from feather import sql
from feather.atproto.pds import PdsClient
from feather.db import db
from feather.jetstream import store as jstore
from feather.network import store
from feather.network.apply import record_fields
from feather.network.relay import COLLECTION, RelayClient, RelayError, RelayRateLimited
from feather.parsing import ascii_int

log = logging.getLogger(__name__)

CONCURRENCY = 2
PER_DID_TIMEOUT_SECS = 120.0
PROGRESS_EVERY = 25
MAX_RETRY_AFTER_SECS = 7 * 86400.0
# Pages of one relay's listing per run (a page a second, 500 DIDs each): a run stays inside the
# job's ten-minute check interval, and the next run resumes at the saved cursor.
ENUM_PAGES_PER_RUN = 500


class Kit:
    """What a rebuild talks to; tests build one on loopback fakes."""

    def __init__(self, relay_http, relay_hosts: list[str], resolver, pds_http, *,
                 relay_sleep: Callable[[float], None] = time.sleep, timeout: float = PER_DID_TIMEOUT_SECS):
        self.relay_http, self.relay_hosts = relay_http, relay_hosts
        self.resolver, self.pds_http = resolver, pds_http
        self.relay_sleep, self.timeout = relay_sleep, timeout



def status() -> dict:
    """Progress for the log and the operator (`flask network status`)."""
    counts = dict(sql.execute("SELECT state, count(*) FROM net_backfill_queue GROUP BY state").fetchall())
    done, total, failed = counts.get("done", 0) + counts.get("failed", 0), sum(counts.values()), counts.get("failed", 0)
    result = store.get_state("backfill.result")
    if result and not total:  # the queue is emptied on completion; its final numbers were kept
        done, total, failed = (int(x) for x in result.split("/"))
    return {"status": store.get_state("backfill.status") or "never", "done": done, "failed": failed,
            "total": total, "completed_at_us": store.get_state("backfill.completed_at")}


def coverage_us() -> int:
    """Up to when the catalogue is known complete: the live stream's applied position (its cursor,
    saved with each batch it applies) or the pre-backfill cursor T0 of the latest rebuild,
    whichever is later. 0: nothing is known yet.

    The applied position, never a clock: a heartbeat written while the process runs says nothing
    about a stream that is disconnected, paused by the disk watermark or silent. A connected
    stream moves constantly, since Jetstream sends every #identity and #account event whatever
    the collection filter."""
    saved = jstore.load_cursor("network")
    return max(saved.time_us if saved and saved.time_us else 0, int(store.get_state("backfill.cursor_us") or 0))


def note_gap(now_us: int, stale_us: int) -> bool:
    """Mark a gap (live.gap, which needs_rebuild() turns into a rebuild) when the catalogue's
    coverage is older than FEATHERREADER_NET_STALE_CURSOR_SECS: Jetstream no longer holds the
    events a replay would need. Called at boot, by the stream on reconnect, and every minute."""
    covered = coverage_us()
    if not covered or now_us - covered <= stale_us:
        return False
    if store.get_state("live.gap") is None:
        store.set_state("live.gap", str(covered))
        log.warning("network: the live stream is %.1f h behind, more than FEATHERREADER_NET_STALE_CURSOR_SECS "
                    "(%d s); a rebuild will fill the gap", (now_us - covered) / 3.6e9, stale_us // 1_000_000)
    return True


def needs_rebuild() -> str | None:
    """Why a rebuild should run now, or None."""
    state = store.get_state("backfill.status")
    if state is None:
        return "no completed rebuild is recorded"
    if state == "retry" and int(store.get_state("backfill.retry_at_us") or 0) > sql.now_us():
        return None  # a relay asked us to wait (Retry-After)
    if state in ("running", "retry"):
        return f"the last rebuild is {state}"
    if store.get_state("live.gap"):
        return "the live stream fell further behind than Jetstream's replay window"
    return None


def start(reason: str) -> None:
    """Begin a rebuild: record T0 before anything is enumerated."""
    with db.atomic():
        store.clear_state("backfill.")
        store.clear_state("live.gap")
        store.clear_queue()
        store.set_state("backfill.cursor_us", str(sql.now_us()))
        store.set_state("backfill.started_at", str(sql.now_us()))
        store.set_state("backfill.status", "running")
    log.info("network rebuild: starting (%s)", reason)


def run(kit: Kit, settings) -> bool:
    """Carry the current rebuild as far as it goes. True when it completed."""
    t0 = int(store.get_state("backfill.cursor_us") or 0)
    if not t0:
        start("no rebuild in progress")
        t0 = int(store.get_state("backfill.cursor_us"))
    if store.get_state("backfill.enumerated") != "1":
        answered, wait_secs = _enumerate(kit)
        if not answered:
            retry_at = sql.now_us() + int(wait_secs * 1_000_000)
            with db.atomic():
                store.set_state("backfill.status", "retry")
                store.set_state("backfill.retry_at_us", str(retry_at))
            log.warning("network rebuild: no relay could be enumerated; live indexing continues and the rebuild "
                        "retries %s", f"in {wait_secs:.0f} s (Retry-After)" if wait_secs else "at the next run")
            return False
    pool = gevent.pool.Pool(CONCURRENCY)
    try:
        while True:
            batch = [r[0] for r in sql.execute(
                "SELECT did FROM net_backfill_queue WHERE state = ? ORDER BY did LIMIT ?", ("pending", 50)).fetchall()]
            if not batch:
                break
            for _ in pool.imap_unordered(lambda did: _one_did(kit, settings, did, t0), batch):
                pass
            progress = status()
            log.info("network rebuild: %d / %d DIDs done (%d failed)", progress["done"], progress["total"],
                     progress["failed"])
    finally:
        pool.kill()
    if store.get_state("backfill.enumerated") != "1":
        log.info("network rebuild: a relay's listing goes on; the next run carries on from its cursor")
        return False  # never done on a partial enumeration
    final = status()
    with db.atomic():
        store.set_state("backfill.status", "done")
        store.set_state("backfill.completed_at", str(sql.now_us()))
        store.set_state("backfill.result", f"{final['done']}/{final['total']}/{final['failed']}")
        store.clear_queue()
    log.info("network rebuild: complete")
    return True


def _enumerate(kit: Kit) -> tuple[bool, float]:
    """Every relay's DIDs into the queue, a page per transaction with the relay's cursor, at most
    ENUM_PAGES_PER_RUN pages per relay per run; a relay's walk ends only when its cursor does.

    (whether any relay answered, the longest Retry-After in seconds a rate-limiting relay asked for).
    backfill.enumerated is set once no relay's walk is left unfinished and one of them ended: a
    relay that fails is left out of this rebuild, as long as another listed everything."""
    answered, wait, ongoing, ended = 0, 0.0, 0, 0
    for host in kit.relay_hosts:
        key = f"backfill.enum.{host}"
        if store.get_state(key) == "end":
            answered, ended = answered + 1, ended + 1
            continue
        client = RelayClient(kit.relay_http, host, sleep=kit.relay_sleep, max_pages=ENUM_PAGES_PER_RUN)
        try:
            for dids in client.iter_pages(COLLECTION, store.get_state(key + ".cursor") or None):
                with db.atomic():
                    for did in dids:
                        if not store.is_opted_out(did):  # consent: an opted-out DID is not even queued
                            store.enqueue(did)
                    if client.cursor:
                        store.set_state(key + ".cursor", client.cursor)
            answered += 1
            if client.truncated:
                ongoing += 1
            else:
                ended += 1
                with db.atomic():
                    store.set_state(key, "end")
        except RelayRateLimited as exc:
            wait = max(wait, retry_after_secs(exc.retry_after) or 0.0)
            log.warning("network rebuild: enumeration on %s failed: %s", host, exc)
        except RelayError as exc:
            log.warning("network rebuild: enumeration on %s failed: %s", host, exc)
    if ended and not ongoing:
        with db.atomic():
            store.set_state("backfill.enumerated", "1")
        log.info("network rebuild: %d DIDs to read", status()["total"])
    return bool(answered), wait


def retry_after_secs(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP date (RFC 9110 §10.2.3); capped at a week."""
    if not value:
        return None
    value = value.strip()
    if ascii_int(value) is not None:  # not isdigit(): float("²") raises, float("٣") is 3.0
        return min(float(ascii_int(value)), MAX_RETRY_AFTER_SECS)
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return min(max(0.0, when - (time.time() if now is None else now)), MAX_RETRY_AFTER_SECS)


def fetch_records(kit: Kit, did: str, max_records: int) -> list[tuple[str, str | None, str | None]]:
    """(rkey, canonical url or None, createdAt) of the DID's records, read anonymously off its PDS."""
    endpoint = kit.resolver.pds_endpoint(did)
    client = PdsClient(kit.pds_http, endpoint)
    prefix = f"at://{did}/{COLLECTION}/"
    found = []
    for record in client.iter_records(did, COLLECTION, limit=100):
        uri = record.get("uri")
        if not isinstance(uri, str) or not uri.startswith(prefix):
            continue  # a PDS answering for some other repo or collection: ignore it
        url, created = record_fields(record.get("value"))
        found.append((uri[len(prefix):], url, created))
        if len(found) >= max_records:
            break
    return found


def _one_did(kit: Kit, settings, did: str, t0: int) -> None:
    records, state = None, "done"
    with db.connection_context():
        skip = store.is_opted_out(did)
    if skip:  # consent: not even a request to its PDS (and re-checked under the lock below)
        with db.connection_context(), db.atomic():
            store.mark_queued(did, "done", 0)
        return
    try:
        with gevent.Timeout(kit.timeout):
            records = fetch_records(kit, did, settings.featherreader_net_max_records_per_did)
    except gevent.Timeout:
        state = "failed"
        log.warning("network rebuild: %s took longer than %.0f s; skipped", did, kit.timeout)
    except Exception as exc:  # identity, PDS or guard errors: skip the DID, checkpoint, move on
        state = "failed"
        log.warning("network rebuild: %s skipped: %s", did, exc)
    with db.connection_context(), db.atomic():
        store.lock_did(did)  # before the opt-out check: an opt-out committing now is seen, or waits for us
        if records is not None and not store.is_opted_out(did):
            touched: set[str] = set()
            kept = set()
            for rkey, url, created in records:
                if url is not None:
                    kept.add(rkey)
                    store.upsert(did, rkey, url, created, t0,
                                 max_per_did=settings.featherreader_net_max_records_per_did, touched=touched)
            store.delete_stale_rows(did, kept, t0, touched)
            store.evict_over_cap(settings.featherreader_net_max_rows, touched)
            store.refresh_rollup(touched)
        store.mark_queued(did, state, len(records or ()))
