"""Rebuild from empty (docs/design.md, "The network catalogue") against a loopback relay + PLC + PDS."""
import logging
import time

import gevent
import pytest

from feather import sql
from feather.atproto.identity import IdentityResolver
from feather.db import db
from feather.jetstream import store as jstore
from feather.jetstream.events import CommitEvent
from feather.outbound import GuardedClient
from feather.network import before_stream_starts, rebuild, store, subscriptions, tasks as jobs
from feather.network.httpclient import PacedClient
from tests.support.fake_relay import FakeNetwork, subscription

NSID = "community.lexicon.rss.subscription"


@pytest.fixture
def fake():
    net = FakeNetwork()
    yield net
    net.close()


@pytest.fixture
def setup(make_app, fake):
    def build(relays=None, timeout=30.0, **settings):
        app = make_app(FEATHERREADER_NETWORK_INDEX=True, **settings)
        http = GuardedClient(allow_private_network=True, read_timeout=5, total_timeout=10)
        resolver = IdentityResolver(http, handle_resolver="", plc_url=fake.url, txt_lookup=lambda n: [])
        kit = rebuild.Kit(http, relays or [fake.url], resolver, PacedClient(http, interval=0.0),
                          relay_sleep=lambda s: None, timeout=timeout)
        return app, kit

    return build


def tick(app, kit):
    with app.app_context(), db.connection_context():
        jobs.rebuild_tick(app.config["FEATHER"], kit)


def maintenance(app):
    class NoLookups:
        def resolve_identity(self, did):
            raise AssertionError("no attribution to check")

    with app.app_context(), db.connection_context():
        jobs.maintenance_tick(app.config["FEATHER"], resolver=NoLookups())


def rows():
    with db.connection_context():
        return db.execute_sql("SELECT did, rkey, feed_url FROM net_subscription ORDER BY did, rkey").fetchall()


def state(key):
    with db.connection_context():
        return store.get_state(key)


def accounts(fake, n, per=1):
    for i in range(n):
        fake.add_account(f"did:plc:acct{i:03d}",
                         [(f"r{j}", subscription(f"https://feed{j}.example/rss")) for j in range(per)])


def test_first_start_with_indexing_on_rebuilds_every_enumerated_account(setup, fake, caplog):
    app, kit = setup()
    fake.add_account("did:plc:alice", [("r1", subscription("https://a.example/feed/", title="secret title")),
                                       ("r2", subscription("https://a.example/feed?token=abcdefgh12"))])
    fake.add_account("did:plc:bob", [("r1", subscription("https://b.example/feed"))])
    with caplog.at_level(logging.INFO):
        tick(app, kit)
    assert rows() == [("did:plc:alice", "r1", "https://a.example/feed"),
                      ("did:plc:bob", "r1", "https://b.example/feed")]
    assert state("backfill.status") == "done"
    assert "2 / 2 DIDs done (0 failed)" in caplog.text
    assert all(c[2]["User-Agent"].startswith("Feather/") and "Authorization" not in c[2] for c in fake.record_calls())
    with db.connection_context():
        assert db.execute_sql("SELECT count(*) FROM net_backfill_queue").fetchone()[0] == 0
    before = len(fake.requests)
    tick(app, kit)  # completed: the next tick does nothing
    assert len(fake.requests) == before


def test_a_killed_rebuild_resumes_at_the_first_unfinished_account(setup, fake):
    app, kit = setup()
    accounts(fake, 8)
    for did in fake.repos:
        fake.slow_dids[did] = 0.2
    worker = gevent.spawn(tick, app, kit)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        gevent.sleep(0.05)
        with db.connection_context():
            done = db.execute_sql("SELECT did FROM net_backfill_queue WHERE state = 'done'").fetchall()
        if len(done) >= 3:
            break
    worker.kill()
    finished = {d for (d,) in done}
    assert 3 <= len(finished) < 8 and state("backfill.status") == "running"
    fake.slow_dids.clear()
    tick(app, kit)
    assert state("backfill.status") == "done"
    assert len(rows()) == 8
    for did in finished:
        assert len(fake.record_calls(did)) == 1  # checkpointed: never fetched again
    assert len(fake.relay_calls()) == 1  # the enumeration was checkpointed too


