"""A timeline in a feed reader: private Atom 1.0 and JSON Feed 1.1 links, made, rotated, revoked.

Parsed with feedparser (what feed readers are built on): no bozo flag, entries equal to the
/timeline page's, the Atom checked against RFC 4287's required elements.
"""
from __future__ import annotations

import html
import re
import runpy
import xml.etree.ElementTree as ET
from pathlib import Path

import feedparser
import pytest

from feather.db import db
from tests.fixtures.feeds.feedkit import (BASE_US, PROFILE, FakeSources, create, delete, feeds_app, follow, ingest,
                                          iso, join_backfills, post)
from tests.test_sync_views import sign_in
from tests.test_timeline_page import mark_backfilled

A, B, C, D = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:dddd"
POST, REPOST = "app.bsky.feed.post", "app.bsky.feed.repost"
ATOM = "{http://www.w3.org/2005/Atom}"
LINK = re.compile(r'value="(http://localhost/r/[A-Za-z0-9_-]+)\.atom"')


def puri(did, rkey):
    return f"at://{did}/{POST}/{rkey}"


def url_of(did, rkey):
    return f"https://bsky.app/profile/{did}/post/{rkey}"


@pytest.fixture
def world(make_app, tmp_path):
    """A follows B and C. B posts (one hostile, one a reply to C), C reposts D's post."""
    app = feeds_app(make_app, tmp_path, sources=FakeSources())
    ref = {"uri": puri(C, "c1"), "cid": "bafyc"}
    ingest(app, [follow(A, "f1", B), follow(A, "f2", C),
                 create(B, PROFILE, "self", {"displayName": "Bee"}, time_us=BASE_US),
                 post(C, "c1", BASE_US + 1_000_000, text="cee's post"),
                 post(B, "b1", BASE_US + 2_000_000, text="<b>bold</b> & more"),
                 post(B, "b2", BASE_US + 3_000_000, text="answering", reply={"root": ref, "parent": ref}),
                 post(D, "d1", BASE_US + 4_000_000, text="dee's post")])
    ingest(app, [create(C, REPOST, "r1", {"subject": {"uri": puri(D, "d1"), "cid": "bafyd"},
                                         "createdAt": iso(BASE_US + 5_000_000)}, time_us=BASE_US + 5_000_000)])
    mark_backfilled(app, A, feeds=("timeline", "posts"))
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    yield app, client
    join_backfills(app)


def csrf(client) -> str:
    return client.get("/api/session").json["csrfToken"]


def make_link(client, feed="timeline") -> str:
    r = client.post("/timeline/reader", data={"csrf_token": csrf(client), "feed": feed})
    assert r.status_code == 200
    found = LINK.search(r.get_data(as_text=True))
    assert found, r.get_data(as_text=True)
    return found.group(1)[len("http://localhost"):]


def page_posts(client, feed="timeline") -> list[str]:
    text = client.get(f"/timeline?feed={feed}").get_data(as_text=True)
    return [html.unescape(m) for m in re.findall(r'class="when" href="([^"]+)"', text)]


def test_the_atom_feed_parses_cleanly_meets_rfc_4287_and_equals_the_page(world):
    app, client = world
    base = make_link(client)
    r = client.get(base + ".atom")
    assert (r.status_code, r.headers["Content-Type"], r.headers["Cache-Control"]) == (
        200, "application/atom+xml; charset=utf-8", "private, max-age=60")
    parsed = feedparser.parse(r.data)
    assert parsed.bozo == 0, parsed.get("bozo_exception")
    assert [e.link for e in parsed.entries] == page_posts(client) == [
        url_of(D, "d1"), url_of(B, "b2"), url_of(B, "b1"), url_of(C, "c1")]
    first, reply, hostile = parsed.entries[0], parsed.entries[1], parsed.entries[2]
    assert first.title == f"{C} reposted {D}: dee's post"
    assert html.unescape(first.content[0].value) == f"<p><em>Reposted by {C}</em></p><p>dee's post</p>"
    assert html.unescape(reply.content[0].value).startswith(f"<p><em>Replying to {C}</em></p>")
    assert hostile.author == "Bee (did:plc:bbbb)"
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; more" in hostile.content[0].value  # escaped as on the page
    assert hostile.published == iso(BASE_US + 2_000_000)[:19] + "Z"
    # RFC 4287 §4.1.1/§4.1.2: feed id, title, updated (and an author, here on the feed); each
    # entry id, title, updated; exactly one alternate link per entry.
    root = ET.fromstring(r.data)
    assert [root.find(ATOM + tag) is not None for tag in ("id", "title", "updated", "author")] == [True] * 4
    for entry in root.findall(ATOM + "entry"):
        assert [len(entry.findall(ATOM + tag)) for tag in ("id", "title", "updated")] == [1, 1, 1]
        assert len([x for x in entry.findall(ATOM + "link") if x.get("rel") == "alternate"]) == 1
    assert root.find(ATOM + "updated").text == iso(BASE_US + 5_000_000)[:19] + "Z"


