"""The feeds configuration: a TOML file named by FEATHERREADER_CONFIG, or the built-in default.

Shape (mirrors Contrail's `ContrailConfig`; every key is explained in docs/settings.md, "The feeds file"):

    namespace = "com.example"
    [collections.post]
    collection = "app.bsky.feed.post"
    queryable = { langs = {}, createdAt = { type = "range" } }
    [feeds.timeline]
    follow = "follow"                  # a short name (a key of [collections]), not an NSID
    targets = ["post"]                 # or [{ collection = "post", maxItems = 300 }]
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
METHODS = ("listRecords", "getRecord")

_TOP_KEYS = {"namespace", "collections", "feeds", "profiles", "actors"}
_COLLECTION_KEYS = {"collection", "queryable", "methods"}
_QUERYABLE_KEYS = {"type"}
_FEED_KEYS = {"follow", "targets", "maxItems", "followBackfill", "fanoutMaxFollowers"}
_TARGET_KEYS = {"collection", "maxItems"}

DEFAULT_TOML = """
namespace = "com.featherreader"
[collections.follow]
collection = "app.bsky.graph.follow"
[collections.post]
collection = "app.bsky.feed.post"
[collections.profile]
collection = "app.bsky.actor.profile"
[feeds.timeline]
follow = "follow"
targets = ["post"]
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


@dataclass(frozen=True)
class Target:
    short: str
    nsid: str
    cap: int  # target maxItems ?? feed maxItems ?? 200


@dataclass(frozen=True)
class Feed:
    name: str
    follow: str  # short name
    targets: tuple[Target, ...]
    max_items: int
    follow_backfill: int  # min(configured or 100, each target's cap) at use
    fanout_max_followers: int | None


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
    return Collection(short, nsid, table_name(short), queryable, methods)


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
        targets.append(Target(short, collections[short].nsid, cap))
    backfill = _positive_int(body.get("followBackfill", DEFAULT_FOLLOW_BACKFILL), f'Feed "{name}" followBackfill')
    fmax = body.get("fanoutMaxFollowers")
    if fmax is not None:
        fmax = _positive_int(fmax, f'Feed "{name}" fanoutMaxFollowers')
    return Feed(name, follow, tuple(targets), max_items, backfill, fmax)


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
