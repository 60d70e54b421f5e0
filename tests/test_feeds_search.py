"""Full-text search (feather/feeds/store/search.py): `search=` on getFeed and listRecords.

The syntax (phrases, OR, prefixes, plain words ANDed) is parsed by Feather and reaches the
database only as its own words, so hostile input is a 400 or a sane answer, never a 500. The index
moves with the records in one transaction: deletes, edits, the records sweep's drops and trims,
a replayed batch, and the batch path against the per-event reference all leave it equal to what
the records say. The expected answers below are the same on SQLite and PostgreSQL (each CI pass
asserts them): the same records match on both; relevance is bm25 on one and ts_rank on the other,
so orders are only asserted where both agree by construction (more occurrences in a record of
the same length, or equal texts ordered by time, then URI).
"""
from __future__ import annotations

import base64
import json

import pytest

from feather.db import current_dialect, db
from feather.dialect import POSTGRESQL, SQLITE
from feather.feeds.ingest import apply
from feather.feeds.store import search
from tests.fixtures.feeds import oracle
from tests.fixtures.feeds.feedkit import (
    BASE_US, FOLLOW, POST, FakeSources, create, delete, feeds_app, follow, ingest, iso, post, rows, toml,
)

A, B, C, D = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:dddd"
NS = "/xrpc/com.example"
NOTE = "com.example.note"
SEARCHABLE = toml().replace('collection = "app.bsky.feed.post"\n',
                            'collection = "app.bsky.feed.post"\nsearchable = ["text", "tags"]\n') + f"""
[collections.note]
collection = "{NOTE}"
"""


@pytest.fixture
def sources():
    return FakeSources()


@pytest.fixture
def app(make_app, tmp_path, sources):
    return feeds_app(make_app, tmp_path, SEARCHABLE, sources=sources)


def uri(did, rkey, nsid=POST):
    return f"at://{did}/{nsid}/{rkey}"


def listed(app, q, **params):
    response = app.test_client().get(f"{NS}.post.listRecords", query_string=dict(search=q, **params))
    assert response.status_code == 200, (q, params, response.json)
    return response.json


def found(app, q, **params) -> list[str]:
    return [r["uri"] for r in listed(app, q, **params)["records"]]


def index_rows(app) -> list[tuple]:
    """(uri, the stored words) of every index row: what a replay or another path must reproduce."""
    if current_dialect().is_sqlite:
        return rows(app, "SELECT k.uri, f.body FROM feed_search_post k"
                         " LEFT JOIN feed_search_post_fts f ON f.rowid = k.docid ORDER BY k.uri")
    return rows(app, "SELECT uri, CAST(doc AS TEXT) FROM feed_search_post ORDER BY uri")


def count_index(app) -> int:
    n = rows(app, "SELECT count(*) FROM feed_search_post")[0][0]
    if current_dialect().is_sqlite:  # the FTS rows are the keys' rows, one each
        assert rows(app, "SELECT count(*) FROM feed_search_post_fts")[0][0] == n
    return n


# --- the syntax (no database) ---------------------------------------------------------------------

def groups(q):
    return search.parse(q).groups


def test_words_are_letters_and_digits_folded_the_same_way_for_both_databases():
    assert search.words("Hello, WORLD! foo-bar example.com 3k") == ["hello", "world", "foo", "bar", "example", "com", "3k"]
    assert search.words("Ça VA Straße ＡＢＣ") == ["ça", "va", "strasse", "abc"]  # casefold and NFKC
    assert search.words("हिन्दी") == ["हिन्दी"]  # marks stay inside their word
    assert search.words("a\x00b _ \ud800 c") == ["a", "b", "c"]


def test_the_syntax_phrases_or_prefixes_and_plain_words():
    assert groups("cat dog") == (((("cat",), False),), ((("dog",), False),))
    assert groups('"black cat" dog') == (((("black", "cat"), False),), ((("dog",), False),))
    assert groups("cat OR dog bird") == (((("cat",), False), (("dog",), False)), ((("bird",), False),))
    assert groups("ca*") == (((("ca",), True),),)
    assert groups("foo-bar") == (((("foo", "bar"), False),),)  # one word of several is a phrase
    assert groups("cat or dog") == (((("cat",), False),), ((("or",), False),), ((("dog",), False),))
    assert groups("cat AND dog") == (((("cat",), False),), ((("dog",), False),))


