"""getFeed / listRecords / getRecord over XRPC (docs/api.md, "Timelines"), through the Flask test client."""
from __future__ import annotations

import base64
import json

import pytest

from tests.fixtures.feeds.feedkit import (
    BASE_US, POST, FakeSources, create, feeds_app, follow, ingest, join_backfills, post, toml,
)

A, C, D = "did:plc:aaaa", "did:plc:cccc", "did:plc:dddd"
GET_FEED = "/xrpc/com.example.getFeed"


@pytest.fixture
def app(make_app, tmp_path):
    sources = FakeSources(handles={"alice.test": A})
    app = feeds_app(make_app, tmp_path, toml(), sources=sources)
    yield app
    join_backfills(app)


@pytest.fixture
def client(app):
    return app.test_client()


def uri(did, rkey):
    return f"at://{did}/{POST}/{rkey}"


@pytest.mark.parametrize("query, status, error, message", [
    ("", 400, "InvalidRequest", "feed and actor parameters required"),
    ("?feed=timeline", 400, "InvalidRequest", "feed and actor parameters required"),
    ("?actor=" + A, 400, "InvalidRequest", "feed and actor parameters required"),
    ("?feed=nope&actor=" + A, 404, "UnknownFeed", "Unknown feed"),
    ("?feed=timeline&actor=nobody.test", 400, "InvalidRequest", "Could not resolve actor"),
    ("?feed=timeline&actor=not%20an%20identifier", 400, "InvalidRequest", "Could not resolve actor"),
    ("?feed=timeline&actor=" + A + "&collection=app.bsky.feed.like", 400, "InvalidRequest",
     "Collection not in feed targets"),
    ("?feed=timeline&actor=" + A + "&collection=profile", 400, "InvalidRequest", "Collection not in feed targets"),
])
def test_get_feed_errors_are_xrpc_json(client, query, status, error, message):
    response = client.get(GET_FEED + query)
    assert response.status_code == status
    assert response.json == {"error": error, "message": message}


def test_get_feed_returns_followed_posts_newest_first_in_the_record_shape(app, client):
    ingest(app, [follow(A, "f1", C), follow(A, "f2", D)])
    ingest(app, [post(C, "c1", BASE_US + 1), post(D, "d1", BASE_US + 3), post(C, "c2", BASE_US + 2)])
    body = client.get(f"{GET_FEED}?feed=timeline&actor={A}").json
    assert [r["uri"] for r in body["records"]] == [uri(D, "d1"), uri(C, "c2"), uri(C, "c1")]
    first = body["records"][0]
    assert set(first) == {"uri", "cid", "did", "collection", "rkey", "time_us", "value"}
    assert (first["did"], first["collection"], first["rkey"], first["time_us"]) == (D, POST, "d1", BASE_US + 3)
    assert first["value"]["text"] == "hello" and first["cid"].startswith("bafy")
    assert "cursor" not in body and "profiles" not in body


def test_actor_may_be_a_handle_and_collection_a_short_name_or_nsid(app, client):
    ingest(app, [follow(A, "f1", C), post(C, "c1", BASE_US + 1)])
    for extra in ("", "&collection=post", "&collection=" + POST):
        body = client.get(f"{GET_FEED}?feed=timeline&actor=alice.test{extra}").json
        assert [r["uri"] for r in body["records"]] == [uri(C, "c1")]


def test_cursor_pages_over_tied_timestamps_without_drops_or_repeats(app, client):
    ingest(app, [follow(A, "f1", C), follow(A, "f2", D)])
    tied = [post(C, f"t{i}", BASE_US + 100) for i in range(5)] + [post(D, f"t{i}", BASE_US + 100) for i in range(2)]
    ingest(app, tied + [post(C, "newer", BASE_US + 200), post(C, "older", BASE_US + 50)])
    seen, cursor, sizes = [], None, []
    while True:
        url = f"{GET_FEED}?feed=timeline&actor={A}&limit=3" + (f"&cursor={cursor}" if cursor else "")
        body = client.get(url).json
        sizes.append(len(body["records"]))
        seen += [r["uri"] for r in body["records"]]
        cursor = body.get("cursor")
        if not cursor:
            break
    expected_tied = sorted([uri(C, f"t{i}") for i in range(5)] + [uri(D, f"t{i}") for i in range(2)])
    assert seen == [uri(C, "newer")] + expected_tied + [uri(C, "older")]
    # A full page always carries a cursor (Contrail: cursor iff records == limit), so 9 records
    # in pages of 3 take a fourth, empty request to learn the end.
    assert sizes == [3, 3, 3, 0]


