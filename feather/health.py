"""GET /health: is this process able to serve a useful request, and is the service doing its work?

It reads one real table page (a bare `SELECT 1` touches no page and would miss a corrupt
file) under a 2 s budget, and reports version, each stream (cursor, host, connection, lag, whether
and when it last failed), each job's recent runs and the pause state. Only a measured database
failure makes it 503; anything else wrong is `"status": "degraded"` with `reasons`, read
from what the worker processes publish (feather/process/status.py). No network call, ever.

Anyone may read it, so it names no process (owner) and quotes no error: those are on /admin.
"""
from __future__ import annotations

import logging
import time

from flask import Blueprint, current_app, jsonify

from feather import sql
from feather.db import current_dialect, db
from feather.jetstream import store as jstore
from feather.process import status
from feather.process.verdict import PUBLIC_JOB_FIELDS, PUBLIC_STREAM_FIELDS, judge, public, saved_streams
from feather.version import __version__

log = logging.getLogger(__name__)
bp = Blueprint("health", __name__)

BUDGET_SECS = 2.0


class _Deadline:
    """Bound a SQLite query in time: the progress handler aborts it past the deadline."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __enter__(self):
        deadline = time.monotonic() + self.seconds
        if current_dialect().is_sqlite:
            db.connection().set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        else:
            db.execute_sql(f"SET statement_timeout = {int(self.seconds * 1000)}")
        return self

    def __exit__(self, *exc):
        try:
            if current_dialect().is_sqlite:
                db.connection().set_progress_handler(None, 1000)
            else:
                db.execute_sql("SET statement_timeout = 0")
        except Exception:  # the failure itself is what we report; cleanup must not mask it
            pass


def probe() -> tuple[bool, dict]:
    started = time.monotonic()
    body: dict = {"version": __version__}
    try:
        db.connect(reuse_if_open=True)
        with _Deadline(BUDGET_SECS):
            row = sql.one("SELECT max(version) FROM schema_version")
            tables = db.get_tables()
            consumers = jstore.cursor_rows() if "jetstream_cursor" in tables else []
            published = _published() if "worker_status" in tables else {}
    except Exception as exc:  # any failure to read is the database being unusable
        log.warning("health: database probe failed: %s", exc)
        body.update(status="error", database={"ok": False, "error": type(exc).__name__})
        return False, body
    body["database"] = {
        "ok": True,
        "schema_version": row[0],
        "ms": round((time.monotonic() - started) * 1000, 1),
    }
    saved = saved_streams(consumers)
    verdict = judge(saved, published, current_app.config["FEATHER"])
    body["consumers"] = {name: public(facts, PUBLIC_STREAM_FIELDS) for name, facts in verdict.streams.items()}
    body["jobs"] = {name: public(facts, PUBLIC_JOB_FIELDS) for name, facts in verdict.jobs.items()}
    body["fetch_paused"] = any(c.paused_reason for c in consumers)
    body["status"] = "degraded" if verdict.reasons else "ok"
    body["reasons"] = verdict.reasons
    return True, body


def _published() -> dict:
    return status.read()


@bp.get("/health")
def health():
    ok, body = probe()
    response = jsonify(body)
    response.status_code = 200 if ok else 503
    response.headers["Cache-Control"] = "no-store"
    return response
