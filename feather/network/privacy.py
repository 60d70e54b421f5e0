"""Which feed URLs may enter the catalogue, and the one spelling each is counted under.

classify() follows FeatherReader's `classify_feed_privacy` rule order:
the first matching rule wins and anything unmatched is public. The catalogue drops every URL
classified private at index time (docs/design.md, "The network catalogue"): a stranger's record
may carry a secret-bearing URL that another reader wrote without checking, and we must neither
keep nor show it.

canonicalise() is our own: the reader has no canonicaliser to reuse. It merges
only spellings that cannot name different documents, plus the trailing slash and tracking
parameters, which readers add and drop freely:
  - scheme and host lower-cased, a trailing dot on the host removed, the default port dropped;
  - the fragment dropped (never sent to the server);
  - percent-escapes upper-cased, escaped unreserved characters decoded, dot-segments removed;
  - an empty path becomes "/", and one trailing "/" on a longer path is removed;
  - tracking parameters (utm_*, fbclid, gclid, …) removed, the rest ordered by name.
It does NOT merge http with https or www.example.com with example.com: those can be different
servers, and merging would make us display a URL nobody subscribed to.
"""
from __future__ import annotations

import re
from urllib.parse import SplitResult, parse_qsl, urlsplit

from feather.atproto.syntax import is_valid_did, is_valid_record_key

MAX_URL_CHARS = 2048

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"[0-9a-fA-F]{16,}")
_B64 = re.compile(r"[A-Za-z0-9_-]{16,}={0,2}")
_FEED_SUFFIXES = (".rss20", ".atom", ".json", ".rss", ".xml")
_PATH_MARKERS = ("/private/", "/feed/private/", "/rss/private/", "/private-feed/", "/members/", "/member/",
                 "/subscriber/")
_CREDENTIAL_KEYS = frozenset("token key auth secret k sig hash access apikey api_key uuid id u s p private "
                             "password pw".split())
# (host substring, marker that makes it private, or None: the host alone is enough)
_PROVIDERS = (
    ("substack.com", "/feed/private/"), ("patreon.com", "auth="), ("ghost.io", "uuid="),
    ("buttondown.email", "token"), ("buttondown.com", "token"), ("beehiiv.com", "token"),
    ("megaphone.fm", "token"), ("acast.com", "token"), ("omny.fm", "token"),
    ("podcasts.apple.com", "token"), ("spotify.com", "token"), ("redcircle.com", "private"),
    ("memberful.com", None), ("pico.link", None), ("steadyhq.com", None), ("supercast.com", None),
    ("supercast.tech", None), ("supportingcast.fm", None),
)
_YOUTUBE_KEYS = frozenset({"channel_id", "playlist_id", "user"})
_TRACKING = frozenset({"fbclid", "gclid", "dclid", "msclkid", "mc_cid", "mc_eid", "_hsenc", "_hsmi", "igshid",
                       "yclid", "twclid"})
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
PUBLICATION = "site.standard.publication"


def is_private(url: str) -> bool:
    return classify(url) == "private"


def classify(url: str) -> str:
    """'private' or 'public', by the first rule that matches."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower()
    except ValueError:
        return "public"  # unparseable is public here; is_storable() refuses it separately
    if parts.username is not None or parts.password is not None:
        return "private"  # 1. userinfo
    if parts.scheme.lower() == "at":
        return "public" if _is_publication_uri(url.strip()) else "private"  # 2. fail closed
    query = parse_qsl(parts.query, keep_blank_values=True)
    if _is_youtube_feed(host, parts.path, query):
        return "public"  # 3
    lowered = url.lower()
    for needle, marker in _PROVIDERS:  # 4
        if needle in host and (marker is None or marker in lowered):
            return "private"
    path = parts.path.lower()
    if any(marker in path + ("/" if not path.endswith("/") else "") for marker in _PATH_MARKERS):
        return "private"  # 5
    for key, value in query:  # 6
        if key.lower() in _CREDENTIAL_KEYS and (_UUID.fullmatch(value) or len(value) >= 8):
            return "private"
    segments = [s for s in parts.path.split("/") if s]
    if any(_secret_segment(s) for s in segments) or any(_high_entropy(v) for _, v in query):
        return "private"  # 7
    return "public"


def is_storable(url: str) -> bool:
    """http(s) with a host, or a DID-form publication at:// URI; nothing else can be a feed here."""
    if not isinstance(url, str) or not url.strip() or len(url) > MAX_URL_CHARS:
        return False
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return False
    if parts.scheme.lower() in ("http", "https"):
        return bool(parts.hostname)
    return parts.scheme.lower() == "at" and _is_publication_uri(url.strip())


