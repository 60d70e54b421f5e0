"""The ingest engine against the fake Jetstream: reconnects, membership, bad frames, backpressure."""
import threading
import time
from dataclasses import replace

import pytest

from feather.db import db
from feather.jetstream import store as jstore, writer
from feather.jetstream.engine import Engine
from feather.jetstream.tuning import Tuning
from tests.support import mirror_feature
from tests.support.eventlog import mixed_log
from tests.support.fake_jetstream import FakeJetstream, make_commit
from tests.support.waiting import wait_until


@pytest.fixture
def jetstream():
    with FakeJetstream() as js:
        yield js


# Reconnects (and restarts) at once: the tests wait for convergence, not for a real backoff.
FAST = Tuning(backoff=lambda attempt: 0.05)


@pytest.fixture
def engine_for(make_app, jetstream, monkeypatch):
    engines = []
    monkeypatch.setattr(mirror_feature, "_ready", False)

    def build(tuning: Tuning | None = None, **settings):
        app = make_app(FEATHERREADER_JETSTREAM_HOSTS=jetstream.url,
                       FEATHERREADER_EXTRA_FEATURES="tests.support.mirror_feature", **settings)
        # Only the test feature's subscriptions: the counts below are about one socket.
        engine = Engine(app, mirror_feature.subscriptions(app.config["FEATHER"]), tuning=tuning)
        engines.append(engine)
        return app, engine

    yield build
    for engine in engines:
        engine.stop(timeout=5)


def rows():
    with db.connection_context():
        return mirror_feature.mirror_rows()


def connected(js, n=1):
    return lambda: js.stats()["connections"] == n


def test_forced_drop_resumes_from_cursor_with_no_gap_and_no_duplicate(engine_for, jetstream):
    app, engine = engine_for(tuning=FAST)
    engine.start()
    wait_until(connected(jetstream), message="first connection")
    first = mixed_log(400, seed=1)
    jetstream.append(first)
    expected, _ = mirror_feature.expected_state(first)
    wait_until(lambda: rows() == expected, message="first half applied")
    stream = engine.streams["global"]

    def saved_covers_applied():
        with db.connection_context():
            return stream.cursor is not None and jstore.load_cursor("global") == stream.cursor
    wait_until(saved_covers_applied, message="the saved cursor to reach the last applied event")
    assert jetstream.drop() == 1
    second = mixed_log(400, seed=2)
    jetstream.append(second)  # appended while the consumer is away: replay must bring it
    expected, _ = mirror_feature.expected_state(first + second)
    wait_until(lambda: rows() == expected, message="replay converged")
    stats = engine.streams["global"].stats
    assert stats["connects"] == 2
    assert stats["disconnects"] == 1
    assert jetstream.stats()["connects_total"] == 2


def connected_for_alice(engine_for, jetstream, tmp_path, monkeypatch):
    """An engine whose stream follows did:plc:alice alone (the DID file it re-reads), connected."""
    dids_file = tmp_path / "dids"
    dids_file.write_text("did:plc:alice\n")
    monkeypatch.setenv("MIRROR_DIDS_FILE", str(dids_file))
    app, engine = engine_for()
    engine.start()
    wait_until(connected(jetstream), message="connection")
    return app, engine, dids_file


def test_options_update_changes_membership_without_reconnecting(engine_for, jetstream, tmp_path, monkeypatch):
    app, engine, dids_file = connected_for_alice(engine_for, jetstream, tmp_path, monkeypatch)
    jetstream.append([make_commit("did:plc:alice", "app.bsky.feed.post", "a1", "create"),
                      make_commit("did:plc:bob", "app.bsky.feed.post", "b1", "create")])
    wait_until(lambda: set(rows()) == {"at://did:plc:alice/app.bsky.feed.post/a1"}, message="alice only")
    dids_file.write_text("did:plc:alice\ndid:plc:bob\n")
    with app.app_context(), db.connection_context():
        engine.refresh_membership("mirror")
    wait_until(lambda: jetstream.stats()["options_updates_total"] == 1, message="options_update")
    jetstream.append([make_commit("did:plc:bob", "app.bsky.feed.post", "b2", "create")])
    wait_until(lambda: "at://did:plc:bob/app.bsky.feed.post/b2" in rows(), message="bob after update")
    assert jetstream.stats()["connects_total"] == 1
    assert engine.streams["mirror"].stats["options_updates"] == 1
    assert engine.streams["mirror"].stats["connects"] == 1


