"""The pages: public /sync, the owner's /u/{handle} (minimal: who they are, then feature panels) and
/u/{handle}/social-graph-sync, where the owner chooses apps, previews, enables, pauses, resumes, disables.

Everything works without JavaScript: state changes are plain POSTs answered with a 303 back to the
page (messages travel as flashes), and the preview is a GET form. htmx only re-fetches the progress
fragment in place while a backfill or queue is moving. Turning sync on goes preview -> confirm, so no
follow is written before the owner has seen what will be written; when the write permission is not
granted yet the confirm goes through feather/auth's consent page first (incremental consent).
Turning it off goes through a confirmation page: a disable POST without confirm=1 is sent there.
What the progress says (records listed, the next write and why it waits, failures, names instead
of DIDs) is computed in feather/sync/status.py, the same for the page and GET /api/sync.
"""
from __future__ import annotations

import time
from urllib.parse import urlencode

from flask import Blueprint, abort, current_app, flash, redirect, render_template, request, url_for

from feather import sql
from feather.auth import consent_url, current_account, has_scopes, known_account, login_required
from feather.sync import apps as registry
from feather.sync import preview, service, status
from feather.sync.api import parse_apps
from feather.sync.follow_writer import PdsError, app_writer
from feather.sync.store import get_set

bp = Blueprint("sync", __name__)

WHY = ("Graph sync creates and deletes follow records on the apps you chose, so Feather needs your "
       "permission to write those records.")
ACTIONS = ("enable", "pause", "resume", "disable")


def _settings():
    return current_app.config["FEATHER"]


def _offered() -> list[registry.App]:
    return registry.offered(_settings())


def _owner(handle: str):
    """The signed-in account when the page is theirs; 404 when sync is not offered, 403 for others.
    Only called under login_required, so there is an account."""
    if len(_offered()) < 2:
        abort(404, "Graph sync is not offered on this instance.")
    account = current_account()
    if handle not in (account.handle, account.did):
        abort(403, "This is someone else's page. You can only manage your own graph sync.")
    return account


def _page_url(account) -> str:
    return url_for("sync.manage", handle=account.handle or account.did)


def format_time(at) -> str:
    """"14:05 UTC" today, with the date otherwise (status.clock)."""
    return status.clock(int(at), sql.now_s()) if at else ""


@bp.app_template_filter("sync_time")
def _sync_time(at) -> str:
    return format_time(at)


@bp.app_template_filter("sync_count")
def _sync_count(n, word: str) -> str:
    return status.plural(int(n or 0), word)


@bp.app_template_filter("sync_iso")
def _sync_iso(at) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(at))) if at else ""


@bp.get("/sync")
def public():
    account = current_account()
    return render_template("sync/public.html", apps=_offered(), settings=_settings(),
                           manage_url=_page_url(account) if account else None)


@bp.get("/u/<handle>")
def user(handle: str):
    account = current_account()
    own = account is not None and handle in (account.handle, account.did)
    if not own and known_account(handle) is None:
        # Only people who signed in here have a page; anyone else would be a page about a stranger.
        abort(404, f"Nobody called {handle} uses this Feather server.")
    sync_set = get_set(account.did) if own else None
    return render_template("users/show.html", handle=handle, account=account if own else None,
                           sync_available=len(_offered()) >= 2, sync_set=sync_set,
                           sync_apps=status.app_names(sync_set.apps) if sync_set else "",
                           pause_words=status.pause_words(sync_set.pause_reason) if sync_set else "",
                           sync_url=_page_url(account) if own else None)


@bp.get("/u/<handle>/social-graph-sync")
@login_required
def manage(handle: str):
    account = _owner(handle)
    state = service.state(account.did, _settings())
    return render_template("sync/manage.html", account=account, state=state, apps=_offered(),
                           chosen=set(state["apps"]) or {a.key for a in _offered()[:2]},
                           activity=service.activity(account.did, 50), page_url=_page_url(account),
                           app_names=status.app_names(state["apps"]), pause_words=status.pause_words(state["pause_reason"]))


