"""The feeds configuration: a TOML file named by FEATHERREADER_CONFIG, or the built-in default.

Shape (mirrors Contrail's `ContrailConfig`; every key is explained in docs/settings.md, "The feeds file"):

    namespace = "com.example"
    [collections.post]
    collection = "app.bsky.feed.post"
    queryable = { langs = {}, createdAt = { type = "range" } }
    searchable = ["text"]              # fields search= looks in (full-text, store/search.py)
    [collections.repost]
    collection = "app.bsky.feed.repost"
    reposts = "post"                   # its records' subject.uri is a record of [collections.post]
    [feeds.timeline]
    title = "Following"                # what the page and published generators call it
    follow = "follow"                  # a short name (a key of [collections]), not an NSID
    targets = ["post", "repost"]       # or [{ collection = "post", maxItems = 300 }]
    replies = "all"                    # or "followed" (replies to people the reader follows), "none"
    maxItems = 200
    followBackfill = 100               # records pulled in on a new follow (≤ the cap)
    fanoutMaxFollowers = 50000         # hybrid fan-out; unset = always fan out
    actors = ["did:plc:…"]             # top level: timelines always kept (FEED_SERVE signed-in/readers)
    [collections.follow]
    methods = ["listRecords"]          # follow and profile collections are not served unless listed

Everything is validated once at start. A misspelled key is an error, not a silent default:
errors name the key (or the feed and the unknown short name) and, from load(), the file.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from feather.atproto.syntax import is_valid_did, is_valid_nsid

DEFAULT_MAX_ITEMS = 200
DEFAULT_FOLLOW_BACKFILL = 100
DEFAULT_NAMESPACE = "com.featherreader"
DEFAULT_PROFILE_NSID = "app.bsky.actor.profile"
MAX_QUERYABLE_FIELDS = 32
MAX_SEARCHABLE_FIELDS = 8
METHODS = ("listRecords", "getRecord")

_TOP_KEYS = {"namespace", "collections", "feeds", "profiles", "actors"}
_COLLECTION_KEYS = {"collection", "queryable", "methods", "reposts", "searchable"}
_QUERYABLE_KEYS = {"type"}
_FEED_KEYS = {"follow", "targets", "maxItems", "followBackfill", "fanoutMaxFollowers", "replies", "title",
              "mixed"}
REPLIES = ("all", "followed", "none")
_TARGET_KEYS = {"collection", "maxItems"}

DEFAULT_TOML = """
namespace = "com.featherreader"
[collections.follow]
collection = "app.bsky.graph.follow"
[collections.post]
collection = "app.bsky.feed.post"
searchable = ["text"]
[collections.repost]
collection = "app.bsky.feed.repost"
reposts = "post"
[collections.profile]
collection = "app.bsky.actor.profile"
[feeds.timeline]
title = "Following"
follow = "follow"
targets = ["post", "repost"]
[feeds.posts]
title = "Following, posts only"
follow = "follow"
targets = ["post"]
# The other apps graph sync knows: each collection's lexicon and link are in docs/everything-lexicons.md.
[collections.tangled_repo]
collection = "sh.tangled.repo"
[collections.tangled_star]
collection = "sh.tangled.feed.star"
[collections.grain_gallery]
collection = "social.grain.gallery"
[collections.semble_card]
collection = "network.cosmik.card"
[collections.semble_collection]
collection = "network.cosmik.collection"
[collections.leaflet_document]
collection = "pub.leaflet.document"
[collections.sifa_position]
collection = "id.sifa.profile.position"
[collections.sifa_project]
collection = "id.sifa.profile.project"
[collections.sifa_publication]
collection = "id.sifa.profile.publication"
[feeds.everything]
title = "Everything"
follow = "follow"
mixed = true
targets = ["post", "repost", "tangled_repo", "tangled_star", "grain_gallery", "semble_card",
           "semble_collection", "leaflet_document", "sifa_position", "sifa_project", "sifa_publication"]
