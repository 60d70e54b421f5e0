"""No cache grows without bound on keys from outside (handles, DIDs, issuers, URLs, addresses).

The walk parses every module in feather/ and finds each long-lived mutable mapping or set: a
module-level or class-level assignment, a `self.<attr> =` anywhere, a dataclass
`field(default_factory=dict)`, and an unbounded `functools.lru_cache(maxsize=None)` /
`functools.cache`. Each must be named in ALLOWED with the reason it cannot grow with outside
input (keyed by configuration, rebuilt from the database, one per batch) or the bound that stops
it (a TtlCache, a max size). A new `self._seen = {}` fails here until someone says why it is safe,
and an entry whose code is gone fails too, so the list stays the truth.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from feather.atproto.cache import TtlCache

ROOT = Path(__file__).resolve().parent.parent
MUTABLE_CALLS = {"dict", "set", "OrderedDict", "defaultdict", "Counter", "ChainMap", "WeakValueDictionary",
                 "WeakKeyDictionary"}

CONSTANT = "constant table, never written"
ALLOWED = {
    # bounded
    "feather/atproto/cache.py::TtlCache._data": "bounded: the TtlCache itself (ttl and max_entries)",
    "feather/feeds/web/budget.py::OutboundBudget._clients":
        "bounded: max_clients, the least recently used client dropped first (a token bucket needs no ttl)",
    "feather/feeds/read/labels.py::Health.down_until":
        "bounded: at most 1,000 labelers, the oldest failure dropped first (Health.failed)",
    "feather/feeds/read/reposts.py::_failed": "bounded: cleared when it reaches MAX_REMEMBERED (10,000) records",
    # one page render: made and dropped with it
    "feather/feeds/read/labels.py::Found.by_labeler":
        "one per read: the labels of one page's posts and authors, from the labelers asked (at most 20)",
    "feather/feeds/read/labels.py::Found.missing": "one per read: the page's subjects a labeler did not answer",
    "feather/feeds/read/timeline.py::_Context.quoted_text":
        "bounded: the quoted posts of one page of at most MAX_PAGE_SIZE entries, dropped with the page",
    # keyed by configuration, or rebuilt from the database
    "feather/config.py::Settings._values": "keyed by setting names (the environment read at start)",
    "feather/process/status.py::Board.pieces": "keyed by the supervised streams, jobs and tasks (configuration)",
    "feather/process/workers.py::PgClaims.owned": "keyed by subscription and job names (configuration)",
    "feather/jetstream/engine.py::Engine.streams": "keyed by subscription names (configuration)",
    "feather/jetstream/engine.py::Engine._standby_logged": "keyed by subscription names (configuration)",
    "feather/jetstream/engine.py::Engine._prepared": "keyed by subscription names (configuration)",
    "feather/jetstream/state.py::StreamState.stats": "keyed by a fixed set of counter names in the code",
    "feather/jetstream/subscriptions.py::Subscription.extra": "a subscription's own settings (configuration)",
    "feather/feeds/config.py::Collection.queryable": "keyed by the feeds configuration's parameters",
    "feather/features.py::Job.kwargs": "a scheduled job's arguments, written in the code (configuration)",
    "feather/process/supervisor.py::Piece.extra": "a piece's own facts (host, lag…), a fixed set of names",
    "feather/feeds/ingest/admission.py::Admission.served":
        "replaced wholesale from the database: the actors this instance serves",
    "feather/feeds/ingest/admission.py::Admission.followees":
        "replaced wholesale from the database: whom the served actors follow",
    "feather/feeds/ingest/admission.py::Admission.reposted":
        "replaced wholesale from the database: the records reposted into served timelines (bounded by their caps)",
    "feather/feeds/ingest/admission.py::Admission.recent":
        "pruned to the last RECENT_SECS at every rebuild (every REBUILD_SECS at the latest): what admit added lately",
    "feather/feeds/ingest/admission.py::Admission.pending":
        "each entry dropped by the probe once settled (SETTLE_SECS): the unfollows of the last few seconds' batches",
    "feather/feeds/ingest/narrow.py::Narrowing.rewinds": "keyed by shard number: at most FEED_NARROW_MAX_DIDS / 10,000 + 1",
    # short-lived: one per batch, request or verdict
    "feather/sync/handler.py::_Sets._cache": "one per batch: at most the batch's authors",
    "feather/feeds/ingest/batch.py::Net.upserts": "one per batch: at most the batch's records",
    "feather/feeds/ingest/batch.py::Net.deletes": "one per batch: at most the batch's records",
    "feather/feeds/ingest/batch.py::Net.tombstones": "one per batch: at most the batch's records",
    "feather/feeds/ingest/batch.py::Net.targets": "one per batch: at most the batch's records",
    "feather/feeds/ingest/batch.py::Net.writers": "one per batch: at most the batch's records",
    "feather/feeds/ingest/batch.py::Net.resync": "one per batch: at most the batch's records",
    "feather/feeds/ingest/batch.py::Net.removed": "one per batch: at most the batch's records",
    "feather/feeds/ingest/batch.py::Net.follows": "one per batch: at most the batch's follows",
    "feather/feeds/ingest/batch.py::Net.unfollows": "one per batch: at most the batch's unfollows",
    "feather/errors.py::ApiError.headers": "one per error answer: the few headers it sets (Retry-After)",
    "feather/process/verdict.py::Verdict.streams": "one per /health or /admin answer, keyed by configured streams",
    "feather/process/verdict.py::Verdict.jobs": "one per /health or /admin answer, keyed by configured jobs",
    "feather/process/verdict.py::Verdict.tasks": "one per /health or /admin answer, keyed by configured tasks",
    # the in-memory PDS of the tests and offline development, never built when serving
    "feather/sync/memory.py::MemoryPds.repos": "test double: the in-memory PDS, not used when serving",
    "feather/sync/memory.py::MemoryPds.profiles": "test double: the in-memory PDS, not used when serving",
    "feather/sync/memory.py::MemoryPds.signed_out": "test double: the in-memory PDS, not used when serving",
    # constants
    "feather/atproto/crypto.py::_B58_INDEX": CONSTANT,
    "feather/feeds/read/labels.py::NAMES": CONSTANT,
    "feather/feeds/read/apps.py::KINDS": CONSTANT,
    "feather/feeds/read/apps.py::_RENDERERS": CONSTANT,
    "feather/feeds/read/refs.py::REFS": CONSTANT,
    "feather/feeds/ingest/plan.py::MEETS": CONSTANT,
    "feather/feeds/web/reader_feed.py::KINDS": CONSTANT,
    "feather/atproto/crypto.py::_CURVES": CONSTANT,
    "feather/atproto/crypto.py::_ORDERS": CONSTANT,
    "feather/atproto/crypto.py::_LEGACY_TYPES": CONSTANT,
    "feather/atproto/syntax.py::_B32_INDEX": CONSTANT,
    "feather/config.py::KNOWN_WEAK_SECRETS": CONSTANT,
    "feather/config.py::_BY_NAME": CONSTANT,
    "feather/db.py::SQLITE_PRAGMAS": CONSTANT,
    "feather/db.py::_MANAGES_OWN_CONNECTION": CONSTANT,
    "feather/errors.py::_NAMES": CONSTANT,
    "feather/errors.py::TITLES": CONSTANT,
    "feather/errors.py::_FRIENDLY": CONSTANT,
    "feather/errors.py::_SCRIPT": CONSTANT,
    "feather/feeds/web/service_auth.py::_REFUSED_TYPES": CONSTANT,
    "feather/feeds/web/service_auth.py::_ALG_CURVE": CONSTANT,
    "feather/feeds/config.py::_TOP_KEYS": CONSTANT,
    "feather/feeds/config.py::_COLLECTION_KEYS": CONSTANT,
    "feather/feeds/config.py::_QUERYABLE_KEYS": CONSTANT,
    "feather/feeds/config.py::_FEED_KEYS": CONSTANT,
    "feather/feeds/config.py::_TARGET_KEYS": CONSTANT,
    "feather/outbound/policy.py::DEFAULT_PORTS": CONSTANT,
    "feather/sync/apps.py::BY_KEY": CONSTANT,
    "feather/sync/apps.py::BY_FOLLOW": CONSTANT,
    "feather/sync/personal.py::EXPORT_COLUMNS": CONSTANT,
    # unbounded, in modules other engineers own right now
    "feather/network/consent.py::RateLimiter._hits": "bounded: LRU of max_clients addresses",
    "feather/network/httpclient.py::PacedClient._next": "bounded: past MAX_HOSTS, hosts whose slot passed are dropped",
}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _mutable(value: ast.AST | None) -> bool:
    if isinstance(value, (ast.Dict, ast.Set, ast.DictComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        return _name(value.func) in MUTABLE_CALLS or (
            _name(value.func) == "field"
            and any(k.arg == "default_factory" and _name(k.value) in MUTABLE_CALLS for k in value.keywords))
    if isinstance(value, ast.IfExp):  # `x if x is not None else {}`
        return _mutable(value.body) or _mutable(value.orelse)
    if isinstance(value, ast.BoolOp):  # `x or {}`
        return any(_mutable(v) for v in value.values)
    return False


def _unbounded_cache(decorator: ast.AST) -> bool:
    if _name(decorator) == "cache":
        return True
    if isinstance(decorator, ast.Call) and _name(decorator.func) == "lru_cache":
        size = decorator.args[0] if decorator.args else next(
            (k.value for k in decorator.keywords if k.arg == "maxsize"), None)
        return isinstance(size, ast.Constant) and size.value is None
    return False


def _pairs(node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(target, value) of an assignment, a tuple assignment (`self.a, self.b = {}, set()`) unpacked."""
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [(node.target, node.value)]
    if not isinstance(node, ast.Assign):
        return []
    out = []
    for target in node.targets:
        if (isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                and len(target.elts) == len(node.value.elts)):
            out.extend(zip(target.elts, node.value.elts))
        else:
            out.append((target, node.value))
    return out


