"""Graph sync across a change of SYNC_SHARD_COUNT and an outage longer than the lookback, with the whole
service running (`make run`'s gunicorn, its gevent worker and background workers), Bluesky's
reference PDS on loopback, and its firehose bridged into two fake Jetstreams: a legacy (v1) host,
which sends at most RATE events a second per address like the real one, and a v2 host (sequences).

World: owners O and P sync Bluesky, Tangled and Sifa; subjects S and X have a profile on all three.
The counts m < n and the owners are picked from a few fresh accounts so that under m, O is in shard
a and P in shard b, and under n, O moves into b: a shard that exists, with a cursor of its own.

  1. (legacy host, m shards) Both sign in and turn sync on; O already follows S on Bluesky, so
     sync follows S on Tangled and Sifa.
  2. The service stops. O makes BACKLOG Grain follows (no app of O's set: work for shard a and
     nothing else), then unfollows S on Bluesky; 6 s later P follows X on Bluesky.
  3. Restart (m shards). Shard b applies P's follow at once while shard a is still working through
     O's backlog at the host's pace: kill -9 there. Saved: a before the unfollow, b more than the
     5 s replay overlap after it.
  4. Restart with n shards: O is in b now, whose cursor is past O's unfollow. b must go back to
     a's cursor (the oldest its owners had; asserted from the cursor it asks the host for), and
     the unfollow must reach Tangled and Sifa: the follows sync made are deleted from O's repo.
  5. (v2 host) Restart; O follows X so shard b saves a sequence cursor; stop; wait past the
     lookback (LOOKBACK_US); restart with it. The saved v2 cursor is judged by its time: the log
     reports the gap with the saved time, b asks for the window's start (a time, not its
     sequence), and every sync set's sweep is due (next_sweep_at = 0, read from the database).

Durations are printed (`-s`); nothing asserts on time.
"""
from __future__ import annotations

import contextlib
import random
import secrets
import time
import zlib

import pytest

from tests.support.fake_jetstream import FakeJetstream
from tests.support.fake_jetstream import tid as make_tid
from tests.support.firehose_bridge import FirehoseBridge
from tests.support.process_world import (Person, Tap, app_password, apply_creates, assert_no_error_records,
                                         create_account, create_record, delete_record, follow_record,
                                         list_records, ok, stopped_after, wait_for)
from tests.support.service_db import read_only
from tests.support.service_process import ServiceProcess, service_env

pytestmark = [pytest.mark.pds, pytest.mark.slow]

APPS = ("bluesky", "tangled", "sifa")
FOLLOW = {"bluesky": "app.bsky.graph.follow", "tangled": "sh.tangled.graph.follow", "sifa": "id.sifa.graph.follow"}
PROFILE = {"bluesky": "app.bsky.actor.profile", "tangled": "sh.tangled.actor.profile", "sifa": "id.sifa.profile.self"}
GRAIN_FOLLOW = "social.grain.graph.follow"
RATE = 80  # events/s per address on the legacy host
BACKLOG = 1200  # O's Grain follows: some fifteen seconds of shard a's time at RATE
OVERLAP_US = 5_000_000  # a legacy resume rewinds this far (feather/jetstream/store.py)
LOOKBACK_US = 8_000_000


def crc(did: str) -> int:
    return zlib.crc32(did.encode())


def pick(dids: list[str]):
    """(O, P, m, n): under m, O in shard a and P in shard b != a; under n, O in b (b < m: it exists)."""
    for m in (2, 3, 4):
        for n in range(m + 1, m + 4):
            for o in dids:
                a, b = crc(o) % m, crc(o) % n
                p = next((p for p in dids if p != o and crc(p) % m == b), None)
                if b < m and b != a and p is not None:
                    return o, p, m, n
    return None


@contextlib.contextmanager
def two_hosts(pds):
    """The PDS's firehose from now on into both fakes; yields ((legacy, tap), (v2, tap)). The fence
    account keeps out writes the PDS sequenced before the bridge connected (process_world.live_firehose)."""
    with FakeJetstream(rate_limit=RATE) as legacy, FakeJetstream(v2_cursor=True) as v2:
        taps = (Tap(legacy, fenced=True), Tap(v2, fenced=True))
        bridge = FirehoseBridge(pds.firehose_url, lambda frames: [tap(frames) for tap in taps], cursor=None).start()
        try:
            fence = create_account(pds, f"fence{secrets.token_hex(4)}")
            for tap in taps:
                tap.fence(fence.did)
            wait_for(lambda: all(tap.open for tap in taps), 30, "the firehose to carry the fence account")
            yield (legacy, taps[0]), (v2, taps[1])
        finally:
            bridge.stop()


class Owner(Person):
    def state(self) -> dict:
        return ok(self.get("/api/sync"), f"{self.label}: GET /api/sync")

    def turn_on(self) -> None:
        body = ok(self.post_json("/api/sync", {"enabled": True, "apps": list(APPS)}), f"{self.label}: POST /api/sync")
        assert (body["enabled"], body["apps"]) == (True, list(APPS)), body


