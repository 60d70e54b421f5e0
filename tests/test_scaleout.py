"""Several worker processes on one PostgreSQL: each subscription and each claimed job has exactly
one live owner; when the owner of the ingest stream dies, another process takes it over within a
couple of claim rounds and resumes from the saved cursor.
"""
import time

import pytest

from feather import features
from feather.jetstream.subscriptions import merge
from feather.locks import lock_key
from tests.conftest import PG_URL
from tests.support import mirror_feature
from tests.support.eventlog import mixed_log
from tests.support.fake_jetstream import FakeJetstream
from tests.support.postgres import claim_owners
from tests.test_jetstream_crash import Worker, db_rows, wait_until, worker_env  # noqa: F401 (fixture)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not PG_URL, reason="several worker processes share a database only on PostgreSQL")]

TAKEOVER_BOUND_SECS = 15  # "within seconds": the claim round is every 2 s


def ingest_socket_open(js) -> bool:
    return any("app.bsky.feed.post" in f["wantedCollections"] for f in js.stats()["last_filter"].values())


def test_each_subscription_has_one_owner_and_a_dead_owners_stream_moves_on_with_no_loss(
        worker_env, make_app, tmp_path):
    log = mixed_log(6000, seed=31, dids=120)
    first, second = log[:3000], log[3000:]
    with FakeJetstream() as js:
        env = worker_env(js)
        app = make_app(FEATHERREADER_JETSTREAM_HOSTS=js.url, FEATHERREADER_EXTRA_FEATURES="tests.support.mirror_feature")
        names = sorted({s.claim_name for s in merge(features.subscriptions(app.config["FEATHER"]))})  # a family claims once
        assert "jetstream:global" in names and "jetstream:sync:0" in names
        keys = {lock_key(n): n for n in names}
        pool = [Worker(env, tmp_path / "w0.log"), Worker(env, tmp_path / "w1.log")]
        pids = {w.proc.pid for w in pool}
        try:
            def every_stream_owned_once():
                owners = claim_owners()
                return all(len(owners.get(k, ())) == 1 for k in keys)

            wait_until(every_stream_owned_once, timeout=30, message=lambda: f"one owner per stream: {claim_owners()}")
            owners = claim_owners()
            assert set().union(*owners.values()) <= pids
            assert all(len(holders) == 1 for holders in owners.values())  # jobs too: once cluster-wide

            # A fresh database has no cursor, so the first connection tails live: append only once
            # the ingest stream's socket is open.
            wait_until(lambda: ingest_socket_open(js), timeout=30, message="the ingest stream's socket")
            js.append(first)
            expected_first, _ = mirror_feature.expected_state(first)
            wait_until(lambda: db_rows() == expected_first, timeout=60, message="the first half applied")

            (victim_pid,) = owners[lock_key("jetstream:global")]
            victim = next(w for w in pool if w.proc.pid == victim_pid)
            survivor = next(w for w in pool if w is not victim)
            victim.kill9()
            killed_at = time.monotonic()
            wait_until(lambda: claim_owners().get(lock_key("jetstream:global")) == {survivor.proc.pid},
                       timeout=TAKEOVER_BOUND_SECS, interval=0.2, message="the survivor claims the ingest stream")
            took = time.monotonic() - killed_at

            js.append(second)
            expected_all, _ = mirror_feature.expected_state(log)
            wait_until(lambda: db_rows() == expected_all, timeout=90, message="the whole log applied once")
            owners = claim_owners()
            assert all(owners.get(k) == {survivor.proc.pid} for k in keys), owners
            print(f"takeover of jetstream:global after kill -9: {took:.1f} s")
        finally:
            for worker in pool:
                worker.terminate()
