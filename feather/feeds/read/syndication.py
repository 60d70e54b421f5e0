"""A timeline as a feed reader reads it: Atom 1.0 (RFC 4287) and JSON Feed 1.1.

Made from exactly the entries the /timeline page shows (timeline.read), so a reader's feed can
never disagree with the page: the same order, the same text (escaped, facets as links), the same
"Reposted by" and "Replying to", and the same labels (a hidden post is left out; a masked one
carries only its label's name, never its text). The newest MAX_ENTRIES, newest first.
"""
from __future__ import annotations

import hashlib
import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from email.utils import format_datetime
from datetime import datetime, timezone

from markupsafe import Markup

ATOM_NS = "http://www.w3.org/2005/Atom"
JSON_FEED = "https://jsonfeed.org/version/1.1"
MAX_ENTRIES = 100
TITLE_CHARS = 80


@dataclass(frozen=True)
class Rendered:
    body: bytes
    content_type: str
    etag: str
    last_modified: str  # an HTTP date


def visible(entries: list) -> list:
    """What a feed reader gets: the page's entries less the hidden ones, at most MAX_ENTRIES."""
    return [e for e in entries if not getattr(e, "hidden", False)][:MAX_ENTRIES]


def _author(e) -> str:
    handle = f"@{e.handle}" if e.handle else e.did
    return f"{e.name} ({handle})" if e.name else handle


def _content(e) -> str:
    """The entry as HTML: context first, then the text and embeds as the page words them."""
    parts: list[Markup] = []
    if e.reposted_by:
        parts.append(Markup("<p><em>Reposted by {}</em></p>").format(e.reposted_by))
    if e.reply_to:
        parts.append(Markup("<p><em>Replying to {}</em></p>").format(e.reply_to))
    warn = getattr(e, "warn", None)
    if warn:  # masked: the label's name only, never the text or what it embeds
        parts.append(Markup("<p>Hidden by a content label: {}. Open the post to see it.</p>").format(warn))
        return str(Markup("").join(parts))
    card = getattr(e, "card", None)
    if card:  # another app's record: its card, as the page shows it
        title = Markup('<a href="{}">{}</a>').format(e.url, card.title) if e.url else card.title
        parts.append(Markup("<p>{} {}: {}</p>").format(card.app, card.kind, title))
    if e.html:
        parts.append(Markup("<p>{}</p>").format(e.html))
    for em in e.embeds:
        if em.href:
            parts.append(Markup('<p>{}: <a href="{}">{}</a></p>').format(em.label, em.href, em.text))
        else:
            parts.append(Markup("<p>{}: {}</p>").format(em.label, em.text))
    return str(Markup("").join(parts))


def _title(e) -> str:
    warn = getattr(e, "warn", None)
    if warn:
        text = f"[{warn}]"
    elif getattr(e, "card", None):
        text = f"{e.card.app} {e.card.kind}: {e.card.title}"
    else:
        text = " ".join(Markup(e.html).striptags().split())
    if len(text) > TITLE_CHARS:
        text = text[:TITLE_CHARS - 1] + "…"
    lead = f"{e.reposted_by} reposted {_author(e)}" if e.reposted_by else _author(e)
    return f"{lead}: {text}" if text else lead


def _entry_id(e) -> str:
    return e.url or e.uri


def _stamp(entries: list, fallback_iso: str) -> str:
    return max((e.shown_iso or e.iso for e in entries), default=fallback_iso)


def _http_date(iso: str) -> str:
    return format_datetime(datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc), usegmt=True)


def _finish(body: bytes, content_type: str, updated: str) -> Rendered:
    return Rendered(body, content_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"', _http_date(updated))


def atom(entries: list, *, title: str, feed_id: str, self_url: str, page_url: str, created_iso: str) -> Rendered:
    entries = visible(entries)
    updated = _stamp(entries, created_iso)
    ET.register_namespace("", ATOM_NS)
    root = ET.Element(f"{{{ATOM_NS}}}feed")

    def sub(parent, tag, text=None, **attrs):
        el = ET.SubElement(parent, f"{{{ATOM_NS}}}{tag}", attrs)
        if text is not None:
            el.text = text
        return el
    sub(root, "id", feed_id)
    sub(root, "title", title)
    sub(root, "updated", updated)
    author = sub(root, "author")
    sub(author, "name", "Feather")
    sub(root, "link", rel="self", href=self_url, type="application/atom+xml")
    sub(root, "link", rel="alternate", href=page_url, type="text/html")
    sub(root, "generator", "Feather")
    for e in entries:
        item = sub(root, "entry")
        sub(item, "id", _entry_id(e))
        sub(item, "title", _title(e))
        sub(item, "updated", e.shown_iso or e.iso)
        sub(item, "published", e.iso)
        who = sub(item, "author")
        sub(who, "name", _author(e))
        sub(who, "uri", f"https://bsky.app/profile/{e.did}")
        if e.url:
            sub(item, "link", rel="alternate", href=e.url, type="text/html")
        sub(item, "content", _content(e), type="html")
    body = b'<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="utf-8")
    return _finish(body, "application/atom+xml; charset=utf-8", updated)


def json_feed(entries: list, *, title: str, self_url: str, page_url: str, created_iso: str) -> Rendered:
    entries = visible(entries)
    items = []
    for e in entries:
        item = {"id": _entry_id(e), "title": _title(e), "content_html": _content(e), "date_published": e.iso, "date_modified": e.shown_iso or e.iso,
                "authors": [{"name": _author(e), "url": f"https://bsky.app/profile/{e.did}"}]}
        if e.url:
            item["url"] = e.url
        items.append(item)
    body = json.dumps({"version": JSON_FEED, "title": title, "home_page_url": page_url, "feed_url": self_url,
                       "authors": [{"name": "Feather"}], "items": items}, ensure_ascii=False, indent=1).encode()
    return _finish(body, "application/feed+json; charset=utf-8", _stamp(entries, created_iso))


def not_modified(rendered: Rendered, if_none_match: str | None, if_modified_since) -> bool:
    """RFC 9110: If-None-Match decides when present; else If-Modified-Since (a datetime or None)."""
    if if_none_match:
        return rendered.etag in [tag.strip() for tag in if_none_match.split(",")] or if_none_match.strip() == "*"
    if if_modified_since is not None:
        last = datetime.strptime(rendered.last_modified, "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=timezone.utc)
        return last <= if_modified_since
    return False

