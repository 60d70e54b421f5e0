"""Scripted OAuth consent on the reference PDS: what a person does in the browser, done by HTTP.

The provider's pages call a small JSON API (`/@atproto/oauth-provider/~api/…`) guarded by a
double-submit CSRF cookie and Fetch-metadata/Origin checks. This drives that API for the PDS
version pinned in tests/pds (oauth-provider of @atproto/pds 0.4.217); it may change with upgrades.
Cookies are carried by hand: the provider marks them Secure, which a cookie jar would not send
over http.
"""
from __future__ import annotations

from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

import requests

API = "/@atproto/oauth-provider/~api"


class ConsentError(AssertionError):
    pass


def _cookies(resp: requests.Response, jar: dict[str, str]) -> None:
    for raw in resp.raw.headers.getlist("Set-Cookie") if hasattr(resp.raw.headers, "getlist") else []:
        parsed = SimpleCookie()
        parsed.load(raw)
        for name, morsel in parsed.items():
            jar[name] = morsel.value


def approve(authorize_url: str, username: str, password: str, scope: str | None = None) -> dict[str, str]:
    """Sign in and consent at authorize_url; returns the callback query (code, state, iss)."""
    jar: dict[str, str] = {}
    page = requests.get(authorize_url, timeout=15, allow_redirects=False, headers={
        "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document", "Sec-Fetch-Site": "none",
        "Accept": "text/html"})
    if page.status_code != 200:
        raise ConsentError(f"authorize page answered {page.status_code}: {page.text[:300]}")
    _cookies(page, jar)
    if "csrf-token" not in jar:
        raise ConsentError(f"no csrf-token cookie on the authorize page (got {sorted(jar)})")

    return consent_with_cookies(authorize_url, jar, username, password, scope)


def consent_with_cookies(authorize_url: str, jar: dict[str, str], username: str, password: str,
                         scope: str | None = None) -> dict[str, str]:
    """Sign in and consent through the provider's API, carrying the PDS cookies in jar (updated
    in place); returns the callback query (code, state, iss)."""
    parts = urlsplit(authorize_url)
    origin = f"{parts.scheme}://{parts.netloc}"

    def post(path: str, body: dict) -> dict:
        resp = requests.post(f"{origin}{API}/{path}", json=body, timeout=30, headers={
            "Origin": origin, "Referer": authorize_url, "Sec-Fetch-Mode": "same-origin",
            "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Dest": "empty", "x-csrf-token": jar["csrf-token"],
            "Cookie": "; ".join(f"{k}={v}" for k, v in jar.items())})
        _cookies(resp, jar)
        if resp.status_code != 200:
            raise ConsentError(f"{path} answered {resp.status_code}: {resp.text[:500]}")
        return resp.json()

    signed_in = post("sign-in", {"locale": "en", "username": username, "password": password, "remember": True})
    body = {"sub": signed_in["account"]["sub"]}
    if scope is not None:
        body["scope"] = scope
    answer = post("consent", body)
    query = parse_qs(urlsplit(answer["url"]).query)
    return {k: v[0] for k, v in query.items()}
