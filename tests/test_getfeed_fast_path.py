"""getFeed's whole request made cheaper (issue 36) without changing what it answers.

The SQLite file's connections are pooled (feather/sqlite_pool.py); a stored record is read
with orjson where that gives json's answer (records.parse_value); the XRPC answers are written
by orjson (web/xrpc.py::_json), which then gives the other connections their turn; a served
reader's read opens no transaction and claims nothing when no backfill is due
(web/xrpc.py::_maybe_backfill). The page statement itself: test_getfeed_split_read.py.
bench/getfeed.py measures the gain.
"""
from __future__ import annotations

import json
import random

import gevent
import gevent.event
import pytest
from flask import jsonify, request

from feather import sql
from feather.db import current_dialect, db
from feather.feeds.store import records
from feather.feeds.tasks import backfill
from feather.feeds.web import xrpc
from feather.sqlite_pool import SqlitePool
from tests.fixtures.feeds.feedkit import (BASE_US, POST, FakeSources, feeds_app, follow, ingest,
                                         mark_backfilled, post, repost)

A, B, C, D = (f"did:plc:{c * 4}" for c in "abcd")
GET_FEED = "/xrpc/com.featherreader.getFeed"


def _sqlite_only():
    if not current_dialect().is_sqlite:
        pytest.skip("the SQLite file's pool (PostgreSQL has its own)")
    assert isinstance(db.obj, SqlitePool)


@pytest.fixture
def app(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, sources=FakeSources())  # the built-in config: Following reads reposts
    yield app
    backfill.join_all(app, timeout=10)


def _get(app, actor=A, **params):
    response = app.test_client().get(GET_FEED, query_string={"feed": "timeline", "actor": actor, **params})
    assert response.status_code == 200, response.get_data()[:300]
    return response


# --- the pool ------------------------------------------------------------------------------------

def test_requests_reuse_one_connection_and_set_its_pragmas_once(app):
    _sqlite_only()
    mark_backfilled(app, A)  # no backfill greenlet takes a connection of its own
    opened = []
    real = db.obj._set_pragmas  # runs on each new connection, never on one the pool hands out again

    def counting(conn):
        opened.append(conn)
        return real(conn)

    db.obj.close_idle()
    db.obj._set_pragmas = counting
    try:
        for _ in range(5):
            _get(app)
    finally:
        del db.obj._set_pragmas
    assert len(opened) == 1  # per request before: five connections, fifty pragmas
    assert db.obj.idle() == 1 and db.obj.is_closed()  # handed back to the pool, not held by this greenlet
    conn = db.obj.connection()
    try:
        assert conn is opened[0]
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000  # its pragmas kept
    finally:
        db.obj.close()


def test_greenlets_holding_connections_at_once_never_share_one(app):
    _sqlite_only()
    held, release = [], gevent.event.Event()

    def hold():
        with db.connection_context():
            held.append(db.obj.connection())
            release.wait()

    greenlets = [gevent.spawn(hold) for _ in range(12)]
    while len(held) < 12:
        gevent.sleep(0.01)
    assert len({id(c) for c in held}) == 12
    release.set()
    gevent.joinall(greenlets, raise_error=True)
    assert db.obj.idle() == db.obj.max_idle == 8  # the rest closed: each may hold 32 MiB of cache


def test_a_connection_handed_back_inside_a_transaction_is_rolled_back(app):
    _sqlite_only()
    with app.app_context():
        db.obj.close_idle()
        db.connect()
        conn = db.obj.connection()
        conn.execute("BEGIN")
        conn.execute("INSERT INTO feed_backfills (actor, feed, completed) VALUES (?, 'timeline', 1)", (B,))
        db.close()  # peewee saw no transaction of its own: only the pool can clean this up
        with db.connection_context():
            assert db.obj.connection() is conn and not conn.in_transaction
            assert sql.one("SELECT 1 FROM feed_backfills WHERE actor = ?", (B,)) is None