def test_cursor_is_base64url_json_with_the_uri_tie_break(app, client):
    ingest(app, [follow(A, "f1", C), post(C, "c1", BASE_US + 1), post(C, "c2", BASE_US + 2)])
    cursor = client.get(f"{GET_FEED}?feed=timeline&actor={A}&limit=1").json["cursor"]
    assert "=" not in cursor
    decoded = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    assert decoded == {"t": BASE_US + 2, "u": uri(C, "c2"), "k": "time"}


def test_a_garbage_or_foreign_kind_cursor_returns_page_one(app, client):
    ingest(app, [follow(A, "f1", C), post(C, "c1", BASE_US + 1)])
    foreign = base64.urlsafe_b64encode(b'{"t":1,"u":"x","k":"search"}').decode().rstrip("=")
    for cursor in ("%%%", "bm90IGpzb24", foreign):
        body = client.get(f"{GET_FEED}?feed=timeline&actor={A}&cursor={cursor}").json
        assert [r["uri"] for r in body["records"]] == [uri(C, "c1")]


@pytest.mark.parametrize("limit, expected", [("0", 1), ("1", 1), ("-5", 1), ("250", 200), ("abc", 50), (None, 50)])
def test_limit_is_clamped_to_1_200_default_50(app, client, limit, expected):
    ingest(app, [follow(A, "f1", C)] + [post(C, f"p{i:03d}", BASE_US + i) for i in range(210)])
    # follow backfill took 100; the other 110 arrived after the follow... all 210 are in the feed.
    url = f"{GET_FEED}?feed=timeline&actor={A}" + (f"&limit={limit}" if limit is not None else "")
    assert len(client.get(url).json["records"]) == expected


def test_filters_come_only_from_the_configured_queryable_fields(app, client):
    ingest(app, [follow(A, "f1", C)])
    ingest(app, [post(C, "en", BASE_US + 1, langs="en"), post(C, "de", BASE_US + 2, langs="de"),
                 post(C, "reply", BASE_US + 3, reply={"root": {"uri": "at://x/y/z"}})])
    got = lambda q: [r["rkey"] for r in client.get(f"{GET_FEED}?feed=timeline&actor={A}&{q}").json["records"]]
    assert got("langs=en") == ["en"]
    assert got("replyRootUri=at://x/y/z") == ["reply"]
    assert got("text=hello") == ["reply", "de", "en"]  # not queryable: ignored, never interpolated
    assert got("record%27)%20OR%201%3D1--=x") == ["reply", "de", "en"]


def test_range_filter_and_field_sort_page_with_their_own_cursor(app, client):
    ingest(app, [follow(A, "f1", C)])
    ingest(app, [create(C, POST, f"p{i}", {"text": "x", "createdAt": f"2020-01-0{i}T00:00:00.000Z"},
                        time_us=BASE_US + 10 - i) for i in range(1, 6)])
    base = f"{GET_FEED}?feed=timeline&actor={A}&createdAtMin=2020-01-02T00:00:00.000Z&createdAtMax=2020-01-04T23:00:00.000Z"
    assert [r["rkey"] for r in client.get(base).json["records"]] == ["p4", "p3", "p2"]  # time = createdAt
    first = client.get(base + "&sort=createdAt&limit=2").json
    assert [r["rkey"] for r in first["records"]] == ["p4", "p3"]  # range fields sort desc by default
    cursor = first["cursor"]
    second = client.get(base + f"&sort=createdAt&limit=2&cursor={cursor}").json
    assert [r["rkey"] for r in second["records"]] == ["p2"]
    asc = client.get(base + "&sort=createdAt&order=asc").json
    assert [r["rkey"] for r in asc["records"]] == ["p2", "p3", "p4"]


