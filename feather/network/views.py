"""The network surfaces: /network, the count API, consent pages, and "your records"
(docs/design.md, "The network catalogue").

/network is a library catalogue, not a discover tab: identical for every viewer (no session,
no CSRF token, no clock on the page), deterministic order, nothing below the k-floor, nobody
named who did not opt in. It is the only page that reads net_* besides the consent pages.
"""
from __future__ import annotations

import functools
import logging
import time
from urllib.parse import urlsplit

from flask import Blueprint, abort, current_app, flash, g, jsonify, redirect, render_template, request, url_for
from flask.globals import request_ctx

from feather import sql
from feather.atproto.identity import IdentityError, resolver_for
from feather.atproto.syntax import is_valid_did, is_valid_handle
from feather.db import db
from feather.errors import ApiError, form_retry
from feather.network import adoption, consent, names, privacy, queries, store
from feather.network.portability import read_subscriptions

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


PUBLIC_CACHE = "public, max-age=300"


def same_for_everyone(view):
    """The response is the same bytes for every viewer, so a shared cache may keep it
    (docs/design.md, "The network catalogue"): these are the only responses marked public.

    The request's session is swapped for an empty one before the view runs, so nothing it
    renders can depend on who is asking (no account name, no CSRF token, no flash: a pending
    flash stays for the viewer's next page), and Flask neither refreshes the cookie nor adds
    `Vary: Cookie`. The page template leaves the account block of base.html empty; signing in
    and out happen on every other page."""
    @functools.wraps(view)
    def wrapper(*args, **kwargs):
        # Flask opens the session before any view and offers no public way to swap it; the
        # byte-identity test fails loudly if a Flask upgrade moves this attribute.
        request_ctx._session = current_app.session_interface.make_null_session(current_app)
        g.pop("auth_account", None)  # anything that already looked the viewer up
        g.same_for_everyone = True  # feather/security.py: a cookie alone does not make this personal
        response = current_app.make_response(view(*args, **kwargs))
        response.headers["Cache-Control"] = PUBLIC_CACHE
        return response
    return wrapper


@bp.get("/network")
@same_for_everyone
def catalogue():
    s = _settings()
    if not s.featherreader_network_page:
        abort(404)
    k = s.featherreader_net_k

    recent, popular = queries.recently_added(k), queries.most_subscribed(k)
    shown = sorted({f.feed_url for f in recent + popular})
    return render_template("network/index.html", k=k, recent=recent, popular=popular,
                           names=queries.attributions(shown, k, names.fresh_since(sql.now_us())),
                           updated_us=store.get_state("rollup.updated_at"))


@bp.get("/api/network/count")
@same_for_everyone
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
    return jsonify({"url": canonical, **({"subscribers": n} if n is not None else {})})


NOT_A_DID = "{} is not a valid DID, so nothing was changed. A DID looks like did:plc:abc123."
NOT_A_NAME = ("{} is neither a handle nor a DID, so nothing was changed. A handle looks like alice.bsky.social, "
              "a DID like did:plc:abc123.")
UNRESOLVED_HANDLE = ("The handle {} could not be looked up (it may be misspelt, or its server may not be answering), "
                     "so nothing was changed. Check the spelling, or enter the account's DID instead (like "
                     "did:plc:abc123): an opt-out by DID needs no lookup.")