# --- records read with orjson --------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    '{"text":"hello","langs":["en"],"n":1,"f":1.5,"z":-0.0,"e":1e300}',
    '{"n":123456789012345678901234567890}',  # past 64 bits: orjson would answer a float
    '{"n":-9223372036854775809}',
    '{"n":18446744073709551615}',
    '{"n":NaN,"i":Infinity}',  # not JSON; json has always read it
    '{"s":"\\ud800"}',  # a lone surrogate
    '{"text": "spaced" , "n" : 99999999999999999999999}',  # not as dumps writes it
    '{"a":1,"a":2}',
    "[" * 300 + "]" * 300,  # deeper than orjson writes
    '{"text":"caf\\u00e9 \\u2603"}',
])
def test_a_stored_record_reads_as_json_reads_it(text):
    got, want = records.parse_value(text), json.loads(text)
    assert repr(got) == repr(want)  # repr: exact ints stay ints, -0.0 stays -0.0, nan compares
    assert [type(v) for v in (got.values() if isinstance(got, dict) else got)] == \
        [type(v) for v in (want.values() if isinstance(want, dict) else want)]


def test_what_is_not_json_still_comes_back_as_the_stored_text():
    assert records.parse_value('{"text":') == '{"text":'
    assert records.parse_value('{"t":"x"} trailing') == '{"t":"x"} trailing'
    assert records.parse_value(None) is None


def test_records_as_dumps_stores_them_read_back_equal_at_random():
    rng = random.Random(36)
    for _ in range(300):
        record = {"text": "".join(rng.choice("ab é☃\n\"\\") for _ in range(rng.randint(0, 30))),
                  "n": rng.choice([0, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 64 - 1, 2 ** 64, -2 ** 63 - 1, 10 ** 30]),
                  "f": rng.uniform(-1e20, 1e20), "list": [rng.randint(-5, 5) for _ in range(3)]}
        text = records.dumps(record)
        assert repr(records.parse_value(text)) == repr(json.loads(text)) == repr(record)


# --- no session for XRPC ---------------------------------------------------------------------------

def test_an_xrpc_read_never_opens_the_session_cookie_a_page_does(app, monkeypatch):
    mark_backfilled(app, A)
    opened = []
    real = type(app.session_interface).get_signing_serializer
    monkeypatch.setattr(type(app.session_interface), "get_signing_serializer",
                        lambda self, a: opened.append(request.path) or real(self, a))
    client = app.test_client()
    client.set_cookie(app.config.get("SESSION_COOKIE_NAME", "session"), "a.signed.cookie")
    response = client.get(GET_FEED, query_string={"feed": "timeline", "actor": A})
    assert response.status_code == 200 and "Set-Cookie" not in response.headers
    assert opened == []
    client.get("/")
    assert opened[:1] == ["/"]


# --- stored records copied into the answer as they are ---------------------------------------------

def test_a_plain_read_copies_each_stored_record_into_the_answer_without_reading_it(app, monkeypatch):
    mark_backfilled(app, A)
    ingest(app, [follow(A, "f1", C)])
    ingest(app, [post(C, f"p{i}", BASE_US + i, text=f"caf\u00e9 {i}", n=i * 10 ** 20, f=-0.0) for i in range(3)])
    with app.app_context(), db.connection_context():
        stored = dict(sql.rows("SELECT uri, record FROM feed_records_post"))
    read = []
    monkeypatch.setattr(records, "parse_value", lambda text: read.append(text) or json.loads(text))
    data = _get(app).get_data()
    assert read == []
    body = json.loads(data)
    assert [r["value"]["text"] for r in body["records"]] == ["caf\u00e9 2", "caf\u00e9 1", "caf\u00e9 0"]
    for r in body["records"]:
        assert b'"value":' + stored[r["uri"]].encode() + b"}" in data  # byte for byte, big ints exact
        assert repr(r["value"]) == repr(json.loads(stored[r["uri"]]))


def test_a_read_with_labels_or_hydrated_references_reads_the_values_it_needs(app, monkeypatch):
    mark_backfilled(app, A)
    ingest(app, [follow(A, "f1", C)])
    parent = f"at://{C}/{POST}/p0"
    ingest(app, [post(C, "p0", BASE_US), post(C, "p1", BASE_US + 1, reply={
        "root": {"uri": parent, "cid": "bafyp0"}, "parent": {"uri": parent, "cid": "bafyp0"}},
        labels={"$type": "com.atproto.label.defs#selfLabels", "values": [{"val": "nudity"}]})])
    body = _get(app, hydrateParent="true").json
    assert [r.get("parent", {}).get("uri") for r in body["records"]] == [parent, None]
    body = _get(app, labelers="did:plc:" + "l" * 24).json
    assert [[label["val"] for label in r["labels"]] for r in body["records"]] == [["nudity"], []]


