"""The demo's plugin (FEATHERREADER_EXTRA_FEATURES=demo.feature), development mode only.

- GET /demo/sign-in?as=ada signs the browser in as a demo account (loopback only): there is no PDS
  offline, so the grant is a placeholder that nothing but graph sync uses, and graph sync writes to
- an in-memory PDS (feather/sync/memory.py) holding the demo accounts' follows and profiles from
  demo/events.jsonl, so backfill, preview and the write queue all have real work to show.
"""
from __future__ import annotations

import ipaddress
import json
import time
from pathlib import Path

from flask import Blueprint, abort, current_app, redirect, request, url_for

from feather.auth.grants import Grant
from feather.auth.views import safe_next
from feather.auth.web import start_session
from feather.config import ConfigError
from feather.security import csrf
from feather.sync import apps as registry
from feather.sync.follow_writer import install_writer
from feather.sync.memory import MemoryPds

EVENTS = Path(__file__).resolve().parent / "events.jsonl"
DOMAIN = "demo.feather.test"
bp = Blueprint("demo", __name__)


def load_frames(path: Path = EVENTS) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def accounts(frames: list[dict]) -> dict[str, str]:
    """handle -> DID, from the demo profiles' descriptions ("Demo account <handle>")."""
    found = {}
    for f in frames:
        c = f.get("commit") or {}
        if c.get("collection") == "app.bsky.actor.profile":
            found[c["record"]["description"].rsplit(" ", 1)[-1]] = f["did"]
    return found


def memory_pds(frames: list[dict]):
    pds = MemoryPds(clock=time.time)
    follows = {app.follow for app in registry.APPS}
    for f in frames:
        c = f.get("commit") or {}
        if c.get("rkey") == "self":
            pds.profiles.add((f["did"], c["collection"]))
        elif c.get("collection") in follows:
            pds.repos[(f["did"], c["collection"])][c["rkey"]] = c["record"]["subject"]
    return pds


def _loopback() -> bool:
    try:
        return ipaddress.ip_address(request.remote_addr or "").is_loopback
    except ValueError:
        return False


@bp.get("/demo/sign-in")
def sign_in():
    if not current_app.config["FEATHER"].is_development or not _loopback():
        abort(403)
    name = request.args.get("as", "ada")
    handle = name if name.endswith(DOMAIN) else f"{name}.{DOMAIN}"
    did = current_app.extensions["demo_accounts"].get(handle)
    if did is None:
        abort(404, f"No demo account {handle}.")
    current_app.extensions["auth"].grants.save(Grant(
        did=did, kind="password", handle=handle, pds_url="http://127.0.0.1:9", issuer=None,
        scope="com.atproto.appPass", access="demo", refresh="demo", expires_at=int(time.time()) + 365 * 86400,
        dpop_key=None, as_nonce=None, pds_nonce=None, client_kid=None))
    start_session(did)
    # The same rule as every sign-in: `next` is a path on this site or it is ignored.
    wanted = request.args.get("next")
    return redirect(safe_next(wanted) if wanted else url_for("sync.manage", handle=handle), 303)


def init_app(app) -> None:
    if not app.config["FEATHER"].is_development:
        raise ConfigError("FEATHERREADER_EXTRA_FEATURES", "demo.feature is for `make demo` (development mode) only")
    frames = load_frames()
    app.extensions["demo_accounts"] = accounts(frames)
    install_writer(app, memory_pds(frames))
    csrf.exempt(bp)
    app.register_blueprint(bp)
