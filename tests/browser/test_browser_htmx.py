"""With JavaScript on: htmx comes from /static/vendor/htmx.min.js, runs under the CSP, and nothing logs an error."""
from __future__ import annotations

import pytest

from tests.browser.helpers import assert_clean_console, assert_footer, sign_in_with_app_password

pytestmark = [pytest.mark.browser, pytest.mark.pds, pytest.mark.slow, pytest.mark.once]

PAGES = ["/", "/about", "/privacy", "/terms", "/login", "/network", "/network/opt-out", "/sync"]


@pytest.mark.parametrize("path", PAGES)
def test_htmx_loads_from_static_under_the_csp(page_js, path):
    loaded = []
    page_js.on("response", lambda r: loaded.append((r.url, r.status)) if "htmx" in r.url else None)
    response = page_js.goto(path)
    assert response.status == 200
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page_js.wait_for_function("() => typeof window.htmx === 'object' && !!window.htmx.version")
    assert [(u.split("/", 3)[-1], s) for u, s in loaded] == [("static/vendor/htmx.min.js", 200)]
    # the config <meta> was read: htmx injects no inline style (which the CSP would refuse)
    assert page_js.evaluate("() => htmx.config.includeIndicatorStyles") is False
    assert page_js.evaluate("() => htmx.config.allowEval") is False
    assert_footer(page_js)
    assert_clean_console(page_js)
    assert page_js.evaluate("() => window.__csp || []") == []


def test_forms_work_the_same_with_javascript_on(page_js, pds):
    sign_in_with_app_password(page_js, pds, "alice", next_url="/about")
    assert page_js.url.endswith("/about")
    with page_js.expect_navigation():
        page_js.get_by_role("button", name="Sign out").click()
    assert page_js.locator("header.site").get_by_role("link", name="Sign in").is_visible()
    assert_clean_console(page_js)
