"""Errors as HTML for browsers and as XRPC JSON under /xrpc/ and /api/; never a stack trace.

Browsers get a page in the house style with a sentence and somewhere to go next; scripts get
`{"error", "message"}` whose message says what to send instead. An expired form token re-renders
the form the person was filling in (a feature registers how, `form_retry`), so nothing typed is lost.
"""
from __future__ import annotations

import logging
from typing import Callable

from flask import current_app, flash, jsonify, render_template, request, session
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.routing import RequestRedirect

log = logging.getLogger(__name__)

_JSON_PREFIXES = ("/xrpc/", "/api/", "/admin/dev/")

# XRPC error names for the statuses we produce; the body's `error` field.
_NAMES = {
    400: "InvalidRequest",
    401: "AuthenticationRequired",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "PayloadTooLarge",
    429: "RateLimitExceeded",
    500: "InternalServerError",
    503: "ServiceUnavailable",
}

# Page titles for people; werkzeug's own wording ("The requested URL was not found on the server. If
# you entered the URL manually…") is replaced by ours whenever a view did not give its own sentence.
TITLES = {400: "That request did not work", 401: "Please sign in", 403: "Not yours to open",
          404: "Page not found", 405: "Not something this page does", 413: "That was too large",
          429: "Slow down a little", 500: "Something went wrong", 503: "Not available right now"}
_FRIENDLY = {
    404: "There is nothing at this address. It may have been mistyped, or what was here has gone.",
    405: "This address exists, but not for what your browser asked. If you pressed a button, go back "
         "and load the page again.",
    403: "This page belongs to someone else, or to the people who run this server.",
}
_SCRIPT = {
    404: "No such endpoint or resource. Check the path against the API reference, docs/api.md in Feather's source.",
    405: "This endpoint does not accept {method}. Allowed: {allowed}.",
}
CSRF_PAGE = "This form had expired, so nothing was sent. Check it and send it again."
CSRF_SCRIPT = ("Missing or invalid CSRF token. Send the header X-CSRF-Token with the csrfToken from "
               "GET /api/session (with the same session cookie).")


class ApiError(Exception):
    """Raised by JSON routes for a client-facing error with a stable name."""

    def __init__(self, status: int, error: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.error, self.message = status, error, message
        self.headers = headers or {}  # e.g. Retry-After on a 429


def wants_json() -> bool:
    return request.path.startswith(_JSON_PREFIXES)


def error_response(status: int, message: str, error: str | None = None):
    if wants_json():
        response = jsonify({"error": error or _NAMES.get(status, "Error"), "message": message})
        response.status_code = status
        return response
    return render_template("error.html", status=status, title=TITLES.get(status, "Something went wrong"),
                           message=message), status


def form_retry(app, endpoint: str, rerender: Callable[[str], object]) -> None:
    """Register how to show `endpoint`'s form again after its token expired: rerender(sentence) reads
    what was typed from request.form and returns the response (the page with the sentence on it)."""
    app.extensions.setdefault("form_retry", {})[endpoint] = rerender


def _default_description(exc: HTTPException) -> bool:
    return not exc.description or exc.description == type(exc).description


def _http_message(exc: HTTPException) -> str:
    code = exc.code or 500
    if not _default_description(exc):
        return exc.description
    if wants_json():
        if isinstance(exc, MethodNotAllowed):
            allowed = ", ".join(sorted(m for m in (exc.valid_methods or []) if m not in ("HEAD", "OPTIONS")))
            return _SCRIPT[405].format(method=request.method, allowed=allowed or "none")
        return _SCRIPT.get(code, exc.name)
    return _FRIENDLY.get(code, exc.description or exc.name)


def _csrf_expired():
    if wants_json():
        return error_response(400, CSRF_SCRIPT, "InvalidCsrfToken")
    rerender = current_app.extensions.get("form_retry", {}).get(request.endpoint)
    if rerender is not None:
        return rerender(CSRF_PAGE)
    # A form of buttons only (nothing typed to keep): the page it sits on, as a GET of the same address
    # would show it (with a fresh token), the sentence on top, still answered 400: nothing was done.
    page = _get_view(request.path)
    if page is not None:
        flash(CSRF_PAGE, "error")
        try:
            response = current_app.make_response(page())
        except HTTPException:  # that page is not this person's either: the plain answer below
            response = None
        if response is not None and response.status_code == 200:
            response.status_code = 400
            return response
        session.pop("_flashes", None)  # the page would not have shown it
    return error_response(400, CSRF_PAGE, "InvalidCsrfToken")


def _get_view(path: str):
    adapter = current_app.url_map.bind("localhost")
    try:
        endpoint, args = adapter.match(path, method="GET")
    except (RequestRedirect, HTTPException):
        return None
    if endpoint == request.endpoint:
        # One function serving GET and POST would see this POST's method and form and act on them:
        # such forms register a form_retry instead, or get the plain answer.
        return None
    view = current_app.view_functions[endpoint]
    return lambda: view(**args)


def init_app(app) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        response = current_app.make_response(error_response(exc.status, exc.message, exc.error))
        response.headers.update(exc.headers)
        return response

    @app.errorhandler(CSRFError)
    def _csrf(exc: CSRFError):
        return _csrf_expired()

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        response = error_response(exc.code or 500, _http_message(exc))
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
            response = current_app.make_response(response)
            response.headers["Allow"] = ", ".join(exc.valid_methods)
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        if isinstance(exc, HTTPException):  # pragma: no cover - routed above
            return _http(exc)
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "Something went wrong on our side. It has been logged.")

