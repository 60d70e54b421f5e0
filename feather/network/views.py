"""The network surfaces: /network, the count API, consent pages, and "your records" (spec §5.6, §7.2).

/network is a library catalogue, not a discover tab: identical for every viewer (no session,
no CSRF token, no clock on the page), deterministic order, nothing below the k-floor, nobody
named who did not opt in. It is the only page that reads net_* besides the consent pages.
"""
from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit

from flask import Blueprint, abort, current_app, flash, jsonify, redirect, render_template, request, url_for

from feather.db import db
from feather.errors import ApiError
from feather.network import adoption, consent, privacy, queries, store

log = logging.getLogger(__name__)
bp = Blueprint("network", __name__)


def _settings():
    return current_app.config["FEATHER"]


def safe_link(url) -> str | None:
    """An href for a stranger's URL: http(s) with a host only; anything else renders as text."""
    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme.lower() in ("http", "https") and parts.hostname else None


def format_us(us) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(us) / 1_000_000)) if us else ""


def network_about() -> dict:
    """What /about may show: the adoption line (if enabled) and the only link to /network."""
    s = _settings()
    found = None
    if s.featherreader_show_adoption:
        try:
            found = adoption.current(list(s.featherreader_relay_hosts))
        except Exception as exc:  # /about must render whatever state the probe is in
            log.warning("network: adoption line unavailable: %s", exc)
    return {"adoption": found, "page": s.featherreader_network_page, "indexing": s.featherreader_network_index}


@bp.get("/network")
def catalogue():
    s = _settings()
    if not s.featherreader_network_page:
        abort(404)
    k = s.featherreader_net_k
    body = render_template("network/index.html", k=k, recent=queries.recently_added(k),
                           popular=queries.most_subscribed(k), names=queries.attributions(k),
                           updated_us=store.get_state("rollup.updated_at"))
    response = current_app.make_response(body)
    response.headers["Cache-Control"] = "public, max-age=300"
    return response


@bp.get("/api/network/count")
def count():
    """For a reader's add-feed card: one feed's subscriber count, only at or above the k-floor."""
    s = _settings()
    if not s.featherreader_network_page:
        raise ApiError(404, "NotFound", "The network catalogue is not enabled on this instance.")
    url = request.args.get("url", "")
    canonical = privacy.indexable(url)
    if canonical is None:
        raise ApiError(400, "InvalidRequest", "url must be a public http(s) feed URL.")
    n = queries.count_for(canonical, s.featherreader_net_k)
    response = jsonify({"url": canonical, **({"subscribers": n} if n is not None else {})})
    response.headers["Cache-Control"] = "public, max-age=300"
    return response


@bp.route("/network/opt-out", methods=["GET", "POST"])
def opt_out():
    if request.method == "GET":
        return render_template("network/opt_out.html", handle=request.args.get("handle", ""))
    handle = (request.form.get("handle") or "").strip().lstrip("@")
    if not consent.allow_opt_out_attempt():
        return render_template("network/opt_out.html", handle=handle,
                               error="Too many attempts from your address. Wait a few minutes and try again."), 429
    if not handle:
        return render_template("network/opt_out.html", handle="", error="Enter your handle or DID."), 400
    from feather.atproto.identity import IdentityError, resolver_for

    try:
        did = resolver_for(current_app).resolve_actor(handle)
    except IdentityError as exc:
        return render_template("network/opt_out.html", handle=handle, error=str(exc)), 400
    with db.atomic():
        removed = store.opt_out(did)
    log.info("network: %s opted out; %d rows removed", did, removed)
    flash(f"Done. {handle} ({did}) is opted out: {removed} indexed record(s) were deleted just now, and this "
          "instance will not index that account again.", "ok")
    return redirect(url_for("network.opted_out"), code=303)


@bp.get("/network/opt-out/done")
def opted_out():
    return render_template("network/opted_out.html")


@bp.route("/network/attribution", methods=["GET", "POST"])
def attribution():
    user = consent.current_user()
    if user is None:
        return render_template("network/attribution.html", user=None), 401
    if request.method == "POST":
        on = request.form.get("attribution") == "on"
        with db.atomic():
            if on and store.is_opted_out(user["did"]):
                flash("You opted out of indexing, so there is nothing to attribute.", "error")
            else:
                store.set_attribution(user["did"], user.get("handle"), on)
                flash("You may now be named next to feeds you subscribe to." if on
                      else "You will not be named anywhere.", "ok")
        return redirect(url_for("network.attribution"), code=303)
    return render_template("network/attribution.html", user=user, attributed=store.is_attributed(user["did"]),
                           opted_out=store.is_opted_out(user["did"]))


@bp.get("/network/me")
def my_records():
    """A reader's page: your subscription records read straight off your PDS, as a stranger would."""
    user = consent.current_user()
    if user is None:
        return render_template("network/attribution.html", user=None), 401
    from feather.network.portability import read_subscriptions

    try:
        records = read_subscriptions(current_app, user["did"])
        error = None
    except Exception as exc:
        log.info("network: could not read %s's records: %s", user["did"], exc)
        records, error = [], "Your PDS could not be read just now. Try again later."
    return render_template("network/me.html", user=user, records=records, error=error,
                           opted_out=store.is_opted_out(user["did"]))


def init_app(app) -> None:
    app.register_blueprint(bp)
    app.jinja_env.filters["safe_link"] = safe_link
    app.jinja_env.filters["format_us"] = format_us
    app.jinja_env.globals["network_about"] = network_about