def test_an_unreachable_relay_leaves_live_indexing_on_and_the_rebuild_retries(setup, fake, caplog):
    app, kit = setup(relays=["http://127.0.0.1:1"])
    with caplog.at_level(logging.WARNING):
        tick(app, kit)
    assert state("backfill.status") == "retry"
    assert "live indexing continues" in caplog.text
    (sub,) = subscriptions(app.config["FEATHER"])
    with db.connection_context():
        jstore.apply_batch(sub, [CommitEvent("did:plc:live", sql.now_us(), "create", NSID, "x",
                                             {"url": "https://live.example/feed", "createdAt": "2026-01-01T00:00:00Z"},
                                             "bafy")], None)
    assert rows() == [("did:plc:live", "x", "https://live.example/feed")]
    accounts(fake, 2)
    kit.relay_hosts = [fake.url]
    tick(app, kit)
    assert state("backfill.status") == "done" and len(rows()) == 3


def test_a_delete_seen_live_during_the_rebuild_is_not_resurrected(setup, fake):
    app, kit = setup()
    fake.add_account("did:plc:alice", [("gone", subscription("https://gone.example/feed")),
                                       ("moved", subscription("https://old.example/feed"))])
    with app.app_context(), db.connection_context():
        rebuild.start("test")  # T0 recorded; the PDS is listed "before" the live events below
    (sub,) = subscriptions(app.config["FEATHER"])
    later = sql.now_us() + 1_000_000
    with db.connection_context():
        jstore.apply_batch(sub, [
            CommitEvent("did:plc:alice", later, "delete", NSID, "gone", None, None),
            CommitEvent("did:plc:alice", later, "update", NSID, "moved",
                        {"url": "https://new.example/feed", "createdAt": "2026-01-01T00:00:00Z"}, "bafy")], None)
    tick(app, kit)
    assert rows() == [("did:plc:alice", "moved", "https://new.example/feed")]


def test_net_rebuild_empties_the_catalogue_before_the_stream_starts_and_resets_last_updated(setup, fake, caplog):
    app, kit = setup()
    accounts(fake, 2)
    with db.connection_context(), db.atomic():
        store.set_state("backfill.status", "done")
        store.upsert("did:plc:stale", "x", "https://stale.example/feed", None, 1, max_per_did=5, touched=set())
        store.set_state("rollup.updated_at", "1000")  # "Last updated" from before the wipe
        jstore.save_cursor("network", jstore.Cursor(2000))
    settings = app.config["FEATHER"]
    settings.featherreader_net_rebuild = True
    before = sql.now_us()
    with caplog.at_level(logging.WARNING):
        before_stream_starts(settings)  # boot: the moment before the engine loads the cursor and connects
    assert "EMPTYING the network catalogue" in caplog.text
    assert rows() == [] and int(state("rollup.updated_at")) >= before
    with db.connection_context():
        seeded = jstore.load_cursor("network").time_us  # the old cursor is gone: the stream starts now
    assert seeded >= before and int(state("backfill.cursor_us")) >= seeded  # T0 after it: no gap between
    assert state("backfill.status") == "running" and fake.requests == []
    tick(app, kit)
    assert [d for d, *_ in rows()] == ["did:plc:acct000", "did:plc:acct001"]
    calls = len(fake.requests)
    tick(app, kit)  # done: the ticks after it do nothing
    assert len(fake.requests) == calls


STALE_US = 82800 * 1_000_000


