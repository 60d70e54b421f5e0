"""Graph sync's owner page in real Chromium: enable (preview -> confirm), pause, resume, disable.

Without JavaScript every step is a GET form or a POST answered with 303; with JavaScript the progress
fragment re-fetches itself in place (htmx, every 5 s while a backfill is moving).
"""
from __future__ import annotations

import pytest

from tests.browser.helpers import assert_clean_console, assert_footer, sign_in_with_app_password
from tests.browser.test_browser_forms import posted_and_redirected

pytestmark = [pytest.mark.browser, pytest.mark.pds, pytest.mark.slow]


def open_sync_page(page, pds, name: str) -> str:
    handle = pds.accounts[name].handle
    sign_in_with_app_password(page, pds, name, next_url=f"/u/{handle}/social-graph-sync")
    path = f"/u/{handle}/social-graph-sync"
    assert page.url.endswith(path)
    assert page.get_by_role("heading", name="Social graph sync", exact=True).is_visible()
    return path


def click_and_land(page, button: str, path: str) -> None:
    with page.expect_navigation() as nav:
        page.get_by_role("button", name=button, exact=True).click()
    posted_and_redirected(nav.value, path)


def enable(page) -> None:
    with page.expect_navigation() as nav:
        page.get_by_role("button", name="Preview", exact=True).click()
    assert "/social-graph-sync/preview?" in nav.value.url and nav.value.status == 200  # a GET form
    assert_footer(page)


def test_enable_pause_resume_disable_without_javascript(page_nojs, pds):
    path = open_sync_page(page_nojs, pds, "alice")
    assert page_nojs.get_by_text("Off. Choose at least two apps").is_visible()
    assert_footer(page_nojs)
    enable(page_nojs)
    click_and_land(page_nojs, "Turn sync on", path)
    assert page_nojs.locator("p.flash.info").inner_text().startswith("Sync is on.")
    assert page_nojs.get_by_role("button", name="Pause").is_visible()
    # no JavaScript: the progress section is plain HTML with the numbers in it
    assert page_nojs.locator("#sync-progress dt").first.inner_text() == "Backfill"

    click_and_land(page_nojs, "Pause", path)
    assert page_nojs.locator("p.flash.info").inner_text().startswith("Sync is paused.")
    assert page_nojs.get_by_role("button", name="Resume").is_visible()
    assert page_nojs.locator("#sync-progress").get_attribute("hx-get") is None  # nothing moves while paused

    click_and_land(page_nojs, "Resume", path)
    assert page_nojs.locator("p.flash.info").inner_text().startswith("Sync resumed")

    click_and_land(page_nojs, "Turn sync off", path)
    assert page_nojs.locator("p.flash.info").inner_text().startswith("Sync is off.")
    assert page_nojs.get_by_role("button", name="Pause").count() == 0
    assert page_nojs.get_by_text("Off. Choose at least two apps").is_visible()
    assert_footer(page_nojs)
    assert_clean_console(page_nojs)


def test_someone_elses_sync_page_is_refused(page_nojs, pds):
    sign_in_with_app_password(page_nojs, pds, "bob")
    response = page_nojs.goto(f"/u/{pds.accounts['alice'].handle}/social-graph-sync")
    assert response.status == 403
    assert_footer(page_nojs)


def test_progress_fragment_updates_in_place_with_javascript(page_js, pds):
    path = open_sync_page(page_js, pds, "carol")
    enable(page_js)
    click_and_land(page_js, "Turn sync on", path)
    progress = page_js.locator("#sync-progress")
    assert progress.get_attribute("hx-get") == f"{path}/progress"  # the backfill has not run (no scheduler)
    page_js.wait_for_function("() => window.htmx && window.htmx.version")
    # Mark the page and the fragment; htmx must swap the fragment without reloading the page.
    page_js.evaluate("() => { window.__samePage = true; document.getElementById('sync-progress').dataset.old = '1'; }")
    with page_js.expect_response(lambda r: r.url.endswith(f"{path}/progress"), timeout=15_000) as fetched:
        pass
    assert fetched.value.status == 200
    assert fetched.value.request.headers.get("hx-request") == "true"
    page_js.wait_for_function("() => { const el = document.getElementById('sync-progress');"
                              " return el && !el.dataset.old; }", timeout=10_000)
    assert page_js.evaluate("() => window.__samePage === true")  # swapped in place, not navigated
    assert page_js.locator("#sync-progress").count() == 1
    click_and_land(page_js, "Turn sync off", path)
    assert_clean_console(page_js)
    assert page_js.evaluate("() => window.__csp || []") == []
