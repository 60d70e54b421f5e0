"""How the consumer recovers: the exact resume cursor, failover between hosts, backoff growth and
reset, a handler failing mid-batch, a reader killed by a bug, and the cursor catching up when the
stream goes quiet. Each test names the planted bug it catches (issue 20)."""
import logging
import time
from dataclasses import replace

import pytest

from feather.process import supervisor
from feather.db import db
from feather.jetstream import consumer, store
from feather.jetstream.engine import Engine
from feather.jetstream.tuning import Tuning
from tests.support import mirror_feature
from tests.support.fake_jetstream import FakeJetstream, make_commit
from tests.support.waiting import wait_until
from tests.test_jetstream_engine import FAST, connected, engine_for, jetstream, rows  # noqa: F401 (fixtures)

POST = "app.bsky.feed.post"


def saved_cursor(name="global"):
    with db.connection_context():
        return store.load_cursor(name)


def only_filter(js) -> dict:
    filters = list(js.stats()["last_filter"].values())
    assert len(filters) == 1
    return filters[0]


def test_resume_cursor_is_exactly_the_saved_time_minus_five_seconds(engine_for, jetstream):  # noqa: F811
    """Catches: no replay rewind, or a 4 s one."""
    app, engine = engine_for()
    saved = int(time.time() * 1_000_000) - 60_000_000
    with db.connection_context(), db.atomic():
        store.save_cursor("global", store.Cursor(saved))
    engine.start()
    wait_until(connected(jetstream), message="connection")
    assert only_filter(jetstream)["cursor"] == saved - 5_000_000


def test_resume_cursor_on_a_v2_host_is_exactly_the_saved_sequence(make_app, monkeypatch):
    monkeypatch.setattr(mirror_feature, "_ready", False)
    with FakeJetstream(v2_cursor=True) as js:
        app = make_app(FEATHERREADER_JETSTREAM_HOSTS=js.url)
        engine = Engine(app, mirror_feature.subscriptions(app.config["FEATHER"]))
        with db.connection_context(), db.atomic():
            store.save_cursor("global", store.Cursor(int(time.time() * 1_000_000) - 60_000_000, seq=42))
        engine.start()
        try:
            wait_until(connected(js), message="connection")
            assert only_filter(js)["cursor"] == 42
        finally:
            engine.stop(timeout=5)


def test_a_v2_cursor_older_than_the_lookback_resumes_at_the_window_and_reports_the_gap(make_app, monkeypatch,
                                                                                       tmp_path):
    """Catches: a v2 sequence resumed as is, whatever its age (the gap never reported)."""
    dids = tmp_path / "dids"
    dids.write_text("did:plc:alice\n")
    monkeypatch.setenv("MIRROR_DIDS_FILE", str(dids))
    monkeypatch.setenv("MIRROR_LOOKBACK_US", str(60_000_000))
    monkeypatch.setattr(mirror_feature, "_ready", False)
    monkeypatch.setattr(mirror_feature, "gaps", [])
    with FakeJetstream(v2_cursor=True) as js:
        app = make_app(FEATHERREADER_JETSTREAM_HOSTS=js.url)
        engine = Engine(app, mirror_feature.subscriptions(app.config["FEATHER"]))
        engine.subscriptions[0].on_gap = mirror_feature.gaps.append
        stale = int(time.time() * 1_000_000) - 3_600_000_000
        with db.connection_context(), db.atomic():
            store.save_cursor("mirror", store.Cursor(stale, seq=42))
        before = int(time.time() * 1_000_000)
        engine.start()
        try:
            wait_until(connected(js), message="connection")
            after = int(time.time() * 1_000_000)
            assert before - 60_000_000 <= only_filter(js)["cursor"] <= after - 60_000_000
            assert mirror_feature.gaps == [stale]
            assert engine.streams["mirror"].stats["gaps"] == 1
        finally:
            engine.stop(timeout=5)


def test_fails_over_to_the_next_host_and_back(make_app, monkeypatch):
    """Catches: a reader that keeps retrying the host that went away."""
    monkeypatch.setattr(mirror_feature, "_ready", False)
    first, second = FakeJetstream().start(), FakeJetstream().start()
    again = None
    app = make_app(FEATHERREADER_JETSTREAM_HOSTS=f"{first.url},{second.url}")
    engine = Engine(app, mirror_feature.subscriptions(app.config["FEATHER"]), tuning=FAST)
    engine.start()
    stream = engine.streams["global"]
    try:
        wait_until(connected(first), message="the first host")
        first.close()
        wait_until(connected(second), message="failover to the second host")
        assert stream.state.obs.host == second.url
        again = FakeJetstream(port=first.port).start()  # the first host is back
        second.close()
        wait_until(connected(again), message="back to the first host")
        assert stream.state.obs.host == first.url
        again.append([make_commit("did:plc:alice", POST, "back", "create")])
        wait_until(lambda: f"at://did:plc:alice/{POST}/back" in rows(), message="applied from the first host")
        assert stream.stats["connects"] == 3
    finally:
        engine.stop(timeout=5)
        for js in (first, second, again):
            if js is not None:
                js.close()