def test_the_json_feed_is_version_1_1_with_the_pages_entries(world):
    app, client = world
    base = make_link(client)
    r = client.get(base + ".json")
    assert r.headers["Content-Type"] == "application/feed+json; charset=utf-8"
    body = r.get_json()
    assert body["version"] == "https://jsonfeed.org/version/1.1"
    assert [i["url"] for i in body["items"]] == page_posts(client)
    assert body["items"][0]["authors"] == [{"name": D, "url": f"https://bsky.app/profile/{D}"}]
    # JSON Feed 1.1's required members (feedparser 6 reads no JSON Feed): title and items at the
    # top; per item an id and content_html or content_text; dates in RFC 3339.
    assert isinstance(body["title"], str) and body["feed_url"].endswith(base + ".json")
    for item in body["items"]:
        assert isinstance(item["id"], str) and isinstance(item["content_html"], str)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", item["date_published"])
    atom = feedparser.parse(client.get(base + ".atom").data)
    assert [html.unescape(i["content_html"]) for i in body["items"]] == [
        html.unescape(e.content[0].value) for e in atom.entries]


def test_a_second_fetch_with_the_validators_is_a_304(world):
    app, client = world
    base = make_link(client)
    first = client.get(base + ".atom")
    again = client.get(base + ".atom", headers={"If-None-Match": first.headers["ETag"]})
    since = client.get(base + ".atom", headers={"If-Modified-Since": first.headers["Last-Modified"]})
    assert (again.status_code, again.data, since.status_code) == (304, b"", 304)
    ingest(app, [post(B, "b3", BASE_US + 6_000_000, text="newer")])
    changed = client.get(base + ".atom", headers={"If-None-Match": first.headers["ETag"]})
    assert changed.status_code == 200 and changed.headers["ETag"] != first.headers["ETag"]
    assert feedparser.parse(changed.data).entries[0].link == url_of(B, "b3")


def test_revoked_rotated_and_unknown_links_all_answer_the_same_404(world):
    app, client = world
    first = make_link(client)
    second = make_link(client)  # rotating ends the first
    assert [client.get(first + ".atom").status_code, client.get(second + ".atom").status_code] == [404, 200]
    r = client.post("/timeline/reader/revoke", data={"csrf_token": csrf(client), "feed": "timeline"})
    assert "is revoked" in r.get_data(as_text=True)
    gone, unknown = client.get(second + ".atom"), client.get("/r/" + "x" * 43 + ".atom")
    assert (gone.status_code, unknown.status_code, gone.data) == (404, 404, unknown.data)
    assert client.get(second + ".json").status_code == 404


def test_the_link_is_shown_once_and_the_page_then_offers_a_new_one_or_revoking(world):
    app, client = world
    page = client.get("/timeline").get_data(as_text=True)
    assert "Make a feed-reader link" in page
    base = make_link(client)
    page = client.get("/timeline").get_data(as_text=True)
    assert base not in page and "Make a new link" in page and "Revoke it" in page
    # Only its hash is kept.
    with app.app_context(), db.connection_context():
        stored = [row[0] for row in db.execute_sql("SELECT token_hash FROM feed_reader_links").fetchall()]
    assert stored and base.rsplit("/", 1)[-1] not in stored


def test_the_posts_only_feed_has_its_own_link_without_reposts(world):
    app, client = world
    base = make_link(client, feed="posts")
    parsed = feedparser.parse(client.get(base + ".atom").data)
    assert [e.link for e in parsed.entries] == page_posts(client, "posts") == [
        url_of(B, "b2"), url_of(B, "b1"), url_of(C, "c1")]


def test_deleting_ones_data_ends_the_links(world):
    from feather.feeds import personal

    app, client = world
    base = make_link(client)
    with app.app_context(), db.connection_context(), db.atomic():
        personal.delete(A)
    assert client.get(base + ".atom").status_code == 404


def test_a_post_deleted_leaves_the_feed(world):
    app, client = world
    base = make_link(client)
    ingest(app, [delete(B, POST, "b1", time_us=BASE_US + 7_000_000)])
    assert url_of(B, "b1") not in [e.link for e in feedparser.parse(client.get(base + ".atom").data).entries]


def test_the_access_log_keeps_four_characters_of_a_link_token():
    conf = runpy.run_path(str(Path(__file__).resolve().parents[1] / "gunicorn.conf.py"))
    token = "AbCdEfGhIjKlMnOp_-qrstuvwxyz0123456789ABCDE"
    line = f"GET /r/{token}.atom HTTP/1.1"
    assert conf["mask_reader_links"](line) == "GET /r/AbCd****.atom HTTP/1.1"
    assert conf["logger_class"].__name__ == "MaskingLogger"


def test_labelled_posts_in_the_feed_honour_the_pages_labels(make_app, tmp_path):
    """A self-labelled post carries only its label's name in the feed, never its text (as the page masks it)."""
    app = feeds_app(make_app, tmp_path, sources=FakeSources(), FEED_LABELERS="")
    self_porn = {"$type": "com.atproto.label.defs#selfLabels", "values": [{"val": "porn"}]}
    ingest(app, [follow(A, "f1", B), post(B, "b1", BASE_US + 1_000_000, text="fine"),
                 post(B, "b2", BASE_US + 2_000_000, text="explicit words", labels=self_porn)])
    mark_backfilled(app, A, feeds=("timeline", "posts"))
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    entries = feedparser.parse(client.get(make_link(client) + ".atom").data).entries
    assert [e.link for e in entries] == [url_of(B, "b2"), url_of(B, "b1")]
    masked = html.unescape(entries[0].content[0].value)
    assert "Adult content" in masked and "explicit words" not in masked and "explicit" not in entries[0].title
    join_backfills(app)