"""

# Field paths end up inside SQL JSON paths, so only plain identifiers (dot-separated) pass.
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}(\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,3}")
_FEED_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
# tomllib's time and memory grow with the square of a dotted key's parts (it records every prefix):
# `a.a.a…` on one line of a megabyte exhausts memory. No key here has more than a few parts, so a
# line with more dots outside its strings and comments than MAX_LINE_DOTS is refused before tomllib.
MAX_LINE_DOTS = 64
_TOML_SKIPPED = re.compile(r'"(?:[^"\\\n]++|\\.)*+"?|\'[^\'\n]*+\'?|#[^\n]*+')  # never fails: linear
_DOTTY_LINE = re.compile(r"^(?:[^.\n]*+\.){%d}" % (MAX_LINE_DOTS + 1), re.M)


class FeedsConfigError(ValueError):
    """The feeds configuration is invalid; the message says where and why."""


@dataclass(frozen=True)
class Queryable:
    path: tuple[str, ...]  # JSON path below the record, e.g. ("subject", "uri")
    param: str  # query parameter name: dotted path camelCased ("subjectUri")
    range: bool


@dataclass(frozen=True)
class Collection:
    short: str
    nsid: str
    table: str  # feed_records_<short>, non-alphanumerics as "_"
    queryable: dict[str, Queryable] = field(default_factory=dict)  # by param name
    methods: frozenset[str] | None = None  # XRPC methods served; None = the default for its role
    reposts: str | None = None  # short name of the collection whose records these repost (subject.uri)
    searchable: tuple[tuple[str, ...], ...] = ()  # JSON paths whose text search= finds (Contrail's key)

    @property
    def search_table(self) -> str:
        """feed_search_<short>: its full-text index (store/search.py), when searchable is set."""
        return "feed_search_" + self.table.removeprefix("feed_records_")


@dataclass(frozen=True)
class Target:
    short: str
    nsid: str
    cap: int  # target maxItems ?? feed maxItems ?? 200
    reposts: str | None = None  # the NSID this target's records repost, when it is a repost collection


@dataclass(frozen=True)
class Feed:
    name: str
    follow: str  # short name
    targets: tuple[Target, ...]
    max_items: int
    follow_backfill: int  # min(configured or 100, each target's cap) at use
    fanout_max_followers: int | None
    replies: str = "all"  # which replies show: all, followed (to someone the reader follows), none
    title: str = ""  # what the page and the generators call it; the name when unset
    mixed: bool = False  # every target in one timeline (read/mixed.py), not one target at a time

    @property
    def label(self) -> str:
        return self.title or self.name

    def reposts_of(self, target: Target) -> Target | None:
        """The feed's repost target whose records repost `target`'s, if it lists one."""
        return next((t for t in self.targets if t.reposts == target.nsid), None)

    @property
    def shown(self) -> tuple[Target, ...]:
        """The targets a reader picks between: a repost target is read merged into the one it reposts."""
        return tuple(t for t in self.targets if t.reposts is None or
                     not any(o.nsid == t.reposts for o in self.targets))


@dataclass(frozen=True)
class FeedsConfig:
    namespace: str
    collections: dict[str, Collection]  # by short name
    feeds: dict[str, Feed]
    profiles: tuple[str, ...] = (DEFAULT_PROFILE_NSID,)
    actors: tuple[str, ...] = ()  # DIDs whose timelines are always kept

    def methods_of(self, short: str) -> frozenset[str]:
        """Follow and profile collections hold who-follows-whom and profiles, which Contrail never
        lists publicly (`methods: []`); everything else serves both methods unless told otherwise."""
        c = self.collections[short]
        if c.methods is not None:
            return c.methods
        private = c.nsid in self.follow_nsids or c.nsid in self.profiles
        return frozenset() if private else frozenset(METHODS)

    def by_nsid(self, nsid: str) -> Collection | None:
        for c in self.collections.values():
            if c.nsid == nsid:
                return c
        return None

    @property
    def follow_nsids(self) -> frozenset[str]:
        return frozenset(self.collections[f.follow].nsid for f in self.feeds.values())

    @property
    def target_nsids(self) -> frozenset[str]:
        return frozenset(t.nsid for f in self.feeds.values() for t in f.targets)

    @property
    def reposted_nsids(self) -> frozenset[str]:
        """Collections some feed shows through reposts (their records can be anyone's)."""
        return frozenset(t.reposts for f in self.feeds.values() for t in f.targets if t.reposts)

    @property
    def feed_mutating_nsids(self) -> frozenset[str]:
        """Contrail's getFeedMutatingNsids: only these can push a feed over its cap."""
        return self.follow_nsids | self.target_nsids

    def target_caps(self) -> dict[str, int]:
        """The global prune cap per target NSID: the largest cap across feeds (buildFeedTargetCaps)."""
        caps: dict[str, int] = {}
        for feed in self.feeds.values():
            for t in feed.targets:
                caps[t.nsid] = max(caps.get(t.nsid, 0), t.cap)
        return caps


def table_name(short: str) -> str:
    return "feed_records_" + re.sub(r"[^A-Za-z0-9]", "_", short).lower()


def camel(path: str) -> str:
    head, *rest = path.split(".")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _known_keys(body: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise FeedsConfigError(f'{where}: unknown key "{unknown[0]}" (known: {", ".join(sorted(allowed))})')


def _positive_int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise FeedsConfigError(f"{where} must be a whole number >= 1; got {value!r}")
    return value


def _collection(short: str, body: Any) -> Collection:
    if not isinstance(body, dict) or not isinstance(body.get("collection"), str):
        raise FeedsConfigError(f'Collection "{short}" needs `collection = "<NSID>"`')
    _known_keys(body, _COLLECTION_KEYS, f"[collections.{short}]")
    nsid = body["collection"]
    if not is_valid_nsid(nsid):
        raise FeedsConfigError(f'Collection "{short}": "{nsid}" is not a valid NSID')
    queryable: dict[str, Queryable] = {}
    raw = body.get("queryable", {})
    if not isinstance(raw, dict) or len(raw) > MAX_QUERYABLE_FIELDS:
        raise FeedsConfigError(f'Collection "{short}": queryable must be a table of at most {MAX_QUERYABLE_FIELDS} fields')
    for name, spec in raw.items():
        if not _FIELD.fullmatch(name):
            raise FeedsConfigError(f'Collection "{short}": queryable field "{name}" is not a plain dotted field name')
        spec = spec if isinstance(spec, dict) else {}
        _known_keys(spec, _QUERYABLE_KEYS, f'[collections.{short}] queryable "{name}"')
        kind = spec.get("type")
        if kind not in (None, "range"):
            raise FeedsConfigError(f'Collection "{short}": queryable "{name}" type must be "range" or absent')
        q = Queryable(tuple(name.split(".")), camel(name), kind == "range")
        queryable[q.param] = q
    methods = body.get("methods")
    if methods is not None:
        if not isinstance(methods, list) or not all(m in METHODS for m in methods):
            raise FeedsConfigError(f'[collections.{short}] methods must be a list of {", ".join(METHODS)}')
        methods = frozenset(methods)
    reposts = body.get("reposts")
    if reposts is not None and not isinstance(reposts, str):
        raise FeedsConfigError(f'[collections.{short}] reposts must be the short name of a collection')
    searchable = body.get("searchable", [])
    if (not isinstance(searchable, list) or len(searchable) > MAX_SEARCHABLE_FIELDS
            or not all(isinstance(f, str) and _FIELD.fullmatch(f) for f in searchable)):
        raise FeedsConfigError(f'[collections.{short}] searchable must be a list of at most {MAX_SEARCHABLE_FIELDS}'
                               ' plain dotted field names, like ["text"]')
    searchable = tuple(dict.fromkeys(tuple(f.split(".")) for f in searchable))
    return Collection(short, nsid, table_name(short), queryable, methods, reposts, searchable)


def _feed(name: str, body: Any, collections: dict[str, Collection]) -> Feed:
    if not _FEED_NAME.fullmatch(name):
        raise FeedsConfigError(f'Feed "{name}": a feed name is letters, digits, "-" and "_"')
    if not isinstance(body, dict):
        raise FeedsConfigError(f'Feed "{name}" must be a table')
    _known_keys(body, _FEED_KEYS, f"[feeds.{name}]")
    follow = body.get("follow", "follow")
    if not isinstance(follow, str) or follow not in collections:
        raise FeedsConfigError(f'Feed "{name}" references unknown follow collection "{follow}"')
    max_items = _positive_int(body.get("maxItems", DEFAULT_MAX_ITEMS), f'Feed "{name}" maxItems')
    raw_targets = body.get("targets")
    if not isinstance(raw_targets, list) or not raw_targets:
        raise FeedsConfigError(f'Feed "{name}" needs a non-empty `targets` list')
    targets = []
    for raw in raw_targets:
        short, cap = raw, max_items
        if isinstance(raw, dict):
            _known_keys(raw, _TARGET_KEYS, f'Feed "{name}" target')
            short = raw.get("collection")
            if "maxItems" in raw:
                cap = _positive_int(raw["maxItems"], f'Feed "{name}" target "{short}" maxItems')
        if not isinstance(short, str) or short not in collections:
            raise FeedsConfigError(f'Feed "{name}" references unknown target collection "{short}"')
        if any(t.short == short for t in targets):
            raise FeedsConfigError(f'Feed "{name}" lists target "{short}" twice')
        reposted = collections[short].reposts
        targets.append(Target(short, collections[short].nsid, cap,
                              collections[reposted].nsid if reposted else None))
    backfill = _positive_int(body.get("followBackfill", DEFAULT_FOLLOW_BACKFILL), f'Feed "{name}" followBackfill')
    fmax = body.get("fanoutMaxFollowers")
    if fmax is not None:
        fmax = _positive_int(fmax, f'Feed "{name}" fanoutMaxFollowers')
    replies = body.get("replies", "all")
    if replies not in REPLIES:
        raise FeedsConfigError(f'Feed "{name}" replies must be one of {", ".join(REPLIES)}; got {replies!r}')
    title = body.get("title", "")
    if not isinstance(title, str) or len(title) > 64:
        raise FeedsConfigError(f'Feed "{name}" title must be text of at most 64 characters')
    mixed = body.get("mixed", False)
    if not isinstance(mixed, bool):
        raise FeedsConfigError(f'Feed "{name}" mixed must be true or false')
    if mixed and fmax is not None:
        raise FeedsConfigError(f'Feed "{name}" cannot be mixed and have fanoutMaxFollowers')
    feed = Feed(name, follow, tuple(targets), max_items, backfill, fmax, replies, title.strip(), mixed)
    for t in feed.targets:
        if t.reposts is not None and fmax is not None:
            # Heavy authors' reposts would have to be merged at read time too; not built yet.
            raise FeedsConfigError(f'Feed "{name}" cannot list the repost collection "{t.short}" together'
                                   f' with fanoutMaxFollowers')
    return feed


def parse(data: dict) -> FeedsConfig:
    _known_keys(data, _TOP_KEYS, "top level")
    namespace = data.get("namespace", DEFAULT_NAMESPACE)
    if not isinstance(namespace, str) or not is_valid_nsid(namespace + ".getFeed"):
        raise FeedsConfigError(f'namespace "{namespace}" does not make a valid NSID with ".getFeed"')
    raw_collections = data.get("collections", {})
    if not isinstance(raw_collections, dict):
        raise FeedsConfigError("[collections] must be a table")
    collections = {short: _collection(short, body) for short, body in raw_collections.items()}
    seen: dict[str, str] = {}
    for c in collections.values():
        if c.nsid in seen:
            # The second table would never fill: ingest routes an NSID to one collection.
            raise FeedsConfigError(f'[collections.{c.short}] and [collections.{seen[c.nsid]}] both name "{c.nsid}"')
        seen[c.nsid] = c.short
    for c in collections.values():
        if c.reposts is not None and c.reposts not in collections:
            raise FeedsConfigError(f'[collections.{c.short}] reposts unknown collection "{c.reposts}"')
        if c.reposts == c.short:
            raise FeedsConfigError(f'[collections.{c.short}] cannot repost itself')
    tables = [c.table for c in collections.values()]
    if len(set(tables)) != len(tables):
        raise FeedsConfigError("two collection short names map to the same table; rename one")
    raw_feeds = data.get("feeds", {})
    if not isinstance(raw_feeds, dict):
        raise FeedsConfigError("[feeds] must be a table")
    if "follow" not in collections and any(
            isinstance(b, dict) and "follow" not in b for b in raw_feeds.values()):
        # Contrail adds the follow collection automatically when a feed names none.
        collections["follow"] = Collection("follow", "app.bsky.graph.follow", table_name("follow"))
    feeds = {name: _feed(name, body, collections) for name, body in raw_feeds.items()}
    profiles = data.get("profiles", [DEFAULT_PROFILE_NSID])
    if not isinstance(profiles, list) or not all(isinstance(p, str) and is_valid_nsid(p) for p in profiles):
        raise FeedsConfigError("profiles must be a list of NSIDs")
    actors = data.get("actors", [])
    if not isinstance(actors, list) or not all(isinstance(a, str) and is_valid_did(a) for a in actors):
        raise FeedsConfigError("actors must be a list of DIDs")
    return FeedsConfig(namespace, collections, feeds, tuple(profiles), tuple(dict.fromkeys(actors)))


def load(path: str | None) -> FeedsConfig:
    """Parse the file at path (or the built-in default when empty); raise FeedsConfigError."""
    if not path:
        return parse(tomllib.loads(DEFAULT_TOML))
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise FeedsConfigError(f"FEATHERREADER_CONFIG: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise FeedsConfigError(f"FEATHERREADER_CONFIG: {path} is not UTF-8 (byte {exc.start})") from None
    if _DOTTY_LINE.search(_TOML_SKIPPED.sub("", text)):
        raise FeedsConfigError(f"FEATHERREADER_CONFIG: {path} has a line with more than {MAX_LINE_DOTS} dots"
                               " outside strings and comments (a key of that many parts)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FeedsConfigError(f"FEATHERREADER_CONFIG: {path} is not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise FeedsConfigError(f"FEATHERREADER_CONFIG: {path} nests arrays or tables too deeply") from None
    try:
        return parse(data)
    except FeedsConfigError as exc:
        raise FeedsConfigError(f"{path}: {exc}") from None
