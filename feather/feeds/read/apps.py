"""The other apps' records as timeline entries: a title, a description, the app's name and a link.

"Everything" shows the records people write on Tangled, Grain, Semble, Leaflet and Sifa beside
their Bluesky posts. Each collection gets a small renderer built from the record alone (and, for
a Tangled star, the starred repository's record when Feather stores it): nothing is loaded from
the app or anywhere else, the page only links to the record on its app. The collections, their
fields and the link patterns are documented, with the lexicon each was read from, in
docs/everything-lexicons.md.

Every field is a stranger's input: a card carries plain text only (the template escapes it),
clipped to a length a timeline can show, and a link is built only from parts that passed their
syntax check (a DID, a record key) or are percent-encoded.
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from feather.atproto.syntax import InvalidSyntax, is_valid_did, is_valid_record_key, parse_at_uri
from feather.feeds.read.render import web_url

TITLE_CHARS, DESCRIPTION_CHARS = 200, 500

TANGLED_REPO = "sh.tangled.repo"
TANGLED_STAR = "sh.tangled.feed.star"
GRAIN_GALLERY = "social.grain.gallery"
SEMBLE_CARD = "network.cosmik.card"
SEMBLE_COLLECTION = "network.cosmik.collection"
LEAFLET_DOCUMENT = "pub.leaflet.document"
SIFA_POSITION = "id.sifa.profile.position"
SIFA_PROJECT = "id.sifa.profile.project"
SIFA_PUBLICATION = "id.sifa.profile.publication"

# NSID -> (the app's name, what one record is), for the page's picker and each card's byline.
KINDS = {
    "app.bsky.feed.post": ("Bluesky", "posts"),
    TANGLED_REPO: ("Tangled", "repositories"),
    TANGLED_STAR: ("Tangled", "stars"),
    GRAIN_GALLERY: ("Grain", "galleries"),
    SEMBLE_CARD: ("Semble", "cards"),
    SEMBLE_COLLECTION: ("Semble", "collections"),
    LEAFLET_DOCUMENT: ("Leaflet", "documents"),
    SIFA_POSITION: ("Sifa", "positions"),
    SIFA_PROJECT: ("Sifa", "projects"),
    SIFA_PUBLICATION: ("Sifa", "publications"),
}


@dataclass(frozen=True)
class Card:
    app: str  # "Tangled"
    kind: str  # "repository", one record's word
    title: str
    description: str
    href: str | None  # the record on its app; None when no link can be built from what is stored
    facets: object = None  # Grain descriptions carry richtext facets, rendered like a post's


def collection_label(nsid: str, short: str) -> str:
    """What the page's picker calls a collection: "Tangled repositories", else its short name."""
    app, kind = KINDS.get(nsid, (None, None))
    return f"{app} {kind}" if app else short


def star_subject(nsid: str, value: dict) -> str | None:
    """The at:// URI of the repository a Tangled star stars (whose name the card needs)."""
    subject = value.get("subject") if nsid == TANGLED_STAR else None
    return subject if isinstance(subject, str) and _parts(subject, TANGLED_REPO) else None


def card(nsid: str, did: str, rkey: str, value: dict, *, handle: str | None = None,
         starred: dict | None = None) -> Card | None:
    """The card for a record of one of the apps, or None for a collection with no renderer (a
    Bluesky post, which the page renders itself). `starred` maps a star's subject URI to that
    repository's stored record."""
    make = _RENDERERS.get(nsid)
    if make is None or not is_valid_did(did) or not is_valid_record_key(rkey):
        return None
    return make(did, rkey, value, handle, starred or {})


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _title(value: object) -> str:
    """One line: whitespace runs (newlines included) become one space."""
    return _clip(" ".join(value.split()), TITLE_CHARS) if isinstance(value, str) else ""


def _about(value: object) -> str:
    """A description keeps its line breaks (the page shows them as the post text's)."""
    return _clip(value.rstrip(), DESCRIPTION_CHARS) if isinstance(value, str) else ""  # the start kept: facets count bytes from it


def _seg(value: str) -> str:
    return quote(value, safe=":")