def test_profiles_true_hydrates_author_profiles(app, client):
    ingest(app, [follow(A, "f1", C), follow(A, "f2", D)])
    ingest(app, [create(C, "app.bsky.actor.profile", "self", {"displayName": "Cee"}),
                 post(C, "c1", BASE_US + 1), post(D, "d1", BASE_US + 2)])
    body = client.get(f"{GET_FEED}?feed=timeline&actor={A}&profiles=true").json
    assert body["profiles"][0] == {"did": D, "handle": None}
    cee = body["profiles"][1]
    assert (cee["did"], cee["uri"], cee["rkey"], cee["value"]["displayName"]) == (
        C, f"at://{C}/app.bsky.actor.profile/self", "self", "Cee")
    assert "profiles" not in client.get(f"{GET_FEED}?feed=timeline&actor={A}&profiles=1").json


def test_list_records_pages_a_collection_and_filters_by_author(app, client):
    ingest(app, [post(C, "c1", BASE_US + 1), post(D, "d1", BASE_US + 2), post(C, "c2", BASE_US + 2)])
    body = client.get("/xrpc/com.example.post.listRecords").json
    assert [r["uri"] for r in body["records"]] == [uri(C, "c2"), uri(D, "d1"), uri(C, "c1")]
    body = client.get(f"/xrpc/com.example.post.listRecords?actor={C}&limit=1").json
    assert [r["uri"] for r in body["records"]] == [uri(C, "c2")]
    body = client.get(f"/xrpc/com.example.post.listRecords?actor={C}&limit=1&cursor={body['cursor']}").json
    assert [r["uri"] for r in body["records"]] == [uri(C, "c1")]
    bad = client.get("/xrpc/com.example.post.listRecords?actor=ghost.test")
    assert (bad.status_code, bad.json["message"]) == (400, "Could not resolve actor")


def test_get_record_errors_and_handle_form_uri(app, client):
    ingest(app, [post(A, "p1", BASE_US + 1)])
    path = "/xrpc/com.example.post.getRecord"
    ok = client.get(f"{path}?uri=at://alice.test/{POST}/p1")
    assert ok.status_code == 200 and ok.json["uri"] == uri(A, "p1") and ok.json["value"]["text"] == "hello"
    assert client.get(path).json == {"error": "InvalidRequest", "message": "uri parameter required"}
    for bad in ("at://alice.test", "https://x", f"at://{A}/{POST}"):
        response = client.get(f"{path}?uri={bad}")
        assert (response.status_code, response.json["message"]) == (400, "uri must be at://<actor>/<collection>/<rkey>")
    missing = client.get(f"{path}?uri=at://{A}/{POST}/nope")
    assert (missing.status_code, missing.json) == (404, {"error": "RecordNotFound", "message": "Record not found"})


def test_a_field_sort_puts_records_without_the_field_last_in_either_order_and_pages_through_them(app, client):
    ingest(app, [follow(A, "f1", C)])
    ingest(app, [post(C, "p1", BASE_US + 1, langs="en"), post(C, "p2", BASE_US + 2),
                 post(C, "p3", BASE_US + 3, langs="de"), post(C, "p4", BASE_US + 4)])
    base = f"{GET_FEED}?feed=timeline&actor={A}&sort=langs"
    rkeys = lambda body: [r["rkey"] for r in body["records"]]
    assert rkeys(client.get(base).json) == ["p3", "p1", "p4", "p2"]  # asc by default; no field: newest first
    assert rkeys(client.get(base + "&order=desc").json) == ["p1", "p3", "p4", "p2"]
    first = client.get(base + "&limit=3").json
    assert rkeys(first) == ["p3", "p1", "p4"]
    second = client.get(base + f"&limit=3&cursor={first['cursor']}").json
    assert (rkeys(second), "cursor" in second) == (["p2"], False)


