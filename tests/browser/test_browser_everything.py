""""Everything" on /timeline in Chromium, at 390 and 1280 px, with JavaScript off and on, and its
feed-reader link read by feedparser.

Bob follows four people: one posts on Bluesky, one made a Tangled repository, one a Grain gallery,
one saved a Semble card (records in each app's own collection, through the firehose path). The
page shows all four newest first, three of them as cards naming their app and linking the record
on its app; nothing overflows a phone. The link made with "Make a feed-reader link" is then read
the way a feed reader reads it. Screenshots and the reader's view go to test-artifacts/.
"""
from __future__ import annotations

import html
import re

import feedparser
import pytest
import requests

from tests.browser.helpers import sign_in_with_app_password
from tests.support.browser import ARTIFACTS, FeatherServer, ensure_htmx

pytestmark = [pytest.mark.browser, pytest.mark.pds, pytest.mark.slow, pytest.mark.once]

POSTER, CODER, PHOTOG, READER = (f"did:plc:every{n}000000000000000000a" for n in "pcgs")
# (did, collection, rkey, record): oldest first.
RECORDS = [
    (POSTER, "app.bsky.feed.post", "3lev0aaaaaaaa", {"text": "a post on Bluesky", "createdAt": "2026-11-30T10:00:00.000Z"}),
    (CODER, "sh.tangled.repo", "3lev1aaaaaaaa", {"name": "feather", "description": "a timeline you keep",
                                                 "owner": CODER, "knot": "knot.example",
                                                 "createdAt": "2026-11-30T10:01:00.000Z"}),
    (PHOTOG, "social.grain.gallery", "3lev2aaaaaaaa", {"title": "Herons at dawn", "description": "six photos",
                                                       "createdAt": "2026-11-30T10:02:00.000Z"}),
    (READER, "network.cosmik.card", "3lev3aaaaaaaa", {
        "type": "URL", "url": "https://example.com/essay",
        "content": {"$type": "network.cosmik.card#urlContent", "url": "https://example.com/essay",
                    "metadata": {"title": "An essay worth keeping", "description": "on slow reading"}},
        "createdAt": "2026-11-30T10:03:00.000Z"}),
]
EXPECTED = [  # newest first: (the card's words, its title, its link); a post has no card
    ("Semble card:", "An essay worth keeping", "https://semble.so/url?id=https%3A%2F%2Fexample.com%2Fessay"),
    ("Grain gallery:", "Herons at dawn", f"https://grain.social/profile/{PHOTOG}/gallery/3lev2aaaaaaaa"),
    ("Tangled repository:", "feather", f"https://tangled.org/{CODER}/feather"),
    (None, None, f"https://bsky.app/profile/{POSTER}/post/3lev0aaaaaaaa"),
]


@pytest.fixture(scope="module")
def server(pds, tmp_path_factory):
    ensure_htmx()
    srv = FeatherServer(tmp_path_factory.mktemp("feather-everything"), {
        "FEED_SERVE": "all", "FEATHERREADER_ALLOW_APP_PASSWORDS": "1", "FEATHERREADER_ALLOW_PRIVATE_NETWORK": "1",
        "FEATHERREADER_HANDLE_RESOLVER": pds.pds_url, "FEATHERREADER_PLC_URL": pds.plc_url,
        "FEATHERREADER_LOGIN_RATE_LIMIT": "1000", "FEED_LABELERS": ""})
    srv.start()
    bob = pds.accounts["bob"].did
    for n, did in enumerate((POSTER, CODER, PHOTOG, READER)):
        srv.inject(did=bob, collection="app.bsky.graph.follow", op="create", rkey=f"3levf{n}aaaaaaa", subject=did)
    for did, collection, rkey, record in RECORDS:
        srv.inject(did=did, collection=collection, op="create", rkey=rkey, record=record)
    yield srv
    srv.stop()


def shown(page) -> list[tuple[str | None, str | None, str]]:
    out = []
    for item in page.locator("ol.timeline li.post").all():
        link = item.locator("a.when").get_attribute("href")
        card = item.locator(".card-title")
        if card.count():
            out.append((card.locator(".app").inner_text(), card.locator("a").inner_text(), link))
        else:
            out.append((None, None, link))
    return out


@pytest.mark.parametrize("width", [390, 1280])
def test_everything_shows_records_from_three_apps_beside_the_posts(page, server, pds, width):
    page.set_viewport_size({"width": width, "height": 900})
    sign_in_with_app_password(page, pds, "bob", next_url="/timeline?feed=everything")
    assert shown(page) == EXPECTED
    assert page.get_by_text("on slow reading").is_visible()  # a card's description
    assert page.locator('nav[aria-label="Collections"] a').all_inner_texts()[:4] == [
        "all", "Bluesky posts", "Tangled repositories", "Tangled stars"]
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # nothing overflows a phone
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"everything-{'js' if page.js else 'nojs'}-{width}.png"), full_page=True)
    page.get_by_role("link", name="Grain galleries").click()
    assert shown(page) == EXPECTED[1:2]


def test_the_everything_link_reads_in_a_feed_reader_as_the_page_shows_it(server, browser, pds):
    context = browser.new_context(java_script_enabled=False, base_url=server.url)
    page = context.new_page()
    sign_in_with_app_password(page, pds, "bob", next_url="/timeline?feed=everything")
    page.get_by_role("button", name=re.compile("Make (a feed-reader|a new) link")).click()
    atom_url = html.unescape(re.search(r'value="([^"]+/r/[A-Za-z0-9_-]+\.atom)"', page.content()).group(1))
    context.close()
    answer = requests.get(atom_url, timeout=30)
    parsed = feedparser.parse(answer.content)
    assert (answer.status_code, parsed.bozo, parsed.feed.title) == (200, False, "Everything · Feather")
    assert [e.link for e in parsed.entries] == [link for _w, _t, link in EXPECTED]
    assert [e.title.split(": ", 1)[1] for e in parsed.entries[:3]] == [
        f"{words} {title}" for words, title, _l in EXPECTED[:3]]
    again = requests.get(atom_url, headers={"If-None-Match": answer.headers["ETag"]}, timeout=30)
    assert again.status_code == 304
    # What a reader shows, kept for the closing note.
    lines = [f"{parsed.feed.title} ({len(parsed.entries)} entries)"]
    lines += [f"- {e.title}\n  {e.link}\n  {e.published}" for e in parsed.entries]
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "everything-feed-reader.txt").write_text("\n".join(lines) + "\n")
