"""Every page as a first-time visitor meets it, in real Chromium: with JavaScript on and off, light and
dark, 1280 px and 390 px. axe-core (npm, pinned in package-lock.json) finds no serious or critical
violation on any of them, the headings are in order on each (one h1, none before it, no level
skipped: asserted here, since axe rates heading-order only "moderate"), and each combination is saved as a screenshot in screenshots/ (gitignored)
so a person can look at every page after a run.
"""
from __future__ import annotations


import pytest

from tests.browser.helpers import (
    assert_footer,
    heading_problems,
    sign_in_with_app_password,
)
from tests.support.browser import REPO

pytestmark = [pytest.mark.browser, pytest.mark.pds, pytest.mark.slow, pytest.mark.once]

SCREENSHOTS = REPO / "screenshots"
AXE = REPO / "node_modules" / "axe-core" / "axe.min.js"
WIDTHS = (1280, 390)
SCHEMES = ("light", "dark")
SIGNED_OUT = {"home": "/", "about": "/about", "privacy": "/privacy", "terms": "/terms", "login": "/login",
              "sync": "/sync", "network": "/network", "opt-out": "/network/opt-out",
              "attribution": "/network/attribution", "not-found": "/no-such-page"}
SIGNED_IN = {"home-signed-in": "/", "privacy-signed-in": "/privacy", "delete": "/privacy/delete",
             "own-page": "/u/{handle}", "sync-manage": "/u/{handle}/social-graph-sync", "my-records": "/network/me",
             "timeline": "/timeline", "admin": "/admin"}


def axe_source() -> str:
    if not AXE.is_file():
        pytest.fail("axe-core is missing: run `npm ci` (make install does)", pytrace=False)
    return AXE.read_text()


RUN_AXE = ("\n;axe.run(document, {resultTypes: ['violations']})"
           ".then(r => r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')"
           ".map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', ')))")


def serious_violations(page) -> list[str]:
    """axe-core's serious and critical violations on the page as it stands (its scripts must run)."""
    return list(page.evaluate(axe_source() + RUN_AXE))


class NoScriptTwin:
    """Where axe checks what a no-JavaScript visitor sees: axe cannot run in a page whose JavaScript is
    off (its own timers never fire), so the same address is loaded in a page that runs scripts but never
    receives the site's own (htmx is refused), with the visitor's cookies, scheme and width."""

    def __init__(self, browser, base_url: str):
        self.context = browser.new_context(base_url=base_url)
        self.context.route("**/static/vendor/*.js", lambda route: route.abort())
        self.page = self.context.new_page()

    def violations(self, page, scheme: str, width: int) -> list[str]:
        self.context.clear_cookies()
        self.context.add_cookies(page.context.cookies())
        self.page.emulate_media(color_scheme=scheme)
        self.page.set_viewport_size({"width": width, "height": 900})
        self.page.goto(page.url)
        assert self.page.evaluate("typeof window.htmx") == "undefined"
        return serious_violations(self.page)

    def close(self):
        self.context.close()


def look_at(page, name: str, js: bool, twin: NoScriptTwin) -> list[str]:
    """Run axe and take a screenshot in every scheme and width; return what axe found, labelled."""
    problems = heading_problems(page)  # asserted here: axe rates heading-order only "moderate"
    SCREENSHOTS.mkdir(exist_ok=True)
    for scheme in SCHEMES:
        page.emulate_media(color_scheme=scheme)
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            label = f"{name}-{width}-{scheme}-{'js' if js else 'nojs'}"
            page.screenshot(path=str(SCREENSHOTS / f"{label}.png"), full_page=True)
            found = serious_violations(page) if js else twin.violations(page, scheme, width)
            problems += [f"{label}: {v}" for v in found]
            overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            if overflow > 0:
                problems.append(f"{label}: the page is {overflow} px wider than the screen")
    return problems


@pytest.fixture
def twin(browser, feather_server):
    made = NoScriptTwin(browser, feather_server.url)
    yield made
    made.close()