@pytest.mark.parametrize("raw", ['"unbalanced', 'a"b', 'NEAR(a b)', "a NEAR b", "NOT a", "text:cat", "^cat",
                                 "a*b", "**a", "OR", "OR cat", "cat OR", "cat OR OR dog", "(cat", "cat)",
                                 "a\x00b", '"', "-cat +dog", "{a b}", "a:*", "'a' <-> 'b'", "a & | !b"])
def test_hostile_input_parses_to_words_or_a_plain_refusal(raw):
    try:
        query = search.parse(raw)
    except search.SearchError as exc:
        assert str(exc).endswith(".") and "search" in str(exc).lower()
        return
    assert query is None or all(w.isalnum() for w in query.words)
    for d in (SQLITE, POSTGRESQL):
        d.search_query(query.groups)  # builds from words only


@pytest.mark.parametrize("raw, message", [
    ("*", "at least one word"), ('""', "at least one word"), ("!!! ???", "at least one word"),
    ("x" * 201, "at most 200 characters"), (" ".join(["w"] * 17), "at most 16 words"),
    ("y" * 65, "at most 64 characters"),
])
def test_searches_that_cannot_run_say_what_to_change(raw, message):
    with pytest.raises(search.SearchError, match=message):
        search.parse(raw)


def test_an_empty_search_is_no_search():
    assert search.parse(None) is None and search.parse("") is None and search.parse("   ") is None


def test_the_match_expression_each_database_gets():
    q = groups('"black cat" OR dog* bird')
    assert SQLITE.search_query(q) == '("black cat" OR "dog"*) AND "bird"'
    assert POSTGRESQL.search_query(q) == "(('black' <-> 'cat') | 'dog':*) & 'bird'"
    assert POSTGRESQL.search_document(["a", "b", "a"]) == "'a':1,3 'b':2"


# --- through listRecords and getFeed --------------------------------------------------------------

def corpus():
    """Posts whose matches and order are the same on both databases."""
    texts = {
        "p1": "The black cat sat", "p2": "a cat and a dog", "p3": "black dogs bark", "p4": "Catalogue of cats",
        "p5": "dog dog dog", "p6": "one dog here", "p7": "nothing to see", "p8": "example.com is a site",
        "p9": "example and com apart", "p10": "cat-like grace",
    }
    return [post(C if i % 2 else D, rkey, BASE_US + i, text=text) for i, (rkey, text) in enumerate(texts.items())]


EXPECTED = {  # query: the matching rkeys, as a set
    "cat": {"p1", "p2", "p10"},
    "CAT": {"p1", "p2", "p10"},
    "cat*": {"p1", "p2", "p4", "p10"},
    "cat dog": {"p2"},
    "cat OR bark": {"p1", "p2", "p3", "p10"},
    '"black cat"': {"p1"},
    '"cat black"': set(),
    "example.com": {"p8"},
    "cat-like": {"p10"},
    '"unbalanced cat': set(),
    "NEAR cat": set(),
    "text:cat": set(),
}


def test_searches_find_the_same_records_on_either_database(app):
    ingest(app, corpus())
    for q, rkeys in EXPECTED.items():
        assert {u.rsplit("/", 1)[1] for u in found(app, q)} == rkeys, q


def test_hostile_searches_over_http_are_a_400_or_an_answer(app):
    ingest(app, corpus())
    client = app.test_client()
    for raw in ['"', "*", "NEAR(", "a\x00b", "x" * 300, "'", "\\", "%", "?", ";--", "cat)", "OR", "é*", "ǅ"]:
        response = client.get(f"{NS}.post.listRecords", query_string={"search": raw})
        assert response.status_code in (200, 400), (raw, response.status_code)
        if response.status_code == 400:
            assert set(response.json) == {"error", "message"}


