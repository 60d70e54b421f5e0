"""Every stored record has a size cap (records.MAX_RECORD_BYTES): from the stream, from a followed
author's PDS, from a listing. A record past it is neither stored nor fanned out."""
from __future__ import annotations

from tests.fixtures.feeds.feedkit import settled_us

from feather.db import db
from feather.feeds.store import records
from tests.fixtures.feeds.feedkit import BASE_US, FakeSources, feed_uris, feeds_app, follow, ingest, post, rows, toml

A, C = "did:plc:aaaa", "did:plc:cccc"


def sized_post(rkey: str, at_us: int, size: int, char: str = "x"):
    """A post whose stored JSON is exactly size bytes (char is one or more bytes in UTF-8)."""
    base = len(records.dumps(post(C, rkey, at_us, text="").record).encode())
    width = len(char.encode())
    assert (size - base) % width == 0
    event = post(C, rkey, at_us, text=char * ((size - base) // width))
    assert len(records.dumps(event.record).encode()) == size
    return event


def test_a_stream_record_at_the_cap_is_stored_and_one_byte_past_it_is_not(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, toml())
    cap = records.MAX_RECORD_BYTES
    ingest(app, [follow(A, "f1", C), sized_post("fits", BASE_US + 1, cap), sized_post("over", BASE_US + 2, cap + 1)])
    assert rows(app, "SELECT rkey FROM feed_records_post") == [("fits",)]
    assert feed_uris(app, A) == [f"at://{C}/app.bsky.feed.post/fits"]


def test_the_cap_counts_utf8_bytes_not_characters(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, toml())
    cap = records.MAX_RECORD_BYTES
    base = len(records.dumps(post(C, "x", BASE_US, text="").record).encode())
    over = post(C, "wide", BASE_US + 1, text="€" * ((cap - base) // 3 + 1))  # a third as many characters
    assert len(records.dumps(over.record)) < cap < len(records.dumps(over.record).encode())
    ingest(app, [follow(A, "f1", C), over])
    assert rows(app, "SELECT count(*) FROM feed_records_post") == [(0,)]


def test_an_oversized_update_leaves_the_stored_version(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, toml())
    ingest(app, [follow(A, "f1", C), post(C, "p", BASE_US + 1, text="first")])
    ingest(app, [sized_post("p", BASE_US + 2, records.MAX_RECORD_BYTES + 1)])
    assert [records.parse_value(r[0])["text"] for r in rows(app, "SELECT record FROM feed_records_post")] == ["first"]


def test_a_followed_authors_fetched_records_past_the_cap_are_not_stored(make_app, tmp_path):
    from feather.feeds.store import fetches
    from feather.feeds.tasks import authors

    big = sized_post("big", BASE_US + 2, records.MAX_RECORD_BYTES + 1).record
    small = post(C, "small", BASE_US + 1).record
    sources = FakeSources(repos={(C, "app.bsky.feed.post"): [("big", "bafybig", big), ("small", "bafysmall", small)]})
    app = feeds_app(make_app, tmp_path, toml(), sources=sources, FEED_SERVE="signed-in")
    with app.app_context(), db.connection_context():
        with db.atomic():
            fetches.request([C])
        assert authors.fetch_tick(app, app.extensions["feeds"], now_us=settled_us()) == 1
    assert rows(app, "SELECT rkey FROM feed_records_post") == [("small",)]
