"""Capability 1: how many repos on the network hold rss subscription records.

One network_stat row per (key, relay): the count, whether the page cap made it a floor, and
when. Never the DIDs: holding them would be a register of who uses an RSS reader, for a
feature whose only output is an integer. A relay that fails keeps its previous row.
"""
from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Callable

from feather import sql
from feather.db import db
from feather.network import store
from feather.network.httpclient import client_from_settings
from feather.network.relay import COLLECTION, AdoptionObservation, RelayClient, RelayError, RelayRateLimited

log = logging.getLogger(__name__)

KEY = "adoption.subscription"
CHECK_SECS = 600.0  # how often the job asks "is a probe due?"; the probe itself runs once per interval
FIRST_DELAY_SECS = 60.0


@dataclass(frozen=True)
class Adoption:
    repos: int
    truncated: bool
    observed_at: str  # the date shown on /about is the newest observation's


def probe(http, hosts: list[str], *, sleep: Callable[[float], None] | None = None) -> list[AdoptionObservation]:
    """Ask every relay; store and log each observation that completed. Never raises."""
    done: list[AdoptionObservation] = []
    for host in hosts:
        client = RelayClient(http, host, **({"sleep": sleep} if sleep else {}))
        try:
            obs = client.count_repos_with_collection(COLLECTION)
        except RelayRateLimited as exc:
            log.warning("adoption probe: %s rate-limited us; run aborted, next try at the next interval "
                        "(Retry-After: %s)", exc.source, exc.retry_after or "not given")
            continue
        except RelayError as exc:
            log.warning("adoption probe: %s; keeping the previous observation", exc)
            continue
        log.info("adoption probe: key=%s source=%s repos=%d truncated=%s", KEY, obs.source, obs.repos,
                 obs.truncated)
        try:
            with db.atomic():
                save(obs)
        except Exception as exc:  # the probe must never affect anything else
            log.warning("adoption probe: could not store the %s observation: %s", obs.source, exc)
            continue
        done.append(obs)
    counts = {o.source: o.repos for o in done}
    if len(set(counts.values())) > 1:
        log.info("adoption probe: relays disagree: %s", ", ".join(f"{s}={n}" for s, n in sorted(counts.items())))
    return done


def save(obs: AdoptionObservation) -> None:
    sql.execute(
        "INSERT INTO network_stat (key, source, value, truncated, observed_at) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (key, source) DO UPDATE SET value = excluded.value, truncated = excluded.truncated,"
        " observed_at = excluded.observed_at", (KEY, obs.source, obs.repos, int(obs.truncated), obs.observed_at))


def current(hosts: list[str] | None = None) -> Adoption | None:
    """The largest count over the relays (only those still configured, when given)."""
    rows = sql.execute(
        "SELECT source, value, truncated, observed_at FROM network_stat WHERE key = ?", (KEY,)).fetchall()
    if hosts is not None:
        rows = [r for r in rows if r[0] in hosts]
    if not rows:
        return None
    best = max(rows, key=lambda r: (r[1], -r[2]))  # an exact count beats a floor of the same size
    return Adoption(best[1], bool(best[2]), max(r[3] for r in rows))


def first_run_delay(interval: float, rand: Callable[[], float] = random.random) -> float:
    """A minute after boot plus up to 10 % of the interval, so instances started together (or a
    fleet restarted at once) do not probe the relays in step."""
    return FIRST_DELAY_SECS + rand() * 0.1 * interval


def check_every(interval: float) -> float:
    return max(1.0, min(CHECK_SECS, interval / 10))


def run_if_due(settings, *, http=None, now: float | None = None, rand: Callable[[], float] = random.random,
               sleep: Callable[[float], None] | None = None) -> bool:
    """Probe when the interval since the last run (remembered across restarts, ±10 % drawn at that
    run) has passed; a failed run counts as a run: no tighter retry. True when it probed."""

    now = time.time() if now is None else now
    interval = settings.featherreader_adoption_interval_secs
    last = store.get_state("adoption.last_run")
    if last is not None:
        at, factor = (float(x) for x in last.split(":"))
        if now < at + interval * factor:
            return False
    with db.atomic():
        store.set_state("adoption.last_run", f"{now:.3f}:{0.9 + 0.2 * rand():.4f}")
    if http is None:
        http = client_from_settings(settings)
    probe(http, list(settings.featherreader_relay_hosts), sleep=sleep)
    return True
