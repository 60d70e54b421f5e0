"""Labelled posts on /timeline in Chromium, at 390 and 1280 px, with JavaScript off and on.

A small labeler on loopback (tests/support/fake_labeler.py, a did:web) labels one post
graphic-media and hides another; a third carries its author's own `porn` self-label. Masked posts
show only the label's name until "Show" is clicked (a details/summary element: no script); the
hidden post is not on the page at all. Screenshots go to test-artifacts/.
"""
from __future__ import annotations

import pytest

from tests.browser.helpers import sign_in_with_app_password
from tests.support.browser import ARTIFACTS, FeatherServer, ensure_htmx
from tests.support.fake_labeler import FakeLabeler

pytestmark = [pytest.mark.browser, pytest.mark.pds, pytest.mark.slow, pytest.mark.once]

AUTHOR = "did:plc:lbauthor000000000000000a"
SELF_PORN = {"$type": "com.atproto.label.defs#selfLabels", "values": [{"val": "porn"}]}


@pytest.fixture(scope="module")
def labeler():
    fake = FakeLabeler(web=True)
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def server(pds, labeler, tmp_path_factory):
    ensure_htmx()
    srv = FeatherServer(tmp_path_factory.mktemp("feather-labels"), {
        "FEED_SERVE": "all", "FEATHERREADER_ALLOW_APP_PASSWORDS": "1", "FEATHERREADER_ALLOW_PRIVATE_NETWORK": "1",
        "FEATHERREADER_HANDLE_RESOLVER": pds.pds_url, "FEATHERREADER_PLC_URL": pds.plc_url,
        "FEATHERREADER_LOGIN_RATE_LIMIT": "1000", "FEED_LABELERS": labeler.did})
    srv.start()
    bob = pds.accounts["bob"].did
    srv.inject(did=bob, collection="app.bsky.graph.follow", op="create", subject=AUTHOR)
    srv.inject(did=AUTHOR, collection="app.bsky.actor.profile", op="create", rkey="self",
               record={"displayName": "Lena Labelled"})
    texts = {"plain": "an ordinary post", "graphic": "a graphic scene described in words",
             "hidden": "a post the labeler hides", "self": "a post its author labelled adult"}
    rkeys = {}
    for n, (key, text) in enumerate(texts.items()):
        record = {"text": text, "createdAt": f"2026-11-30T10:0{n}:00.000Z"}
        if key == "self":
            record["labels"] = SELF_PORN
        rkeys[key] = f"3lb{n}aaaaaaaa"
        srv.inject(did=AUTHOR, collection="app.bsky.feed.post", op="create", rkey=rkeys[key], record=record)
    labeler.label(f"at://{AUTHOR}/app.bsky.feed.post/{rkeys['graphic']}", "graphic-media")
    labeler.label(f"at://{AUTHOR}/app.bsky.feed.post/{rkeys['hidden']}", "!hide")
    srv.texts = texts
    yield srv
    srv.stop()


@pytest.mark.parametrize("width", [390, 1280])
def test_masked_posts_show_their_label_until_show_is_clicked_and_hidden_ones_are_absent(page, server, pds, width):
    texts = server.texts
    page.set_viewport_size({"width": width, "height": 900})
    sign_in_with_app_password(page, pds, "bob", next_url="/timeline")
    items = page.locator("ol.timeline li.post")
    assert items.count() == 3  # the hidden post is not on the page
    assert texts["hidden"] not in page.locator("ol.timeline").inner_text()
    masked = page.locator("ol.timeline details.masked")
    assert masked.count() == 2
    assert [m.locator("summary .label-name").inner_text() for m in masked.all()] == ["Adult content", "Graphic media"]
    for key in ("self", "graphic"):
        assert not page.get_by_text(texts[key]).is_visible()
    assert page.get_by_text(texts["plain"]).is_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # nothing overflows a phone
    ARTIFACTS.mkdir(exist_ok=True)
    mode = "js" if page.js else "nojs"
    page.screenshot(path=str(ARTIFACTS / f"labels-{mode}-{width}-masked.png"), full_page=True)
    masked.nth(1).locator("summary").click()
    assert page.get_by_text(texts["graphic"]).is_visible()
    assert not page.get_by_text(texts["self"]).is_visible()  # each mask opens alone
    page.screenshot(path=str(ARTIFACTS / f"labels-{mode}-{width}-shown.png"), full_page=True)
    assert "could not be checked" not in page.content()
