"""The writer shares one gevent loop with the web workers: a catch-up must not starve sockets.

Each batch holds the loop while its SQL runs; between batches the hub has to poll sockets. With a
bare gevent.sleep(0) the reader and writer handed off through callbacks only, and a request
waited for the whole catch-up (about 50 batches at a time), which is what the load bench showed.
"""
import socket

import gevent

from feather.jetstream.tuning import Tuning
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
