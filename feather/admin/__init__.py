"""GET /admin: the operator's status page (streams, jobs, catalogue, sync, timelines, database).

For the accounts in FEATHERREADER_ADMIN_DIDS, signed in the usual way; anyone else gets 403.
Server-rendered and complete without JavaScript; htmx only re-fetches the status part in place
every few seconds (/admin/status). The same verdict as /health (feather/process/verdict.py), told in
full: which process owns each stream, job and task, and the last errors, which the public
/health leaves out.
"""
from __future__ import annotations

import time

from flask import Blueprint, abort, current_app, render_template

from feather import features
from feather.admin import sections
from feather.auth import is_admin
from feather.auth.web import current_account
from feather.db import db
from feather.jetstream import store as jstore
from feather.process import status
from feather.process.verdict import judge, saved_streams

bp = Blueprint("admin", __name__)
REFRESH_SECS = 5


def _require_operator():
    account = current_account()
    if account is None or not is_admin(account.did):  # the one place that decides who operates
        abort(403)
    return account


def gather() -> dict:
    """Everything the page shows, as plain data (also what a test reads)."""
    settings = current_app.config["FEATHER"]
    tables = set(db.get_tables())
    saved = saved_streams(jstore.cursor_rows())
    verdict = judge(saved, status.read() if "worker_status" in tables else {}, settings)
    figures = features.operator_status(settings)  # each feature's own counts, from its own tables
    return {
        "status": "degraded" if verdict.reasons else "ok",
        "reasons": verdict.detailed,
        "streams": verdict.streams,
        "jobs": verdict.jobs,
        "tasks": verdict.tasks,
        "catalogue": figures.get("feather.network"),
        "sync": figures.get("feather.sync"),
        "timelines": figures.get("feather.feeds"),
        "database": sections.database(settings),
        "now": time.time(),
    }


@bp.get("/admin")
def page():
    account = _require_operator()
    return render_template("admin/page.html", s=gather(), account=account, refresh=REFRESH_SECS)


@bp.get("/admin/status")
def status_part():
    _require_operator()
    return render_template("admin/_status.html", s=gather(), refresh=REFRESH_SECS)


def _ago(ts) -> str:
    if not ts:
        return "never"
    seconds = int(time.time() - float(ts))
    if seconds < 0:
        return "just now"
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    if seconds < 172800:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} days ago"


def _bytes(n) -> str:
    if n is None:
        return "none"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def init_app(app) -> None:
    app.register_blueprint(bp)
    app.jinja_env.filters["ago"] = _ago
    app.jinja_env.filters["bytes"] = _bytes