@pytest.mark.parametrize("text", ["NaN is not a number", "Infinity and beyond", "-Infinity"])
def test_a_post_whose_text_holds_a_word_json_once_wrote_for_a_float_is_answered_exactly(app, text):
    ingest(app, [follow(A, "f1", C)])
    ingest(app, [post(C, "w", BASE_US + 1, text=text)])
    assert _get(app).json["records"][0]["value"]["text"] == text


def test_an_answer_orjson_refuses_still_reads_its_stored_records_for_jsonify(app):
    with app.test_request_context():
        response = xrpc._json({"records": [{"value": records.Stored('{"text":"x","n":1}')}], "big": 2 ** 70})
    assert json.loads(response.get_data()) == {"records": [{"value": {"text": "x", "n": 1}}], "big": 2 ** 70}


@pytest.mark.parametrize("text, want", [
    ('{"text":"x"}', "stored"),
    ('{"text":"x","n":NaN}', "read"),
    ('{"i":-Infinity}', "read"),
    ('[1,2]', "read"),
    ('{"text":', "read"),
    ('{"t":"x"} trailing', "read"),
])
def test_only_a_text_shaped_as_dumps_writes_a_record_is_copied(text, want):
    got = records.answer_value(text)
    assert ("stored" if isinstance(got, records.Stored) else "read") == want
    assert repr(got.value if want == "stored" else got) == repr(records.parse_value(text))


# --- the answer, written by orjson ---------------------------------------------------------------

def test_get_feed_answers_the_same_json_as_jsonify_did(app, monkeypatch):
    mark_backfilled(app, A)
    ingest(app, [follow(A, "f1", C)])
    ingest(app, [post(C, f"p{i}", BASE_US + i, text=f"caf\u00e9 {i}", langs=["fr"], n=i * 10 ** 18)
                 for i in range(3)])
    ingest(app, [repost(C, "r1", f"at://{C}/{POST}/p0", BASE_US + 9)])
    response = _get(app, limit="2")
    assert response.mimetype == "application/json" and response.get_data().endswith(b"\n")
    assert "caf\u00e9".encode() in response.get_data()  # UTF-8, not escaped to ASCII
    with monkeypatch.context() as m:
        m.setattr(xrpc, "_json", lambda body: jsonify(xrpc._read_stored(body)))
        before = _get(app, limit="2")
    assert b"caf\\u00e9" in before.get_data()
    body = json.loads(response.get_data())
    assert body == json.loads(before.get_data())
    assert body["cursor"] and [r["value"]["text"] for r in body["records"]] == ["caf\u00e9 0", "caf\u00e9 2"]
    assert body["records"][0]["reason"]["by"] == C


def test_a_record_past_what_orjson_writes_is_answered_exactly(app):
    ingest(app, [follow(A, "f1", C)])
    ingest(app, [post(C, "big", BASE_US + 1, n=2 ** 70)])
    assert _get(app).json["records"][0]["value"]["n"] == 2 ** 70


def test_a_stored_nan_is_answered_as_null_so_the_answer_stays_json(app):
    ingest(app, [follow(A, "f1", C)])
    ingest(app, [post(C, "nan", BASE_US + 1)])
    with app.app_context(), db.connection_context():
        sql.execute("UPDATE feed_records_post SET record = ? WHERE did = ?", ('{"text":"x","n":NaN}', C))

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    body = json.loads(_get(app).get_data(), parse_constant=refuse)
    assert body["records"][0]["value"] == {"text": "x", "n": None}


def test_a_written_answer_lets_the_other_connections_run_before_this_ones_next_request(app):
    """gunicorn's gevent worker closes the response once the body is written, then reads the same
    connection's next request: the close gives the turn to every greenlet that is ready. (On
    SQLite nothing else in a request yields; on PostgreSQL the queries do.)"""
    mark_backfilled(app, A)
    response = _get(app)
    ran = []
    gevent.spawn(ran.append, "another connection's request")  # ready, waiting for a turn
    response.close()
    assert ran == ["another connection's request"]


# --- no transaction and no claim when nothing is due ---------------------------------------------

