"""The JSON API for scripts: the same operations as the owner's page, one contract (docs/api.md, "Graph sync").

    GET  /api/sync                   the state (service.state; the explaining part from status.overview)
    POST /api/sync                   {"enabled": bool, "paused": bool, "apps": [keys]}, any of them -> new state
    GET  /api/sync/preview?apps=a,b  what enabling would write (preview.compute); writes nothing
    GET  /api/sync/activity?limit=n  the newest activity rows

Every call needs a signed-in session (cookie from POST /api/session or the web sign-in); POST also needs
the X-CSRF-Token header (value from GET /api/session). Errors are {"error", "message"}: 400 for a bad
request (naming what is wrong), 401 signed out, 403 a write permission not granted yet, 404 sync not
offered here. CSRF is checked by hand after the session so a signed-out script is told 401, not 400.
"""
from __future__ import annotations

from flask import Blueprint, current_app, g, jsonify, request

from feather import sql
from feather.auth import current_account, has_scopes
from feather.errors import ApiError
from feather.parsing import ascii_int
from feather.security import csrf
from feather.sync import apps as registry
from feather.sync import preview, service, status
from feather.sync.follow_writer import PdsError, app_writer
from feather.sync.store import get_set

bp = Blueprint("sync_api", __name__, url_prefix="/api/sync")
csrf.exempt(bp)

FIELDS = ("enabled", "paused", "apps")
ACTIVITY_MAX = 200


def _settings():
    return current_app.config["FEATHER"]


@bp.before_request
def _guard():
    if len(registry.offered(_settings())) < 2:
        raise ApiError(404, "NotFound", "Graph sync is not offered on this instance.")
    account = current_account()
    if account is None:
        raise ApiError(401, "AuthenticationRequired",
                       "Sign in first: POST /api/session with an app password, or sign in on the web.")
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        csrf.protect()  # CSRFError -> 400 InvalidCsrfToken, like /api/session
    g.sync_owner = account.did


@bp.get("")
def get_state():
    return jsonify(service.state(g.sync_owner, _settings()))


def _body() -> dict:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ApiError(400, "InvalidRequest", 'Send a JSON object with any of "enabled", "paused" and "apps".')
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise ApiError(400, "InvalidRequest", f"Unknown field {unknown[0]!r}; send any of enabled, paused, apps.")
    for name in ("enabled", "paused"):
        if name in body and not isinstance(body[name], bool):
            raise ApiError(400, "InvalidRequest", f'"{name}" must be true or false.')
    if "apps" in body and not (isinstance(body["apps"], list) and all(isinstance(k, str) for k in body["apps"])):
        raise ApiError(400, "InvalidRequest", '"apps" must be a list of app keys.')
    return body


@bp.post("")
def post_state():
    body, owner, settings = _body(), g.sync_owner, _settings()
    change = {k: body.get(k) for k in FIELDS}
    try:
        scopes = service.check_change(owner, settings, **change)
    except ValueError as exc:
        raise ApiError(400, "InvalidRequest", str(exc)) from None
    if scopes and not has_scopes(owner, scopes):
        # A script cannot click through OAuth: the owner grants it once on the web page.
        raise ApiError(403, "ConsentRequired",
                       "Sync needs permission to create and delete follow records on the chosen apps. Sign in on "
                       "the web and turn sync on from your page once; scripts can use it after that.")
    try:
        return jsonify(service.configure(owner, settings, sql.now_s(), **change))
    except ValueError as exc:
        raise ApiError(400, "InvalidRequest", str(exc)) from None


def parse_apps(values: list[str]) -> list[str]:
    """?apps=a,b or ?apps=a&apps=b -> registry keys; ValueError names an unknown key."""
    return [k.strip() for v in values for k in v.split(",") if k.strip()]


@bp.get("/preview")
def get_preview():
    settings = _settings()
    keys = parse_apps(request.args.getlist("apps"))
    if not keys:
        current = get_set(g.sync_owner)
        keys = list(current.apps) if current else []
    try:
        keys = registry.normalize_keys(keys, settings)
    except ValueError as exc:
        raise ApiError(400, "InvalidRequest", str(exc)) from None
    if len(keys) < 2:
        raise ApiError(400, "InvalidRequest", "Name at least two apps: ?apps=bluesky,tangled")
    reader = app_writer(current_app)
    if reader is None:
        raise ApiError(503, "ServiceUnavailable", "Sync cannot read from PDSes on this instance right now.")
    try:
        result = preview.compute(g.sync_owner, keys, settings, reader)
    except PdsError as exc:
        raise ApiError(502, "UpstreamFailure", f"Your PDS did not answer the listing: {exc}") from None
    status.remember_following(g.sync_owner, result, sql.now_s())  # the "of about N" of the listing to come
    return jsonify(result)


@bp.get("/activity")
def get_activity():
    limit = ascii_int(request.args.get("limit", "50"))  # "²".isdigit() is True, int("²") raises
    if limit is None or not 1 <= limit <= ACTIVITY_MAX:
        raise ApiError(400, "InvalidRequest", f"limit must be a whole number from 1 to {ACTIVITY_MAX}.")
    return jsonify({"activity": service.activity(g.sync_owner, limit)})
