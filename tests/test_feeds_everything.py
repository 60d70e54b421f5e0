""""Everything", the second built-in feed: the records people you follow write on every app graph
sync knows (Tangled, Grain, Semble, Leaflet, Sifa) beside their Bluesky posts and reposts.

Each app's record becomes a card (read/apps.py): a title, a description, the app's name and a
link to the record on its app, built from the record alone; the page, getFeed and the feed-reader
output carry the same entries. Published generators stay Bluesky-only.
"""
from __future__ import annotations

import html
import re

import feedparser
import pytest

from feather.feeds.config import load
from feather.feeds.read import apps
from tests.fixtures.feeds.feedkit import (BASE_US, FakeSources, create, delete, feeds_app, follow, ingest, iso,
                                          join_backfills, post)
from tests.test_reader_feed import make_link
from tests.test_sync_views import sign_in
from tests.test_timeline_page import mark_backfilled

A, B, C, D = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:dddd"
REPO, STAR, GALLERY, CARD = apps.TANGLED_REPO, apps.TANGLED_STAR, apps.GRAIN_GALLERY, apps.SEMBLE_CARD
DOC = apps.LEAFLET_DOCUMENT


def test_the_built_in_everything_feed_lists_every_apps_content_collection():
    config = load("")
    feed = config.feeds["everything"]
    assert (feed.label, feed.mixed, feed.follow, feed.replies) == ("Everything", True, "follow", "all")
    assert [t.nsid for t in feed.targets] == [
        "app.bsky.feed.post", "app.bsky.feed.repost", "sh.tangled.repo", "sh.tangled.feed.star",
        "social.grain.gallery", "network.cosmik.card", "network.cosmik.collection", "pub.leaflet.document",
        "id.sifa.profile.position", "id.sifa.profile.project", "id.sifa.profile.publication"]
    assert all(t.cap == 200 for t in feed.targets)
    # Every other app's target has a renderer: none would show as a bare record.
    assert [t.nsid for t in feed.shown if t.nsid not in apps.KINDS] == []


def test_everything_is_not_offered_as_a_bluesky_feed_generator():
    from feather.feeds.web.generator import publishable

    assert [f.name for f in publishable(load(""))] == ["timeline", "posts"]


@pytest.mark.parametrize("nsid, rkey, value, handle, expected", [
    (REPO, "3l2repo", {"name": "feather", "description": "a reader", "knot": "k", "owner": B},
     None, ("Tangled", "repository", "feather", "a reader", f"https://tangled.org/{B}/feather")),
    (REPO, "3l2repo", {"name": "a b/c"}, None, ("Tangled", "repository", "a b/c", "",
                                                 f"https://tangled.org/{B}/a%20b%2Fc")),
    (STAR, "3l2star", {"subject": f"at://{C}/{REPO}/3l2other"}, None,
     ("Tangled", "star", "starred a repository", "", f"https://tangled.org/{C}")),
    (STAR, "3l2star", {"subject": "https://evil.example/"}, None, ("Tangled", "star", "starred a repository", "", None)),
    (GALLERY, "3l2gal", {"title": "Herons\nat dawn", "description": "birds"}, None,
     ("Grain", "gallery", "Herons at dawn", "birds", f"https://grain.social/profile/{B}/gallery/3l2gal")),
    (CARD, "3l2card", {"type": "URL", "content": {"$type": "network.cosmik.card#urlContent",
                                                  "url": "https://example.com/a?b=c",
                                                  "metadata": {"title": "An article", "description": "d"}}},
     None, ("Semble", "card", "An article", "d", "https://semble.so/url?id=https%3A%2F%2Fexample.com%2Fa%3Fb%3Dc")),
    (CARD, "3l2card", {"type": "URL", "content": {"url": "javascript:alert(1)"}}, None,
     ("Semble", "card", "a link", "", None)),
    (CARD, "3l2card", {"type": "URL", "content": {"url": "https://example.org/x"}}, None,
     ("Semble", "card", "example.org", "", "https://semble.so/url?id=https%3A%2F%2Fexample.org%2Fx")),
    (CARD, "3l2note", {"type": "NOTE", "content": {"$type": "network.cosmik.card#noteContent", "text": "so good"}},
     "bee.test", ("Semble", "note", "a note", "so good", "https://semble.so/profile/bee.test")),
    (apps.SEMBLE_COLLECTION, "3l2coll", {"name": "Reading", "accessType": "OPEN"}, "bee.test",
     ("Semble", "collection", "Reading", "", "https://semble.so/profile/bee.test/collections/3l2coll")),
    (apps.SEMBLE_COLLECTION, "3l2coll", {"name": "Reading"}, None, ("Semble", "collection", "Reading", "", None)),
    (DOC, "3l2doc", {"title": "Notes", "description": "on x", "publication": f"at://{B}/pub.leaflet.publication/3l2pub"},
     None, ("Leaflet", "document", "Notes", "on x", f"https://leaflet.pub/lish/{B}/3l2pub/3l2doc")),
    (DOC, "3l2doc", {"title": "Solo"}, None, ("Leaflet", "document", "Solo", "", f"https://leaflet.pub/p/{B}/3l2doc")),
    (apps.SIFA_POSITION, "3l2pos", {"title": "Engineer", "company": "Acme", "startedAt": "2024-01"}, None,
     ("Sifa", "position", "Engineer at Acme", "", f"https://sifa.id/p/{B}")),
    (apps.SIFA_PROJECT, "3l2prj", {"name": "Feather", "description": "rss"}, None,
     ("Sifa", "project", "Feather", "rss", f"https://sifa.id/p/{B}")),
    (apps.SIFA_PUBLICATION, "3l2pbl", {"title": 7}, None, ("Sifa", "publication", "a publication", "",
                                                           f"https://sifa.id/p/{B}")),
])
def test_each_apps_record_renders_as_a_card_from_the_record_alone(nsid, rkey, value, handle, expected):
    card = apps.card(nsid, B, rkey, value, handle=handle)
    assert (card.app, card.kind, card.title, card.description, card.href) == expected


