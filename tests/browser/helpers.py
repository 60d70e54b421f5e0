"""Small steps the browser tests share: sign-in, footer and console checks."""
from __future__ import annotations

import itertools

from feather.atproto.syntax import next_tid
from tests.support.browser import FOOTER_LINKS
from tests.support.pds import create_session, xrpc


def app_password(pds, name: str) -> str:
    made = xrpc(pds.pds_url, "POST", "com.atproto.server.createAppPassword", token=create_session(pds, name),
                json={"name": f"feather-browser-{next_tid()}"})
    assert made.status_code == 200, made.text
    return made.json()["password"]


def assert_footer(page) -> None:
    footer = page.locator("footer.site")
    for text, href in FOOTER_LINKS.items():
        link = footer.get_by_role("link", name=text, exact=True)
        assert link.count() == 1, f"footer link {text!r} missing on {page.url}"
        assert link.get_attribute("href") == href


def assert_clean_console(page, allow_status: int | None = None) -> None:
    """No console error, page error or CSP report. A page served with an error status on purpose
    (allow_status) makes Chromium log that status once; that line alone is allowed."""
    errors = [e for e in page.console_errors
              if not (allow_status and f"responded with a status of {allow_status}" in e)]
    assert errors == [], f"console errors on {page.url}: {errors}"


def sign_in_with_app_password(page, pds, name: str = "alice", next_url: str | None = None) -> None:
    acct = pds.accounts[name]
    page.goto("/login" + (f"?next={next_url}" if next_url else ""))
    page.fill("#pw-identifier", acct.handle)
    page.fill("#password", app_password(pds, name))
    with page.expect_navigation():
        page.get_by_role("button", name="Sign in with an app password").click()
    header = page.locator("header.site")
    assert header.locator(".account").inner_text() == f"@{acct.handle}", page.content()[:2000]


def consent_in_browser_session(context, authorize_url: str, username: str, password: str) -> dict[str, str]:
    """Sign in and consent on the PDS as the browser that is showing its authorize page.

    The provider binds the request to the browser (device cookies set by that page), so the scripted
    calls of tests/support/oauth_pds.py are made here with the browser's own PDS cookies. The pages
    themselves are a JavaScript app; its JSON API is what a person's clicks would call.
    """
    from urllib.parse import urlsplit

    from tests.support.oauth_pds import ConsentError, consent_with_cookies

    parts = urlsplit(authorize_url)
    origin = f"{parts.scheme}://{parts.netloc}"
    jar = {c["name"]: c["value"] for c in context.cookies(origin)}
    if "csrf-token" not in jar:
        raise ConsentError(f"the browser holds no csrf-token cookie for {origin} (got {sorted(jar)})")
    return consent_with_cookies(authorize_url, jar, username, password)


HEADINGS = "() => [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')].map(h => [+h.tagName[1], h.textContent.trim()])"


def heading_problems(page) -> list[str]:
    """The page's headings out of order: not exactly one h1, a heading before the h1, or a level
    skipped on the way down (h2 -> h4). Read from the DOM, so it works with JavaScript off too."""
    headings = page.evaluate(HEADINGS)
    where = page.url.split("/", 3)[-1]
    problems = []
    h1s = [text for level, text in headings if level == 1]
    if len(h1s) != 1:
        problems.append(f"/{where}: {len(h1s)} h1 headings {h1s}, not one")
    if headings and headings[0][0] != 1:
        problems.append(f"/{where}: the first heading is h{headings[0][0]} {headings[0][1]!r}, not the h1")
    for (before, _), (level, text) in itertools.pairwise(headings):
        if level > before + 1:
            problems.append(f"/{where}: h{level} {text!r} follows an h{before} (a level skipped)")
    return problems