def test_backoff_grows_while_nothing_arrives_and_resets_after_a_connection_that_delivered(
        engine_for, jetstream):  # noqa: F811
    """Catches: backoff that never resets after a good connection (and one that resets on a mere connect)."""
    attempts = []
    app, engine = engine_for(tuning=Tuning(backoff=lambda attempt: attempts.append(attempt) or 0.05))
    engine.start()
    stream = engine.streams["global"]

    def drop_when(connects):
        wait_until(lambda: stream.stats["connects"] == connects and jetstream.stats()["connections"] == 1,
                   message=f"connection {connects}")
        assert jetstream.drop() == 1

    drop_when(1)  # delivered nothing
    drop_when(2)  # nothing again
    wait_until(lambda: stream.stats["connects"] == 3, message="third connection")
    jetstream.append([make_commit("did:plc:alice", POST, "b1", "create")])
    wait_until(lambda: f"at://did:plc:alice/{POST}/b1" in rows(), message="an event delivered")
    drop_when(3)  # this one delivered an event
    drop_when(4)  # the replayed event was already queued: nothing new
    wait_until(lambda: len(attempts) == 4, message="four reconnect delays")
    jetstream.close()  # now every connect fails
    wait_until(lambda: len(attempts) >= 7, message="failed connects")
    assert attempts[:7] == [0, 1, 0, 1, 2, 3, 4]


def streaming_with_b2_planted(engine_for, jetstream, monkeypatch):  # noqa: F811
    """A connected "global" stream of 3-event batches whose handler fails on rkey b2 while
    mirror_feature.fails_left > 0 (the tests set it), reconnecting at once."""
    monkeypatch.setattr(mirror_feature, "FAIL_RKEY", "b2")
    app, engine = engine_for(tuning=replace(FAST, batch_events=3))
    engine.start()
    wait_until(connected(jetstream), message="connection")
    return engine.streams["global"]


def test_a_handler_failing_mid_batch_commits_nothing_and_the_batch_replays_exactly_once(
        engine_for, jetstream, monkeypatch, caplog):  # noqa: F811
    """Catches: a batch applied outside its transaction; a failed batch that does not stop the reader
    queueing (later events applied, the cursor moved past the lost batch)."""
    monkeypatch.setattr(mirror_feature, "COUNT_APPLIES", True)
    stream = streaming_with_b2_planted(engine_for, jetstream, monkeypatch)
    now = int(time.time() * 1_000_000)
    first = [make_commit("did:plc:alice", POST, f"a{i}", "create", time_us=now - 30_000_000 + i) for i in range(3)]
    jetstream.append(first)
    wait_until(lambda: saved_cursor() == store.Cursor(first[-1]["time_us"]), message="first batch saved")
    monkeypatch.setattr(mirror_feature, "fails_left", 10**6)
    later = ([make_commit("did:plc:alice", POST, f"b{i}", "create", time_us=now - 20_000_000 + i) for i in range(3)]
             + [make_commit("did:plc:alice", POST, f"c{i}", "create", time_us=now - 19_000_000 + i) for i in range(3)]
             + [make_commit("did:plc:alice", POST, f"d{i}", "create", time_us=now - 1_000_000 + i) for i in range(3)])
    jetstream.append(later)
    wait_until(lambda: stream.stats["batch_failures"] >= 3, message="the batch failing on every replay")
    # Batches are cut by count as events arrive, so b0 and b1 may land in a batch of their own;
    # b2's batch and everything after it must be nowhere, and the cursor before b2.
    b2 = later[2]["time_us"]
    stuck = [f"at://did:plc:alice/{POST}/{k}" for k in ("b2", "c0", "c1", "c2", "d0", "d1", "d2")]
    with db.connection_context():
        assert set(mirror_feature.mirror_rows()) & set(stuck) == set()
    assert saved_cursor().time_us < b2 and stream.cursor.time_us < b2
    monkeypatch.setattr(mirror_feature, "fails_left", 0)  # the fault is fixed
    expected, _ = mirror_feature.expected_state(first + later)
    wait_until(lambda: rows() == expected, message="replay applied")
    with db.connection_context():
        counts = mirror_feature.apply_counts()
    assert {uri: counts.get(uri) for uri in stuck} == dict.fromkeys(stuck, 1)
    assert stream.writer_piece.streak == 0 and stream.writer_piece.failures == stream.stats["batch_failures"]
    tracebacks = [r for r in caplog.records if r.name == "feather.process.supervisor" and r.levelno == logging.ERROR]
    assert len(tracebacks) == 1  # one streak, however many replays failed


