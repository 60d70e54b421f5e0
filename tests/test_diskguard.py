"""The disk guard: a default install pauses writing before its disk fills (the larger of 1 GiB or 5 %
of the SQLite file's disk kept free); an explicit byte watermark still wins. The disk is stood in
for at os.statvfs; the database, its size and the engine are real."""
from __future__ import annotations

import os

import pytest

from feather import diskguard
from feather.db import db
from tests.conftest import PG_URL

GIB = 1 << 30


class Disk:
    def __init__(self, total: int, free: int):
        self.total, self.free, self.asked = total, free, []

    def __call__(self, path):
        self.asked.append(path)
        return os.statvfs_result((4096, 4096, self.total // 4096, self.free // 4096, self.free // 4096,
                                  0, 0, 0, 0, 255))


@pytest.fixture
def app(make_app):
    return make_app()


def pressure(app):
    with app.app_context(), db.connection_context():
        return diskguard.pressure(app.config["FEATHER"])


def test_the_default_watermark_is_zero_so_the_free_space_rule_is_on_by_default(app):
    assert app.config["FEATHER"].featherreader_db_size_watermark_bytes == 0
    assert (diskguard.MIN_FREE_BYTES, diskguard.MIN_FREE_FRACTION) == (GIB, 0.05)


@pytest.mark.parametrize("total, free, pressed", [
    (10 * GIB, GIB - 4096, True),  # a small disk: 1 GiB is the larger
    (10 * GIB, GIB, False),
    (100 * GIB, 5 * GIB - 4096, True),  # a large one: 5 % is
    (100 * GIB, 5 * GIB, False),
])
@pytest.mark.skipif(bool(PG_URL), reason="the free-space rule reads the SQLite file's disk")
def test_free_space_under_the_larger_of_1_gib_or_5_percent_is_pressure(app, monkeypatch, total, free, pressed):
    disk = Disk(total, free)
    monkeypatch.setattr(diskguard, "statvfs", disk)
    found = pressure(app)
    assert (found is not None) == pressed
    if pressed:
        need = max(GIB, total // 20)
        assert found.reason == f"disk has {free} bytes free, under the {need} kept free"
    db_path = app.config["FEATHER"].database_url.split(":///", 1)[1]
    assert disk.asked == [os.path.dirname(os.path.abspath(db_path))]


def test_an_explicit_byte_watermark_wins_over_the_disk(app, monkeypatch):
    monkeypatch.setattr(diskguard, "statvfs", Disk(100 * GIB, 0))  # a full disk
    settings = app.config["FEATHER"]
    settings.featherreader_db_size_watermark_bytes = 10**15
    assert pressure(app) is None
    settings.featherreader_db_size_watermark_bytes = 1
    found = pressure(app)
    assert found is not None and found.reason == f"database size {found.size} >= watermark 1"


@pytest.mark.skipif(not PG_URL, reason="PostgreSQL's disk is the server's")
def test_on_postgresql_only_the_byte_rule_applies(app, monkeypatch):
    disk = Disk(100 * GIB, 0)
    monkeypatch.setattr(diskguard, "statvfs", disk)
    assert (pressure(app), disk.asked) == (None, [])


@pytest.mark.skipif(bool(PG_URL), reason="the free-space rule reads the SQLite file's disk")
def test_a_default_install_whose_disk_fills_pauses_its_streams_and_resumes_when_space_returns(app, monkeypatch):
    from feather.features import subscriptions
    from feather.jetstream.engine import Engine

    disk = Disk(100 * GIB, GIB)
    monkeypatch.setattr(diskguard, "statvfs", disk)
    engine = Engine(app, subscriptions(app.config["FEATHER"]))
    assert engine.check_watermark() is True
    with app.app_context(), db.connection_context():
        reasons = {r[0] for r in db.execute_sql("SELECT paused_reason FROM jetstream_cursor").fetchall()}
    assert reasons == {f"disk has {GIB} bytes free, under the {5 * GIB} kept free"}
    disk.free = 6 * GIB
    assert engine.check_watermark() is False
    with app.app_context(), db.connection_context():
        assert {r[0] for r in db.execute_sql("SELECT paused_reason FROM jetstream_cursor").fetchall()} == {None}
