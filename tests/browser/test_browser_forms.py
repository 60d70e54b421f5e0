"""With JavaScript disabled, every form works by plain POST and a 303 redirect, in real Chromium.

The app runs as users run it (gunicorn, gevent worker, development mode) against the reference PDS.
"""
from __future__ import annotations

from urllib.parse import urlencode

import pytest
import requests

from tests.browser.helpers import (assert_clean_console, assert_footer, consent_in_browser_session,
                                   sign_in_with_app_password)

pytestmark = [pytest.mark.browser, pytest.mark.pds, pytest.mark.slow, pytest.mark.once]

FEED = "https://blog.example.com/feed.xml"
RSS = "community.lexicon.rss.subscription"
PAGES = ["/", "/about", "/privacy", "/terms", "/login", "/network", "/network/opt-out", "/network/attribution"]


def posted_and_redirected(response, path: str):
    """The navigation ended on `path` after a POST answered 303 (what a no-JS form submit looks like)."""
    first = response.request.redirected_from
    assert first is not None, f"no redirect before {response.url}"
    assert first.method == "POST"
    assert first.response().status == 303
    assert response.url.split("?")[0].endswith(path), response.url
    assert response.status == 200


def seed_catalogue(server, dids, feed=FEED) -> None:
    for i, did in enumerate(dids):
        server.inject(did=did, collection=RSS, op="create", rkey=f"3lbrowser{i:05d}",
                      record={"url": feed, "createdAt": "2026-11-01T00:00:00.000Z"})


def test_the_page_scripts_really_do_not_run(page_nojs):
    page_nojs.goto("/")
    assert page_nojs.locator("script[src='/static/vendor/htmx.min.js']").count() == 1
    assert page_nojs.evaluate("typeof window.htmx") == "undefined"  # the driver can look; the page ran nothing


@pytest.mark.parametrize("path", PAGES)
def test_every_page_has_the_footer_and_a_clean_console(page_nojs, path):
    response = page_nojs.goto(path)
    expected = 401 if path == "/network/attribution" else 200  # it asks signed-out people to sign in
    assert response.status == expected, (path, response.status)
    assert_footer(page_nojs)
    assert_clean_console(page_nojs, allow_status=expected)


def test_app_password_sign_in_and_sign_out(page_nojs, pds):
    sign_in_with_app_password(page_nojs, pds, "alice", next_url="/about")
    assert page_nojs.url.endswith("/about")
    assert page_nojs.get_by_role("heading", name="About").is_visible()
    assert_footer(page_nojs)
    with page_nojs.expect_navigation() as nav:
        page_nojs.get_by_role("button", name="Sign out").click()
    posted_and_redirected(nav.value, "/")
    assert page_nojs.locator("header.site .account").count() == 0
    assert page_nojs.locator("header.site").get_by_role("link", name="Sign in").is_visible()
    assert_clean_console(page_nojs)


def test_a_wrong_app_password_re_renders_the_form_with_one_sentence(page_nojs, pds):
    page_nojs.goto("/login")
    page_nojs.fill("#pw-identifier", pds.accounts["bob"].handle)
    page_nojs.fill("#password", "aaaa-bbbb-cccc-dddd")
    with page_nojs.expect_navigation() as nav:
        page_nojs.get_by_role("button", name="Sign in with an app password").click()
    assert nav.value.status == 400
    assert page_nojs.locator("#login-error").inner_text() == "The handle or app password is wrong."
    assert page_nojs.input_value("#pw-identifier") == pds.accounts["bob"].handle
    assert page_nojs.locator("header.site .account").count() == 0
    assert_footer(page_nojs)