def test_profiles_name_each_author_once_however_many_of_their_records_the_page_holds(app, client):
    ingest(app, [follow(A, "f1", C)])
    ingest(app, [post(C, f"c{i}", BASE_US + i) for i in range(1, 4)])
    body = client.get(f"{GET_FEED}?feed=timeline&actor={A}&profiles=true").json
    assert (len(body["records"]), body["profiles"]) == (3, [{"did": C, "handle": None}])


def test_a_cursor_longer_than_the_limit_is_ignored_even_when_it_decodes():
    """Defence in depth (the XRPC routes already refuse URLs over 4096 bytes): the decoder never
    parses more than MAX_CURSOR_CHARS."""
    from feather.feeds.read import cursor as cursors

    def of_length(n: int) -> str:
        for pad in range(n):
            text = cursors.encode(5, "at://" + "x" * pad, "time")
            if len(text) >= n:
                return text
        raise AssertionError(n)

    longest, over = of_length(cursors.MAX_CURSOR_CHARS), of_length(cursors.MAX_CURSOR_CHARS + 1)
    assert (len(longest), len(over)) == (cursors.MAX_CURSOR_CHARS, cursors.MAX_CURSOR_CHARS + 2)
    assert cursors.decode(longest, "time").t == 5
    assert cursors.decode(over, "time") is None


@pytest.mark.parametrize("query", ["langs=a%00b", "createdAtMin=%00", "createdAtMax=2020%00"])
def test_a_nul_in_a_filter_is_a_400_not_a_database_error(app, client, query):
    ingest(app, [follow(A, "f1", C), post(C, "p", BASE_US + 1, langs="en")])
    for path in (f"{GET_FEED}?feed=timeline&actor={A}&{query}", f"/xrpc/com.example.post.listRecords?{query}"):
        response = client.get(path)
        assert (response.status_code, response.json["error"]) == (400, "InvalidRequest"), path
        assert "NUL" in response.json["message"]


def test_a_forged_numeric_sort_value_in_a_cursor_reads_a_page_not_a_500(app, client):
    """On PostgreSQL a field's sort value is text; SQLite's json_extract may give a number. A cursor
    carrying a number where the database has text is forged there, and reads page one."""
    ingest(app, [follow(A, "f1", C)])
    ingest(app, [create(C, POST, f"p{i}", {"text": "x", "createdAt": f"2020-01-0{i}T00:00:00.000Z"},
                        time_us=BASE_US + 10 - i) for i in range(1, 4)])
    forged = base64.urlsafe_b64encode(json.dumps(
        {"t": BASE_US, "u": uri(C, "p9"), "v": 5, "k": "field:createdAt"}).encode()).rstrip(b"=").decode()
    response = client.get(f"{GET_FEED}?feed=timeline&actor={A}&sort=createdAt&cursor={forged}")
    assert response.status_code == 200
    from tests.conftest import PG_URL

    expected = ["p3", "p2", "p1"] if PG_URL else []  # SQLite compares the number with the text: nothing sorts below it
    assert [r["rkey"] for r in response.json["records"]] == expected


def test_a_time_cursor_is_compact_utf8_json_in_contrails_key_order():
    """Contrail's cursor is JSON.stringify({t, u, k}) in base64url: no spaces, keys in that order,
    text as UTF-8 (not \\u-escaped), no padding. Both writers (orjson for a time cursor, json for a
    field sort's) must give those bytes."""
    from feather.feeds.read import cursor as cursors

    text = cursors.encode(1733500000000001, "at://did:plc:ünï/app.bsky.feed.post/3k", "time")
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    assert raw == '{"t":1733500000000001,"u":"at://did:plc:ünï/app.bsky.feed.post/3k","k":"time"}'.encode()
    valued = cursors.encode(7, "at://x/y/z", "field:year", 1999, with_v=True)
    raw = base64.urlsafe_b64decode(valued + "=" * (-len(valued) % 4))
    assert raw == b'{"t":7,"u":"at://x/y/z","v":1999,"k":"field:year"}'
