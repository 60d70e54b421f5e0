"""/timeline says what a post answers and what it quotes: "Replying to <name>" from the parent's
author, and a quoted post's author and text when the store has it (else the plain link), all from
the store (no lookup per mention) and all escaped."""
from __future__ import annotations

import html
import re

import pytest

from feather import sql
from feather.db import db
from feather.feeds.store import identities
from tests.fixtures.feeds.feedkit import (BASE_US, PROFILE, FakeSources, create, feeds_app, follow, ingest,
                                          join_backfills, post, toml)
from tests.test_sync_views import sign_in
from tests.test_timeline_page import mark_backfilled

A, B, C, E = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc", "did:plc:eeee"
POST = "app.bsky.feed.post"


def ref(did, rkey):
    return {"uri": f"at://{did}/{POST}/{rkey}", "cid": "bafyparent"}


@pytest.fixture
def world(make_app, tmp_path):
    """A follows B and C. C is "Cee <3" (a stored profile); E is followed by nobody and has no
    profile; B replies to C and to E, quotes C, and quotes a post of E's the store never saw."""
    sources = FakeSources()
    app = feeds_app(make_app, tmp_path, toml(), sources=sources)
    ingest(app, [follow(A, "f1", B), follow(A, "f2", C),
                 create(C, PROFILE, "self", {"displayName": "Cee <3"}, time_us=BASE_US),
                 post(C, "c1", BASE_US + 1_000_000, text="the <original>"),
                 post(B, "r1", BASE_US + 2_000_000, text="reply to cee", reply={"root": ref(C, "c1"), "parent": ref(C, "c1")}),
                 post(B, "r2", BASE_US + 3_000_000, text="reply to e", reply={"root": ref(C, "c1"), "parent": ref(E, "e1")}),
                 post(B, "q1", BASE_US + 4_000_000, text="quoting cee",
                      embed={"$type": "app.bsky.embed.record", "record": ref(C, "c1")}),
                 post(B, "q2", BASE_US + 5_000_000, text="quoting e",
                      embed={"$type": "app.bsky.embed.recordWithMedia",
                             "record": {"$type": "app.bsky.embed.record", "record": ref(E, "e9")},
                             "media": {"$type": "app.bsky.embed.images", "images": [{"alt": "a cat"}]}}),
                 post(B, "bad", BASE_US + 6_000_000, text="broken reply", reply={"parent": {"uri": "javascript:x"}})])
    mark_backfilled(app, A)
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    yield app, client, sources
    join_backfills(app)


def posts(page: str) -> dict[str, str]:
    """{post text: the whole <li> of it}"""
    found = {}
    for item in re.findall(r'<li class="post">(.*?)</li>', page, re.S):
        text = html.unescape(re.search(r'<div class="text">(.*?)</div>', item, re.S).group(1))
        found[text] = " ".join(item.split())
    return found


def test_a_reply_names_the_author_it_answers_and_links_the_parent(world):
    app, client, sources = world
    shown = posts(client.get("/timeline").text)
    assert ('<p class="context muted">Replying to <a href="https://bsky.app/profile/did:plc:cccc/post/c1" '
            'rel="nofollow noopener ugc">Cee &lt;3</a></p>') in shown["reply to cee"]
    assert ('<p class="context muted">Replying to <a href="https://bsky.app/profile/did:plc:eeee/post/e1" '
            'rel="nofollow noopener ugc">did:plc:eeee</a></p>') in shown["reply to e"]
    assert "Replying to" not in shown["broken reply"] and "Replying to" not in shown["the <original>"]
    assert [c for c in sources.calls if c[1] == E] == []  # nobody was looked up for a mention
    with app.app_context(), db.connection_context():
        identities.save_handle(E, "e.test", sql.now_us())  # a handle verified earlier, for another reason
    shown = posts(client.get("/timeline").text)
    assert ">@e.test</a></p>" in shown["reply to e"]


def test_a_quote_shows_the_stored_posts_author_and_text_else_the_link(world):
    app, client, _ = world
    shown = posts(client.get("/timeline").text)
    assert ('<p class="embed"><span class="muted">Quoted post by Cee &lt;3:</span> <a href="https://bsky.app/profile/'
            'did:plc:cccc/post/c1" rel="nofollow noopener ugc">the &lt;original&gt;</a></p>') in shown["quoting cee"]
    assert ('<p class="embed"><span class="muted">Quoted post:</span> <a href="https://bsky.app/profile/did:plc:eeee/'
            'post/e9" rel="nofollow noopener ugc">open it on Bluesky</a></p>') in shown["quoting e"]
    assert '<span class="muted">Image:</span>' in shown["quoting e"]
