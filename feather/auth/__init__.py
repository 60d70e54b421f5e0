"""Sign-in with atproto OAuth (app passwords as an opt-in fallback), and acting for signed-in accounts.

For other features:
    from feather import auth
    auth.declare_scopes("repo:app.bsky.graph.follow?action=create&action=delete")   # in init_app
    auth.current_account()            -> Account(did, handle, needs_reauth, message) | None
    auth.known_account(handle_or_did) -> (did, handle) of an account that signed in here | None
    auth.login_required               view decorator (redirects to /login?next=…)
    auth.has_scopes(did, scopes)      -> bool: granted already?
    auth.consent_url(scopes, next, why) -> the page that asks the user for more scopes
    auth.pds_client(did)              -> feather.atproto.pds.PdsClient acting as did;
                                         raises auth.NeedsReauth (an AuthInvalid) when it cannot
    auth.is_admin(did)                -> bool: one of this instance's operators (FEATHERREADER_ADMIN_DIDS)
"""
from __future__ import annotations

import functools
import json
import time
from datetime import timedelta
from urllib.parse import urlencode

import click
from flask import current_app, flash, redirect, request, session, url_for

from feather import sql
from feather.atproto.identity import IdentityError
from feather.auth import personal
from feather.auth.dpop import new_key
from feather.auth.grants import NeedsReauth
from feather.auth.service import AuthService, SignInError, declare_scopes, forget_expired_requests
from feather.auth.views import bp, retry_sign_in
from feather.auth.web import Account, current_account, forget_expired, known_account
from feather.errors import error_response, form_retry
from feather.features import Job

__all__ = ["Account", "AuthService", "NeedsReauth", "SignInError", "consent_url", "current_account",
           "declare_scopes", "has_scopes", "is_admin", "known_account", "login_required", "pds_client",
           "service"]


def service(app=None) -> AuthService:
    return (app or current_app).extensions["auth"]


def pds_client(did: str, app=None):
    return service(app).pds_client(did)


def has_scopes(did: str, scopes, app=None) -> bool:
    return service(app).has_scopes(did, scopes)


def is_admin(did: str | None, app=None) -> bool:
    """Whether did is one of this instance's operators. The one place that decides it, so every
    operator-only page (publishing feed generators, /admin) asks the same question."""
    admins = (app or current_app).config["FEATHER"].featherreader_admin_dids
    return bool(did) and did in admins


def consent_url(scopes, next_url: str = "/", why: str = "") -> str:
    return url_for("auth.consent_form") + "?" + urlencode([("scope", s) for s in scopes]
                                                          + [("next", next_url), ("why", why)])


def login_required(view):
    @functools.wraps(view)
    def wrapped(*args, **kwargs):
        if current_account() is None:
            return redirect(url_for("auth.login_form", next=request.full_path.rstrip("?")), 303)
        return view(*args, **kwargs)

    return wrapped


def init_app(app) -> None:
    settings = app.config["FEATHER"]
    app.extensions["auth"] = AuthService(settings)
    app.extensions["auth"].sign_in_hooks = app.extensions.setdefault("sign_in_hooks", [])
    if settings.is_production:
        app.extensions["auth"].oauth  # noqa: B018 - fail at start, not at the first sign-in
    app.config["PERMANENT_SESSION_LIFETIME"] = timedelta(days=settings.featherreader_session_days)
    app.register_blueprint(bp)
    for endpoint in ("auth.login", "auth.login_password"):
        form_retry(app, endpoint, retry_sign_in)
    app.jinja_env.globals["auth_account"] = current_account
    app.cli.add_command(new_client_key)
    personal.register(app)

    @app.errorhandler(IdentityError)
    def _identity(exc: IdentityError):
        return error_response(400, str(exc), "UnresolvableIdentity")

    @app.before_request
    def _tell_about_reauth():
        # Once per dead grant (keyed by the message), on a page view: the flash shows on that page.
        if request.method != "GET" or request.path.startswith(("/api/", "/xrpc/", "/static/", "/login")):
            return
        if request.endpoint in ("health.health", "static"):
            return
        account = current_account()
        if account and account.needs_reauth and session.get("auth_told") != account.message:
            session["auth_told"] = account.message
            flash(account.message, "error")


@click.command("new-oauth-client-key")
def new_client_key() -> None:
    """Print a new ES256 private JWK for FEATHERREADER_OAUTH_CLIENT_KEYS (keep it secret)."""
    jwk = new_key().as_dict(private=True)
    jwk["kid"] = time.strftime("feather-%Y%m%d")
    click.echo(json.dumps({"keys": [jwk]}))


def cleanup() -> None:
    """Drop expired sign-in requests, browser sessions and rate buckets."""
    now = sql.now_s()
    forget_expired_requests(now)
    forget_expired(now)


def jobs(settings) -> list:
    return [Job("auth-cleanup", cleanup, 3600.0, jitter=60.0, first_run_delay=60.0)]