def test_oauth_sign_in_form_redirects_to_the_pds_and_the_callback_signs_in(page_nojs, pds, feather_server):
    """The login form's POST answers 303 to the PDS's authorize page; the browser follows it (CSP form-action
    allows it). The consent on the PDS is a JavaScript app, so its API is called with this browser's PDS
    cookies; the callback is then visited by the same browser, whose cookies carry the Feather session."""
    acct = pds.accounts["carol"]
    page_nojs.goto("/login?next=/privacy")
    page_nojs.fill("#identifier", acct.handle)
    with page_nojs.expect_navigation() as nav:
        page_nojs.get_by_role("button", name="Continue").click()
    authorize_url = nav.value.url
    assert authorize_url.startswith(f"{pds.issuer}/oauth/authorize?client_id=http%3A%2F%2Flocalhost%3F")
    first = nav.value.request.redirected_from
    assert (first.method, first.response().status) == ("POST", 303)

    query = consent_in_browser_session(page_nojs.context, authorize_url, acct.handle, acct.password)
    response = page_nojs.goto(f"{feather_server.url}/oauth/callback?{urlencode(query)}")
    assert response.url == f"{feather_server.url}/privacy"
    assert page_nojs.locator("header.site .account").inner_text() == f"@{acct.handle}"
    assert_footer(page_nojs)
    assert_clean_console(page_nojs)


def test_network_opt_out_form_deletes_and_redirects(page_nojs, pds, feather_server):
    carol = pds.accounts["carol"]
    others = [f"did:plc:browseroptout{i:011d}" for i in range(5)]
    seed_catalogue(feather_server, others + [carol.did])
    page_nojs.goto("/network")
    assert page_nojs.get_by_text(f"{FEED}: 6 accounts").is_visible(), page_nojs.content()[:3000]

    page_nojs.goto("/about")
    with page_nojs.expect_navigation():
        page_nojs.get_by_role("link", name="the network catalogue").click()
    page_nojs.get_by_role("link", name="Opt out").click()
    page_nojs.wait_for_url("**/network/opt-out")
    page_nojs.fill("#handle", "@" + carol.handle)
    with page_nojs.expect_navigation() as nav:
        page_nojs.get_by_role("button", name="Opt out").click()
    posted_and_redirected(nav.value, "/network/opt-out/done")
    assert page_nojs.get_by_role("heading", name="You are opted out").is_visible()
    # The same page whatever was typed: a stranger learns nothing about the account from it.
    main = page_nojs.locator("main").inner_text()
    assert carol.did not in main and carol.handle not in main and "deleted" not in main
    assert_footer(page_nojs)
    assert_clean_console(page_nojs)
    # /network is cacheable for five minutes, so ask the server directly, as a new visitor would
    assert f"{FEED}</a>: 5 accounts" in requests.get(feather_server.url + "/network", timeout=10).text


def test_network_opt_out_of_an_unknown_handle_says_why(page_nojs):
    page_nojs.goto("/network/opt-out")
    page_nojs.fill("#handle", "nobody-here.test")
    with page_nojs.expect_navigation() as nav:
        page_nojs.get_by_role("button", name="Opt out").click()
    assert nav.value.status == 400
    assert page_nojs.locator("p.flash.error").inner_text().strip()
    assert page_nojs.input_value("#handle") == "nobody-here.test"


def test_attribution_form_turns_naming_on_and_off(page_nojs, pds):
    sign_in_with_app_password(page_nojs, pds, "bob", next_url="/network/attribution")
    assert page_nojs.get_by_text("You are counted anonymously and never named.").is_visible()
    with page_nojs.expect_navigation() as nav:
        page_nojs.get_by_role("button", name="Name me next to my feeds").click()
    posted_and_redirected(nav.value, "/network/attribution")
    assert "You may now be named" in page_nojs.locator("p.flash.ok").inner_text()
    with page_nojs.expect_navigation() as nav:
        page_nojs.get_by_role("button", name="Stop naming me").click()
    posted_and_redirected(nav.value, "/network/attribution")
    assert page_nojs.locator("p.flash.ok").inner_text() == "You will not be named anywhere."
    assert_clean_console(page_nojs)
