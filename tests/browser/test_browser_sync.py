"""Graph sync's owner page in real Chromium: enable (preview -> confirm), pause, resume, disable.

Without JavaScript every step is a GET form or a POST answered with 303; with JavaScript the progress
fragment re-fetches itself in place (htmx, every 5 s while a backfill is moving). Turning sync off
asks first on a page of its own, with JavaScript or without. The page fits a 390 px phone with a
full Activity list, long names and failures (screenshots at 390 and 1280 px in test-artifacts/).
"""
from __future__ import annotations

import sqlite3

import pytest

from tests.browser.helpers import assert_clean_console, assert_footer, sign_in_with_app_password
from tests.browser.test_browser_forms import posted_and_redirected

pytestmark = [pytest.mark.browser, pytest.mark.pds, pytest.mark.slow, pytest.mark.once]


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


def turn_off(page, path: str) -> None:
    """"Turn sync off" is a GET to a confirmation page; only its button turns sync off."""
    with page.expect_navigation() as nav:
        page.get_by_role("button", name="Turn sync off", exact=True).click()
    assert nav.value.url.split("?")[0].endswith(f"{path}/turn-off") and nav.value.status == 200
    assert nav.value.request.method == "GET"
    assert page.get_by_role("heading", name="Turn sync off?").is_visible()
    assert page.get_by_role("button", name="Pause").count() == 0  # still on: nothing happened yet
    assert_footer(page)
    click_and_land(page, "Yes, turn sync off", path)


def test_enable_pause_resume_disable_without_javascript(page_nojs, pds):
    path = open_sync_page(page_nojs, pds, "alice")
    assert page_nojs.get_by_text("Off. Choose at least two apps").is_visible()
    assert_footer(page_nojs)
    enable(page_nojs)
    click_and_land(page_nojs, "Turn sync on", path)
    assert page_nojs.locator("p.flash.info").inner_text().startswith("Sync is on.")
    assert page_nojs.get_by_role("button", name="Pause").is_visible()
    # no JavaScript: the progress section is plain HTML with the numbers in it
    assert page_nojs.locator("#sync-progress dt").first.inner_text() == "Listing"
    assert page_nojs.locator("#sync-progress h3").all_inner_texts() == ["Bluesky", "Tangled"]

    click_and_land(page_nojs, "Pause", path)
    assert page_nojs.locator("p.flash.info").inner_text().startswith("Sync is paused.")
    assert page_nojs.get_by_role("button", name="Resume").is_visible()
    assert page_nojs.locator("#sync-progress").get_attribute("hx-get") is None  # nothing moves while paused

    click_and_land(page_nojs, "Resume", path)
    assert page_nojs.locator("p.flash.info").inner_text().startswith("Sync resumed")

    turn_off(page_nojs, path)
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
    turn_off(page_js, path)
    assert_clean_console(page_js)
    assert page_js.evaluate("() => window.__csp || []") == []


def seed_a_busy_history(server, owner: str) -> None:
    """What a week of sync leaves on the page: every kind of activity row, long names, failures."""
    now = int(__import__("time").time())
    people = [(f"did:plc:{n:024d}", handle, display) for n, (handle, display) in enumerate([
        ("ada-lovelace-with-a-rather-long-handle.example.com", "Ada Augusta King, Countess of Lovelace"),
        ("grace.example.com", None), ("x" * 60 + ".example.com", "W" * 64)])]
    d0, d1, d2 = (p[0] for p in people)
    error = "HTTP 502 Bad Gateway: upstream connect error or disconnect/reset before headers. reset reason: overflow"
    rows = [("tangled", "follow", d0, 3, None), ("grain", "unfollow", d1, 1, None), ("sifa", "retry", d2, 3, None),
            ("sifa", "failed", d2, 0, f"follow: {error}"), ("grain", "waiting", d0, 0, None),
            ("", "rate_limited", None, 0, "rate limited"), ("tangled", "error", d1, 0, "follow: RuntimeError: boom"),
            ("", "backfill_done", None, 0, "1204 follows queued")] * 4
    db = sqlite3.connect(server.db_path, timeout=10)
    with db:
        db.executemany("INSERT INTO sync_people (did, handle, display_name, wanted_at, fetched_at, next_fetch_at)"
                       " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (did) DO NOTHING",
                       [(did, h, name, now, now, now + 86400) for did, h, name in people])
        db.executemany("INSERT INTO sync_activity (owner_did, at, app, kind, subject, points, detail)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?)", [(owner, now - 60 * i, *r) for i, r in enumerate(rows)])
        db.execute("INSERT INTO sync_queue (owner_did, app, kind, subject, origin, status, attempts, not_before,"
                   " last_error, created_at, updated_at) VALUES (?, 'bluesky', 'follow', ?, 'event', 'failed', 5, 0,"
                   " ?, ?, ?)", (owner, d2, error, now, now))
    db.close()


def test_the_page_fits_a_390_px_phone_and_turning_off_asks_first_with_javascript(page_js, pds, feather_server):
    from tests.support.browser import ARTIFACTS

    path = open_sync_page(page_js, pds, "bob")
    enable(page_js)
    click_and_land(page_js, "Turn sync on", path)
    seed_a_busy_history(feather_server, pds.accounts["bob"].did)
    ARTIFACTS.mkdir(exist_ok=True)
    for width in (1280, 390):
        page_js.set_viewport_size({"width": width, "height": 900})
        page_js.goto(path)
        assert page_js.locator("ol.activity li").count() == 33  # seeded, and "Sync turned on"
        assert page_js.locator(".problems li").count() == 1
        assert page_js.get_by_text("Ada Augusta King, Countess of Lovelace (@ada-lovelace-with-a-rather-long-handle"
                                   ".example.com) has no Grain profile yet").first.is_visible()
        page_js.screenshot(path=str(ARTIFACTS / f"sync-page-{width}.png"))  # the first screen
        page_js.screenshot(path=str(ARTIFACTS / f"sync-page-{width}-full.png"), full_page=True)
    assert page_js.evaluate("() => document.documentElement.scrollWidth") <= 390
    assert "did:plc:" not in page_js.locator("main").inner_text()
    turn_off(page_js, path)
    assert page_js.locator("p.flash.info").inner_text().startswith("Sync is off.")
    assert page_js.evaluate("() => document.documentElement.scrollWidth") <= 390
    assert_clean_console(page_js)


def test_turning_off_without_javascript_can_be_cancelled(page_nojs, pds):
    path = open_sync_page(page_nojs, pds, "alice")
    enable(page_nojs)
    click_and_land(page_nojs, "Turn sync on", path)
    with page_nojs.expect_navigation():
        page_nojs.get_by_role("button", name="Turn sync off", exact=True).click()
    assert page_nojs.url.split("?")[0].endswith(f"{path}/turn-off")
    with page_nojs.expect_navigation():
        page_nojs.get_by_role("link", name="Keep sync on").click()
    assert page_nojs.get_by_role("button", name="Pause").is_visible()  # still on
    turn_off(page_nojs, path)
    assert page_nojs.get_by_text("Off. Choose at least two apps").is_visible()
    assert_clean_console(page_nojs)
