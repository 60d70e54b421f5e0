"""XRPC: `{ns}.getFeed`, `{ns}.{short}.listRecords`, `{ns}.{short}.getRecord` (GET, JSON).

The check order of getFeed is Contrail's (docs/design.md, "Timelines"): params → feed → service auth → actor →
issuer == actor → first-read backfill (never blocks) → collection → the listRecords pipeline.
Rules are registered per method name (not a catch-all `/xrpc/<m>`) so other features can
serve their own XRPC methods beside these.
"""
from __future__ import annotations

import gevent
import orjson
from flask import Blueprint, after_this_request, current_app, jsonify, request

from feather import sql
from feather.atproto.syntax import InvalidSyntax, is_valid_did, parse_at_uri
from feather.errors import ApiError
from feather.feeds.config import FeedsConfig
from feather.feeds.read import hybrid, labels, query, refs, reposts
from feather.feeds.read.identities import profiles_for
from feather.feeds.read.sources import sources_for
from feather.feeds.store import backfills, records
from feather.feeds.tasks import authors, backfill
from feather.feeds.web import budget, context
from feather.feeds.web.gate import admit_reader
from feather.feeds.web.service_auth import init_errors, verify_request

STRIPPED = ("feed", "actor", "collection", "did")


def _charge_lookup(identifier: str) -> None:
    """Spend from the outbound budget when resolving identifier would leave the process. Sources
    that cannot say (test doubles, other deployments' own) are taken to answer locally."""
    would_fetch = getattr(sources_for(current_app), "would_fetch", None)
    if would_fetch is not None and would_fetch(identifier):
        budget.spend(current_app, request.remote_addr)


def _resolve(identifier: str) -> str:
    """The DID for an actor parameter. A DID is used as is (nothing is fetched); a handle that is
    not in the identity cache costs a lookup from the outbound budget, refused with 429 when spent."""
    if not identifier.startswith("did:"):
        _charge_lookup(identifier)
    did = sources_for(current_app).resolve_actor(identifier)
    if not did or not is_valid_did(did):
        raise ApiError(400, "InvalidRequest", "Could not resolve actor")
    return did


def _page(config: FeedsConfig, collection, params, source) -> dict:
    """The listRecords pipeline's page, with `profiles=true`'s handles and profile records, and
    `labels` on each record when the caller names labelers (`labelers=`, atproto-accept-labelers)."""
    wanted = labels.requested(params.get("labelers"), request.headers.get("atproto-accept-labelers"))
    params = {k: v for k, v in params.items() if k != "labelers"}
    # Labels and hydrated references read each record's value; otherwise it is copied as stored.
    out = query.run(config, collection, params, source, stored=wanted is None and not refs.wanted(params))
    refs.hydrate(collection, out["records"], params)
    if wanted is not None:
        app = current_app._get_current_object()
        out["records"] = labels.attach(app, out["records"], wanted,
                                       admit=lambda: budget.try_spend(app, request.remote_addr))
        applied = ",".join(w.did + (";redact" if w.redact else "") for w in wanted)
        after_this_request(lambda response: _labelers_header(response, applied))
    if params.get("profiles") == "true":
        out["profiles"] = profiles_for(current_app._get_current_object(), config,
                                       [r["did"] for r in out["records"]])
    return out


def _labelers_header(response, applied: str):
    response.headers["atproto-content-labelers"] = applied
    return response


def get_feed():
    config = context.config()
    settings = current_app.config["FEATHER"]
    feed_name, actor = request.args.get("feed"), request.args.get("actor")
    if not feed_name or not actor:
        raise ApiError(400, "InvalidRequest", "feed and actor parameters required")
    feed = config.feeds.get(feed_name)
    if feed is None:
        raise ApiError(404, "UnknownFeed", "Unknown feed")
    issuer = None
    if settings.feed_service_auth:
        issuer = verify_request(request.headers.get("Authorization"), config, settings,
                                ChargedKeys(sources_for(current_app)))
    did = _resolve(actor)
    if issuer is not None and issuer != did:
        raise ApiError(403, "Forbidden", "feed actor must match the service-auth issuer")
    admit_reader(config, settings, did)  # FEED_SERVE: served, newly served, or refused
    app = current_app._get_current_object()
    _maybe_backfill(app, config, feed, did)
    wanted = request.args.get("collection")
    target = None if feed.mixed else feed.shown[0]  # a mixed feed reads every target at once
    if wanted:
        matches = [t for t in feed.shown if wanted in (t.nsid, t.short)]
        if not matches:
            raise ApiError(400, "InvalidRequest", "Collection not in feed targets")
        target = matches[0]
    params = {k: v for k, v in request.args.items() if k not in STRIPPED}
    collection = config.collections[(target or feed.shown[0]).short]
    reposts.fill_read(app, config, feed, target, did, admit=lambda: budget.try_spend(app, request.remote_addr),
                      cursor=request.args.get("cursor"))
    source = hybrid.feed_source(config, feed, target, did)
    author = request.args.get("did")
    if author is not None:  # Contrail's author filter: the feed's records by this one account
        if not is_valid_did(author):
            raise ApiError(400, "InvalidRequest", "did must be a DID (like did:plc:abc123): the author to keep.")
        source.where.append("r.did = ?")
        source.where_params.append(author)
    return _json(_page(config, collection, params, source))


def _maybe_backfill(app, config: FeedsConfig, feed, did: str) -> None:
    """The first-read backfill, claimed only when one is due. Nearly every read finds it done: this
    process remembers that (backfill.known_done) and asks nothing. Otherwise one read of its row,
    outside any transaction, says whether it is done, in flight or resting after a failure, and
    then nothing is written or claimed. When one looks due, backfill.maybe_start decides again
    inside its transaction, so two readers still cannot both claim it."""
    if backfill.known_done(app, did, feed.name):
        return
    row = backfills.state(did, feed.name)
    if row is not None and row[0]:
        backfill.note_done(app, did, feed.name)
    elif backfill.wants_claim(row, sql.now_ms()):
        backfill.maybe_start(app, config, feed, did, admit=lambda: budget.try_spend(app, request.remote_addr))


