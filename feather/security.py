"""CSRF on every POST form, the response headers every page carries, and JSON bodies with a depth limit."""
from __future__ import annotations

from flask import g, request, session
from flask.json.provider import DefaultJSONProvider
from flask_wtf.csrf import CSRFProtect
from htmx_flask import Htmx
from werkzeug.exceptions import BadRequest

from feather.parsing import MAX_JSON_DEPTH, json_depth_ok

csrf = CSRFProtect()

# No inline script anywhere: htmx is loaded from /static and configured by a <meta> tag.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)


class DepthLimitedJSON(DefaultJSONProvider):
    """request.get_json() through here: a deeply nested body is a 400 before it is decoded.

    json.loads recurses once per level, so `[[[[…` a megabyte deep is a RecursionError (a logged 500)
    that costs more than any handler's own checks. BadRequest, not ValueError: get_json(silent=True)
    swallows ValueErrors into None, and the caller deserves the precise reason.
    """

    def loads(self, s, **kwargs):
        if not json_depth_ok(s):
            raise BadRequest(f"JSON nested deeper than {MAX_JSON_DEPTH} levels is refused.")
        return super().loads(s, **kwargs)


def _private_when_signed_in(response) -> None:
    """A page rendered for a signed-in account (its timeline, its sync settings) is no one else's
    and should not outlive the visit: no shared cache keeps it, and the browser does not show it
    from its cache after sign-out. A view that chose its own policy keeps it (the public
    catalogue, checked below)."""
    if "Cache-Control" not in response.headers and g.get("auth_account") is not None:
        response.headers["Cache-Control"] = "private, no-store"


def _no_public_cache_for_personal(response) -> None:
    """A view may mark its page `public` (a shared cache keeps one copy for everyone) only when every
    visitor would get it byte for byte. A request with any cookie may be answered with a handle, a
    flash or a CSRF token, and a response that sets a cookie carries that visitor's session: both
    become `private, no-store`, whatever the view said. `Vary: Cookie` keeps a cache that stored the
    anonymous copy from handing it to a signed-in visitor."""
    if "public" not in response.headers.get("Cache-Control", ""):
        return
    carries_session = session.modified or session or response.headers.get("Set-Cookie")
    if g.get("same_for_everyone") and not carries_session:
        return  # rendered with the session swapped for an empty one (network.views): alike for all
    if request.cookies or carries_session:
        response.headers["Cache-Control"] = "private, no-store"
    else:
        response.vary.add("Cookie")


def init_app(app) -> None:
    app.json = DepthLimitedJSON(app)
    csrf.init_app(app)
    Htmx(app)
    hsts = app.config["FEATHER"].is_production

    @app.after_request
    def _headers(response):
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("X-Frame-Options", "DENY")
        _private_when_signed_in(response)
        _no_public_cache_for_personal(response)
        if hsts:
            # Production is https only (FEATHERREADER_PUBLIC_URL, secure cookies): tell browsers never
            # to try plain http, where the first request could be rewritten on the way.
            response.headers.setdefault("Strict-Transport-Security", "max-age=31536000")
        return response