def test_a_boot_after_longer_than_the_stale_setting_falls_back_to_a_rebuild(setup, fake):
    app, kit = setup()
    accounts(fake, 1)
    old = sql.now_us() - STALE_US - 3_600_000_000
    with db.connection_context(), db.atomic():
        store.set_state("backfill.status", "done")
        store.set_state("backfill.cursor_us", str(old - 1))
        jstore.save_cursor("network", jstore.Cursor(old))
    before_stream_starts(app.config["FEATHER"])  # the moment before the stream connects
    assert int(state("live.gap")) == old
    tick(app, kit)
    assert len(rows()) == 1 and state("live.gap") is None


def test_a_stream_that_stops_applying_while_the_process_runs_is_a_gap_at_the_setting(setup, fake, monkeypatch):
    """Disconnected, paused by the watermark or connected and silent: all the same, its applied
    position stops. The process being up (it used to write a clock heartbeat) proves nothing."""
    app, kit = setup(FEATHERREADER_NET_STALE_CURSOR_SECS=3600)
    accounts(fake, 1)
    applied = sql.now_us()
    with db.connection_context(), db.atomic():
        store.set_state("backfill.status", "done")
        store.set_state("backfill.cursor_us", str(applied - 10 * 3_600_000_000))
        jstore.save_cursor("network", jstore.Cursor(applied))
    for minutes in range(0, 60, 10):  # the process keeps ticking; the stream applies nothing
        monkeypatch.setattr(sql, "now_us", lambda m=minutes: applied + m * 60_000_000)
        maintenance(app)
    assert state("live.gap") is None  # 50 minutes behind: a replay still covers it
    monkeypatch.setattr(sql, "now_us", lambda: applied + 61 * 60_000_000)
    maintenance(app)
    assert int(state("live.gap")) == applied
    monkeypatch.undo()
    tick(app, kit)
    assert len(rows()) == 1 and state("live.gap") is None
    maintenance(app)  # the rebuild's T0 covers the stream's gap: no rebuild after rebuild
    assert state("live.gap") is None


def test_the_stream_reports_a_gap_when_it_reconnects_past_the_setting(setup):
    from feather.jetstream.consumer import Stream

    app, _ = setup(FEATHERREADER_NET_STALE_CURSOR_SECS=3600)
    (sub,) = subscriptions(app.config["FEATHER"])
    before_stream_starts(app.config["FEATHER"])  # seeds the stream's cursor, as at boot
    assert sub.max_lookback_us == 3600 * 1_000_000
    old = sql.now_us() - 2 * 3_600_000_000
    with db.connection_context(), db.atomic():
        store.set_state("backfill.status", "done")
        sql.execute("UPDATE jetstream_cursor SET time_us = ? WHERE name = 'network'", (old,))
    stream = Stream(sub, ["ws://127.0.0.1:9/subscribe"], app=app, allow_private=True)
    stream.cursor = jstore.Cursor(old)  # e.g. after a day-long outage or watermark pause
    assert stream._connect_cursor() > old  # the engine's lookback check, at reconnect
    assert int(state("live.gap")) == old


def test_failing_slow_and_private_address_accounts_are_skipped_and_checkpointed(setup, fake, caplog):
    app, kit = setup(timeout=0.5)
    accounts(fake, 4)
    fake.failing_dids["did:plc:acct000"] = 500
    fake.slow_dids["did:plc:acct001"] = 2.0
    fake.pds_for["did:plc:acct002"] = "http://169.254.169.254"
    with caplog.at_level(logging.WARNING):
        tick(app, kit)
    assert [d for d, *_ in rows()] == ["did:plc:acct003"]
    assert state("backfill.status") == "done"
    assert "took longer than 0 s" in caplog.text or "took longer than 1 s" in caplog.text
    assert "link-local" in caplog.text


def test_opted_out_accounts_are_skipped_by_the_rebuild(setup, fake):
    app, kit = setup()
    accounts(fake, 2)
    with db.connection_context(), db.atomic():
        store.opt_out("did:plc:acct000")
    tick(app, kit)
    assert [d for d, *_ in rows()] == ["did:plc:acct001"]
    assert fake.record_calls("did:plc:acct000") == []  # not even a request to its PDS
    assert not [r for r in fake.requests if r[0] == "/did:plc:acct000"]  # nor to its DID document


