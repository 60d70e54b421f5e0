"""/timeline without JavaScript: the signed-in person's feed, paging, new posts, filling in, feeds."""
from __future__ import annotations

import html
import re

import pytest

from feather.db import db
from tests.fixtures.feeds.feedkit import (BASE_US, PROFILE, FakeSources, create, feeds_app, follow, ingest,
                                          join_backfills, post, toml)
from tests.test_sync_views import in_db, sign_in

A, B, C = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc"
TWO_FEEDS = toml(extra="[feeds.friends]\nfollow = \"follow\"\ntargets = [{ collection = \"post\", maxItems = 50 }]")


def mark_backfilled(app, did, feeds=("timeline",)):
    from feather.db import current_dialect

    def run():
        for feed in feeds:
            db.execute_sql(current_dialect().q("INSERT INTO feed_backfills (actor, feed, completed, retries)"
                                               " VALUES (?, ?, 1, 0)"), (did, feed))
    in_db(app, run)


@pytest.fixture
def world(make_app, tmp_path):
    """A follows B; B ("Bee", bob.test) has written p0..p4, a second apart; A is signed in."""
    app = feeds_app(make_app, tmp_path, toml(), sources=FakeSources(handles={"bob.test": B}))
    ingest(app, [follow(A, "f1", B), create(B, PROFILE, "self", {"displayName": "Bee"}, time_us=BASE_US)]
           + [post(B, f"p{i}", BASE_US + i * 1_000_000, text=f"post {i}") for i in range(5)])
    mark_backfilled(app, A)
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    yield app, client
    join_backfills(app)


def texts(page: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r'<div class="text">(.*?)</div>', page, re.S)]


def older_link(page: str) -> str | None:
    found = re.search(r'<li class="more"><a href="([^"]+)"', page)
    return html.unescape(found.group(1)) if found else None


def test_signed_out_visitors_are_sent_to_sign_in(make_app, tmp_path):
    client = feeds_app(make_app, tmp_path, toml()).test_client()
    r = client.get("/timeline")
    assert (r.status_code, r.headers["Location"]) == (303, "/login?next=/timeline")
    # The navigation is the same for everyone (the catalogue page is cached publicly with it).
    assert '<li><a href="/timeline">Timeline</a></li>' in client.get("/").text


def test_the_page_lists_the_feed_newest_first_with_name_handle_and_time(world):
    app, client = world
    page = client.get("/timeline").text
    assert texts(page) == ["post 4", "post 3", "post 2", "post 1", "post 0"]
    assert page.count('<strong class="name">Bee</strong>') == 5
    assert page.count('<span class="handle">@bob.test</span>') == 5
    assert ('<a class="when" href="https://bsky.app/profile/did:plc:bbbb/post/p4" rel="nofollow noopener">'
            '<time datetime="2025-10-09T08:53:24Z" title="2025-10-09 08:53 UTC">9 Oct 2025</time></a>') in page
    assert '<li><a href="/timeline" aria-current="page">Timeline</a></li>' in page
    assert "Older posts" not in page and "Filling in" not in page


def test_older_posts_link_walks_the_whole_feed_by_keyset_cursor(world):
    app, client = world
    seen, url, pages = [], "/timeline?limit=2", 0
    while url and pages < 10:  # a cursor that is ignored would page forever
        page = client.get(url).text
        seen += texts(page)
        url, pages = older_link(page), pages + 1
    assert (seen, pages) == (["post 4", "post 3", "post 2", "post 1", "post 0"], 3)
    page = client.get("/timeline?limit=2").text
    more = re.search(r'hx-get="([^"]+)"[^>]*hx-trigger="revealed"', page)
    fragment = client.get(html.unescape(more.group(1))).text  # what htmx swaps in: the next items only
    assert texts(fragment) == ["post 2", "post 1"] and "<h1>" not in fragment
    assert older_link(fragment).startswith("/timeline?cursor=")


def test_hostile_post_text_is_escaped_and_its_facets_are_safe_links(world):
    app, client = world
    text = '<img src=x onerror=alert(1)> "quoted" & more https://ok.example'
    start = text.index("https://")
    facets = [{"index": {"byteStart": 0, "byteEnd": 5}, "features": [
                  {"$type": "app.bsky.richtext.facet#link", "uri": "javascript:alert(2)"}]},
              {"index": {"byteStart": start, "byteEnd": len(text)}, "features": [
                  {"$type": "app.bsky.richtext.facet#link", "uri": "https://ok.example"}]}]
    embed = {"$type": "app.bsky.embed.images", "images": [{"alt": "<script>x()</script>", "image": {}}]}
    ingest(app, [post(B, "evil", BASE_US + 9_000_000, text=text, facets=facets, embed=embed)])
    page = client.get("/timeline").text
    assert ('<div class="text">&lt;img src=x onerror=alert(1)&gt; &#34;quoted&#34; &amp; more '
            '<a href="https://ok.example" rel="nofollow noopener ugc">https://ok.example</a></div>') in page
    assert "&lt;script&gt;x()&lt;/script&gt;" in page
    main = page[page.index("<main"):page.index("</main>")]
    assert "<img" not in main and "<script" not in main and "javascript:" not in main


