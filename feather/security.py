"""CSRF on every POST form, and the response headers every page carries."""
from __future__ import annotations

from flask_wtf.csrf import CSRFProtect

csrf = CSRFProtect()

# No inline script anywhere: htmx is loaded from /static and configured by a <meta> tag.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)


def init_app(app) -> None:
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
