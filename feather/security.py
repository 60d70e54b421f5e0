"""CSRF on every POST form, the response headers every page carries, and JSON bodies with a depth limit."""
from __future__ import annotations

from flask.json.provider import DefaultJSONProvider
from flask_wtf.csrf import CSRFProtect
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


def init_app(app) -> None:
    app.json = DepthLimitedJSON(app)
    csrf.init_app(app)
    from htmx_flask import Htmx

    Htmx(app)

    @app.after_request
    def _headers(response):
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("X-Frame-Options", "DENY")
        return response
