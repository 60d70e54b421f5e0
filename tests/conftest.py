from gevent import monkey

monkey.patch_all()  # the app runs patched in production; tests run the same way

import os  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

pytest_plugins = ["tests.support.pds", "tests.support.firehose_bridge"]
# Debian's Chromium through Playwright, one per session for tests/browser/ and the whole-process tests.
from tests.support.browser import browser, playwright_instance  # noqa: E402, F401

# CI runs each property test on the same examples every time (a failure there is reproducible, never
# a dice roll on someone's unrelated change); a local run explores new ones.
from hypothesis import settings as _hypothesis  # noqa: E402

_hypothesis.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("FEATHER_CI") == "1":
    _hypothesis.load_profile("ci")

REPO = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("DATABASE_URL", "") if os.environ.get("DATABASE_URL", "").startswith("postgres") else ""


def pytest_report_header(config):
    return f"feather database: {'PostgreSQL ' + PG_URL.rsplit('@', 1)[-1] if PG_URL else 'SQLite'}"


def pytest_collection_modifyitems(config, items):
    """Tests marked `once` give the same answer whichever database runs (they never touch it, or
    they pin their own SQLite file, or they check rendering that the HTTP tests also cover on
    PostgreSQL): CI runs them on the SQLite pass and deselects them on the PostgreSQL pass, which
    keeps the two passes inside CI's time budget. Deselected, not skipped: nothing is counted.

    Tests marked `live` read the public network: only the nightly run (`make nightly`, which sets
    FEATHER_LIVE_NETWORK=1) selects them; every other run deselects them the same way."""
    drop = []
    if os.environ.get("FEATHER_LIVE_NETWORK") != "1":
        drop += [item for item in items if item.get_closest_marker("live")]
    if PG_URL:
        drop += [item for item in items if item.get_closest_marker("once") and item not in drop]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]


def pytest_configure(config):
    # The terminal's stderr, taken before any test's capture swaps it, for the hang watchdog below.
    import sys

    config._feather_stderr = os.fdopen(os.dup(sys.stderr.fileno()), "w")


HANG_SECS = 600  # twice pytest-timeout's 300 s: only a hang it cannot end reaches this


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """The backstop for a hang pytest-timeout cannot end: one in C (a green psycopg2 connection
    blocked on its mutex) runs neither its SIGALRM handler nor its timer thread, which gevent has
    made green. faulthandler's watchdog is a real C thread: it prints every stack and ends the run,
    so CI fails in minutes, naming the test, instead of running out its whole time."""
    import faulthandler

    faulthandler.dump_traceback_later(HANG_SECS, exit=True, file=item.config._feather_stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def _pg_template():
    """PostgreSQL only: one migrated database per session, copied for each test that builds an app."""
    from tests.support.postgres import migrated_template

    with migrated_template(PG_URL) as name:
        yield name


@pytest.fixture
def database_url(request, tmp_path):
    """A fresh database per test: a SQLite file, or a new PostgreSQL database. Empty, except that on
    PostgreSQL a test that builds its app with `make_app` gets a copy of the migrated schema (the
    same schema `make_app` would migrate to, at a fraction of the time); tests marked
    `empty_database` always start empty."""
    if not PG_URL:
        yield f"sqlite:///{tmp_path / 'feather.db'}"
        return
    from tests.support.postgres import scratch_database

    template = None
    if "make_app" in request.fixturenames and not request.node.get_closest_marker("empty_database"):
        template = request.getfixturevalue("_pg_template")

    def close_pool():
        from feather.db import db

        _close_pool(db)

    with scratch_database(PG_URL, "feather_t", before_drop=close_pool, template=template) as url:
        yield url


@pytest.fixture
def make_app(database_url, tmp_path):
    """Build an app on the test database with extra settings; migrated unless told not to, as a
    process starts (the migrations, then each feature's ensure_schema: the feeds' records tables)."""
    from feather import create_app
    from feather.db import db
    from feather.process.runtime import migrate as start

    made = []

    def make(migrate: bool = True, **settings):
        config = {
            "DATABASE_URL": database_url,
            "FEATHERREADER_ENV": "test",
            "FEATHERREADER_DATA_DIR": str(tmp_path / "data"),
            "FEATHERREADER_ALLOW_PRIVATE_NETWORK": True,
            "FEED_LABELERS": "",  # no test asks Bluesky's labeler; the labels tests name their fake one
        }
        config.update(settings)
        app = create_app(config)
        made.append(app)
        if migrate:
            start(app)
        return app

    yield make
    _stop_backfills(made)
    _close_pool(db)


def _stop_backfills(apps) -> None:
    """A sign-in or a first read spawns a feed backfill greenlet that the test may not wait for.
    Let them finish (or end them) before the pool closes (see _close_pool)."""
    import gevent

    from feather.feeds.tasks import backfill

    for app in apps:
        backfill.join_all(app, timeout=10)
        gevent.killall([g for g in app.extensions.get(backfill._GREENLETS, []) if not g.dead], timeout=5)


def _close_pool(db, wait_secs: float = 10.0) -> None:
    """Close every pooled connection, but only once none is mid-query. Any greenlet the test did
    not wait for (a labels fetch, a reposted post's fetch) may be inside a query: its green
    psycopg2 connection holds its mutex while the query waits in the hub, and closing it from here
    would block the whole thread on that mutex, a hang neither pytest-timeout's signal nor its
    green timer thread can end. Yielding to the hub until the pool has its connections back lets
    those queries finish; a connection still held after that is idle, and closes safely."""
    import time

    import gevent

    if db.obj is None:
        return
    if not hasattr(db.obj, "close_all"):
        if not db.obj.is_closed():
            db.obj.close()
        return
    db.obj.close()  # this greenlet's own connection back to the pool first
    deadline = time.monotonic() + wait_secs
    while db.obj._in_use and time.monotonic() < deadline:
        gevent.sleep(0.02)
    db.obj.close_all()


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def fixture_frames():
    """The real Jetstream frames in tests/fixtures, one string per line."""
    return (REPO / "tests" / "fixtures" / "jetstream-events.jsonl").read_text().splitlines()
