"""Dev injection: run a hand-made event through the same dispatch path as the stream.

`POST /admin/dev/jetstream-event` and `flask dev-event` exist for local development only: both
refuse unless FEATHERREADER_ENV=development (`allowed_here`). The route also answers only on
loopback, and only to a signed-in operator (FEATHERREADER_ADMIN_DIDS, the same question /admin
asks): signed out is 401, anyone else 403, and a request must carry the session's CSRF token in
X-CSRF-Token, as /api/sync does. The command runs on the server's own shell, so its user operates.
Injected events move no cursor: they are not part of the stream.
"""
from __future__ import annotations

import ipaddress
import json
import time

import click
from flask import Blueprint, current_app, jsonify, request
from flask.cli import with_appcontext

from feather.errors import ApiError
from feather.jetstream import store
from feather.jetstream.events import DecodeError, Event, decode
from feather.jetstream.subscriptions import merge
from feather.parsing import loads_limited

bp = Blueprint("jetstream_dev", __name__)


def frame_from_fields(did: str, collection: str | None, op: str, rkey: str | None = None,
                      record: dict | None = None, subject: str | None = None, cid: str | None = None) -> dict:
    """The Jetstream frame a short description stands for (used by the route and the CLI)."""
    from feather.atproto.syntax import next_tid

    if op in ("identity", "account"):
        body = {"did": did, "seq": 0, "time": _now_iso()}
        if op == "account":
            body["active"] = True
        return {"did": did, "time_us": _now_us(), "kind": op, op: body}
    record = dict(record or {})
    if subject is not None:
        record.setdefault("subject", subject)
    if collection and op != "delete":
        record.setdefault("$type", collection)
        record.setdefault("createdAt", _now_iso())
    commit = {"rev": next_tid(), "operation": op, "collection": collection, "rkey": rkey or next_tid()}
    if op != "delete":
        commit["record"] = record
        commit["cid"] = cid or "bafyreidevinjected" + commit["rkey"]
    return {"did": did, "time_us": _now_us(), "kind": "commit", "commit": commit}


def inject(settings, frame: dict) -> list[str]:
    """Decode and dispatch one frame to every subscription that would have received it."""
    from feather import features
    from feather.db import db

    event = decode(json.dumps(frame))
    if event is None:
        raise DecodeError(f"unknown event kind {frame.get('kind')!r}")
    reached = []
    with db.connection_context():
        for sub in merge(features.subscriptions(settings)):
            if not _subscribed(sub, event):
                continue
            store.apply_batch(sub, [event], cursor=None)
            reached.append(sub.name)
    return reached


def _subscribed(sub, event: Event) -> bool:
    from feather.jetstream.subscriptions import collection_matches

    if sub.dids is not None and event.did not in set(sub.dids()):
        return False
    return event.kind != "commit" or collection_matches(event.collection, sub.collections)


def _now_us() -> int:
    return int(time.time() * 1_000_000)


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


def allowed_here(settings) -> bool:
    """The one environment rule for the route and the command: development only (not test, not
    production). A hand-made event in production would write follows and records nobody made."""
    return settings.is_development


def _require_operator():
    """The signed-in operator's account; 401 signed out, 403 for anyone else (the XRPC error shape)."""
    from feather.auth import current_account, is_admin
    from feather.security import csrf

    account = current_account()
    if account is None:
        raise ApiError(401, "AuthenticationRequired",
                       "Sign in first as an operator: POST /api/session with an app password, or sign in on the web.")
    if not is_admin(account.did):
        raise ApiError(403, "Forbidden", "Event injection is for this server's operators only.")
    csrf.protect()  # CSRFError -> 400 InvalidCsrfToken, like /api/sync
    return account


def _from_loopback() -> bool:
    try:
        return ipaddress.ip_address(request.remote_addr or "").is_loopback
    except ValueError:
        return False


@bp.post("/admin/dev/jetstream-event")
def dev_event():
    settings = current_app.config["FEATHER"]
    if not allowed_here(settings) or not _from_loopback():
        raise ApiError(403, "Forbidden", "Event injection is only available in development mode, from loopback.")
    _require_operator()
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ApiError(400, "InvalidRequest", "Send a JSON object: a Jetstream frame, or {did, collection, op, ...}.")
    if "kind" not in body:
        did, op = body.get("did"), body.get("op")
        if not isinstance(did, str) or op not in ("create", "update", "delete", "identity", "account"):
            raise ApiError(400, "InvalidRequest", "did and op (create, update, delete, identity, account) are required.")
        if op in ("create", "update", "delete") and not isinstance(body.get("collection"), str):
            raise ApiError(400, "InvalidRequest", "collection is required for a commit.")
        body = frame_from_fields(did, body.get("collection"), op, body.get("rkey"), body.get("record"),
                                 body.get("subject"), body.get("cid"))
    try:
        reached = inject(settings, body)
    except DecodeError as exc:
        raise ApiError(400, "InvalidRequest", f"That is not a valid Jetstream event: {exc}.") from None
    return jsonify({"frame": body, "subscriptions": reached})


@click.command("dev-event")
@click.option("--did", required=True)
@click.option("--collection")
@click.option("--op", type=click.Choice(["create", "update", "delete", "identity", "account"]), required=True)
@click.option("--rkey")
@click.option("--subject")
@click.option("--record", help="The record as JSON.")
@with_appcontext
def dev_event_command(did, collection, op, rkey, subject, record):
    """Run one hand-made event through the same dispatch path as the stream (development only)."""
    if not allowed_here(current_app.config["FEATHER"]):
        raise click.UsageError("dev-event is a development tool: it runs only with FEATHERREADER_ENV=development")
    if op in ("create", "update", "delete") and not collection:
        raise click.UsageError("--collection is required for create, update and delete")
    try:
        parsed = loads_limited(record) if record else None
    except ValueError as exc:
        raise click.UsageError(f"--record is not JSON: {exc}") from None
    frame = frame_from_fields(did, collection, op, rkey, parsed, subject)
    try:
        reached = inject(current_app.config["FEATHER"], frame)
    except DecodeError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(json.dumps({"frame": frame, "subscriptions": reached}))


def init_app(app) -> None:
    from feather.security import csrf

    csrf.exempt(bp)  # checked by hand after the operator check, so a signed-out script is told 401 first
    app.register_blueprint(bp)
    app.cli.add_command(dev_event_command)