def test_empty_membership_never_connects_as_all_dids(engine_for, jetstream, tmp_path, monkeypatch):
    dids_file = tmp_path / "dids"
    dids_file.write_text("")
    monkeypatch.setenv("MIRROR_DIDS_FILE", str(dids_file))
    app, engine = engine_for()
    engine.start()
    stream = engine.streams["mirror"]
    wait_until(lambda: stream.stats["idle_checks"] >= 2, message="the reader to look at its empty membership twice")
    assert jetstream.stats()["connects_total"] == 0


def test_a_failure_building_the_subscription_is_retried_not_fatal(engine_for, jetstream, tmp_path, monkeypatch):
    """The DID set comes from the database (a sync shard's members): an error reading it, or a set
    over Jetstream's limit, must be retried with backoff; the reader must not die with it."""
    dids_file = tmp_path / "dids"  # missing: reading the membership raises
    monkeypatch.setenv("MIRROR_DIDS_FILE", str(dids_file))
    app, engine = engine_for()
    engine.start()
    stream = engine.streams["mirror"]
    wait_until(lambda: stream.stats["membership_failures"] >= 1, message="a membership failure")
    dids_file.write_text("did:plc:alice\n")
    wait_until(connected(jetstream), timeout=15, message="connection after the membership recovers")
    jetstream.append([make_commit("did:plc:alice", "app.bsky.feed.post", "a1", "create")])
    wait_until(lambda: set(rows()) == {"at://did:plc:alice/app.bsky.feed.post/a1"}, message="applied")
    assert jetstream.stats()["connects_total"] == 1


def test_identity_account_and_unknown_kind_frames_are_survived(engine_for, jetstream):
    app, engine = engine_for()
    engine.start()
    wait_until(connected(jetstream), message="connection")
    from tests.support.jetstream_wire import make_account, make_identity

    frames = [make_identity("did:plc:alice", handle="alice.test"),
              {"$raw": '{"did":"did:plc:alice","time_us":5,"kind":"sync","sync":{"seq":1}}'},
              {"$raw": '{"did":"did:plc:alice","time_us":6,"kind":"commit","commit":{"operation":"create"'},
              {"$raw": "[1, 2, 3]"},
              {"$raw": '{"did":"did:plc:alice","time_us":7,"kind":"commit","commit":{"operation":"explode",'
                       '"collection":"app.bsky.feed.post","rkey":"x"}}'},
              {"$raw": '{"did":"did:plc:alice","time_us":8,"kind":"commit","commit":{"operation":"create",'
                       '"collection":"app.bsky.feed.post","rkey":"big","cid":"bafy","record":{"text":"'
                       + "x" * 3_000_000 + '"}}}'},
              make_account("did:plc:bob", active=False, status="deactivated"),
              make_commit("did:plc:alice", "app.bsky.feed.post", "p1", "create")]
    jetstream.append(frames)
    wait_until(lambda: "at://did:plc:alice/app.bsky.feed.post/p1" in rows(), message="post after odd frames")
    with db.connection_context():
        identities = dict(db.execute_sql("SELECT did, coalesce(handle, active) FROM test_identity").fetchall())
    assert identities == {"did:plc:alice": "alice.test", "did:plc:bob": "False:deactivated"}
    stats = engine.streams["global"].stats
    assert stats["ignored"] == 1
    # The 3 MB frame never arrives: we ask Jetstream for maxMessageSizeBytes = MAX_FRAME_BYTES, so it
    # skips it (a server that sends one anyway meets the socket cap: test_net_websocket.py).
    assert stats["malformed"] == 3
    assert stats["oversized"] == 0
    assert stats["connects"] == 1