def test_the_rebuild_keeps_at_most_the_per_did_cap(setup, fake):
    app, kit = setup(FEATHERREADER_NET_MAX_RECORDS_PER_DID=3)
    accounts(fake, 1, per=7)
    tick(app, kit)
    assert len(rows()) == 3


def test_requests_to_one_host_are_spaced_by_the_interval():
    now = [0.0]
    slept = []

    class Http:
        allow_private_network = False

        def request(self, method, url, **kw):
            return (method, url)

    def sleep(s):
        slept.append(round(s, 3))
        now[0] += s

    paced = PacedClient(Http(), interval=1.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):
        paced.get("https://pds.example/xrpc/x")
    paced.get("https://other.example/xrpc/x")
    assert slept == [1.0, 1.0]


def test_the_operator_sees_rebuild_progress_and_counts(setup, fake):
    import json

    app, kit = setup()
    accounts(fake, 3)
    tick(app, kit)
    out = json.loads(app.test_cli_runner().invoke(args=["network", "status"]).output)
    assert (out["indexing"], out["rows"], out["feeds"], out["rebuild"]["status"]) == (True, 3, 1, "done")
    assert (out["rebuild"]["done"], out["rebuild"]["total"], out["rebuild"]["failed"]) == (3, 3, 0)


def test_enumeration_waits_as_long_as_a_rate_limiting_relay_says(setup, fake, monkeypatch):
    app, kit = setup()
    accounts(fake, 1)
    fake.page_replies[1] = (429, {"Retry-After": "3600"}, {"error": "RateLimitExceeded"})
    now = sql.now_us()
    monkeypatch.setattr(sql, "now_us", lambda: now)
    tick(app, kit)
    assert state("backfill.status") == "retry" and int(state("backfill.retry_at_us")) == now + 3_600_000_000
    monkeypatch.setattr(sql, "now_us", lambda: now + 3_599_000_000)
    tick(app, kit)  # the next runs (every 600 s) inside the hour ask nothing
    assert len(fake.relay_calls()) == 1
    monkeypatch.setattr(sql, "now_us", lambda: now + 3_600_000_001)
    tick(app, kit)
    assert len(fake.relay_calls()) == 2 and len(rows()) == 1 and state("backfill.status") == "done"


