"""The core pages: home (a map when signed out, a small dashboard when signed in), about, privacy
(what is held about you, export, delete), terms; and the navigation every page shows.

The navigation's links are the same for every viewer (the network page, which must be identical
bytes for everyone, keeps them); who is signed in lives in base.html's `account` block.
"""
from __future__ import annotations

import json
import logging

from flask import Blueprint, current_app, flash, redirect, render_template, request, url_for

from feather import personal
from feather.auth.web import current_account, end_session

log = logging.getLogger(__name__)
bp = Blueprint("pages", __name__)


def _account():
    # Sign-in is optional wiring: without feather.auth loaded, nobody is signed in.
    return current_account() if "auth" in current_app.extensions else None


def nav_items() -> list[dict]:
    """The main navigation: only features this instance serves, in the order people use them."""
    # No link to /network here: the catalogue's design (docs/design.md, "Decisions") keeps the catalogue reachable only
    # from /about, so it never becomes a tab in the path people walk every day.
    views = current_app.view_functions
    items = [("Home", "pages.index")]
    if "timeline.page" in views:  # the timeline page arrives with its own feature branch
        items.append(("Timeline", "timeline.page"))
    if "sync.public" in views:
        items.append(("Sync", "sync.public"))
    items.append(("Privacy", "pages.privacy"))
    path = request.path
    # The owner's sync pages live under /u/<handle>/ but are the Sync feature's.
    section = (request.endpoint or "").split(".")[0]
    found = []
    for label, endpoint in items:
        href = url_for(endpoint)
        current = path == href or (href != "/" and path.startswith(href + "/")) or (
            endpoint == "sync.public" and section == "sync" and request.endpoint != "sync.user")
        found.append({"label": label, "href": href, "current": current})
    return found


@bp.app_context_processor
def _navigation():
    return {"nav_items": nav_items, "nav_endpoints": current_app.view_functions}


@bp.get("/")
def index():
    account = _account()
    if account is None:
        return render_template("index.html", account=None, panels=[])
    return render_template("index.html", account=account, panels=personal.panels(current_app, account))


@bp.get("/about")
def about():
    return render_template("about.html")


@bp.get("/privacy")
def privacy():
    account = _account()
    held = []
    if account is not None:
        held = [(h.title, h.describe(account.did)) for h in personal.holdings(current_app)]
    return render_template("privacy.html", account=account, held=held)


@bp.get("/privacy/export")
def export():
    account = _account()
    if account is None:
        return redirect(url_for("auth.login_form", next=request.path), 303)
    body = {"did": account.did, "handle": account.handle, **personal.export(current_app, account.did)}
    response = current_app.response_class(json.dumps(body, indent=2, ensure_ascii=False, default=str) + "\n",
                                          mimetype="application/json")
    response.headers["Content-Disposition"] = 'attachment; filename="feather-my-data.json"'
    response.headers["Cache-Control"] = "no-store"
    return response


def _confirm_delete(account, error: str | None = None, status: int = 200):
    held = [(h.title, h.describe(account.did)) for h in personal.holdings(current_app)]
    return render_template("privacy_delete.html", account=account, held=held, error=error), status


def retry_delete(sentence: str):
    """The confirmation again after its token expired (feather/errors.py): nothing was deleted."""
    account = _account()
    if account is None:
        return redirect(url_for("auth.login_form", next=request.path), 303)
    return _confirm_delete(account, sentence, 400)


@bp.route("/privacy/delete", methods=["GET", "POST"])
def delete():
    """Delete my data: a confirmation page first (a GET), then a POST with confirm=1 does it."""
    account = _account()
    if account is None:
        return redirect(url_for("auth.login_form", next=request.path), 303)
    if request.method == "GET" or request.form.get("confirm") != "1":
        return _confirm_delete(account)
    did = account.did
    personal.delete(current_app, did)
    log.info("privacy: an account deleted its data")  # no DID: the log is not a list of who left
    end_session()
    flash("Your data on this server is deleted and you are signed out. Your records on your own "
          "server are untouched.", "info")
    return redirect(url_for("pages.index"), 303)


@bp.get("/terms")
def terms():
    return render_template("terms.html")
