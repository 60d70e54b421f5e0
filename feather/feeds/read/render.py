"""Turning stored records into what the timeline page shows, safely.

Everything in a record is written by a stranger: the text, the facets' byte ranges and URIs, an
embed's alt text and title. Text is always escaped here (markupsafe) before it is wrapped in the
few tags we write ourselves; a link's target must be http(s), a mention's a valid DID, and a
facet that is out of range, overlaps another or cuts a UTF-8 character is dropped (its text
stays, as plain text). Images and other blobs are never loaded: the page shows their alt text
and a link to the post, so reading the timeline makes the browser fetch nothing from a PDS or a
CDN a post names.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from markupsafe import Markup, escape

from feather.atproto.syntax import InvalidSyntax, is_valid_did, parse_at_uri

BSKY = "https://bsky.app"
MAX_FACETS = 100  # a record may carry any number; a post has a handful
FACET = "app.bsky.richtext.facet"
LINK_ATTRS = 'rel="nofollow noopener ugc"'


def web_url(uri: object) -> str | None:
    """uri if a browser may follow it from our page (http or https with a host), else None."""
    if not isinstance(uri, str) or len(uri) > 3000:
        return None
    try:
        parts = urlsplit(uri.strip())
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return uri.strip()


def _feature_href(feature: object) -> str | None:
    if not isinstance(feature, dict):
        return None
    kind = feature.get("$type")
    if kind == f"{FACET}#link":
        return web_url(feature.get("uri"))
    if kind == f"{FACET}#mention":
        did = feature.get("did")
        return f"{BSKY}/profile/{did}" if is_valid_did(did) else None
    if kind == f"{FACET}#tag":
        tag = feature.get("tag")
        if isinstance(tag, str) and 0 < len(tag) <= 640:
            return f"{BSKY}/hashtag/{quote(tag, safe='')}"
    return None


def _spans(data: bytes, facets: object) -> list[tuple[int, int, str]]:
    """(start, end, href) of the usable facets, in order, none overlapping."""
    if not isinstance(facets, list):
        return []
    found = []
    for facet in facets[:MAX_FACETS]:
        if not isinstance(facet, dict) or not isinstance(facet.get("index"), dict):
            continue
        start, end = facet["index"].get("byteStart"), facet["index"].get("byteEnd")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
            continue
        if not 0 <= start < end <= len(data):
            continue
        features = facet.get("features")
        href = next((h for f in (features if isinstance(features, list) else [])
                     if (h := _feature_href(f))), None)
        if href is None:
            continue
        try:  # a range that cuts a character in two is not a facet we can show
            data[start:end].decode("utf-8")
            data[:start].decode("utf-8")
        except UnicodeDecodeError:
            continue
        found.append((start, end, href))
    found.sort()
    spans, last_end = [], 0
    for start, end, href in found:
        if start >= last_end:  # overlapping facets: the first one wins
            spans.append((start, end, href))
            last_end = end
    return spans


def rich_text(text: object, facets: object = None) -> Markup:
    """The post text as HTML: escaped, with its facets as links."""
    if not isinstance(text, str):
        return Markup("")
    data = text.encode("utf-8")
    out, at = [], 0
    for start, end, href in _spans(data, facets):
        out.append(escape(data[at:start].decode("utf-8")))
        out.append(Markup(f'<a href="{escape(href)}" {LINK_ATTRS}>') + escape(data[start:end].decode("utf-8"))
                   + Markup("</a>"))
        at = end
    out.append(escape(data[at:].decode("utf-8")))
    return Markup("").join(out)


@dataclass(frozen=True)
class Embed:
    label: str  # "Image", "Link", "Quoted post", "Video"
    text: str
    href: str | None


def post_url(uri: object) -> str | None:
    """The bsky.app page of an app.bsky.feed.post at:// URI (links only; never fetched by us)."""
    try:
        parsed = parse_at_uri(uri) if isinstance(uri, str) else None
    except InvalidSyntax:
        return None
    if parsed is None or parsed.collection != "app.bsky.feed.post" or not parsed.rkey:
        return None
    return f"{BSKY}/profile/{quote(parsed.did_or_handle, safe=':')}/post/{quote(parsed.rkey, safe='')}"