def mutable_containers(source: str, path: str) -> dict[str, int]:
    """{"path::[Class.]name": line} of every long-lived mutable mapping or set, and of every
    function behind an unbounded lru_cache (named `name()`)."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, cls: str | None, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name, False)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(_unbounded_cache(d) for d in child.decorator_list):
                    found.setdefault(f"{path}::{cls + '.' if cls else ''}{child.name}()", child.lineno)
                visit(child, cls, True)
                continue
            for target, value in _pairs(child):
                if not _mutable(value):
                    continue
                if isinstance(target, ast.Attribute) and _name(target.value) == "self":
                    found.setdefault(f"{path}::{cls or '?'}.{target.attr}", child.lineno)
                elif isinstance(target, ast.Name) and not in_function:  # module or class body
                    found.setdefault(f"{path}::{cls + '.' if cls else ''}{target.id}", child.lineno)
            visit(child, cls, in_function)

    visit(ast.parse(source), None, False)
    return found


def walk_feather() -> dict[str, int]:
    found: dict[str, int] = {}
    for module in sorted((ROOT / "feather").rglob("*.py")):
        path = module.relative_to(ROOT).as_posix()
        found.update(mutable_containers(module.read_text(), path))
    return found


def test_every_long_lived_mapping_or_set_in_feather_is_allowed_with_a_reason():
    found = walk_feather()
    unexplained = {key: line for key, line in found.items() if key not in ALLOWED}
    assert unexplained == {}, ("a mapping or set that may grow with outside keys: bound it (TtlCache) or add it "
                               f"to ALLOWED with the reason it cannot grow: {unexplained}")


def test_the_allow_list_names_only_code_that_still_exists_and_gives_each_a_reason():
    found = walk_feather()
    assert sorted(set(ALLOWED) - set(found)) == []
    assert [key for key, reason in ALLOWED.items() if len(reason.strip()) < 8] == []


@pytest.mark.parametrize("source, key", [
    ("class Seen:\n    def __init__(self):\n        self._seen = {}\n", "m.py::Seen._seen"),
    ("class Seen:\n    def start(self):\n        self._seen = set()\n", "m.py::Seen._seen"),
    ("import collections\nclass Seen:\n    def __init__(self, x=None):\n"
     "        self._seen = x or collections.OrderedDict()\n", "m.py::Seen._seen"),
    ("class Seen:\n    def __init__(self):\n        self.n, self._seen = 0, {}\n", "m.py::Seen._seen"),
    ("from collections import defaultdict\n_BY_HANDLE = defaultdict(list)\n", "m.py::_BY_HANDLE"),
    ("_hits: dict[str, int] = {}\n", "m.py::_hits"),
    ("_dids = {d: 1 for d in ()}\n", "m.py::_dids"),
    ("from dataclasses import dataclass, field\n@dataclass\nclass S:\n    seen: dict = field(default_factory=dict)\n",
     "m.py::S.seen"),
    ("import functools\n@functools.lru_cache(maxsize=None)\ndef resolve(handle):\n    return handle\n",
     "m.py::resolve()"),
    ("import functools\n@functools.cache\ndef resolve(handle):\n    return handle\n", "m.py::resolve()"),
])
def test_the_walk_finds_an_unbounded_container_however_it_is_spelled(source, key):
    assert list(mutable_containers(source, "m.py")) == [key]


def test_the_walk_passes_over_bounded_caches_locals_and_frozen_constants():
    source = ("import functools\n_FROZEN = frozenset({'a'})\n\n@functools.lru_cache(maxsize=8)\ndef f(x):\n"
              "    seen = {}\n    return seen\n\nclass C:\n    def __init__(self):\n"
              "        self.cache = TtlCache(60, time.monotonic, max_entries=100)\n        local = set()\n")
    assert mutable_containers(source, "m.py") == {}


def test_ttl_cache_holds_at_most_max_entries_and_a_reput_moves_to_the_back():
    now = [0.0]
    cache = TtlCache(100.0, lambda: now[0], max_entries=3)
    for key in "abc":
        cache.put(key, key.upper())
    cache.put("b", "B2")  # a re-put of a held key evicts nobody: it takes its own slot anew, at the back
    assert (len(cache), cache.get("a"), cache.get("b"), cache.get("c")) == (3, "A", "B2", "C")
    cache.put("d", "D")  # a is the oldest insert, then c: b's re-put counts as new
    cache.put("e", "E")
    assert [cache.get(k) for k in "abcde"] == [None, "B2", None, "D", "E"]


def test_ttl_cache_drops_expired_entries_on_put_without_being_asked_for_them():
    now = [0.0]
    cache = TtlCache(10.0, lambda: now[0], max_entries=100)
    for n in range(50):
        cache.put(n, n)
    now[0] = 10.0
    cache.put("fresh", 1)
    assert (len(cache), cache.get("fresh")) == (1, 1)


def test_the_opt_out_limiter_remembers_at_most_max_clients_and_forgets_the_least_recently_seen():
    from feather.network.consent import RateLimiter

    limiter = RateLimiter(1, window=300, clock=lambda: 0.0, max_clients=2)
    assert [limiter.allow("a"), limiter.allow("b"), limiter.allow("a"), limiter.allow("c")] == [True, True, False, True]
    assert list(limiter._hits) == ["a", "c"]  # b, seen longest ago, was forgotten; a was seen again
    assert [limiter.allow("b"), limiter.allow("c")] == [True, False]  # b starts over; c is still counted


def test_the_paced_client_forgets_hosts_whose_turn_has_passed_once_it_holds_many():
    from feather.network import httpclient

    class Http:
        allow_private_network = False

        def request(self, method, url, **kwargs):
            return None

    now = [0.0]
    paced = httpclient.PacedClient(Http(), interval=1.0, clock=lambda: now[0], sleep=lambda s: None)
    for i in range(httpclient.MAX_HOSTS):
        paced.get(f"https://h{i}.example/x")
    assert len(paced._next) == httpclient.MAX_HOSTS
    now[0] = 5.0  # every slot (1.0) has passed
    paced.get("https://late.example/x")
    assert paced._next == {"late.example": 6.0}
