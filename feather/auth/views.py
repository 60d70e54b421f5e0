"""Routes: /login, /login/password, /oauth/callback, /logout, /oauth/consent, client metadata, /api/session.

Every page works without JavaScript and every form carries the CSRF token (flask-wtf checks all
POSTs; JSON callers send X-CSRF-Token). Errors are re-rendered forms with one plain sentence.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from flask import Blueprint, current_app, jsonify, redirect, render_template, request, session, url_for
from flask_wtf.csrf import generate_csrf

from feather.addresses import client_key
from feather.auth.dpop import public_jwks
from feather.auth.service import SignInError
from feather.auth.web import current_account, end_session, over_rate_limit, start_session
from feather.errors import ApiError
from feather.security import CSP

bp = Blueprint("auth", __name__)

TOO_MANY = "Too many sign-in attempts from your address. Please wait a few minutes and try again."


def _service():
    return current_app.extensions["auth"]


def _settings():
    return current_app.config["FEATHER"]


def safe_next(value: str | None) -> str:
    """Only same-site paths: `next` must never send someone to another site after sign-in.

    Judged as the browser will read the Location header: URL parsers drop TAB, CR and LF anywhere
    (`/<TAB>/evil` is `//evil`) and treat `\\` as `/`, so any control character or backslash is
    refused outright, and what is left must parse as a path with no scheme and no host.
    """
    home = url_for("pages.index")
    if not isinstance(value, str) or not value.startswith("/") or "\\" in value:
        return home
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value):
        return home
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or value.startswith("//"):
        return home
    return value


def _page(template: str, status: int = 200, **context):
    """Render an auth page. Its forms' POSTs answer with a redirect to the user's sign-in server, and
    browsers check form-action against every hop, so these pages allow https form targets."""
    context.setdefault("allow_app_passwords", _settings().featherreader_allow_app_passwords)
    context.setdefault("account", current_account())
    response = current_app.make_response((render_template(template, **context), status))
    targets = "'self' https:" + (" http:" if _settings().featherreader_allow_private_network else "")
    response.headers["Content-Security-Policy"] = CSP.replace("form-action 'self'", f"form-action {targets}")
    return response


def _rate_limited() -> bool:
    # By /64 for IPv6 (feather/addresses.py): one client can hold every address in its /64.
    return over_rate_limit(f"login:{client_key(request.remote_addr)}", _settings().featherreader_login_rate_limit)


@bp.get("/login")
def login_form():
    account = current_account()
    return _page("auth/login.html", next=safe_next(request.args.get("next")),
                 identifier=(account.handle or account.did) if account and account.needs_reauth else "",
                 notice=account.message if account and account.needs_reauth else None)


@bp.post("/login")
def login():
    identifier = request.form.get("identifier", "").strip()
    next_url = safe_next(request.form.get("next"))
    if _rate_limited():
        return _page("auth/login.html", 429, error=TOO_MANY, identifier=identifier, next=next_url)
    if not identifier:
        return _page("auth/login.html", 400, error="Enter your handle (like alice.bsky.social) or your "
                     "server's address.", identifier=identifier, next=next_url)
    try:
        target, state = _service().start_oauth(identifier, next_url=next_url)
    except SignInError as e:
        return _page("auth/login.html", 400, error=str(e), identifier=identifier, next=next_url)
    _remember_state(state)
    return redirect(target, 303)


@bp.post("/login/password")
def login_password():
    if not _settings().featherreader_allow_app_passwords:
        raise ApiError(404, "NotFound", "App-password sign-in is turned off on this server.")
    identifier = request.form.get("identifier", "").strip()
    next_url = safe_next(request.form.get("next"))
    if _rate_limited():
        return _page("auth/login.html", 429, error=TOO_MANY, identifier=identifier, next=next_url, form="password")
    try:
        did = _service().sign_in_password(identifier, request.form.get("password", ""))
    except SignInError as e:
        return _page("auth/login.html", 400, error=str(e), identifier=identifier, next=next_url, form="password")
    start_session(did)
    return redirect(next_url, 303)


# OAuth `state`s this browser started, in its signed session cookie. A callback is accepted only
# with one of them, once: otherwise an attacker's own callback URL, opened in someone else's
# browser, would sign that browser into the attacker's account (login CSRF).
_PENDING = "oauth_states"
_MAX_PENDING = 5  # a few tabs signing in at once; the oldest is forgotten first


def _remember_state(state: str) -> None:
    pending = [s for s in session.get(_PENDING, []) if s != state]
    session[_PENDING] = pending[-(_MAX_PENDING - 1):] + [state]


def _take_state(state: str) -> bool:
    pending = session.get(_PENDING, [])
    if not state or state not in pending:
        return False
    session[_PENDING] = [s for s in pending if s != state]
    return True


@bp.get("/oauth/callback")
def callback():
    if not _take_state(request.args.get("state") or ""):
        return _page("auth/login.html", 400, identifier="", next=safe_next(None),
                     error="This sign-in was not started in this browser, or was already used. Please start again.")
    try:
        did, next_url = _service().finish_oauth(request.args)
    except SignInError as e:
        return _page("auth/login.html", 400, error=str(e), identifier="", next=safe_next(None))
    start_session(did)
    return redirect(safe_next(next_url), 303)


@bp.post("/logout")
def logout():
    end_session()
    return redirect(url_for("pages.index"), 303)


@bp.get("/oauth/consent")
def consent_form():
    account = current_account()
    if account is None:
        return redirect(url_for("auth.login_form", next=request.full_path), 303)
    scopes = request.args.getlist("scope")
    return _page("auth/consent.html", scopes=scopes, next=safe_next(request.args.get("next")),
                 why=request.args.get("why", "")[:300])


@bp.post("/oauth/consent")
def consent():
    account = current_account()
    if account is None:
        return redirect(url_for("auth.login_form"), 303)
    scopes = tuple(request.form.getlist("scope"))
    try:
        target, state = _service().start_oauth(account.did, extra_scopes=scopes, expect_did=account.did,
                                               next_url=safe_next(request.form.get("next")))
    except (SignInError, ValueError) as e:
        return _page("auth/consent.html", 400, error=str(e), scopes=scopes, next=safe_next(None), why="")
    _remember_state(state)
    return redirect(target, 303)


def retry_sign_in(sentence: str):
    """A sign-in form again after its token expired (feather/errors.py): what was typed, one sentence.
    The password is never sent back to the browser; the person types it again."""
    form = "password" if request.endpoint == "auth.login_password" else "oauth"
    return _page("auth/login.html", 400, error=sentence, identifier=request.form.get("identifier", "").strip(),
                 next=safe_next(request.form.get("next")), form=form)


@bp.get("/oauth-client-metadata.json")
def client_metadata():
    return jsonify(_service().oauth.config.metadata())


@bp.get("/oauth/jwks.json")
def jwks():
    return jsonify(public_jwks(list(_service().oauth.config.keys)))


def _session_json(status: int = 200):
    account = current_account()
    body = {"csrfToken": generate_csrf(), "signedIn": account is not None,
            "appPasswords": _settings().featherreader_allow_app_passwords}
    if account is not None:
        body.update(did=account.did, handle=account.handle, needsReauth=account.needs_reauth)
        if account.message:
            body["message"] = account.message
    return jsonify(body), status


@bp.get("/api/session")
def api_session():
    return _session_json()


@bp.post("/api/session")
def api_sign_in():
    if not _settings().featherreader_allow_app_passwords:
        raise ApiError(403, "AppPasswordsDisabled", "App-password sign-in is turned off on this server.")
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or not isinstance(body.get("identifier"), str) \
            or not isinstance(body.get("password"), str):
        raise ApiError(400, "InvalidRequest", 'Send JSON {"identifier": "...", "password": "..."}.')
    if _rate_limited():
        raise ApiError(429, "RateLimitExceeded", TOO_MANY)
    try:
        did = _service().sign_in_password(body["identifier"], body["password"])
    except SignInError as e:
        raise ApiError(401, "AuthenticationFailed", str(e)) from None
    start_session(did)
    return _session_json()


@bp.delete("/api/session")
def api_sign_out():
    end_session()
    return _session_json()
