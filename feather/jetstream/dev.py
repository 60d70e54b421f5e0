"""Dev injection: run a hand-made event through the same dispatch path as the stream.

`POST /admin/dev/jetstream-event` and `flask dev-event` exist for local development only: both
refuse unless FEATHERREADER_ENV=development (`allowed_here`). The route also answers only on
loopback, and only to a signed-in operator (FEATHERREADER_ADMIN_DIDS, the same question /admin
asks): signed out is 401, anyone else 403, and a request must carry the session's CSRF token in
X-CSRF-Token, as /api/sync does. The command runs on the server's own shell, so its user operates.
Injected events move no cursor: they are not part of the stream.

With `--write` (the route: `"write": true`, for the signed-in operator's own account only) the
record is first written to the account's PDS with its stored session (feather/auth's
`pds_client`), and the event dispatched is built from what the PDS answered (uri, cid, rev), so the
whole path from a real record to every handler can be tried by hand. The write is a network call
made before the dispatch opens its transaction.
"""
from __future__ import annotations

import ipaddress
import json
import time

import click
from flask import Blueprint, current_app, jsonify, request
from flask.cli import with_appcontext

from feather import auth, features
from feather.atproto.pds import PdsError
from feather.atproto.syntax import next_tid, parse_at_uri
from feather.auth import current_account, is_admin
from feather.auth.grants import NeedsReauth
from feather.db import db
from feather.errors import ApiError
from feather.jetstream import store
from feather.jetstream.events import DecodeError, Event, decode
from feather.jetstream.subscriptions import collection_matches, merge
from feather.parsing import loads_limited
from feather.security import csrf

bp = Blueprint("jetstream_dev", __name__)


def frame_from_fields(did: str, collection: str | None, op: str, rkey: str | None = None,
                      record: dict | None = None, subject: str | None = None, cid: str | None = None) -> dict:
    """The Jetstream frame a short description stands for (used by the route and the CLI)."""
    if op in ("identity", "account"):
        body = {"did": did, "seq": 0, "time": _now_iso()}
        if op == "account":
            body["active"] = True
        return {"did": did, "time_us": _now_us(), "kind": op, op: body}
    record = _record_for(collection, op, record, subject)
    commit = {"rev": next_tid(), "operation": op, "collection": collection, "rkey": rkey or next_tid()}
    if op != "delete":
        commit["record"] = record
        commit["cid"] = cid or "bafyreidevinjected" + commit["rkey"]
    return {"did": did, "time_us": _now_us(), "kind": "commit", "commit": commit}


def _record_for(collection: str | None, op: str, record: dict | None, subject: str | None) -> dict:
    record = dict(record or {})
    if subject is not None:
        record.setdefault("subject", subject)
    if collection and op != "delete":
        record.setdefault("$type", collection)
        record.setdefault("createdAt", _now_iso())
    return record


class WriteError(Exception):
    """The write did not happen (or its answer was unusable); `error` names it, the message is a sentence."""

    def __init__(self, error: str, message: str):
        super().__init__(message)
        self.error = error


def write_and_inject(app, did: str, op: str, collection: str, rkey: str | None, record: dict | None,
                     subject: str | None = None) -> tuple[dict, list[str]]:
    """Write the record to did's PDS with its stored session, then dispatch the event built from the
    PDS's answer exactly as `inject` does; (the frame, the subscriptions it reached)."""
    record = _record_for(collection, op, record, subject)
    no_session = (f"{did} has no usable session on this server. Sign in here as that account (an app "
                  "password is enough), then try again.")
    with db.connection_context():
        try:
            client = auth.pds_client(did, app)
            if op == "create":
                answer = client.create_record(did, collection, record, rkey=rkey)
            elif op == "update":
                answer = client.put_record(did, collection, rkey, record)
            else:
                answer = client.delete_record(did, collection, rkey)
        except NeedsReauth:
            raise WriteError("SessionRequired", no_session) from None
        except PdsError as exc:
            name = f" ({exc.error})" if exc.error else f" (HTTP {exc.status})" if exc.status else ""
            raise WriteError("WriteRefused", f"The account's server refused the write{name}: {exc.message}") from None
    frame = _frame_from_answer(did, op, collection, rkey, record, answer)
    try:
        return frame, inject(app.config["FEATHER"], frame)
    except DecodeError as exc:
        raise WriteError("InvalidRequest", f"The record was written, but its event is not valid: {exc}.") from None