def profile_url(did: str) -> str | None:
    """An account's page on bsky.app (links only)."""
    return f"{BSKY}/profile/{quote(did, safe=':')}" if is_valid_did(did) else None


def _post_ref(value: object) -> str | None:
    """The at:// URI of a strong ref to an app.bsky.feed.post, or None."""
    uri = value.get("uri") if isinstance(value, dict) else None
    return uri if post_url(uri) is not None else None


def reply_parent(record: dict) -> str | None:
    """The post this one replies to (its reply.parent), or None."""
    reply = record.get("reply")
    return _post_ref(reply.get("parent")) if isinstance(reply, dict) else None


def quoted(record: dict) -> str | None:
    """The post this one quotes (embed.record, or the record of a recordWithMedia), or None."""
    embed = record.get("embed")
    if not isinstance(embed, dict):
        return None
    ref = embed.get("record")
    if embed.get("$type") == "app.bsky.embed.recordWithMedia" and isinstance(ref, dict):
        ref = ref.get("record")
    return _post_ref(ref) if embed.get("$type") in ("app.bsky.embed.record", "app.bsky.embed.recordWithMedia") else None


def author_of(uri: str) -> str:
    return parse_at_uri(uri).did_or_handle


def _text(value: object, fallback: str, limit: int = 1000) -> str:
    return value.strip()[:limit] if isinstance(value, str) and value.strip() else fallback


def embeds(embed: object, own_url: str | None, depth: int = 0) -> list[Embed]:
    """What a post's embed is, in words and links: alt text for media (linked to the post itself,
    where the app shows it), the title of an external link, and a link to a quoted post."""
    if not isinstance(embed, dict) or depth > 1:
        return []
    kind = embed.get("$type")
    if kind == "app.bsky.embed.images":
        images = embed.get("images") if isinstance(embed.get("images"), list) else []
        return [Embed("Image", _text(i.get("alt") if isinstance(i, dict) else None, "no description"), own_url)
                for i in images[:4]]
    if kind == "app.bsky.embed.video":
        return [Embed("Video", _text(embed.get("alt"), "no description"), own_url)]
    if kind == "app.bsky.embed.external":
        ext = embed.get("external") if isinstance(embed.get("external"), dict) else {}
        href = web_url(ext.get("uri"))
        return [Embed("Link", _text(ext.get("title"), href or "untitled"), href)]
    if kind == "app.bsky.embed.record":
        ref = embed.get("record") if isinstance(embed.get("record"), dict) else {}
        return [Embed("Quoted post", "open it on Bluesky", post_url(ref.get("uri")))]
    if kind == "app.bsky.embed.recordWithMedia":
        quoted = embeds({"$type": "app.bsky.embed.record", "record": (embed.get("record") or {}).get("record")}
                        if isinstance(embed.get("record"), dict) else None, own_url, depth + 1)
        return embeds(embed.get("media"), own_url, depth + 1) + quoted
    return []


def ago(time_us: int, now: float | None = None) -> str:
    """"now", "5m", "3h", "2d", then the date: short, like the apps people read timelines in."""
    now = time.time() if now is None else now
    seconds = max(0, int(now - time_us / 1_000_000))
    if seconds < 60:
        return "now"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    if seconds < 7 * 86400:
        return f"{seconds // 86400}d"
    then, today = time.gmtime(time_us / 1_000_000), time.gmtime(now)
    return time.strftime("%-d %b" if then.tm_year == today.tm_year else "%-d %b %Y", then)


def exact(time_us: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time_us / 1_000_000))


def iso(time_us: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time_us / 1_000_000))
