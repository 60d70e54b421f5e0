"""/timeline in Chromium, with JavaScript off and on, at 1280 and 390 px: paging, infinite scroll,
the new-posts notice, and hostile post text shown as text."""
from __future__ import annotations

import pytest

from tests.browser.helpers import sign_in_with_app_password
from tests.support.browser import ARTIFACTS, FeatherServer, ensure_htmx

pytestmark = [pytest.mark.browser, pytest.mark.pds, pytest.mark.slow, pytest.mark.once]

AUTHOR = "did:plc:tlauthor000000000000000a"
HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script> & "quotes"'


@pytest.fixture(scope="module")
def server(pds, tmp_path_factory):
    """Feather for bob, with everything in his timeline: scheduler off (no job touches the store)
    and FEED_SERVE=all (injected posts of a made-up author are kept without a fetch)."""
    ensure_htmx()
    srv = FeatherServer(tmp_path_factory.mktemp("feather-timeline"), {
        "FEED_SERVE": "all", "FEATHERREADER_ALLOW_APP_PASSWORDS": "1", "FEATHERREADER_ALLOW_PRIVATE_NETWORK": "1",
        "FEATHERREADER_HANDLE_RESOLVER": pds.pds_url, "FEATHERREADER_PLC_URL": pds.plc_url,
        "FEATHERREADER_LOGIN_RATE_LIMIT": "1000"})
    srv.start()
    bob = pds.accounts["bob"].did
    srv.inject(did=bob, collection="app.bsky.graph.follow", op="create", subject=AUTHOR)
    srv.inject(did=AUTHOR, collection="app.bsky.actor.profile", op="create", rkey="self",
               record={"displayName": "Tess <Timeline>"})
    for i in range(12):
        srv.inject(did=AUTHOR, collection="app.bsky.feed.post", op="create",
                   record={"text": f"post number {i}", "createdAt": f"2026-11-30T10:{i:02d}:00.000Z"})
    link = "read https://example.com/a-very-long-path-that-should-wrap-on-a-phone-screen-without-overflowing"
    start = link.index("https://")
    srv.inject(did=AUTHOR, collection="app.bsky.feed.post", op="create", record={
        "text": HOSTILE + "\n" + link, "createdAt": "2026-11-30T11:00:00.000Z",
        "facets": [{"index": {"byteStart": len((HOSTILE + "\n").encode()) + start,
                              "byteEnd": len((HOSTILE + "\n" + link).encode())},
                    "features": [{"$type": "app.bsky.richtext.facet#link", "uri": link[start:]}]}],
        "embed": {"$type": "app.bsky.embed.images", "images": [{"alt": "a heron on one leg", "image": {}}]}})
    yield srv
    srv.stop()


@pytest.fixture
def nojs(server, browser, request):
    context = browser.new_context(java_script_enabled=False, base_url=server.url)
    yield context.new_page()
    context.close()


@pytest.fixture
def js(server, browser):
    context = browser.new_context(java_script_enabled=True, base_url=server.url)
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda m: page.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.console_errors.append(str(e)))
    yield page
    context.close()


def posts(page) -> list[str]:
    return [t.split("\n")[0] for t in page.locator("ol.timeline li.post .text").all_inner_texts()]


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"timeline-{name}.png"), full_page=True)


@pytest.mark.parametrize("width", [1280, 390])
def test_without_javascript_the_timeline_pages_by_links_and_shows_hostile_text_as_text(nojs, pds, width):
    nojs.set_viewport_size({"width": width, "height": 900})
    sign_in_with_app_password(nojs, pds, "bob", next_url="/timeline?limit=5")
    assert posts(nojs)[0] == HOSTILE.split("\n")[0]
    assert posts(nojs)[1:] == [f"post number {i}" for i in (11, 10, 9, 8)]
    assert nojs.locator("main img, main script").count() == 0
    assert nojs.get_by_role("link", name="https://example.com/a-very-long-path", exact=False).get_attribute(
        "href").startswith("https://example.com/")
    assert "Image: a heron on one leg" in nojs.locator("ol.timeline li.post").first.inner_text()
    assert nojs.locator(".name").first.inner_text() == "Tess <Timeline>"
    assert nojs.evaluate("document.documentElement.scrollWidth") <= width  # nothing overflows a phone
    shot(nojs, f"nojs-{width}")
    seen = posts(nojs)
    while nojs.get_by_role("link", name="Older posts").count():
        with nojs.expect_navigation():
            nojs.get_by_role("link", name="Older posts").click()
        seen += posts(nojs)
    assert seen[1:] == [f"post number {i}" for i in range(11, -1, -1)]


@pytest.mark.parametrize("width", [1280, 390])
def test_with_javascript_older_posts_load_on_scroll_and_new_posts_are_announced(js, server, pds, width):
    js.set_viewport_size({"width": width, "height": 900})
    sign_in_with_app_password(js, pds, "bob", next_url="/timeline?limit=5")
    js.wait_for_function("() => typeof window.htmx === 'object'")
    for expected in (10, 13):  # scrolling the "Older posts" item into view loads the next page in place
        # Looked up afresh each time: on a tall window htmx may already be swapping the item out.
        js.evaluate("() => { const more = document.querySelector('li.more'); if (more) more.scrollIntoView(); }")
        js.wait_for_function(f"() => document.querySelectorAll('ol.timeline li.post').length >= {expected}")
    assert posts(js)[1:] == [f"post number {i}" for i in range(11, -1, -1)]
    assert js.evaluate("window.__pwned") is None
    server.inject(did=AUTHOR, collection="app.bsky.feed.post", op="create",
                  record={"text": f"fresh {width}", "createdAt": "2026-11-30T12:00:00.000Z"})
    js.evaluate("htmx.trigger('#new-posts', 'check')")  # what its 30 s timer does
    notice = js.locator("#new-posts a.new-posts")
    notice.wait_for()
    assert notice.inner_text() == "1 new post"
    js.evaluate("window.scrollTo(0, 0)")
    shot(js, f"js-{width}")
    with js.expect_navigation():
        notice.click()
    assert posts(js)[0] == f"fresh {width}"
    assert js.console_errors == []
    server.inject(did=AUTHOR, collection="app.bsky.feed.post", op="delete",  # leave the feed as it was
                  rkey=js.locator(".when").first.get_attribute("href").rsplit("/", 1)[-1])