def _parts(uri: object, collection: str) -> tuple[str, str] | None:
    """(did, rkey) of an at:// URI naming a record of collection, else None."""
    try:
        parsed = parse_at_uri(uri) if isinstance(uri, str) else None
    except InvalidSyntax:
        return None
    if (parsed is None or parsed.collection != collection or not parsed.rkey
            or not is_valid_did(parsed.did_or_handle)):
        return None
    return parsed.did_or_handle, parsed.rkey


def _tangled_repo(did, rkey, value, handle, starred):
    name = _title(value.get("name"))
    href = f"https://tangled.org/{_seg(did)}/{quote(name, safe='')}" if name else f"https://tangled.org/{_seg(did)}"
    return Card("Tangled", "repository", name or "a repository", _about(value.get("description")),
                href)


def _tangled_star(did, rkey, value, handle, starred):
    subject = value.get("subject")
    parts = _parts(subject, TANGLED_REPO)
    if parts is None:
        return Card("Tangled", "star", "starred a repository", "", None)
    repo = starred.get(subject)
    name = _title(repo.get("name")) if isinstance(repo, dict) else ""
    owner = f"https://tangled.org/{_seg(parts[0])}"
    if not name:
        return Card("Tangled", "star", "starred a repository", "", owner)
    description = _about(repo.get("description"))
    return Card("Tangled", "star", f"starred {name}", description, f"{owner}/{quote(name, safe='')}")


def _grain_gallery(did, rkey, value, handle, starred):
    return Card("Grain", "gallery", _title(value.get("title")) or "a gallery",
                _about(value.get("description")),
                f"https://grain.social/profile/{_seg(did)}/gallery/{quote(rkey, safe='')}", value.get("facets"))


def _semble_card(did, rkey, value, handle, starred):
    content = value.get("content") if isinstance(value.get("content"), dict) else {}
    if value.get("type") == "NOTE" or str(content.get("$type")).endswith("#noteContent"):
        note = _about(content.get("text"))
        return Card("Semble", "note", "a note", note, _semble_profile(handle))
    url = web_url(content.get("url")) or web_url(value.get("url"))
    meta = content.get("metadata") if isinstance(content.get("metadata"), dict) else {}
    title = _title(meta.get("title")) or (urlsplit(url).hostname if url else "") or "a link"
    href = f"https://semble.so/url?id={quote(url, safe='')}" if url else None
    return Card("Semble", "card", title, _about(meta.get("description")), href)


def _semble_profile(handle: str | None) -> str | None:
    # Semble's routes take a handle; whether a DID works there is unconfirmed, so no link without one.
    return f"https://semble.so/profile/{quote(handle, safe='')}" if handle else None


def _semble_collection(did, rkey, value, handle, starred):
    profile = _semble_profile(handle)
    return Card("Semble", "collection", _title(value.get("name")) or "a collection",
                _about(value.get("description")),
                f"{profile}/collections/{quote(rkey, safe='')}" if profile else None)


def _leaflet_document(did, rkey, value, handle, starred):
    publication = _parts(value.get("publication"), "pub.leaflet.publication")
    if publication is not None and publication[0] == did:
        href = f"https://leaflet.pub/lish/{_seg(did)}/{quote(publication[1], safe='')}/{quote(rkey, safe='')}"
    else:
        href = f"https://leaflet.pub/p/{_seg(did)}/{quote(rkey, safe='')}"
    return Card("Leaflet", "document", _title(value.get("title")) or "a document",
                _about(value.get("description")), href)


def _sifa(kind: str, title_key: str):
    def make(did, rkey, value, handle, starred):
        title = _title(value.get(title_key))
        company = _title(value.get("company")) if kind == "position" else ""
        if title and company:
            title = _title(f"{title} at {company}")
        # Sifa has no page per entry: the profile, which lists them all.
        return Card("Sifa", kind, title or f"a {kind}", _about(value.get("description")),
                    f"https://sifa.id/p/{_seg(did)}")
    return make


_RENDERERS = {
    TANGLED_REPO: _tangled_repo,
    TANGLED_STAR: _tangled_star,
    GRAIN_GALLERY: _grain_gallery,
    SEMBLE_CARD: _semble_card,
    SEMBLE_COLLECTION: _semble_collection,
    LEAFLET_DOCUMENT: _leaflet_document,
    SIFA_POSITION: _sifa("position", "title"),
    SIFA_PROJECT: _sifa("project", "name"),
    SIFA_PUBLICATION: _sifa("publication", "title"),
}
