"""feather.sql's one_round_trip: writes wait and reach PostgreSQL with the next statement run, in order.

Runs on both databases: SQLite has no round trips to save, so there a write runs at once and each
test says what that database shows.
"""
from __future__ import annotations

import pytest

from feather import sql
from feather.db import current_dialect, db

TABLE = "CREATE TEMPORARY TABLE trip_test (n INTEGER, t TEXT)"


class Boom(Exception):
    pass


@pytest.fixture
def conn(app):
    with app.app_context(), db.connection_context():
        sql.execute(TABLE)
        yield current_dialect()


def _trips(monkeypatch) -> list:
    """Every statement text handed to the driver (peewee's execute_sql is the one door)."""
    sent: list = []
    real = db.obj.execute_sql
    monkeypatch.setattr(db.obj, "execute_sql", lambda text, params=None, *a, **k: (
        sent.append(text), real(text, params, *a, **k))[1])
    return sent


def test_a_read_inside_the_block_sees_the_writes_before_it_in_one_round_trip(conn, monkeypatch):
    sent = _trips(monkeypatch)
    with db.atomic(), sql.one_round_trip():
        sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (1, "a"))
        sql.write("UPDATE trip_test SET n = n + 10 WHERE t = ?", ("a",))
        sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (2, "b"))
        assert sql.rows("SELECT n, t FROM trip_test ORDER BY t") == [(11, "a"), (2, "b")]
    assert len(sent) == (4 if conn.is_sqlite else 1)


def test_the_writes_left_waiting_go_when_the_block_ends(conn, monkeypatch):
    sent = _trips(monkeypatch)
    with db.atomic():
        with sql.one_round_trip():
            sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (1, "a"))
            sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (2, "b"))
            assert len(sent) == (2 if conn.is_sqlite else 0)  # nothing sent yet on PostgreSQL
        assert len(sent) == (2 if conn.is_sqlite else 1)
        assert sql.rows("SELECT n FROM trip_test ORDER BY n") == [(1,), (2,)]


def test_a_statement_run_in_the_block_answers_for_itself_not_for_the_writes_before_it(conn):
    with db.atomic(), sql.one_round_trip():
        sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (1, "a"))
        sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (2, "a"))
        sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (3, "b"))
        assert sql.execute("UPDATE trip_test SET n = 0 WHERE t = ?", ("b",)).rowcount == 1
        assert sql.scalar("SELECT count(*) FROM trip_test WHERE n > ?", (0,)) == 2


@pytest.mark.parametrize("text", ["50% off", "%s and %% and ?", "it's; DROP TABLE trip_test; --", "a;\nb", "ünï 🪶"])
def test_a_waiting_write_stores_its_text_exactly(conn, text):
    with db.atomic():
        with sql.one_round_trip():
            sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (1, text))
        assert sql.rows("SELECT t FROM trip_test") == [(text,)]


def test_an_error_in_the_block_sends_nothing_that_was_waiting(conn):
    # Outside a transaction each statement commits by itself: a write sent on the way out of a
    # failed block would stay.
    with pytest.raises(Boom), sql.one_round_trip():
        sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (1, "a"))
        raise Boom
    assert sql.scalar("SELECT count(*) FROM trip_test") == (1 if conn.is_sqlite else 0)


def test_outside_the_block_a_write_runs_at_once(conn, monkeypatch):
    sent = _trips(monkeypatch)
    sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (1, "a"))
    assert len(sent) == 1
    assert sql.scalar("SELECT count(*) FROM trip_test") == 1


def test_a_block_inside_another_waits_for_the_outer_one(conn, monkeypatch):
    sent = _trips(monkeypatch)
    with db.atomic(), sql.one_round_trip():
        with sql.one_round_trip():
            sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (1, "a"))
        sql.write("INSERT INTO trip_test (n, t) VALUES (?, ?)", (2, "b"))
        waited = len(sent)
    assert waited == (2 if conn.is_sqlite else 0)
    assert len(sent) == (2 if conn.is_sqlite else 1)
