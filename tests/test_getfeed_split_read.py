"""A time-ordered read of posts and reposts runs one ordered arm per collection
(read/query.py::_arms): the same pages as the one statement with `f.collection IN (…)`, every
page and cursor alike, and a plan that walks each collection's key in page order (nothing sorts
all of the reader's rows, so the read stops after `limit` rows)."""
from __future__ import annotations

import random

import pytest

from feather import sql
from feather.db import current_dialect, db
from feather.feeds.read import hybrid, query
from feather.feeds.tasks import backfill
from tests.fixtures.feeds.feedkit import (BASE_US, POST, FakeSources, feeds_app, follow, ingest,
                                         mark_backfilled, post, repost)
from tests.test_feeds_explain import plan, unbounded_scans

A, B, C, D = (f"did:plc:{c * 4}" for c in "abcd")


@pytest.fixture
def app(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, sources=FakeSources())  # the built-in config: Following reads reposts
    yield app
    backfill.join_all(app, timeout=10)


def _world(app, rng):
    """A follows B and C; B, C and D post; B and C repost each other's posts and D's, some twice."""
    mark_backfilled(app, A)
    ingest(app, [follow(A, "f1", B), follow(A, "f2", C)])
    events, uris = [], []
    for i in range(60):
        author = rng.choice((B, C, D))
        at = BASE_US + i * 10 + rng.choice((0, 0, 5))  # ties on time, broken by URI
        events.append(post(author, f"p{i:02d}", at))
        uris.append(f"at://{author}/{POST}/p{i:02d}")
        if i > 5 and rng.random() < 0.5:
            events.append(repost(rng.choice((B, C)), f"r{i:02d}", rng.choice(uris), at + rng.choice((0, 3))))
    ingest(app, sorted(events, key=lambda e: e.time_us))


def _pages(app, limit):
    """Every page of A's timeline through query.run, the cursor from each page to the next."""
    config = app.extensions["feeds"]
    feed = config.feeds["timeline"]
    target = feed.shown[0]
    c = config.collections[target.short]
    pages, params = [], {"limit": str(limit)}
    with app.app_context(), db.connection_context():
        while True:
            page = query.run(config, c, params, hybrid.feed_source(config, feed, target, A))
            pages.append(page["records"])
            if "cursor" not in page:
                return pages
            params = {"limit": str(limit), "cursor": page["cursor"]}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_split_read_gives_every_page_the_whole_statement_gives(app, seed, monkeypatch):
    _world(app, random.Random(seed))
    for limit in (1, 7, 50):
        split = _pages(app, limit)
        with monkeypatch.context() as m:
            m.setattr(query, "_arms", lambda *args: None)
            whole = _pages(app, limit)
        assert split == whole
        assert sum(len(p) for p in split) > 40 and any("reason" in r for p in split for r in p)


def test_the_split_read_is_one_ordered_walk_per_collection(app):
    _world(app, random.Random(4))
    statements = []
    real = sql.rows

    def capture(statement, params=()):
        statements.append((statement, list(params)))
        return real(statement, params)

    config = app.extensions["feeds"]
    feed = config.feeds["timeline"]
    target = feed.shown[0]
    with app.app_context(), db.connection_context():
        query.sql.rows = capture
        try:
            query.run(config, config.collections[target.short], {"limit": "5"},
                      hybrid.feed_source(config, feed, target, A))
        finally:
            query.sql.rows = real
        (statement, params), = [s for s in statements if "UNION ALL" in s[0]]
        assert statement.count("f.collection = ?") == 2 and "f.collection IN" not in statement
        lines = plan(statement, params)
    names = ["feed_items", "f", "g", config.collections[target.short].table, "r"]
    assert unbounded_scans(lines, names) == []
    if current_dialect().is_sqlite:  # each arm walks the key in page order: nothing sorts all the rows
        assert not any("TEMP B-TREE" in line for line in lines) and any("MERGE" in line for line in lines)
