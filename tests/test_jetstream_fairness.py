"""The writer shares one gevent loop with the web workers: a catch-up must not starve sockets.

Each batch holds the loop while its SQL runs; between batches the hub has to poll sockets. With a
bare gevent.sleep(0) the reader and writer handed off through callbacks only, and a request
waited for the whole catch-up (about 50 batches at a time), which is what the load bench showed.
"""
import json
import socket

import gevent
import websocket

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