# What orjson writes natively but Flask's provider writes its own way (dates as HTTP dates,
# dataclasses, str subclasses such as Markup): left to Flask, so no answer changes shape.
_PASSTHROUGH = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


def _json(body: dict):
    """The answer as JSON, through orjson: flask.jsonify's standard-library encoder took a
    getFeed page 0.6 ms (bench/getfeed.py --profile). The same JSON as jsonify's, except keys
    in the order the record and the pipeline wrote them (not sorted), text as UTF-8 (not escaped
    to ASCII) and a NaN or infinity (which no JSON can hold) as null. What orjson refuses (an
    integer past 64 bits, a lone surrogate, the types above) goes through jsonify, as before."""
    try:
        response = current_app.response_class(
            orjson.dumps(body, default=_stored, option=orjson.OPT_APPEND_NEWLINE | _PASSTHROUGH),
            mimetype="application/json")
    except orjson.JSONEncodeError:
        response = jsonify(_read_stored(body))
    # Once the body is written (the server closes the response), let every other connection's
    # request run before this connection's next one. On SQLite a request never waits on I/O, so
    # a keep-alive client that sent its next request at once was answered again and again while
    # the other connections waited: through gunicorn, 16 clients saw a median of a few ms and a
    # p99 of hundreds (docs/performance.md, "Issue 36").
    response.call_on_close(gevent.sleep)
    return response


def _stored(value):
    """orjson's hook for what it does not write itself: a stored record goes in as its text."""
    if isinstance(value, records.Stored):
        return orjson.Fragment(value.text)
    raise TypeError  # orjson raises JSONEncodeError: the answer goes through jsonify


def _read_stored(body):
    """body with each stored record read (for jsonify, which cannot copy a text in)."""
    if isinstance(body, records.Stored):
        return body.value
    if isinstance(body, dict):
        return {k: _read_stored(v) for k, v in body.items()}
    if isinstance(body, list):
        return [_read_stored(v) for v in body]
    return body


class ChargedKeys:
    """The sources as service auth sees them: the issuer is whatever DID the token claims, so
    fetching its document (before the signature can be checked) is paid for like any lookup."""

    def __init__(self, sources):
        self.sources = sources

    def signing_key(self, did: str):
        _charge_lookup(did)
        return self.sources.signing_key(did)


def list_records(short: str):
    config = context.config()
    collection = config.collections[short]
    author = request.args.get("actor") or request.args.get("did")
    did = _resolve(author) if author else None
    params = {k: v for k, v in request.args.items() if k not in ("actor", "did")}
    # Contrail's 3 s author backfill, paid from the same budget as getFeed's. Not for a search: a
    # page fetched live is not indexed, so search= with actor= searches what the store holds.
    if did is not None and not (request.args.get("search") or "").strip():
        app = current_app._get_current_object()
        listed = authors.backfill_listing(app, config, collection, did,
                                          admit=lambda: budget.try_spend(app, request.remote_addr))
        if listed is not None:  # an author nobody served follows: answered from the page, not stored
            return _json(_page(config, collection, params, query.listed_source(collection, listed)))
    return _json(_page(config, collection, params, query.collection_source(collection, did)))


def get_record(short: str):
    config = context.config()
    collection = config.collections[short]
    raw = request.args.get("uri")
    if not raw:
        raise ApiError(400, "InvalidRequest", "uri parameter required")
    try:
        parsed = parse_at_uri(raw)
    except InvalidSyntax:
        parsed = None
    if parsed is None or not parsed.collection or not parsed.rkey:
        raise ApiError(400, "InvalidRequest", "uri must be at://<actor>/<collection>/<rkey>")
    did = _resolve(parsed.did_or_handle)  # a handle here is a lookup like any other: budgeted
    found = None
    if parsed.collection == collection.nsid:
        found = query.get_record(collection, f"at://{did}/{parsed.collection}/{parsed.rkey}")
    if found is None:
        raise ApiError(404, "RecordNotFound", "Record not found")
    if request.args.get("profiles") == "true":
        found["profiles"] = profiles_for(current_app._get_current_object(), config, [found["did"]])
    return _json(found)


def make_blueprint(config: FeedsConfig) -> Blueprint:
    bp = Blueprint("feeds", __name__)
    init_errors(bp)
    ns = config.namespace
    if config.feeds:
        bp.add_url_rule(f"/xrpc/{ns}.getFeed", "get_feed", get_feed, methods=["GET"])
    for short in config.collections:
        methods = config.methods_of(short)  # follow and profile collections: none unless configured
        if "listRecords" in methods:
            bp.add_url_rule(f"/xrpc/{ns}.{short}.listRecords", f"list_records_{short}", list_records,
                            methods=["GET"], defaults={"short": short})
        if "getRecord" in methods:
            bp.add_url_rule(f"/xrpc/{ns}.{short}.getRecord", f"get_record_{short}", get_record,
                            methods=["GET"], defaults={"short": short})
    bp.before_request(_refuse_long_urls)
    return bp


MAX_URL_BYTES = 4096  # gunicorn.conf.py lets lines up to 8190 through so this answers in XRPC JSON


def _refuse_long_urls():
    if len(request.full_path.encode()) > MAX_URL_BYTES:
        raise ApiError(414, "InvalidRequest", f"The URL is longer than {MAX_URL_BYTES} bytes.")
