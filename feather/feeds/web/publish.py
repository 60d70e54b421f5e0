"""Publishing a feed: its `app.bsky.feed.generator` record in an operator's own repo.

A feed shows up in the Bluesky app once a repo holds a generator record pointing at this
service's DID; the record's URI is the feed's name everywhere (describeFeedGenerator,
getFeedSkeleton's `feed`). The record key is the feed's name in the feeds config, so publishing
again updates the same record (putRecord) and unpublishing deletes it. Writing to someone's repo
needs their permission for exactly this collection (REPO_SCOPE, asked for by the page when the
operator clicks Publish), and only operators (FEATHERREADER_ADMIN_DIDS) may do it.
feed_generators remembers what was published so the generator can answer for it (store/generators.py).
"""
from __future__ import annotations

import time
import unicodedata

from feather import sql
from feather.db import db
from feather.feeds.config import FeedsConfig
from feather.feeds.store import generators
from feather.feeds.web.generator import GENERATOR, post_target

REPO_SCOPE = f"repo:{GENERATOR}"
MAX_NAME_GRAPHEMES, MAX_NAME_BYTES = 24, 240  # the lexicon's limits for displayName
MAX_DESCRIPTION_GRAPHEMES, MAX_DESCRIPTION_BYTES = 300, 3000


class PublishError(ValueError):
    """The publication cannot be made; the message is a sentence for the operator."""


def graphemes(text: str) -> int:
    """Roughly what a person counts as characters: combining marks, joiners and the character a
    zero-width joiner attaches, and variation selectors add nothing. (No grapheme library here;
    this errs towards counting an unusual cluster as more than one.)"""
    count, joined = 0, False
    for ch in text:
        if ch == "\u200d":
            joined = True
            continue
        if unicodedata.combining(ch) or "\ufe00" <= ch <= "\ufe0f" or "\U0001f3fb" <= ch <= "\U0001f3ff":
            continue
        if not joined:
            count += 1
        joined = False
    return count


def check_text(display_name: str, description: str) -> tuple[str, str]:
    name, desc = (display_name or "").strip(), (description or "").strip()
    if not name:
        raise PublishError("Give the feed a display name: the Bluesky app shows it as the feed's title.")
    if graphemes(name) > MAX_NAME_GRAPHEMES or len(name.encode()) > MAX_NAME_BYTES:
        raise PublishError(f"The display name is longer than {MAX_NAME_GRAPHEMES} characters.")
    if graphemes(desc) > MAX_DESCRIPTION_GRAPHEMES or len(desc.encode()) > MAX_DESCRIPTION_BYTES:
        raise PublishError(f"The description is longer than {MAX_DESCRIPTION_GRAPHEMES} characters.")
    return name, desc


def record(service_did: str, display_name: str, description: str, created_at: str) -> dict:
    value = {"$type": GENERATOR, "did": service_did, "displayName": display_name, "createdAt": created_at}
    if description:
        value["description"] = description
    return value


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


def _feed(config: FeedsConfig, name: str):
    feed = config.feeds.get(name)
    if feed is None or post_target(feed) is None:
        raise PublishError(f"There is no feed {name!r} of posts to publish on this instance.")
    return feed


def publish(client, config: FeedsConfig, publisher: str, feed_name: str, display_name: str, description: str,
            service_did: str | None) -> str:
    """Write (or rewrite) the record in publisher's repo with client (a PdsClient acting as them),
    then remember it. Returns the feed's at:// URI. PdsError from the client passes through."""
    if not service_did:
        raise PublishError("This instance has no service DID yet: set FEATHERREADER_PUBLIC_URL.")
    _feed(config, feed_name)
    name, desc = check_text(display_name, description)
    made = client.put_record(publisher, GENERATOR, feed_name, record(service_did, name, desc, _now_iso()))
    uri = f"at://{publisher}/{GENERATOR}/{feed_name}"
    with db.atomic():  # the network call is done; one short write
        generators.remember(uri, publisher, feed_name, feed_name, made.get("cid"), name, desc, sql.now_us())
    return uri


def unpublish(client, publisher: str, feed_name: str) -> str:
    """Delete the record from publisher's repo (deleting a missing one succeeds), then forget it."""
    uri = f"at://{publisher}/{GENERATOR}/{feed_name}"
    client.delete_record(publisher, GENERATOR, feed_name)
    with db.atomic():
        generators.forget(uri)
    return uri


def publications() -> dict[str, list[dict]]:
    """{feed name: [{uri, publisher_did, display_name, description}]}"""
    out: dict[str, list[dict]] = {}
    for uri, publisher, feed, name, desc in sql.rows("SELECT uri, publisher_did, feed, display_name, description FROM feed_generators"
                                                     " ORDER BY published_us, uri"):
        out.setdefault(feed, []).append({"uri": uri, "publisher_did": publisher, "display_name": name,
                                         "description": desc})
    return out