def test_retry_after_is_read_as_seconds_or_an_http_date_and_capped():
    assert rebuild.retry_after_secs("120") == 120.0
    assert rebuild.retry_after_secs("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480.0 - 60) == 60.0
    assert rebuild.retry_after_secs("99999999") == 7 * 86400.0
    assert rebuild.retry_after_secs("soon") is None and rebuild.retry_after_secs(None) is None


def test_an_injected_dev_event_does_not_wipe_the_catalogue_under_net_rebuild(setup):
    """The one-shot wipe belongs to the stream's start; the dev injector only lists subscriptions."""
    from tests.test_dev_event import OPERATOR, post, sign_in

    app, _ = setup(FEATHERREADER_ENV="development", FEATHERREADER_NET_REBUILD=True,
                   FEATHERREADER_ADMIN_DIDS=[OPERATOR], FEATHERREADER_ALLOW_APP_PASSWORDS=True)
    with db.connection_context(), db.atomic():
        store.upsert("did:plc:kept", "k1", "https://kept.example/feed", None, 1, max_per_did=5, touched=set())
    response = post(*sign_in(app, OPERATOR), {
        "did": "did:plc:new", "op": "create", "collection": NSID, "rkey": "n1",
        "record": {"url": "https://new.example/feed", "createdAt": "2026-01-01T00:00:00Z"}})
    assert response.status_code == 200 and "network" in response.get_json()["subscriptions"]
    assert sorted(d for d, *_ in rows()) == ["did:plc:kept", "did:plc:new"]


def test_the_engine_prepares_the_network_stream_once_before_it_streams(setup, monkeypatch):
    from feather.jetstream import consumer
    from feather.jetstream.engine import Engine

    app, _ = setup(FEATHERREADER_NET_REBUILD=True, FEATHERREADER_JETSTREAM_HOSTS="ws://127.0.0.1:9/subscribe",
                   FEATHERREADER_ALLOW_PRIVATE_NETWORK=True)
    monkeypatch.setattr(consumer.Stream, "start", lambda self: None)  # no socket: only the claim round
    engine = Engine(app, subscriptions(app.config["FEATHER"]))
    with db.connection_context(), db.atomic():
        store.upsert("did:plc:old", "o1", "https://old.example/feed", None, 1, max_per_did=5, touched=set())
    engine.claim_round()
    assert rows() == [] and "network" in engine.streams  # wiped once, then the stream started
    with db.connection_context(), db.atomic():
        store.upsert("did:plc:after", "a1", "https://after.example/feed", None, 1, max_per_did=5, touched=set())
    engine.streams.clear()
    engine.claim_round()  # a later claim (a takeover, a lost claim) does not wipe again
    assert [d for d, *_ in rows()] == ["did:plc:after"]


def test_an_opt_out_while_the_rebuild_reads_the_account_keeps_it_out(setup, fake):
    app, kit = setup()
    accounts(fake, 2)
    real = kit.resolver.pds_endpoint

    def pds_endpoint(did):
        if did == "did:plc:acct000":  # the person opts out after the rebuild checked, while it reads their PDS
            with db.connection_context(), db.atomic():
                store.opt_out(did)
        return real(did)

    kit.resolver.pds_endpoint = pds_endpoint
    tick(app, kit)
    assert [d for d, *_ in rows()] == ["did:plc:acct001"]
    assert state("backfill.status") == "done"


def test_a_stream_exactly_the_setting_behind_is_not_yet_a_gap(setup):
    app, _ = setup(FEATHERREADER_NET_STALE_CURSOR_SECS=3600)
    applied, stale_us = sql.now_us(), 3600 * 1_000_000
    with db.connection_context(), db.atomic():
        jstore.save_cursor("network", jstore.Cursor(applied))
        assert rebuild.note_gap(applied + stale_us, stale_us) is False
        assert store.get_state("live.gap") is None
        assert rebuild.note_gap(applied + stale_us + 1, stale_us) is True
        assert store.get_state("live.gap") == str(applied)


def test_tombstones_newer_than_an_unfinished_rebuilds_start_outlive_the_week(setup):
    app, _ = setup()
    day = 86_400_000_000
    t0 = sql.now_us() - 10 * day  # a rebuild still waiting on a relay's Retry-After, ten days on
    with db.connection_context(), db.atomic():
        store.set_state("backfill.status", "retry")
        store.set_state("backfill.cursor_us", str(t0))
        for rkey, at in (("before-t0", t0 - day), ("after-t0", t0 + day)):  # both older than the week
            sql.execute("INSERT INTO net_tombstone (did, rkey, time_us) VALUES (?, ?, ?)",
                        ("did:plc:a", rkey, at))
    maintenance(app)
    with db.connection_context():  # the rebuild may still list the deleted record: its tombstone must stay
        assert db.execute_sql("SELECT rkey FROM net_tombstone").fetchall() == [("after-t0",)]


def test_the_rebuild_reads_at_most_two_accounts_at_once(setup, fake):
    """Each account's records take a while at the relay, so requests overlap as much as the pool
    lets them: the relay saw exactly two at once (the pool's width), never more."""
    app, kit = setup()
    accounts(fake, 8)
    for did in fake.repos:
        fake.slow_dids[did] = 0.3
    tick(app, kit)
    assert fake.most_in_flight == rebuild.CONCURRENCY == 2
    assert state("backfill.status") == "done" and len(rows()) == 8