@bp.get("/u/<handle>/social-graph-sync/turn-off")
@login_required
def turn_off(handle: str):
    """The confirmation page "Turn sync off" leads to (with or without JavaScript)."""
    account = _owner(handle)
    state = service.state(account.did, _settings())
    if not state["enabled"]:
        flash("Sync is already off.", "info")
        return redirect(_page_url(account), 303)
    return render_template("sync/turn_off.html", account=account, state=state, page_url=_page_url(account),
                           app_names=status.app_names(state["apps"]))


@bp.get("/u/<handle>/social-graph-sync/progress")
@login_required
def progress(handle: str):
    account = _owner(handle)
    return render_template("sync/_progress.html", state=service.state(account.did, _settings()),
                           page_url=_page_url(account))


@bp.get("/u/<handle>/social-graph-sync/preview")
@login_required
def preview_page(handle: str):
    account = _owner(handle)
    settings = _settings()
    try:
        keys = registry.normalize_keys(parse_apps(request.args.getlist("apps")), settings)
    except ValueError as exc:
        flash(str(exc), "error")
        return redirect(_page_url(account), 303)
    if len(keys) < 2:
        flash("Choose at least two apps to keep in sync.", "error")
        return redirect(_page_url(account), 303)
    result, error, reader = None, None, app_writer(current_app)
    if reader is None:
        error = "This instance cannot read follow records right now, so there is no preview."
    else:
        try:
            result = preview.compute(account.did, keys, settings, reader)
            status.remember_following(account.did, result, sql.now_s())
        except PdsError as exc:
            error = f"Your follows could not be read right now ({exc}). Try again in a minute."
    scopes = service.write_scopes(keys)
    return render_template("sync/preview.html", account=account, keys=keys, result=result, error=error,
                           apps={a.key: a for a in registry.APPS}, page_url=_page_url(account),
                           needs_consent=not has_scopes(account.did, scopes), state=service.state(account.did, settings))


@bp.post("/u/<handle>/social-graph-sync")
@login_required
def act(handle: str):
    account = _owner(handle)
    action = request.form.get("action", "")
    if action not in ACTIONS:
        abort(400, f"Unknown action {action!r}; the page sends one of {', '.join(ACTIONS)}.")
    change: dict = {}
    if action == "enable":
        keys = request.form.getlist("apps")
        if request.form.get("confirm") != "1":  # nothing is written before the preview is confirmed
            return redirect(url_for("sync.preview_page", handle=handle) + "?" + urlencode({"apps": ",".join(keys)}),
                            303)
        change = {"apps": keys, "enabled": True}
        back = url_for("sync.preview_page", handle=handle) + "?" + urlencode({"apps": ",".join(keys)})
    elif action == "disable" and request.form.get("confirm") != "1":  # asked first, on a page of its own
        return redirect(url_for("sync.turn_off", handle=handle), 303)
    else:
        change = {"pause": {"paused": True}, "resume": {"paused": False}, "disable": {"enabled": False}}[action]
        back = _page_url(account)
    try:
        scopes = service.check_change(account.did, _settings(), **change)
        if scopes and not has_scopes(account.did, scopes):
            return redirect(consent_url(scopes, back, WHY), 303)
        service.configure(account.did, _settings(), sql.now_s(), **change)
    except ValueError as exc:
        flash(str(exc), "error")
        return redirect(_page_url(account), 303)
    flash({"enable": "Sync is on. Your follows are being listed; the progress is below.",
           "pause": "Sync is paused. Follows and unfollows keep queuing and are written when you resume.",
           "resume": "Sync resumed: queued changes are being written.",
           "disable": "Sync is off. Nothing more will be written; nothing already written was undone."}[action],
          "info")
    return redirect(_page_url(account), 303)
