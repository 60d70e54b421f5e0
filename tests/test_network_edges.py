"""The catalogue at its edges: disk pressure, and consent ordered against concurrent writers."""
import threading
import time

import pytest

from feather.db import current_dialect, db
from feather.jetstream import store as jstore
from feather.jetstream.engine import Engine
from feather.jetstream.events import CommitEvent
from feather.network import rebuild, store, subscriptions, tasks
from tests.conftest import PG_URL
from tests.support.waiting import wait_until

NSID = "community.lexicon.rss.subscription"
T = 1_760_000_000_000_000


def seed_rows(n: int) -> None:
    """n rows over n // 5 feeds, with URLs long enough that the rows fill real pages."""
    with db.connection_context(), db.atomic():
        touched: set[str] = set()
        for i in range(n):
            url = f"https://feed{i // 5:05d}.example/{'path/' * 20}rss.xml"
            store.upsert(f"did:plc:seed{i:06d}", "r1", url, None, T + i, max_per_did=10, touched=touched)
        store.refresh_rollup(touched)


def count_rows() -> int:
    with db.connection_context():
        return db.execute_sql("SELECT count(*) FROM net_subscription").fetchone()[0]


def size() -> int:
    with db.connection_context():
        return jstore.db_size_bytes()


@pytest.fixture(params=["new file", "older file"] if not PG_URL else ["postgresql"])
def pressured_app(request, make_app, database_url):
    if request.param == "older file":
        # A file made before auto_vacuum=incremental: deleted rows leave free pages in the file.
        import sqlite3

        conn = sqlite3.connect(database_url[len("sqlite:///"):])
        conn.execute("CREATE TABLE made_earlier (x)")
        conn.close()
    app = make_app(FEATHERREADER_NETWORK_INDEX=True)
    if request.param == "older file":
        with db.connection_context():
            assert db.execute_sql("PRAGMA auto_vacuum").fetchone()[0] == 0
    return app


def test_disk_pressure_prunes_only_until_under_the_watermark_and_the_streams_resume(pressured_app):
    app = pressured_app
    settings = app.config["FEATHER"]
    seed_rows(10_000)
    before = size()
    # Just under the current size: the first slice (10 % of 10,000 rows) is enough to get back under.
    settings.featherreader_db_size_watermark_bytes = before - 1
    engine = Engine(app, subscriptions(settings))
    assert engine.check_watermark() is True  # over: the streams pause
    started = time.monotonic()
    with app.app_context(), db.connection_context():
        removed = tasks.prune_for_disk_pressure(settings)
    assert (removed, count_rows()) == (1000, 9000)  # the oldest tenth, not the whole catalogue
    after = size()
    assert after < settings.featherreader_db_size_watermark_bytes
    assert engine.check_watermark() is False  # back under: the streams resume by themselves
    print(f"disk pressure: 10,000 rows, {before:,} B measured, watermark {before - 1:,} B -> pruned {removed:,}"
          f" rows, {after:,} B, streams resumed after {time.monotonic() - started:.2f} s")
    with db.connection_context():
        oldest = db.execute_sql("SELECT min(did) FROM net_subscription").fetchone()[0]
        counted = db.execute_sql("SELECT sum(subscriber_count) FROM net_feed_rollup").fetchone()[0]
    assert (oldest, counted) == ("did:plc:seed001000", 9000)
    with app.app_context(), db.connection_context():
        assert tasks.prune_for_disk_pressure(settings) == 0  # under: nothing more goes


