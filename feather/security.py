"""CSRF on every POST form, the response headers every page carries, and JSON bodies with a depth limit."""
from __future__ import annotations

from flask import g, request, session
from flask.json.provider import DefaultJSONProvider
from flask.sessions import SecureCookieSessionInterface
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


class SessionCookies(SecureCookieSessionInterface):
    """Flask's signed session cookie, with its signing serializer built once per key instead of
    on every request (and itsdangerous then serializing a test value to learn its kind): that was
    a fifth of what a request cost the app before its view ran (bench/getfeed.py, issue 36)."""

    _built: tuple | None = None

    def get_signing_serializer(self, app):
        keys = (app.secret_key, tuple(app.config.get("SECRET_KEY_FALLBACKS") or ()))
        built = self._built
        if built is None or built[0] != keys:  # a changed key (a test's app, a rotation) builds anew
            built = self._built = (keys, super().get_signing_serializer(app))
        return built[1]

    def open_session(self, app, request):
        """No session for XRPC: its callers are apps and feed services that authenticate with a
        bearer token (service auth) and send no cookie, and no XRPC view reads or writes one.
        Reading it anyway (the cookie, the serializer) was a twentieth of a getFeed request."""
        if request.path.startswith(XRPC):
            return self.make_null_session(app)
        return super().open_session(app, request)


XRPC = "/xrpc/"


# What every response carries unless its view set the header itself.
STATIC_HEADERS = (("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
                  ("Referrer-Policy", "same-origin"), ("X-Frame-Options", "DENY"))
HSTS = ("Strict-Transport-Security", "max-age=31536000")


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

    app.session_interface = SessionCookies()
    # Production is https only (FEATHERREADER_PUBLIC_URL, secure cookies): tell browsers never to
    # try plain http, where the first request could be rewritten on the way.
    always = STATIC_HEADERS + ((HSTS,) if hsts else ())

    @app.after_request
    def _headers(response):
        headers = response.headers
        # One pass over the few headers the view set, not a case-folding search per default.
        present = {name.lower() for name, _ in headers.items()}
        for name, value in always:
            if name.lower() not in present:
                headers.add(name, value)
        _private_when_signed_in(response)
        _no_public_cache_for_personal(response)
        return response