def _frame_from_answer(did: str, op: str, collection: str, rkey: str | None, record: dict, answer: dict) -> dict:
    """The commit frame for what the PDS says it stored: its uri's rkey, its cid and its commit's rev."""
    commit_info = answer.get("commit") if isinstance(answer.get("commit"), dict) else {}
    rev = commit_info.get("rev") if isinstance(commit_info.get("rev"), str) else next_tid()
    commit = {"rev": rev, "operation": op, "collection": collection, "rkey": rkey}
    if op != "delete":
        try:
            uri = parse_at_uri(answer.get("uri"))
        except ValueError:
            uri = None
        cid = answer.get("cid")
        if uri is None or (uri.did_or_handle, uri.collection) != (did, collection) or not uri.rkey \
                or not isinstance(cid, str):
            raise WriteError("WriteRefused", "The account's server answered the write without the record's "
                                             "address and cid, so no event was dispatched.")
        commit.update(rkey=uri.rkey, record=record, cid=cid)
    return {"did": did, "time_us": _now_us(), "kind": "commit", "commit": commit}


def inject(settings, frame: dict) -> list[str]:
    """Decode and dispatch one frame to every subscription that would have received it."""
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
    if sub.active is not None and not sub.active():
        return False  # switched off: the streams taking its turn carry the event
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
    account = _require_operator()
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ApiError(400, "InvalidRequest", "Send a JSON object: a Jetstream frame, or {did, collection, op, ...}.")
    if "write" in body:
        return _write_route(account.did, body)
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


def _write_route(owner: str, body: dict):
    if body.get("write") is not True:
        raise ApiError(400, "InvalidRequest", "write is true or left out.")
    if "kind" in body:
        raise ApiError(400, "InvalidRequest", "With write, send {collection, op, rkey, record, subject}, not a frame.")
    if body.get("did", owner) != owner:
        raise ApiError(403, "Forbidden", "With write, the record goes to your own account only: leave out did.")
    op, collection, rkey, record = (body.get("op", "create"), body.get("collection"), body.get("rkey"),
                                    body.get("record"))
    if op not in ("create", "update", "delete") or not isinstance(collection, str):
        raise ApiError(400, "InvalidRequest", "With write, op is create, update or delete, and collection is required.")
    if not isinstance(rkey, (str, type(None))) or not isinstance(record, (dict, type(None))) \
            or not isinstance(body.get("subject"), (str, type(None))):
        raise ApiError(400, "InvalidRequest", "rkey and subject are strings and record is an object.")
    if op != "create" and rkey is None:
        raise ApiError(400, "InvalidRequest", "rkey is required for update and delete.")
    try:
        frame, reached = write_and_inject(current_app._get_current_object(), owner, op, collection, rkey, record,
                                          body.get("subject"))
    except WriteError as exc:
        raise ApiError(400, exc.error, str(exc)) from None
    return jsonify({"frame": frame, "subscriptions": reached})


@click.command("dev-event")
@click.option("--did", "--as", "did", required=True, help="The event's account (with --write, whose PDS).")
@click.option("--collection")
@click.option("--op", type=click.Choice(["create", "update", "delete", "identity", "account"]),
              help="Required, except with --write, where it defaults to create.")
@click.option("--rkey")
@click.option("--subject")
@click.option("--record", help="The record as JSON.")
@click.option("--write", is_flag=True, help="Write the record to the account's PDS with its stored session first, "
                                            "and dispatch what the PDS answered.")
@with_appcontext
def dev_event_command(did, collection, op, rkey, subject, record, write):
    """Run one hand-made event through the same dispatch path as the stream (development only)."""
    if not allowed_here(current_app.config["FEATHER"]):
        raise click.UsageError("dev-event is a development tool: it runs only with FEATHERREADER_ENV=development")
    op = op or ("create" if write else None)
    if op is None:
        raise click.UsageError("--op is required (create, update, delete, identity, account)")
    if op in ("create", "update", "delete") and not collection:
        raise click.UsageError("--collection is required for create, update and delete")
    try:
        parsed = loads_limited(record) if record else None
    except ValueError as exc:
        raise click.UsageError(f"--record is not JSON: {exc}") from None
    if write:
        if op not in ("create", "update", "delete"):
            raise click.UsageError("--write writes a record: --op is create, update or delete")
        if op != "create" and not rkey:
            raise click.UsageError("--rkey is required for update and delete with --write")
        if not isinstance(parsed, (dict, type(None))):
            raise click.UsageError("--record is a JSON object")
        try:
            frame, reached = write_and_inject(current_app._get_current_object(), did, op, collection, rkey, parsed,
                                              subject)
        except WriteError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(json.dumps({"frame": frame, "subscriptions": reached}))
        return
    frame = frame_from_fields(did, collection, op, rkey, parsed, subject)
    try:
        reached = inject(current_app.config["FEATHER"], frame)
    except DecodeError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(json.dumps({"frame": frame, "subscriptions": reached}))


def init_app(app) -> None:
    csrf.exempt(bp)  # checked by hand after the operator check, so a signed-out script is told 401 first
    app.register_blueprint(bp)
    app.cli.add_command(dev_event_command)
