"""A Bluesky feed generator: the person's own timeline, pinned in the Bluesky app.

Three pieces (see the `app.bsky.feed.*` lexicons): a `did:web` document for this instance's host
naming a `BskyFeedGenerator` service (`#bsky_fg`), `describeFeedGenerator` listing the feeds
published from here (feed_generators, written by publish.py), and `getFeedSkeleton`, which
answers the *viewer's* timeline as post URIs. The viewer is whoever signed the service-auth
token the app view forwards: the same checks as getFeed's FEED_SERVICE_AUTH (feather/feeds/
service_auth.py: signature by the issuer's #atproto key, aud = this service's DID, lxm = the method,
expiry and lifetime bounded, and the issuer's DID document paid from the outbound budget).
A skeleton needs a viewer, so a missing token is refused like a bad one.

A viewer this instance does not serve (FEED_SERVE) gets an empty feed and, in `message`, the
reason: the app shows an empty feed either way, and the reason is there for whoever looks.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from flask import Blueprint, abort, current_app, jsonify, request

from feather import sql
from feather.errors import ApiError
from feather.feeds.config import Feed, FeedsConfig
from feather.feeds.read import hybrid, query, reposts
from feather.feeds.read.sources import sources_for
from feather.feeds.tasks import backfill
from feather.feeds.web import budget, context
from feather.feeds.web.gate import admit_reader
from feather.feeds.web.service_auth import AuthError, init_errors, verify
from feather.feeds.web.xrpc import ChargedKeys, _refuse_long_urls
from feather.parsing import ascii_int

SKELETON = "app.bsky.feed.getFeedSkeleton"
DESCRIBE = "app.bsky.feed.describeFeedGenerator"
GENERATOR = "app.bsky.feed.generator"
POST = "app.bsky.feed.post"
DEFAULT_LIMIT, MAX_LIMIT = 50, 100  # the lexicon's: 1..100, default 50

def public_origin(settings) -> str | None:
    public = (settings.featherreader_public_url or "").strip().rstrip("/")
    return public or None


def web_did(settings) -> str | None:
    """did:web of FEATHERREADER_PUBLIC_URL's host; a port (development only) is written %3A."""
    origin = public_origin(settings)
    parts = urlsplit(origin) if origin else None
    if parts is None or not parts.hostname:
        return None
    return f"did:web:{parts.hostname}" + (f"%3A{parts.port}" if parts.port else "")


def service_did(settings) -> str | None:
    """The DID feed records point to: FEATHERREADER_FEED_SERVICE_DID if set, else our did:web."""
    return settings.featherreader_feed_service_did or web_did(settings)


def post_target(feed: Feed):
    """The target a skeleton is made of: Bluesky can only show posts. A mixed feed of other apps'
    records too ("Everything") is not offered: in the Bluesky app it would be its posts alone,
    the Following feed under another name."""
    if feed.mixed and any(not t.nsid.startswith("app.bsky.") for t in feed.targets):
        return None
    return next((t for t in feed.targets if t.nsid == POST), None)


def publishable(config: FeedsConfig) -> list[Feed]:
    return [f for f in config.feeds.values() if post_target(f) is not None]


def published_uris(config: FeedsConfig) -> list[str]:
    names = {f.name for f in publishable(config)}
    rows = sql.rows("SELECT uri, feed FROM feed_generators ORDER BY published_us, uri")
    return [uri for uri, feed in rows if feed in names]


def feed_for_uri(config: FeedsConfig, uri: str) -> Feed | None:
    row = sql.one("SELECT feed FROM feed_generators WHERE uri = ?", (uri,))
    feed = config.feeds.get(row[0]) if row else None
    return feed if feed is not None and post_target(feed) is not None else None


def _settings():
    return current_app.config["FEATHER"]


def did_document():
    settings = _settings()
    did = web_did(settings)
    if did is None or service_did(settings) != did:
        abort(404, "This instance has no did:web (set FEATHERREADER_PUBLIC_URL).")
    return jsonify({"@context": ["https://www.w3.org/ns/did/v1"], "id": did,
                    "service": [{"id": "#bsky_fg", "type": "BskyFeedGenerator",
                                 "serviceEndpoint": public_origin(settings)}]})


def describe():
    return jsonify({"did": service_did(_settings()), "feeds": [{"uri": u} for u in published_uris(context.config())]})


def parse_limit(raw: str | None) -> int:
    value = ascii_int(raw, signed=True) if raw else None
    return DEFAULT_LIMIT if value is None else max(1, min(MAX_LIMIT, value))


def skeleton():
    config, settings = context.config(), _settings()
    uri = request.args.get("feed")
    if not uri:
        raise ApiError(400, "InvalidRequest", "feed parameter required")
    feed = feed_for_uri(config, uri)
    if feed is None:
        raise ApiError(400, "UnknownFeed", "This feed generator does not serve that feed.")
    header = request.headers.get("Authorization") or ""
    if not header.startswith("Bearer "):
        raise AuthError("AuthMissing", "This feed is the viewer's own timeline: it needs the viewer's service-auth "
                                       "token (Authorization: Bearer …).")
    viewer = verify(header[len("Bearer "):].strip(), audience=service_did(settings), method=SKELETON,
                    key_of=ChargedKeys(sources_for(current_app)).signing_key)
    try:
        admit_reader(config, settings, viewer)  # FEED_SERVE: served, newly served, or not
    except ApiError as exc:
        if exc.error != "NotServed":
            raise
        origin = public_origin(settings)
        return jsonify({"feed": [], "message": exc.message + (f" Sign in at {origin} to have yours kept."
                                                              if origin else "")})
    app = current_app._get_current_object()
    backfill.maybe_start(app, config, feed, viewer, admit=lambda: budget.try_spend(app, request.remote_addr))
    target = post_target(feed)
    reposts.fill_read(app, config, feed, target, viewer, admit=lambda: budget.try_spend(app, request.remote_addr),
                      cursor=request.args.get("cursor"))
    source = hybrid.feed_source(config, feed, target, viewer)
    params = {"limit": str(parse_limit(request.args.get("limit"))), "cursor": request.args.get("cursor") or ""}
    page = query.run(config, config.collections[target.short], params, source, stored=True)  # URIs only
    body: dict = {"feed": [_item(r) for r in page["records"]]}
    if page.get("cursor"):
        body["cursor"] = page["cursor"]
    return jsonify(body)


def _item(record: dict) -> dict:
    """A skeleton item: the post, and the repost that brought it (the app shows "reposted by")."""
    reason = record.get("reason")
    if reason is None:
        return {"post": record["uri"]}
    return {"post": record["uri"], "reason": {"$type": reason["$type"], "repost": reason["repost"]}}


def init_app(app, settings) -> None:
    """Serve the generator when this instance has a service DID (FEATHERREADER_PUBLIC_URL or
    FEATHERREADER_FEED_SERVICE_DID); without one there is nothing a feed record could point to."""
    if service_did(settings) is None:
        return
    bp = Blueprint("feed_generator", __name__)
    init_errors(bp)
    bp.add_url_rule("/.well-known/did.json", "did_document", did_document, methods=["GET"])
    bp.add_url_rule(f"/xrpc/{DESCRIBE}", "describe", describe, methods=["GET"])
    bp.add_url_rule(f"/xrpc/{SKELETON}", "skeleton", skeleton, methods=["GET"])
    bp.before_request(_refuse_long_urls)
    app.register_blueprint(bp)