def test_full_queue_disconnects_and_replay_converges(engine_for, jetstream, monkeypatch):
    # Slow enough that the first batch is still being written when the reader reconnects.
    monkeypatch.setattr(mirror_feature, "SLOW_WRITER_SECS", 0.2)
    app, engine = engine_for(tuning=replace(FAST, queue_size=20, queue_full_grace_secs=0, batch_events=10))
    engine.start()
    wait_until(connected(jetstream), message="connection")
    frames = mixed_log(300, seed=3)
    jetstream.append(frames)
    expected, _ = mirror_feature.expected_state(frames)
    wait_until(lambda: rows() == expected, timeout=60,
               message=lambda: f"convergence after queue-full drops: {dict(engine.streams['global'].stats)} "
                               f"{len(rows())}/{len(expected)}")
    assert engine.streams["global"].stats["queue_full"] >= 1
    assert engine.streams["global"].stats["connects"] >= 2


def test_watermark_pauses_writing_and_resumes_under_it(engine_for, jetstream):
    app, engine = engine_for(tuning=FAST, FEATHERREADER_DB_SIZE_WATERMARK_BYTES=1024)
    engine.start()
    assert engine.watermark_paused is True
    wait_until(lambda: engine.streams["global"].stats["paused_checks"] >= 2, message="the reader to see the pause twice")
    assert jetstream.stats()["connects_total"] == 0
    with db.connection_context():
        reason = db.execute_sql("SELECT paused_reason FROM jetstream_cursor WHERE name = 'global'").fetchone()[0]
    assert reason.startswith("database size ")
    app.config["FEATHER"].featherreader_db_size_watermark_bytes = 10**12
    assert engine.check_watermark() is False
    wait_until(connected(jetstream), message="reconnect after resume")
    jetstream.append([make_commit("did:plc:alice", "app.bsky.feed.post", "w1", "create")])
    wait_until(lambda: "at://did:plc:alice/app.bsky.feed.post/w1" in rows(), message="write after resume")
    with db.connection_context():
        reason = db.execute_sql("SELECT paused_reason FROM jetstream_cursor WHERE name = 'global'").fetchone()[0]
    assert reason is None


def test_cursor_older_than_lookback_reports_a_gap(engine_for, jetstream, tmp_path, monkeypatch):
    from feather.jetstream import store

    dids_file = tmp_path / "dids"
    dids_file.write_text("did:plc:alice\n")
    monkeypatch.setenv("MIRROR_DIDS_FILE", str(dids_file))
    monkeypatch.setenv("MIRROR_LOOKBACK_US", str(60_000_000))
    monkeypatch.setattr(mirror_feature, "gaps", [])
    app, engine = engine_for()
    stale = int(time.time() * 1_000_000) - 3_600_000_000
    with db.connection_context(), db.atomic():
        store.save_cursor("mirror", store.Cursor(stale))
    engine.subscriptions[0].on_gap = mirror_feature.gaps.append
    engine.start()
    wait_until(connected(jetstream), message="connection")
    assert mirror_feature.gaps == [stale]
    assert engine.streams["mirror"].stats["gaps"] == 1


def test_cursor_is_saved_with_the_batch_and_only_moves_forward(engine_for, jetstream):
    from feather.jetstream import store

    app, engine = engine_for()
    engine.start()
    wait_until(connected(jetstream), message="connection")
    last = jetstream.append(mixed_log(50, seed=4))
    def saved():
        with db.connection_context():
            c = store.load_cursor("global")
            return c is not None and c.time_us == last
    wait_until(saved, message="cursor at the last event")
    with db.connection_context(), db.atomic():
        store.save_cursor("global", store.Cursor(last - 10_000_000))
    with db.connection_context():
        assert store.load_cursor("global").time_us == last


