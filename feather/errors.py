"""Errors as HTML for browsers and as XRPC JSON under /xrpc/ and /api/; never a stack trace."""
from __future__ import annotations

import logging

from flask import jsonify, render_template, request
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException, InternalServerError

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


class ApiError(Exception):
    """Raised by JSON routes for a client-facing error with a stable name."""

    def __init__(self, status: int, error: str, message: str):
        super().__init__(message)
        self.status, self.error, self.message = status, error, message


def wants_json() -> bool:
    return request.path.startswith(_JSON_PREFIXES)


def error_response(status: int, message: str, error: str | None = None):
    if wants_json():
        response = jsonify({"error": error or _NAMES.get(status, "Error"), "message": message})
        response.status_code = status
        return response
    return render_template("error.html", status=status, message=message), status


def init_app(app) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return error_response(exc.status, exc.message, exc.error)

    @app.errorhandler(CSRFError)
    def _csrf(exc: CSRFError):
        return error_response(400, "The form expired or was not sent from this site. Reload the page and try again.",
                              "InvalidCsrfToken")

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        return error_response(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        if isinstance(exc, HTTPException):  # pragma: no cover - routed above
            return _http(exc)
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "Something went wrong on our side. It has been logged.")