def opt_out_target(text: str) -> tuple[str | None, str | None]:
    """(the DID to opt out, None), or (None, the sentence saying why nothing was done).

    A valid DID is taken as typed, with nothing fetched: an opt-out only removes data, so it must
    work while the PLC directory is down or the account's document is gone, and asking the network
    first would make the answer depend on the account. A handle has to be looked up to name a DID;
    one direction is enough (whoever could point a handle at a DID could type the DID)."""

    if text.startswith("did:"):
        if not is_valid_did(text):
            return None, NOT_A_DID.format(text)
        # did:plc identifiers are lower-case base32: a DID typed in capitals is still that account
        return (text.lower() if text.startswith("did:plc:") else text), None
    if not is_valid_handle(text):
        return None, NOT_A_NAME.format(text)

    try:
        return resolver_for(current_app).resolve_handle(text), None
    except IdentityError:
        return None, UNRESOLVED_HANDLE.format(text)


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
    did, error = opt_out_target(handle)
    if did is None:
        # Said before any catalogue read: nothing in it depends on whether the account was indexed.
        return render_template("network/opt_out.html", handle=handle, error=error), 400
    with db.atomic():
        store.opt_out(did)
    # The same answer for every input, and no DID in the log: whether (and how much of) an
    # account was indexed is not something to tell whoever typed its handle, or the log reader.
    log.info("network: an account opted out")
    return redirect(url_for("network.opted_out"), code=303)


@bp.get("/network/opt-out/done")
def opted_out():
    return render_template("network/opted_out.html")


@bp.route("/network/attribution", methods=["GET", "POST"])
def attribution():
    """The signed-in account's own catalogue choices: being named, and clearing its opt-out.

    Both act on the session's DID only, never on one a form names: anyone may opt anyone out
    (it only removes data), so only the account itself may undo that."""
    user = consent.current_user()
    if user is None:
        return render_template("network/attribution.html", user=None), 401
    if request.method == "POST":
        if request.form.get("opt_out") == "clear":
            return _clear_opt_out(user)
        on = request.form.get("attribution") == "on"
        with db.atomic():
            if on and store.is_opted_out(user["did"]):
                flash("You opted out of indexing, so there is nothing to attribute. Clear your opt-out first "
                      "(below), then choose again.", "error")
            else:
                store.set_attribution(user["did"], user.get("handle"), on)
                flash("You may now be named next to feeds you subscribe to." if on
                      else "You will not be named anywhere.", "ok")
        return redirect(url_for("network.attribution"), code=303)
    return render_template("network/attribution.html", user=user, attributed=store.is_attributed(user["did"]),
                           opted_out_us=store.opted_out_at(user["did"]))


def _clear_opt_out(user: dict):
    with db.atomic():
        cleared = store.clear_opt_out(user["did"])
    if cleared:
        log.info("network: an account cleared its opt-out")
        flash("Your opt-out is cleared. Records you publish or change from now on are counted anonymously, the ones "
              "you already have come back at this instance's next rebuild of the catalogue, and you are named only "
              "if you ask to be, below.", "ok")
    else:  # a second tab, or a double click: say what is true now
        flash("You have no opt-out to clear: you are counted anonymously unless you choose to be named.", "ok")
    return redirect(url_for("network.attribution"), code=303)


@bp.get("/network/me")
def my_records():
    """A reader's page: your subscription records read straight off your PDS, as a stranger would."""
    user = consent.current_user()
    if user is None:  # there is nothing to show without knowing whose records: sign in, then come back
        return redirect(url_for("auth.login_form", next=request.path) if "auth.login_form" in current_app.view_functions
                        else url_for("network.attribution"), code=303)

    try:
        records = read_subscriptions(current_app, user["did"])
        error = None
    except Exception as exc:
        log.info("network: could not read %s's records: %s", user["did"], exc)
        records, error = [], "Your PDS could not be read just now. Try again later."
    return render_template("network/me.html", user=user, records=records, error=error,
                           opted_out_us=store.opted_out_at(user["did"]))


def _retry_opt_out(sentence: str):
    """The opt-out form again after its token expired, with what was typed."""
    handle = (request.form.get("handle") or "").strip()
    return render_template("network/opt_out.html", handle=handle, error=sentence), 400


def init_app(app) -> None:
    app.register_blueprint(bp)
    form_retry(app, "network.opt_out", _retry_opt_out)
    app.jinja_env.filters["safe_link"] = safe_link
    app.jinja_env.filters["format_us"] = format_us
    app.jinja_env.globals["network_about"] = network_about