def subjects_on(pds, did: str, app: str) -> list[str]:
    return sorted(r["value"]["subject"] for r in list_records(pds, did, FOLLOW[app]))


def saved(database_url: str) -> dict[str, tuple[int, int | None]]:
    with read_only(database_url) as run_all:
        return {name: (t, seq) for name, t, seq in
                run_all("SELECT name, time_us, seq FROM jetstream_cursor WHERE name LIKE ?", ["sync:%"])}


def connection_for(js, did: str, old: set[str]) -> dict:
    """The host's view of a new sync-shard socket whose wantedDids name this DID (waits for it).
    A served reader's DID is also on the feeds' narrow shards (feather/feeds/ingest/narrow.py),
    with a cursor of their own: a sync shard is the one asking for the Grain follows."""
    found = {}

    def opened() -> bool:
        found.update(next((f for cid, f in js.stats()["last_filter"].items()
                           if cid not in old and did in f.get("wantedDids", ())
                           and GRAIN_FOLLOW in f.get("wantedCollections", ())), {}))
        return bool(found)
    wait_for(opened, 30, lambda: f"a shard socket naming {did}: {js.stats()['last_filter']}", interval=0.1)
    return found


def test_an_unfollow_survives_a_raised_shard_count_and_an_old_v2_cursor_is_a_gap(pds, database_url, tmp_path):
    t0 = time.monotonic()

    def mark(label: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {label}", flush=True)

    with two_hosts(pds) as ((legacy, tap), (v2, tap2)):
        sfx = secrets.token_hex(3)  # the session PDS is shared
        candidates = []
        while (picked := pick([c.did for c in candidates])) is None:
            assert len(candidates) < 24, "no pair of accounts moves into an existing shard"
            candidates += [create_account(pds, f"sh{len(candidates) + i}{sfx}") for i in range(3)]
        o_did, p_did, m, n = picked
        o, p = (next(c for c in candidates if c.did == did) for did in (o_did, p_did))
        a, b = crc(o.did) % m, crc(o.did) % n
        s, x = create_account(pds, f"ss{sfx}"), create_account(pds, f"sx{sfx}")
        for acct in (s, x):
            apply_creates(pds, acct, [(PROFILE[app], "self", {"displayName": acct.name}) for app in APPS])
        s_rkey = create_record(pds, o, FOLLOW["bluesky"], follow_record(s.did))
        mark(f"{len(candidates) + 2} accounts; counts {m} -> {n}: O in sync:{a} then sync:{b}, P in sync:{b}")

        env = service_env(
            DATABASE_URL=database_url, FEATHERREADER_ENV="development", SECRET_KEY=secrets.token_hex(32),
            FEATHERREADER_DATA_DIR=tmp_path / "data", FEATHERREADER_ALLOW_APP_PASSWORDS=True,
            FEATHERREADER_ALLOW_PRIVATE_NETWORK=True, FEATHERREADER_JETSTREAM_HOSTS=legacy.url,
            FEATHERREADER_PLC_URL=pds.plc_url, FEATHERREADER_HANDLE_RESOLVER=pds.pds_url,
            FEATHERREADER_LOG_LEVEL="INFO", SYNC_SHARD_COUNT=m)
        with stopped_after(ServiceProcess(env, tmp_path / "gunicorn.log")) as svc:
            # 1. Both turn sync on; O's follow of S reaches Tangled and Sifa.
            svc.start()
            owners = [Owner(svc, acct, label) for acct, label in ((o, "O"), (p, "P"))]
            for owner in owners:
                owner.sign_in(app_password(pds, owner.acct, f"reshard-{sfx}"))
                owner.turn_on()
            wait_for(lambda: all(subjects_on(pds, o.did, app) == [s.did] for app in APPS), 90,
                     lambda: f"S on every app of O's: {[o_.state() for o_ in owners]}", interval=0.5)
            # ... and shard a has applied the echoes of those writes: a cursor of its own to resume
            # from (a shard that never applied anything starts live after a restart).
            echoes = [tap.time_of(o.did, FOLLOW[app], r["uri"].rsplit("/", 1)[-1], "create")
                      for app in APPS[1:] for r in list_records(pds, o.did, FOLLOW[app])]
            wait_for(lambda: saved(database_url).get(f"sync:{a}", (0, None))[0] >= max(echoes), 30,
                     lambda: f"sync:{a} to apply the echoes: {saved(database_url)}", interval=0.1)
            mark("sync on for O and P; S followed on Bluesky, Tangled and Sifa; shard a has their echoes")

            # 2. Work made while the service is down.
            svc.stop()
            rng = random.Random()
            phantoms = ["did:plc:" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(24))
                        for _ in range(BACKLOG)]
            base_us = time.time_ns() // 1000
            apply_creates(pds, o, [(GRAIN_FOLLOW, make_tid(base_us + i), follow_record(d))
                                   for i, d in enumerate(phantoms)])
            delete_record(pds, o, FOLLOW["bluesky"], s_rkey)
            unfollow_at = tap.time_of(o.did, FOLLOW["bluesky"], s_rkey, "delete")
            time.sleep((OVERLAP_US + 1_000_000) / 1e6)
            x_rkey = create_record(pds, p, FOLLOW["bluesky"], follow_record(x.did))
            p_follow_at = tap.time_of(p.did, FOLLOW["bluesky"], x_rkey, "create")
            mark(f"stopped; O: {BACKLOG} Grain follows, then unfollowed S ({unfollow_at}); "
                 f"P followed X ({p_follow_at})")

            # 3. Restart with m shards; kill -9 once b has P's follow and a is still in O's backlog.
            svc.start()
            wait_for(lambda: saved(database_url).get(f"sync:{b}", (0, None))[0] >= p_follow_at, 30,
                     lambda: f"sync:{b} to apply P's follow: {saved(database_url)}", interval=0.05)
            svc.kill9()
            cursors = saved(database_url)
            a_at, b_at = cursors[f"sync:{a}"][0], cursors[f"sync:{b}"][0]
            # The tap knows each commit's last frame (200 follows a commit): a bound, not a count.
            commits = {tap.times[(o.did, GRAIN_FOLLOW, make_tid(base_us + i), "create")] for i in range(BACKLOG)}
            bound = min(BACKLOG, 200 * (1 + sum(1 for t in commits if t <= a_at)))
            mark(f"kill -9: sync:{a} saved at {a_at} (fewer than {bound} of O's {BACKLOG} Grain follows applied), "
                 f"sync:{b} at {b_at}")
            assert a_at < unfollow_at < b_at - OVERLAP_US, \
                f"the kill must land with O's unfollow unapplied and sync:{b} past it: {cursors}"

            # 4. Restart with n shards: b goes back to a's cursor, the unfollow reaches every app.
            svc.env["SYNC_SHARD_COUNT"] = str(n)
            old = set(legacy.stats()["last_filter"])
            svc.start()
            asked = connection_for(legacy, o.did, old)["cursor"]
            mark(f"restarted with {n} shards; the shard holding O asked for cursor {asked}")
            assert asked == a_at - OVERLAP_US
            wait_for(lambda: all(subjects_on(pds, o.did, app) == [] for app in APPS), 90,
                     lambda: f"the unfollow on every app of O's: {[subjects_on(pds, o.did, a_) for a_ in APPS]};"
                             f" {owners[0].state()}", interval=0.5)
            wait_for(lambda: all(subjects_on(pds, p.did, app) == [x.did] for app in APPS), 60,
                     lambda: f"X on every app of P's: {owners[1].state()}", interval=0.5)
            assert f"sync: SYNC_SHARD_COUNT changed from {m} to {n}" in svc.log_text()
            mark("O's unfollow of S reached Tangled and Sifa; P's follow of X reached every app")

            # 5. The v2 host: a sequence cursor, an outage past the lookback, a gap and sweeps due.
            svc.stop()
            svc.env["FEATHERREADER_JETSTREAM_HOSTS"] = v2.url
            svc.start()
            x2 = create_record(pds, o, FOLLOW["bluesky"], follow_record(x.did))
            x2_at = tap2.time_of(o.did, FOLLOW["bluesky"], x2, "create")
            wait_for(lambda: saved(database_url)[f"sync:{b}"][1] is not None
                     and saved(database_url)[f"sync:{b}"][0] >= x2_at, 30,
                     lambda: f"a v2 cursor for sync:{b}: {saved(database_url)}", interval=0.1)
            svc.stop()
            at, seq = saved(database_url)[f"sync:{b}"]
            wait_for(lambda: time.time() * 1e6 > at + LOOKBACK_US + 1_000_000, 30, "the outage to outlast the lookback")
            mark(f"on the v2 host sync:{b} saved time {at}, sequence {seq}; down for longer than {LOOKBACK_US} µs")
            svc.env["SYNC_JETSTREAM_MAX_LOOKBACK_US"] = str(LOOKBACK_US)
            old, log_before = set(v2.stats()["last_filter"]), len(svc.log_text())
            before_us = int(time.time() * 1e6)
            svc.start()
            asked = connection_for(v2, o.did, old)["cursor"]
            after_us = int(time.time() * 1e6)
            assert asked != seq and before_us - LOOKBACK_US <= asked <= after_us - LOOKBACK_US, (asked, seq, at)
            gap_lines = [f"jetstream sync:{b}: saved cursor {at} is older than the {LOOKBACK_US} µs window",
                         f"sync sync:{b}: resumed past the lookback window (saved cursor {at})"]
            wait_for(lambda: all(line in svc.log_text()[log_before:] for line in gap_lines), 30,
                     lambda: f"the gap reported: {svc.log_tail(30)}")
            with read_only(database_url) as run_all:
                due = run_all("SELECT owner_did, next_sweep_at FROM sync_sets ORDER BY owner_did")
            assert due == sorted([(o.did, 0), (p.did, 0)])
            mark(f"restart after the outage: sync:{b} asked for {asked} (the window's start), gap reported, sweeps due")
            assert_no_error_records(svc)
    print(f"total {time.monotonic() - t0:.1f} s")