def _traced_read(app, actor):
    """(statements the read ran, whether any ran inside a transaction, maybe_start calls)."""
    ran, in_tx, started = [], [], []
    real_execute, real_start = db.obj.execute_sql, backfill.maybe_start

    def execute_sql(statement, params=None, *args, **kwargs):
        ran.append(statement)
        in_tx.append(db.obj.in_transaction())
        return real_execute(statement, params, *args, **kwargs)

    def maybe_start(*args, **kwargs):
        started.append(args[3])
        return real_start(*args, **kwargs)

    db.obj.execute_sql, backfill.maybe_start = execute_sql, maybe_start
    try:
        _get(app, actor)
    finally:
        del db.obj.execute_sql
        backfill.maybe_start = real_start
    return ran, any(in_tx), started


WRITES = ("INSERT", "UPDATE", "DELETE", "SELECT PG_ADVISORY")


def test_a_served_readers_read_with_its_backfill_done_opens_no_transaction_and_claims_nothing(app):
    mark_backfilled(app, A)
    ran, in_tx, started = _traced_read(app, A)
    assert not in_tx and started == []
    assert [s for s in ran if s.lstrip().upper().startswith(WRITES)] == []


def test_a_backfill_in_flight_or_resting_is_not_claimed_again_and_opens_no_transaction(app):
    now = sql.now_ms()
    with app.app_context(), db.connection_context(), db.atomic():
        sql.execute("INSERT INTO feed_backfills (actor, feed, completed, retries, started_at)"
                    " VALUES (?, 'timeline', 0, 0, ?), (?, 'timeline', 0, 2, ?)", (A, now, B, now))
    for actor in (A, B):
        _ran, in_tx, started = _traced_read(app, actor)
        assert not in_tx and started == []


def test_a_first_read_still_claims_its_backfill(app):
    _ran, in_tx, started = _traced_read(app, D)
    assert started == [D] and in_tx  # the claim: inside backfill.maybe_start's transaction
    backfill.join_all(app, timeout=10)
    with app.app_context(), db.connection_context():
        assert sql.one("SELECT completed FROM feed_backfills WHERE actor = ?", (D,)) == (1,)


def _asks_backfills(ran) -> bool:
    return any("feed_backfills" in statement for statement in ran)


def test_once_a_read_has_seen_the_backfill_done_the_next_reads_do_not_ask_again(app):
    mark_backfilled(app, A)
    first, _in_tx, _started = _traced_read(app, A)
    then = [_traced_read(app, A)[0] for _ in range(3)]
    assert _asks_backfills(first) and [_asks_backfills(ran) for ran in then] == [False, False, False]


def test_a_backfill_seen_in_flight_is_asked_about_again(app):
    with app.app_context(), db.connection_context(), db.atomic():
        sql.execute("INSERT INTO feed_backfills (actor, feed, completed, retries, started_at)"
                    " VALUES (?, 'timeline', 0, 0, ?)", (A, sql.now_ms()))
    assert _asks_backfills(_traced_read(app, A)[0])
    with app.app_context(), db.connection_context(), db.atomic():
        sql.execute("DELETE FROM feed_backfills WHERE actor = ?", (A,))
    assert _traced_read(app, A)[2] == [A]  # nothing remembered it as done: the next read claims


def test_after_delete_my_data_the_next_read_claims_a_backfill_again(app):
    from feather import personal

    mark_backfilled(app, A)
    _traced_read(app, A)  # seen done, and remembered
    with app.test_request_context(), db.connection_context():
        with db.atomic():
            personal.delete(app, A)
    assert _traced_read(app, A)[2] == [A]


def test_the_memory_of_done_backfills_lasts_its_ttl(app, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(backfill.time, "monotonic", lambda: clock[0])
    mark_backfilled(app, A)
    _traced_read(app, A)
    clock[0] += backfill.DONE_TTL_SECS - 1
    assert not _asks_backfills(_traced_read(app, A)[0])
    clock[0] += 2
    assert _asks_backfills(_traced_read(app, A)[0])


def test_a_stale_claim_is_claimed_again(app):
    with app.app_context(), db.connection_context(), db.atomic():
        sql.execute("INSERT INTO feed_backfills (actor, feed, completed, retries, started_at)"
                    " VALUES (?, 'timeline', 0, 0, ?)", (A, sql.now_ms() - backfill.BACKFILL_STALE_MS - 1))
    assert _traced_read(app, A)[2] == [A]
