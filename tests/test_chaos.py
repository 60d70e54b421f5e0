"""Chaos: real worker processes SIGKILLed at random points while a log streams with forced
drops and malformed frames mixed in; afterwards the database equals the log's state.

FEATHER_CHAOS_EVENTS sets the log size (CI runs a reduced 20,000; `make bench` runs 100,000).
"""
import os
import random
import time

import pytest

from feather.locks import lock_key
from tests.conftest import PG_URL
from tests.support import mirror_feature
from tests.support.eventlog import mixed_log
from tests.support.fake_jetstream import FakeJetstream
from tests.support.postgres import claim_owners
from tests.test_jetstream_crash import (Worker, _cursor_saved, db_rows, wait_until,  # noqa: F401 (fixture)
                                        worker_env)

pytestmark = pytest.mark.slow

EVENTS = int(os.environ.get("FEATHER_CHAOS_EVENTS", "20000"))
KILLS = 20


def _with_noise(frames, rng):
    noisy = []
    for frame in frames:
        noisy.append(frame)
        if rng.random() < 0.002:
            noisy.append({"$raw": rng.choice(['{"did":"did:plc:x","time_us":1,"kind":"commit","commit":{',
                                              "not json at all", '{"kind":"commit"}', "[]"])})
    return noisy


def _run_chaos(worker_env, tmp_path, workers: int, seed: int):
    rng = random.Random(seed)
    # One DID per 50 events: with mixed_log's default 50 DIDs, 100k events make every author's
    # ~550 duplicate follow records a fan-out of hundreds of rows per post, which measures the
    # feeds handler on an impossible graph instead of crash safety.
    log = mixed_log(EVENTS, seed=seed, dids=max(50, EVENTS // 50), identity_every=101)
    chunk = max(1, len(log) // (KILLS + 1))
    chunks = [log[i:i + chunk] for i in range(0, len(log), chunk)]
    with FakeJetstream() as js:
        env = worker_env(js)
        pool = [Worker(env, tmp_path / f"w{i}.log") for i in range(workers)]
        try:
            wait_until(lambda: js.stats()["connections"] == 1, message="first connection")
            js.append(chunks[0])
            wait_until(_cursor_saved, message="first cursor save")
            kills = 0
            for piece in chunks[1:]:
                js.append(_with_noise(piece, rng))
                time.sleep(rng.uniform(0.0, 0.4))
                if rng.random() < 0.3:
                    js.drop()  # a forced 1006 on top of the kill
                victim = rng.randrange(len(pool))
                pool[victim].kill9()
                kills += 1
                pool[victim].log.close()
                pool[victim] = Worker(env, tmp_path / f"w{victim}.log")
            assert kills >= KILLS
            expected, _ = mirror_feature.expected_state(log)
            wait_until(lambda: db_rows() == expected, timeout=180, interval=0.5,
                       message=lambda: f"database equal to the log ({len(db_rows())}/{len(expected)})")
            if workers > 1:
                _assert_each_claim_has_one_owner()
        finally:
            for worker in pool:
                worker.terminate()


def _assert_each_claim_has_one_owner():
    owners = claim_owners()
    assert len(owners.get(lock_key("jetstream:global"), ())) == 1
    assert all(len(pids) == 1 for pids in owners.values())


def test_random_kills_drops_and_garbage_converge_to_the_log_state(worker_env, tmp_path, database_url):
    _run_chaos(worker_env, tmp_path, workers=1, seed=21)


@pytest.mark.skipif(not PG_URL, reason="several worker processes share a database only on PostgreSQL")
def test_two_workers_on_postgres_one_killed_at_random_converge(worker_env, tmp_path, database_url):
    _run_chaos(worker_env, tmp_path, workers=2, seed=22)