def test_a_star_names_its_repository_when_that_record_is_stored_and_long_text_is_clipped():
    subject = f"at://{C}/{REPO}/3l2other"
    card = apps.card(STAR, B, "3l2star", {"subject": subject}, starred={subject: {"name": "kite", "description": "x"}})
    assert (card.title, card.description, card.href) == ("starred kite", "x", f"https://tangled.org/{C}/kite")
    long = apps.card(GALLERY, B, "3l2gal", {"title": "t" * 500, "description": "d" * 900})
    assert (len(long.title), long.title[-1], len(long.description)) == (200, "…", 500)
    assert apps.card("app.bsky.feed.post", B, "3l2p", {"text": "x"}) is None
    assert apps.card(GALLERY, "not-a-did", "3l2gal", {"title": "x"}) is None


@pytest.fixture
def world(make_app, tmp_path):
    """A follows B and C; D is not followed. B posts and has a Tangled repo, C stars it and posts a
    Grain gallery; D's records never show."""
    app = feeds_app(make_app, tmp_path, sources=FakeSources())
    ingest(app, [follow(A, "f1", B), follow(A, "f2", C)])
    at = lambda s: BASE_US + s * 1_000_000  # noqa: E731
    ingest(app, [post(B, "3l2p1", at(1), text="a bluesky post"),
                 create(B, REPO, "3l2repo", {"name": "feather", "description": "<b>bold</b> reader",
                                             "owner": B, "knot": "knot.example", "createdAt": iso(at(2))},
                        time_us=at(2)),
                 create(C, STAR, "3l2star", {"subject": f"at://{B}/{REPO}/3l2repo", "createdAt": iso(at(3))},
                        time_us=at(3)),
                 create(C, GALLERY, "3l2gal", {"title": "Herons", "description": "at dawn", "createdAt": iso(at(4))},
                        time_us=at(4)),
                 create(D, GALLERY, "3l2gald", {"title": "not followed", "createdAt": iso(at(5))}, time_us=at(5))])
    mark_backfilled(app, A, feeds=("timeline", "posts", "everything"))
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    yield app, client
    join_backfills(app)


EXPECTED = [  # newest first: (link, title on the page)
    (f"https://grain.social/profile/{C}/gallery/3l2gal", "Herons"),
    (f"https://tangled.org/{B}/feather", "starred feather"),
    (f"https://tangled.org/{B}/feather", "feather"),
    (f"https://bsky.app/profile/{B}/post/3l2p1", None),
]


def page_entries(client, **params) -> list[tuple[str, str | None]]:
    text = client.get("/timeline", query_string={"feed": "everything", **params}).get_data(as_text=True)
    out = []
    for item in re.findall(r'<li class="post[^"]*">(.*?)</li>', text, re.S):
        link = html.unescape(re.search(r'class="when" href="([^"]+)"', item).group(1))
        title = re.search(r'class="card-title">.*?rel="nofollow noopener ugc">([^<]*)</a>', item, re.S)
        out.append((link, html.unescape(title.group(1)) if title else None))
    return out