@pytest.mark.parametrize("js", [False, True], ids=["nojs", "js"])
def test_every_signed_out_page_passes_axe_and_fits_a_phone(request, twin, js):
    page = request.getfixturevalue("page_js" if js else "page_nojs")
    problems = []
    for name, path in SIGNED_OUT.items():
        response = page.goto(path)
        assert response.status in (200, 401, 404), (path, response.status)
        assert_footer(page)
        problems += look_at(page, name, js, twin)
    assert problems == []


@pytest.mark.parametrize("js", [False, True], ids=["nojs", "js"])
def test_every_signed_in_page_passes_axe_and_fits_a_phone(request, pds, twin, js):
    page = request.getfixturevalue("page_js" if js else "page_nojs")
    handle = pds.accounts["carol"].handle
    sign_in_with_app_password(page, pds, "carol")
    problems = []
    for name, path in SIGNED_IN.items():
        response = page.goto(path.format(handle=handle))
        assert response.status == 200, (path, response.status)
        problems += look_at(page, name, js, twin)
    assert problems == []


def test_the_navigation_leads_everywhere_without_javascript(page_nojs, pds):
    page = page_nojs
    page.set_viewport_size({"width": 390, "height": 800})
    page.goto("/")
    nav = page.get_by_role("navigation", name="Main")
    assert [a.inner_text() for a in nav.get_by_role("link").all()] == ["Home", "Timeline", "Sync", "Privacy"]
    with page.expect_navigation():
        nav.get_by_role("link", name="Sync").click()
    assert page.url.endswith("/sync")
    assert nav.get_by_role("link", name="Sync").get_attribute("aria-current") == "page"
    with page.expect_navigation():
        page.locator("header.site").get_by_role("link", name="Sign in").click()
    assert page.url.endswith("/login?next=/sync")
    acct = pds.accounts["bob"]
    from tests.browser.helpers import app_password

    page.fill("#pw-identifier", acct.handle)
    page.fill("#password", app_password(pds, "bob"))
    with page.expect_navigation():
        page.get_by_role("button", name="Sign in with an app password").click()
    assert page.url.endswith("/sync")  # back where the person was
    with page.expect_navigation():
        page.locator("header.site .account").click()
    assert page.url.endswith(f"/u/{acct.handle}")
    assert page.get_by_role("heading", level=1).inner_text() == f"@{acct.handle}"


def test_the_skip_link_is_the_first_stop_and_lands_on_the_content(page_nojs):
    page = page_nojs
    page.goto("/about")
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.textContent")
    assert focused == "Skip to the content"
    assert page.locator(".skip-link").bounding_box()["y"] >= 0  # shown while focused
    page.keyboard.press("Enter")
    page.wait_for_url("**/about#content")  # a same-page jump: the URL updates after the key event
    assert page.evaluate("document.activeElement.id") == "content"


def test_form_controls_are_16px_and_dark_mode_changes_the_colours(page_nojs):
    page = page_nojs
    page.goto("/network/opt-out")
    assert page.evaluate("getComputedStyle(document.querySelector('#handle')).fontSize") == "16px"
    assert page.evaluate("getComputedStyle(document.querySelector('button[type=submit]')).fontSize") == "16px"
    page.emulate_media(color_scheme="light")
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert (light, dark) == ("rgb(255, 255, 255)", "rgb(20, 23, 29)")


def test_a_wrong_opt_out_is_tied_to_its_field(page_nojs, pds):
    page = page_nojs
    page.goto("/network/opt-out")
    page.fill("#handle", "did:plc:not valid")
    with page.expect_navigation() as nav:
        page.get_by_role("button", name="Opt out").click()
    assert nav.value.status == 400
    field = page.locator("#handle")
    assert field.get_attribute("aria-invalid") == "true"
    described = page.locator("#" + field.get_attribute("aria-describedby")).inner_text()
    assert described == "did:plc:not valid is not a valid DID, so nothing was changed. A DID looks like did:plc:abc123."
    assert field.input_value() == "did:plc:not valid"