def test_the_new_posts_notice_counts_what_arrived_after_the_page(world):
    app, client = world
    page = client.get("/timeline").text
    new_url = html.unescape(re.search(r'<div id="new-posts" hx-get="([^"]+)"', page).group(1))
    assert client.get(new_url).text.strip() == ""
    ingest(app, [post(B, "n1", BASE_US + 10_000_000), post(B, "n2", BASE_US + 11_000_000)])
    assert client.get(new_url).text.strip() == '<a class="new-posts" href="/timeline">2 new posts</a>'


def test_an_older_page_has_no_new_posts_notice(world):
    app, client = world
    older = older_link(client.get("/timeline?limit=2").text)
    page = client.get(older).text
    assert texts(page) == ["post 2", "post 1"]
    assert 'id="new-posts"' not in page  # "N new posts" would count the newer page as new


def test_while_the_first_backfill_runs_the_page_says_so_and_refreshes_itself(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, toml(), sources=FakeSources(), FEED_SERVE="signed-in")
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    in_db(app, lambda: db.execute_sql("INSERT INTO feed_backfills (actor, feed, completed, retries, started_at)"
                                      " VALUES ('did:plc:aaaa', 'timeline', 0, 0, 9999999999999)"))
    page = client.get("/timeline").text
    assert "Filling in your timeline: listing the accounts you follow from your server." in page
    assert 'hx-get="/timeline/region" hx-trigger="every 3s"' in page
    in_db(app, lambda: db.execute_sql("UPDATE feed_backfills SET completed = 1"))
    ingest(app, [follow(A, "f1", B)])  # a new followee under admission: queued for a fetch
    assert "fetching recent posts of 1 account you follow." in client.get("/timeline/region").text
    in_db(app, lambda: db.execute_sql("UPDATE feed_fetches SET fetched_us = 1"))  # the fetch job ran
    region = client.get("/timeline/region").text
    assert "Filling in" not in region and "hx-trigger" not in region
    join_backfills(app)


def test_several_feeds_get_a_selector_and_each_reads_its_own(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, TWO_FEEDS, sources=FakeSources())
    ingest(app, [follow(A, "f1", B), post(B, "p1", BASE_US + 1, text="hello")])
    mark_backfilled(app, A, ("timeline", "friends"))
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    page = client.get("/timeline?feed=friends").text
    assert ('<a href="/timeline?feed=timeline">timeline</a><a href="/timeline?feed=friends" aria-current="page">'
            'friends</a>') in page
    assert texts(page) == ["hello"]
    assert client.get("/timeline?feed=nope").status_code == 404
    join_backfills(app)


GALLERY = "com.example.gallery"  # no renderer (read/apps.py): shown by its most text-like field
MIXED = toml(extra=f"[collections.gallery]\ncollection = \"{GALLERY}\"\n"
                   "[feeds.mixed]\nfollow = \"follow\"\ntargets = [\"post\", \"gallery\"]")


def test_a_feed_with_two_targets_shows_each_by_its_own_link(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, MIXED, sources=FakeSources())
    ingest(app, [follow(A, "f1", B), post(B, "p1", BASE_US + 1_000_000, text="a post")]
           + [create(B, GALLERY, f"g{i}", {"title": f"gallery {i}", "createdAt": "2025-10-09T08:53:2{i}Z"},
                     time_us=BASE_US + (2 + i) * 1_000_000) for i in range(3)])
    mark_backfilled(app, A, ("timeline", "mixed"))
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    page = client.get("/timeline?feed=mixed").text
    assert texts(page) == ["a post"]  # the first target by default, as getFeed answers
    assert ('<nav class="feed-picker" aria-label="Collections">\n  <a href="/timeline?feed=mixed" aria-current="page">'
            'Bluesky posts</a><a href="/timeline?feed=mixed&amp;collection=gallery">gallery</a>') in page
    page = client.get("/timeline?feed=mixed&collection=gallery&limit=2").text
    assert texts(page) == ["gallery 2", "gallery 1"]
    assert ('<a href="/timeline?feed=mixed&amp;limit=2">Bluesky posts</a><a href="/timeline?feed=mixed&amp;collection=gallery'
            '&amp;limit=2" aria-current="page">gallery</a>') in page
    older = older_link(page)
    assert "collection=gallery" in older and texts(client.get(older).text) == ["gallery 0"]
    new_url = html.unescape(re.search(r'id="new-posts" hx-get="([^"]+)"', page).group(1))
    assert "collection=gallery" in new_url
    ingest(app, [create(B, GALLERY, "g9", {"title": "gallery 9", "createdAt": "2025-10-09T08:54:00Z"},
                        time_us=BASE_US + 60_000_000)]
           + [post(B, f"p{9 + i}", BASE_US + (61 + i) * 1_000_000, text="later post") for i in range(2)])
    notice = client.get(new_url).text
    assert "1 new post" in notice and "2 new posts" not in notice  # the gallery's newcomer, not the posts
    assert client.get(f"/timeline?feed=mixed&collection={GALLERY}").status_code == 200  # the NSID names it too
    assert client.get("/timeline?feed=mixed&collection=nope").status_code == 404
    join_backfills(app)
