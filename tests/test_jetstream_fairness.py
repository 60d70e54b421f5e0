"""The writer shares one gevent loop with the web workers: a catch-up must not starve sockets.

Each batch holds the loop while its SQL runs; between batches the hub has to poll sockets. With a
bare gevent.sleep(0) the reader and writer handed off through callbacks only, and a request
waited for the whole catch-up (about 50 batches at a time), which is what the load bench showed.
"""
import json
import socket

import gevent
import websocket

from feather import sql
from feather.db import answers_awaited, awaiting_answer, current_dialect, db
from feather.jetstream.consumer import Stream
from feather.jetstream.tuning import Tuning
from feather.jetstream.writer import yield_to_io
from tests.support import mirror_feature
from tests.support.eventlog import mixed_log
from tests.support.waiting import wait_until
from tests.test_jetstream_engine import connected, engine_for, jetstream  # noqa: F401 (fixtures)


def _batches_before_socket_is_served(engine_for, jetstream, monkeypatch) -> tuple[int, int]:  # noqa: F811
    monkeypatch.setattr(mirror_feature, "BUSY_WRITER_SECS", 0.005)
    monkeypatch.setattr(mirror_feature, "batches_applied", 0)
    app, engine = engine_for(tuning=Tuning(batch_events=50))
    engine.start()
    wait_until(connected(jetstream), message="connection")
    jetstream.append(mixed_log(20_000, seed=4))  # about 400 batches of catch-up
    wait_until(lambda: mirror_feature.batches_applied >= 5, message="catch-up under way")
    left, right = socket.socketpair()
    served_at = []

    def web_request():
        left.recv(1)
        served_at.append(mirror_feature.batches_applied)

    waiter = gevent.spawn(web_request)
    gevent.sleep(0.001)  # the waiter is parked on its socket
    started_at = mirror_feature.batches_applied
    right.send(b"x")
    waiter.join(timeout=60)
    left.close()
    right.close()
    return started_at, served_at[0]


def test_a_ready_socket_is_served_within_a_batch_or_two_during_catch_up(engine_for, jetstream,  # noqa: F811
                                                                         monkeypatch):
    started_at, served_at = _batches_before_socket_is_served(engine_for, jetstream, monkeypatch)
    assert served_at - started_at <= 2, (started_at, served_at)


class Backlog:
    """A socket whose next frame is always there, as during a catch-up: reading it never waits."""

    def __init__(self, frames: list[bytes]):
        self.frames = iter(frames)

    def recv_data(self):
        frame = next(self.frames, None)
        if frame is None:
            raise websocket.WebSocketConnectionClosedException("backlog drained")
        return websocket.ABNF.OPCODE_TEXT, frame


def _frames_between_turns(make_app, every: int, n: int = 2_000) -> tuple[list[int], Stream]:
    """How many frames the reader took between the turns another greenlet got while it drained n."""
    app = make_app(FEATHERREADER_EXTRA_FEATURES="tests.support.mirror_feature")
    sub = mirror_feature.subscriptions(app.config["FEATHER"])[0]
    stream = Stream(sub, ["ws://127.0.0.1:9"], app=app, allow_private=True,
                    tuning=Tuning(queue_size=n, reader_yield_frames=every))
    frames = [json.dumps(f).encode() for f in mixed_log(n, seed=5, start_us=1_000_000)]
    seen: list[int] = []
    draining = True

    def other_greenlet():
        while True:
            seen.append(stream.stats["frames"])
            if not draining:
                return
            yield_to_io()

    other = gevent.spawn(other_greenlet)
    gevent.sleep(0)  # it has had its first turn
    reason = stream._receive(Backlog(frames))
    draining = False
    other.join(timeout=5)
    assert reason.startswith("WebSocketConnectionClosedException")
    assert stream.stats["frames"] == n
    return [b - a for a, b in zip(seen, seen[1:])], stream


def test_a_reader_draining_a_backlog_lets_other_greenlets_run_every_32_frames(make_app):
    gaps, stream = _frames_between_turns(make_app, every=32)
    assert max(gaps) == 32
    assert sum(gaps) == 2_000
    assert stream.state.queue.qsize() == stream.stats["frames"] - stream.stats["ignored"]


def test_with_reader_yield_frames_0_the_whole_backlog_runs_without_a_turn_for_anyone(make_app):
    gaps, _ = _frames_between_turns(make_app, every=0)
    assert [g for g in gaps if g] == [2_000]


def test_while_a_greenlet_awaits_a_database_answer_the_reader_yields_every_4_frames(make_app):
    """A writer whose PostgreSQL answer has arrived runs only at the reader's next yield; while one
    is awaited the reader yields every reader_yield_frames_awaited frames instead of every 32."""
    app = make_app(FEATHERREADER_EXTRA_FEATURES="tests.support.mirror_feature")
    sub = mirror_feature.subscriptions(app.config["FEATHER"])[0]
    stream = Stream(sub, ["ws://127.0.0.1:9"], app=app, allow_private=True,
                    tuning=Tuning(queue_size=2_000, reader_yield_frames=32, reader_yield_frames_awaited=4))
    frames = [json.dumps(f).encode() for f in mixed_log(2_000, seed=5, start_us=1_000_000)]
    seen: list[int] = []
    draining = True

    def awaiting_greenlet():  # stands for a writer parked in the PostgreSQL wait callback
        with awaiting_answer():
            while draining:
                seen.append(stream.stats["frames"])
                yield_to_io()

    other = gevent.spawn(awaiting_greenlet)
    gevent.sleep(0)
    stream._receive(Backlog(frames))
    draining = False
    other.join(timeout=5)
    gaps = [b - a for a, b in zip(seen, seen[1:])]
    assert max(gaps) == 4 and sum(gaps) == 2_000
    assert not answers_awaited()  # the marker left with the greenlet


def test_a_statement_in_flight_on_postgresql_marks_an_answer_awaited_and_sqlite_never_does(app):
    """The wait callback (PostgreSQL under gevent) marks the wait the reader looks at; a SQLite
    call never yields to the loop, so nothing else ever sees one in flight."""
    samples: list[bool] = []

    def statement():
        with app.app_context(), db.connection_context():
            sql.one("SELECT pg_sleep(0.3)" if not current_dialect().is_sqlite else
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)"
                    " SELECT count(*) FROM n")

    running = gevent.spawn(statement)
    while not running.dead:
        samples.append(answers_awaited())
        gevent.sleep(0.01)
    running.get()
    with app.app_context():
        sqlite = current_dialect().is_sqlite
    assert (True in samples) is (not sqlite)
    assert not answers_awaited()