def test_the_page_shows_each_apps_records_among_the_posts_newest_first(world):
    app, client = world
    assert page_entries(client) == EXPECTED
    text = client.get("/timeline?feed=everything").get_data(as_text=True)
    assert "Tangled repository:" in text and "Grain gallery:" in text and "Tangled star:" in text
    assert "&lt;b&gt;bold&lt;/b&gt; reader" in text  # a stranger's description, escaped
    # The picker names the apps; one collection alone still reads.
    assert '>Tangled repositories</a>' in text and '>Grain galleries</a>' in text
    assert page_entries(client, collection="grain_gallery") == EXPECTED[:1]
    # The Following feed is unchanged: posts only from the other apps' point of view.
    assert [u for u, _t in page_entries(client, feed="timeline")] == [EXPECTED[3][0]]


def test_getfeed_returns_the_other_apps_records_with_their_collection(world):
    app, client = world
    body = client.get("/xrpc/com.featherreader.getFeed", query_string={"feed": "everything", "actor": A}).json
    assert [(r["collection"], r["rkey"]) for r in body["records"]] == [
        (GALLERY, "3l2gal"), (STAR, "3l2star"), (REPO, "3l2repo"), ("app.bsky.feed.post", "3l2p1")]


def test_the_reader_feed_carries_the_cards_as_the_page_does(world):
    app, client = world
    base = make_link(client, feed="everything")
    items = client.get(base + ".json").json["items"]
    assert [i["url"] for i in items] == [u for u, _t in EXPECTED]
    assert items[0]["title"] == f"{C}: Grain gallery: Herons"
    atom = feedparser.parse(client.get(base + ".atom").data)
    assert not atom.bozo and [e.link for e in atom.entries] == [u for u, _t in EXPECTED]
    assert ('Tangled repository: <a href="https://tangled.org/did:plc:bbbb/feather">feather</a>'
            in atom.entries[2].content[0].value)


def test_a_deleted_record_leaves_everything(world):
    app, client = world
    ingest(app, [delete(C, GALLERY, "3l2gal", time_us=BASE_US + 9_000_000)])
    assert page_entries(client) == EXPECTED[1:]


def test_a_new_follows_other_app_records_are_listed_only_where_the_repo_has_them():
    """A newly followed author is fetched for every Everything target: one describeRepo first, then
    a listing only of the collections the repo holds (most Bluesky accounts hold none of them)."""
    from feather.feeds.tasks import authors

    class Described(FakeSources):
        def collections(self, did):
            self.calls.append(("describe", did))
            return frozenset(nsid for d, nsid in self.repos if d == did)

    grain = [("3l2gal", "bafyg", {"$type": GALLERY, "title": "Herons", "createdAt": iso(BASE_US)})]
    sources = Described(repos={(B, GALLERY): grain, (B, "app.bsky.feed.post"): []})
    config = load("")
    did, got, error = authors._fetch(sources, config, B)
    assert (did, error) == (B, None)
    assert sources.calls[0] == ("describe", B)
    assert sorted(c for c in sources.calls if c[0] == "list") == [("list", B, "app.bsky.feed.post"), ("list", B, GALLERY)]
    assert {c.nsid: items for c, items in got if items} == {GALLERY: grain}
    # A source that cannot say lists every target, as before.
    plain = FakeSources(repos={(B, GALLERY): grain})
    authors._fetch(plain, config, B)
    assert len([c for c in plain.calls if c[0] == "list"]) == 11


def test_the_other_apps_rows_are_pruned_to_their_cap_like_posts(make_app, tmp_path):
    """The built-in caps (200 per target) prune a gallery-heavy follow as they prune posts: the
    newest 200 galleries stay, and the reader's posts are untouched."""
    from feather.db import db
    from feather.feeds.tasks import prune
    from tests.fixtures.feeds.feedkit import rows

    app = feeds_app(make_app, tmp_path, sources=FakeSources())
    ingest(app, [follow(A, "f1", B)])
    ingest(app, [create(B, GALLERY, f"3l2g{i:04d}", {"title": f"g{i}", "createdAt": iso(BASE_US + i)},
                        time_us=BASE_US + i) for i in range(205)] + [post(B, "3l2p1", BASE_US + 1)])
    caps = app.extensions["feeds"].target_caps()
    with app.app_context(), db.connection_context():
        assert prune.prune_actor(A, caps) == 5
    kept = rows(app, "SELECT uri FROM feed_items WHERE actor = ? AND collection = ? ORDER BY time_us", (A, GALLERY))
    assert (len(kept), kept[0][0]) == (200, f"at://{B}/{GALLERY}/3l2g0005")
    assert rows(app, "SELECT count(*) FROM feed_items WHERE actor = ? AND collection = ?",
                (A, "app.bsky.feed.post")) == [(1,)]