def test_the_last_account_leaving_closes_the_connection_quietly_and_idles(engine_for, jetstream, tmp_path,
                                                                           monkeypatch, caplog):
    """An emptied DID set is not a fault: the socket is closed (an empty wantedDids would mean
    every DID), the log says why at INFO, and the stream idles instead of reconnecting."""
    app, engine, dids_file = connected_for_alice(engine_for, jetstream, tmp_path, monkeypatch)
    dids_file.write_text("")
    caplog.set_level("INFO", logger="feather.jetstream.consumer")
    with app.app_context(), db.connection_context():
        engine.refresh_membership("mirror")
    wait_until(connected(jetstream, 0), message="the connection closed")
    stream = engine.streams["mirror"]
    # Two turns of the reader's loop that chose to idle: a reconnect would have come instead.
    idle_before = stream.stats["idle_checks"]
    wait_until(lambda: stream.stats["idle_checks"] >= idle_before + 2, message="the reader to idle")
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "feather.jetstream.consumer"]
    assert said == [("INFO", "jetstream mirror: closed the connection: no account left to follow")]
    stream = engine.streams["mirror"]
    assert (jetstream.stats()["connects_total"], stream.stats["disconnects"], stream.closed_for) == (1, 0, None)
    dids_file.write_text("did:plc:bob\n")
    wait_until(connected(jetstream), timeout=15, message="a connection once an account is back")
    assert jetstream.stats()["opened"][-1]["wantedDids"] == 1


def test_the_cursor_is_saved_with_a_batch_at_most_once_a_second(engine_for, jetstream, monkeypatch):
    """The writer's clock is held still and moved by hand: batches within a second of the last save
    carry no cursor; the first one a full second (Tuning.cursor_save_secs) later does."""
    from types import SimpleNamespace

    from feather.jetstream import store

    clock = [1000.0]
    monkeypatch.setattr(writer, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    saved_with: list[bool] = []
    real = store.apply_batch
    monkeypatch.setattr(store, "apply_batch", lambda sub, batch, cursor: (
        saved_with.append(cursor is not None), real(sub, batch, cursor))[1])
    app, engine = engine_for(tuning=Tuning(batch_events=10))
    engine.start()
    stream = engine.streams["global"]
    wait_until(connected(jetstream), message="connection")

    def burst(n: int, tag: str) -> list[bool]:
        before = len(saved_with)
        last = jetstream.append([make_commit("did:plc:alice", "app.bsky.feed.post", f"{tag}{i}", "create")
                                 for i in range(n)])
        wait_until(lambda: stream.cursor is not None and stream.cursor.time_us == last, message=f"{tag} applied")
        with db.connection_context():  # and saved once the stream went quiet (the idle save)
            wait_until(lambda: store.load_cursor("global").time_us == last, message=f"{tag} saved")
        return saved_with[before:]

    first = burst(100, "a")  # at 1000.0: the first batch saves (nothing saved yet), no other does
    assert len(first) >= 10 and first == [True] + [False] * (len(first) - 1)
    clock[0] = 1000.5  # the idle save above stamped 1000.0
    assert set(burst(10, "b")) == {False}
    clock[0] = 1001.25  # 0.75 s after the last save (the idle one at 1000.5)
    assert set(burst(10, "c")) == {False}
    clock[0] = 1002.25  # exactly a second after it
    assert burst(10, "d")[0] is True


def test_the_channel_between_socket_and_writer_holds_1024_events(engine_for, jetstream, monkeypatch):
    """The writer is stuck on its first batch: the reader queues until the channel is full, and the
    event that does not fit drops the connection (Jetstream replays it)."""
    gate = threading.Event()
    monkeypatch.setattr(mirror_feature, "WRITER_GATE", gate)
    app, engine = engine_for(tuning=Tuning(queue_full_grace_secs=0))
    engine.start()
    stream = engine.streams["global"]
    wait_until(connected(jetstream), message="connection")
    jetstream.append([make_commit("did:plc:alice", "app.bsky.feed.post", "first", "create")])
    wait_until(lambda: mirror_feature.batches_applied or stream.state.queue.qsize() == 0, message="the writer took it")
    jetstream.append([make_commit("did:plc:alice", "app.bsky.feed.post", f"q{i}", "create") for i in range(2000)])
    wait_until(lambda: stream.stats["queue_full"] >= 1, timeout=30, message="the channel filled")
    try:
        assert stream.state.queue.qsize() == Tuning().queue_size == 1024
    finally:
        gate.set()
