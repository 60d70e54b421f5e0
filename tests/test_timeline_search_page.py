"""/timeline's search box: a GET form (no JavaScript), the query echoed escaped, results paged with
the search cursor, a way back to the whole timeline, and a plain sentence for a search that
cannot run."""
from __future__ import annotations

import html
import re

import pytest

from tests.fixtures.feeds.feedkit import BASE_US, FakeSources, feeds_app, follow, ingest, join_backfills, post
from tests.test_feeds_search import SEARCHABLE
from tests.test_sync_views import sign_in
from tests.test_timeline_page import mark_backfilled, older_link, texts

A, B, C = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc"


@pytest.fixture
def world(make_app, tmp_path):
    """A follows B, not C; both write about cats and dogs."""
    app = feeds_app(make_app, tmp_path, SEARCHABLE, sources=FakeSources())
    ingest(app, [follow(A, "f1", B)]
           + [post(B, f"p{i}", BASE_US + i * 1_000_000, text=f"cat number {i}") for i in range(5)]
           + [post(B, "d1", BASE_US + 10_000_000, text="a dog"), post(C, "c1", BASE_US + 11_000_000, text="cat of C")])
    mark_backfilled(app, A)
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    yield app, client
    join_backfills(app)


def test_the_page_has_a_labelled_get_search_form(world):
    _, client = world
    page = client.get("/timeline").text
    form = re.search(r'<form method="get" action="/timeline" role="search"[^>]*>(.*?)</form>', page, re.S)
    assert form, page
    assert '<label for="timeline-q">' in form.group(1) and 'id="timeline-q"' in form.group(1)
    assert 'name="q"' in form.group(1) and "csrf" not in form.group(1).lower()  # a GET carries no token


def test_a_search_shows_the_matching_posts_of_the_timeline_only_with_a_way_back(world):
    _, client = world
    r = client.get("/timeline?q=cat")
    assert r.status_code == 200
    assert sorted(texts(r.text)) == [f"cat number {i}" for i in range(5)]  # not C's, not the dog
    assert "Results for “cat”" in r.text
    back = re.search(r'<a href="([^"]+)">Back to the whole timeline</a>', r.text)
    assert back and html.unescape(back.group(1)) == "/timeline"
    assert 'id="new-posts"' not in r.text  # no "N new posts" polling on results


def test_the_query_is_echoed_escaped(world):
    _, client = world
    r = client.get("/timeline", query_string={"q": '<script>alert("x")</script> cat'})
    assert "<script>alert" not in r.text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; cat" in r.text  # in the box and the heading
    assert r.status_code == 200


def test_results_page_with_the_search_cursor_without_repeats(world):
    _, client = world
    r = client.get("/timeline?q=cat&limit=2")
    seen = texts(r.text)
    link = older_link(r.text)
    for _ in range(5):  # three pages of two: never back to page one
        if not link:
            break
        assert "q=cat" in link
        r = client.get(link)
        seen += texts(r.text)
        link = older_link(r.text)
    assert sorted(seen) == [f"cat number {i}" for i in range(5)] and len(set(seen)) == 5


def test_a_search_that_cannot_run_says_why_with_the_box_to_fix_it(world):
    _, client = world
    r = client.get("/timeline?q=*")
    assert r.status_code == 400
    assert "Search for at least one word" in r.text and 'aria-invalid="true"' in r.text
    assert texts(r.text) == []
    nothing = client.get("/timeline?q=zebra")
    assert nothing.status_code == 200 and "No posts in this timeline match “zebra”." in nothing.text


def test_an_empty_search_is_the_whole_timeline(world):
    _, client = world
    assert texts(client.get("/timeline?q=+").text) == texts(client.get("/timeline").text)