def test_the_writer_recovers_when_the_failed_batch_itself_applies_even_if_nothing_follows(
        engine_for, jetstream, monkeypatch):  # noqa: F811
    """The failing batch is the stream's last: once its replay applies, the writer is healthy again
    (/health reads this streak), without waiting for an event that may not come for hours."""
    stream = streaming_with_b2_planted(engine_for, jetstream, monkeypatch)
    now = int(time.time() * 1_000_000)
    first = [make_commit("did:plc:alice", POST, "a0", "create", time_us=now - 20_000_000)]
    jetstream.append(first)  # a batch that applies (and creates the mirror's tables) before the fault
    wait_until(lambda: stream.cursor == store.Cursor(first[-1]["time_us"]), message="the first batch applied")
    monkeypatch.setattr(mirror_feature, "fails_left", 2)
    events = [make_commit("did:plc:alice", POST, f"b{i}", "create", time_us=now - 10_000_000 + i) for i in range(3)]
    jetstream.append(events)
    expected, _ = mirror_feature.expected_state(first + events)
    wait_until(lambda: rows() == expected, message="the replay applied the failed batch")
    wait_until(lambda: stream.cursor == store.Cursor(events[-1]["time_us"]), message="the cursor at the last event")
    assert (stream.stats["batch_failures"], stream.writer_piece.failures, mirror_feature.fails_left) == (2, 2, 0)
    assert stream.writer_piece.streak == 0


def test_a_reader_killed_by_a_bug_is_restarted_by_the_supervisor_and_logged_once(
        engine_for, jetstream, monkeypatch, caplog):  # noqa: F811
    """Catches: a reader greenlet that dies for good when something outside its retry loop raises."""
    app, engine = engine_for(tuning=FAST)  # the supervisor's restart backs off by the stream's tuning too
    engine.start()
    stream = engine.streams["global"]
    wait_until(connected(jetstream), message="connection")
    real, planted = consumer.hosts.with_params, []

    def with_params_once(*args):
        if not planted:
            planted.append(1)
            raise RuntimeError("planted bug outside the retry loop")
        return real(*args)

    monkeypatch.setattr(consumer.hosts, "with_params", with_params_once)
    with caplog.at_level(logging.ERROR, logger="feather.process.supervisor"):
        jetstream.drop()
        wait_until(lambda: stream.stats["connects"] == 2, message="reconnect after the restart")
    jetstream.append([make_commit("did:plc:alice", POST, "r1", "create")])
    wait_until(lambda: f"at://did:plc:alice/{POST}/r1" in rows(), message="applied after the restart")
    assert (stream.reader_piece.restarts, stream.reader_piece.last_error) == (
        1, "RuntimeError: planted bug outside the retry loop")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("reader global failed: restarting")
    assert "Traceback" in errors[0]


def test_the_cursor_is_saved_once_the_stream_goes_quiet(engine_for, jetstream):  # noqa: F811
    """Catches: the last applied position left unsaved after a burst (saved only with a batch)."""
    app, engine = engine_for(tuning=Tuning(cursor_save_secs=10**9))  # the once-a-second rule never fires again
    engine.start()
    stream = engine.streams["global"]
    wait_until(connected(jetstream), message="connection")
    last = jetstream.append([make_commit("did:plc:alice", POST, f"q{i}", "create") for i in range(5)])
    wait_until(lambda: stream.cursor is not None and stream.cursor.time_us == last, message="applied")
    wait_until(lambda: saved_cursor() == store.Cursor(last), message="the cursor saved while idle")


@pytest.mark.parametrize("attempt, expected", [(0, 1.0), (1, 2.0), (5, 32.0), (6, 60.0), (20, 60.0)])
def test_backoff_doubles_to_a_sixty_second_cap(attempt, expected):
    assert supervisor.backoff_delay(attempt, rand=lambda: 0.5) == expected