def indexable(url) -> str | None:
    """The canonical URL to count a record under, or None when it must not be indexed at all."""
    if not isinstance(url, str) or not is_storable(url) or is_private(url):
        return None
    canonical = canonicalise(url)
    return canonical if canonical and not is_private(canonical) else None


def canonicalise(url: str) -> str | None:
    url = url.strip()
    if url[:5].lower() == "at://":  # its "netloc" is a DID, which urlsplit would read as host:port
        return url if _is_publication_uri(url) else None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname.lower().rstrip(".")
    if ":" in host:
        host = f"[{host}]"  # IPv6 literal
    if port is not None and port != {"http": 80, "https": 443}[scheme]:
        host = f"{host}:{port}"
    path = _remove_dot_segments(_normalise_escapes(parts.path)) or "/"
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    pairs = [p for p in parts.query.split("&") if p]
    kept = [_normalise_escapes(p) for p in pairs if not _is_tracking(p.split("=", 1)[0])]
    kept.sort(key=lambda p: p.split("=", 1)[0])  # stable: repeated keys keep their order
    return SplitResult(scheme, host, path, "&".join(kept), "").geturl()


# --- helpers
def _is_publication_uri(url: str) -> bool:
    rest = url[len("at://"):] if url.startswith("at://") else ""
    bits = rest.split("/")
    return (len(bits) == 3 and is_valid_did(bits[0]) and bits[1] == PUBLICATION
            and is_valid_record_key(bits[2]))


def _is_youtube_feed(host: str, path: str, query: list[tuple[str, str]]) -> bool:
    if not (host in ("youtube.com", "www.youtube.com") or host.endswith(".youtube.com")):
        return False
    return path.startswith("/feeds/videos.xml") and all(k in _YOUTUBE_KEYS for k, _ in query)


def _high_entropy(value: str) -> bool:
    if _UUID.fullmatch(value) or _HEX.fullmatch(value):
        return True
    if not _B64.fullmatch(value):
        return False
    body = value.rstrip("=")
    has_letter = any(c.isalpha() for c in body)
    has_digit = any(c.isdigit() for c in body)
    separators = sum(1 for c in body if c in "-_")
    return has_letter and has_digit and len(set(body)) >= 10 and separators < 3


def _secret_segment(segment: str) -> bool:
    candidates = [segment]
    lowered = segment.lower()
    for suffix in _FEED_SUFFIXES:
        if lowered.endswith(suffix):
            candidates.append(segment[: -len(suffix)])
            break
    if any(_high_entropy(c) for c in candidates) or _UUID.search(segment):
        return True
    return any(_high_entropy(part) for part in re.split(r"[._-]", segment) if part)


def _is_tracking(key: str) -> bool:
    key = key.lower()
    return key.startswith("utm_") or key in _TRACKING


def _normalise_escapes(text: str) -> str:
    def fix(match: re.Match) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else "%" + match.group(1).upper()

    return re.sub(r"%([0-9a-fA-F]{2})", fix, text)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, for absolute paths: '/a/./b/../c' -> '/a/c'."""
    if "." not in path:
        return path
    out: list[str] = []
    segments = path.split("/")
    for i, seg in enumerate(segments):
        if seg == ".":
            if i == len(segments) - 1:
                out.append("")
            continue
        if seg == "..":
            if len(out) > 1:
                out.pop()
            if i == len(segments) - 1:
                out.append("")
            continue
        out.append(seg)
    return "/".join(out) if out and out[0] == "" else "/" + "/".join(out)