def test_more_relevant_first_then_newest_then_uri(app):
    events = [post(C, "few", BASE_US + 9, text="dog bird"), post(C, "many", BASE_US + 1, text="dog dog")]
    events += [post(D, f"same{i}", BASE_US + t, text="dog cat") for i, t in enumerate((5, 7, 7))]
    events += [post(D, f"other{i}", BASE_US + 20 + i, text=f"unrelated words {i}") for i in range(8)]
    ingest(app, events)
    # "dog dog" first (more occurrences at the same length, on both databases); the four records of
    # one "dog" in two words are equally relevant, so newest first, and at equal times by URI.
    assert [u.rsplit("/", 1)[1] for u in found(app, "dog")] == ["many", "few", "same1", "same2", "same0"]


def test_the_search_cursor_pages_without_duplicates_or_gaps(app):
    events = [post(C, f"p{i:02d}", BASE_US + i // 3, text="dog " * (1 + i % 3) + "tail") for i in range(17)]
    events += [post(D, f"x{i}", BASE_US + i, text="nothing here") for i in range(10)]
    ingest(app, events)
    whole = found(app, "dog", limit="100")
    assert len(whole) == 17
    paged, cursor = [], None
    for _ in range(10):  # 17 matches, 4 a page: five pages, not a loop back to page one
        page = listed(app, "dog", limit="4", **({"cursor": cursor} if cursor else {}))
        paged += [r["uri"] for r in page["records"]]
        cursor = page.get("cursor")
        if not cursor:
            break
        body = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        assert set(body) == {"t", "u", "v", "k"} and body["k"] == "search" and isinstance(body["v"], (int, float))
    assert paged == whole


def test_a_cursor_of_another_kind_gives_page_one(app):
    ingest(app, [post(C, f"p{i}", BASE_US + i, text=f"dog {i}") for i in range(5)])
    time_cursor = listed(app, "", limit="2")["cursor"]
    first = found(app, "dog", limit="2")
    assert found(app, "dog", limit="2", cursor=time_cursor) == first
    search_cursor = listed(app, "dog", limit="2")["cursor"]
    assert [r["uri"] for r in listed(app, "", limit="2", cursor=search_cursor)["records"]] == \
           [r["uri"] for r in listed(app, "", limit="2")["records"]]


def test_a_delete_removes_the_record_from_results_and_the_index(app):
    ingest(app, [post(C, "p1", BASE_US + 1, text="hello world"), post(C, "p2", BASE_US + 2, text="hello there")])
    assert count_index(app) == 2
    ingest(app, [delete(C, POST, "p1", time_us=BASE_US + 3)])
    assert found(app, "hello") == [uri(C, "p2")]
    assert count_index(app) == 1


def test_an_edit_is_indexed_again(app):
    ingest(app, [post(C, "p1", BASE_US + 1, text="hello world")])
    ingest(app, [create(C, POST, "p1", {"text": "goodbye moon", "createdAt": iso(BASE_US + 1)},
                        time_us=BASE_US + 5, op="update")])
    assert found(app, "hello") == [] and found(app, "moon") == [uri(C, "p1")]
    assert count_index(app) == 1


def test_every_searchable_field_and_list_of_strings_is_searched(app):
    ingest(app, [post(C, "p1", BASE_US + 1, text="plain", tags=["Sunset", 3, "beach"])])
    assert found(app, "sunset beach") == [uri(C, "p1")]


def test_a_replayed_batch_leaves_the_index_identical(app):
    batch = corpus() + [delete(D, POST, "p1", time_us=BASE_US + 50)]
    ingest(app, batch)
    before = index_rows(app)
    ingest(app, batch)
    assert index_rows(app) == before and len(before) == count_index(app) == len(corpus()) - 1


def test_the_batch_path_indexes_exactly_like_the_per_event_reference(app):
    from tests.test_feeds_batch import MANY, random_batches

    config = app.extensions["feeds"]
    states = []
    for path in (oracle.apply_commits, apply.apply_commits):
        with app.app_context(), db.connection_context():
            for table in ("feed_items", "feed_records_post", "feed_records_follow", "feed_records_profile",
                          "feed_tombstones", "feed_search_post") + (("feed_search_post_fts",)
                                                                      if current_dialect().is_sqlite else ()):
                db.execute_sql(f"DELETE FROM {table}")
            for events in random_batches(3, MANY, size=120):
                with db.atomic():
                    path(config, events)
        states.append((index_rows(app), rows(app, "SELECT uri FROM feed_records_post ORDER BY uri")))
    assert states[0] == states[1]
    assert [r[0] for r in states[0][0]] == [r[0] for r in states[0][1]]  # one index row per record


def test_the_records_sweep_removes_the_index_rows_of_what_it_drops_and_trims(make_app, tmp_path):
    from tests.test_feeds_storage import tick

    text = f'actors = ["{A}"]\n' + SEARCHABLE.replace("maxItems = 200", "maxItems = 3")
    app = feeds_app(make_app, tmp_path, text, sources=FakeSources(), FEED_SERVE="signed-in")
    ingest(app, [follow(A, "f1", C), follow(A, "f2", D)])
    ingest(app, [post(C, f"c{i}", BASE_US + 10 + i, text=f"kept {i}") for i in range(5)]
           + [post(D, "d1", BASE_US + 30, text="dropped")])
    ingest(app, [delete(A, FOLLOW, "f2", time_us=BASE_US + 40)])
    assert count_index(app) == 6
    tick(app)
    assert rows(app, "SELECT rkey FROM feed_records_post ORDER BY rkey") == [("c2",), ("c3",), ("c4",)]
    assert count_index(app) == 3
    assert [r[0] for r in index_rows(app)] == [uri(C, f"c{i}") for i in (2, 3, 4)]
    assert found(app, "dropped") == [] and len(found(app, "kept")) == 3


def test_get_feed_searches_only_the_readers_timeline(app):
    ingest(app, [follow(A, "f1", C), follow(B, "f2", D)])
    ingest(app, [post(C, "c1", BASE_US + 1, text="hello from c"), post(D, "d1", BASE_US + 2, text="hello from d"),
                 post(C, "c2", BASE_US + 3, text="other")])
    client = app.test_client()
    body = client.get(f"{NS}.getFeed", query_string={"feed": "timeline", "actor": A, "search": "hello"}).json
    assert [r["uri"] for r in body["records"]] == [uri(C, "c1")]
    body = client.get(f"{NS}.getFeed", query_string={"feed": "timeline", "actor": A, "search": "hello", "did": D}).json
    assert body["records"] == []
    plain = client.get(f"{NS}.getFeed", query_string={"feed": "timeline", "actor": A, "search": "  "}).json
    assert [r["uri"] for r in plain["records"]] == [uri(C, "c2"), uri(C, "c1")]


def test_list_records_searches_the_collection_and_an_authors_stored_records_only(app, sources):
    ingest(app, [post(C, "c1", BASE_US + 1, text="hello"), post(D, "d1", BASE_US + 2, text="hello")])
    assert set(found(app, "hello")) == {uri(C, "c1"), uri(D, "d1")}
    assert found(app, "hello", actor=C) == [uri(C, "c1")]
    assert [c for c in sources.calls if c[0] == "list"] == []  # a search fetches no page live


def test_records_fetched_from_a_pds_are_indexed_when_stored(app, sources):
    sources.repos[(C, POST)] = [("r1", "bafyr1", {"$type": POST, "text": "fetched words", "createdAt": iso(BASE_US)})]
    assert app.test_client().get(f"{NS}.post.listRecords", query_string={"actor": C}).status_code == 200
    assert found(app, "fetched") == [uri(C, "r1")] and count_index(app) == 1


def test_a_collection_without_searchable_fields_refuses_a_search(app):
    response = app.test_client().get(f"{NS}.note.listRecords", query_string={"search": "x"})
    assert response.status_code == 400 and "cannot be searched" in response.json["message"]
    assert app.test_client().get(f"{NS}.note.listRecords", query_string={"search": ""}).status_code == 200


def test_a_new_index_is_filled_from_the_stored_records_when_a_process_starts(app):
    from feather.feeds import ensure_schema

    ingest(app, corpus())
    before = index_rows(app)
    with app.app_context(), db.connection_context():
        for statement in (["DROP TABLE feed_search_post_fts", "DROP TABLE feed_search_post"]
                          if current_dialect().is_sqlite else ["DROP TABLE feed_search_post"]):
            db.execute_sql(statement)
        ensure_schema(app.config["FEATHER"])
    assert index_rows(app) == before
    assert {u.rsplit("/", 1)[1] for u in found(app, "cat")} == EXPECTED["cat"]