@pytest.mark.skipif(bool(PG_URL), reason="SQLite's free pages")
def test_on_a_new_sqlite_file_a_prune_gives_its_pages_back(make_app):
    app = make_app(FEATHERREADER_NETWORK_INDEX=True)
    settings = app.config["FEATHER"]
    seed_rows(5000)
    with db.connection_context():
        pages = db.execute_sql("PRAGMA page_count").fetchone()[0]
        assert db.execute_sql("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
    settings.featherreader_db_size_watermark_bytes = size() - 1
    with app.app_context(), db.connection_context():
        tasks.prune_for_disk_pressure(settings)
        assert db.execute_sql("PRAGMA freelist_count").fetchone()[0] == 0
        assert db.execute_sql("PRAGMA page_count").fetchone()[0] < pages


def test_a_rebuild_waits_while_the_database_is_over_the_watermark(make_app):
    app = make_app(FEATHERREADER_NETWORK_INDEX=True)
    settings = app.config["FEATHER"]
    settings.featherreader_db_size_watermark_bytes = 1

    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError("a rebuild over the watermark must not fetch anything")

    with app.app_context(), db.connection_context():
        tasks.rebuild_tick(settings, Untouchable())
        assert store.get_state("backfill.status") is None


def test_opt_out_inserts_and_deletes_in_one_transaction(make_app, monkeypatch):
    app = make_app(FEATHERREADER_NETWORK_INDEX=True, FEATHERREADER_NETWORK_PAGE=True)
    with db.connection_context(), db.atomic():
        store.upsert("did:plc:a", "r1", "https://a.example/feed", None, T, max_per_did=5, touched=set())

    def fail(did, touched):
        raise RuntimeError("fault between the opt-out's insert and its delete")

    monkeypatch.setattr(store, "delete_did", fail)
    from tests.test_network_page import with_directory

    client = with_directory(app).test_client()
    html = client.get("/network/opt-out").get_data(as_text=True)
    token = html.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    assert client.post("/network/opt-out", data={"handle": "did:plc:a", "csrf_token": token}).status_code == 500
    monkeypatch.undo()
    with db.connection_context():
        assert db.execute_sql("SELECT count(*) FROM net_optout").fetchone()[0] == 0  # neither happened
        assert db.execute_sql("SELECT did FROM net_subscription").fetchall() == [("did:plc:a",)]


# --- consent against concurrent writers (real PostgreSQL, where READ COMMITTED allowed the race)
def _race(write_in_thread, monkeypatch):
    """Run `write_in_thread` (a catalogue write of did:plc:racer) in a thread and hold it right
    after it decided the DID is not opted out; opt out meanwhile; then let the write finish.
    (Threads are greenlets here, and psycopg2 waits through gevent: two real connections.)"""
    decided, release = threading.Event(), threading.Event()
    real_upsert = store.upsert

    def held_upsert(*args, **kwargs):
        decided.set()
        release.wait(30)
        return real_upsert(*args, **kwargs)

    monkeypatch.setattr(store, "upsert", held_upsert)
    errors = []

    def writer():
        try:
            write_in_thread()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    wait_until(decided.is_set, message="the writer to read the opt-out state")
    opted = threading.Event()

    def opt_out():
        with db.connection_context(), db.atomic():
            store.opt_out("did:plc:racer")
        opted.set()

    opting = threading.Thread(target=opt_out)
    opting.start()
    # Either the opt-out is already done (nothing orders it: the bug) or it waits on the DID's lock.
    wait_until(lambda: opted.is_set() or _waiting_on_a_lock(), message="the opt-out to finish or wait")
    release.set()
    thread.join(30)
    opting.join(30)
    assert errors == []
    with db.connection_context():
        rows = db.execute_sql("SELECT count(*) FROM net_subscription WHERE did = 'did:plc:racer'").fetchone()[0]
        counted = db.execute_sql("SELECT count(*) FROM net_feed_rollup WHERE feed_url = 'https://race.example/feed'"
                                 ).fetchone()[0]
    return rows, counted


def _waiting_on_a_lock() -> bool:
    with db.connection_context():
        return db.execute_sql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                              ).fetchone()[0] > 0


pg_only = pytest.mark.skipif(not PG_URL, reason="the READ COMMITTED race is PostgreSQL's")


@pg_only
@pytest.mark.postgres
def test_an_opt_out_during_a_live_batch_leaves_the_account_uncounted(make_app, monkeypatch):
    app = make_app(FEATHERREADER_NETWORK_INDEX=True)
    (sub,) = subscriptions(app.config["FEATHER"])
    event = CommitEvent("did:plc:racer", T, "create", NSID, "r1", {"url": "https://race.example/feed"}, "bafy")

    def batch():
        with db.connection_context():
            jstore.apply_batch(sub, [event], None)

    assert _race(batch, monkeypatch) == (0, 0)


@pg_only
@pytest.mark.postgres
def test_an_opt_out_during_a_rebuild_write_leaves_the_account_uncounted(make_app, monkeypatch):
    app = make_app(FEATHERREADER_NETWORK_INDEX=True)
    settings = app.config["FEATHER"]

    class Resolver:
        def pds_endpoint(self, did):
            return "https://pds.example"

    monkeypatch.setattr(rebuild, "fetch_records", lambda kit, did, n: [("r1", "https://race.example/feed", None)])
    with db.connection_context(), db.atomic():
        db.execute_sql(current_dialect().q("INSERT INTO net_backfill_queue (did, state, updated_at) VALUES (?, ?, ?)"),
                       ("did:plc:racer", "pending", 0))
    kit = rebuild.Kit(None, [], Resolver(), None)
    assert _race(lambda: rebuild._one_did(kit, settings, "did:plc:racer", T), monkeypatch) == (0, 0)
