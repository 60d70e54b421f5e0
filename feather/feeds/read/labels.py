"""Moderation labels: what a post may show, from its self-labels and the labelers asked.

Two halves. The decision is pure (`self_labels`, `verdict`): a post with `!hide` (or a takedown)
on it or on its author's account is dropped; one labelled `porn`, `sexual`, `nudity`,
`graphic-media` or `!warn` (on the post or the account) is shown behind a "Show" control naming
the label; anything else shows as it is. The fetch (`labels_for`) reads the cache
(store/labels.py) and asks each labeler (`com.atproto.label.queryLabels` at its `#atproto_labeler`
endpoint, through the guarded client) only about the subjects it has not answered for within
FEED_LABELS_TTL_SECS. All of a read's calls share one hard deadline (FEED_LABELS_WAIT_MS): what
has not answered by then is given up, and a post no labeler has answered for yet is marked
`unchecked` (the page says so quietly; it is never blanked). A stale answer is used while the
labeler cannot be reached. A labeler that failed is not asked again for `health(app).backoff_s`
in this process, so an outage costs one wait, not one per page. Network first, then one short
transaction.

    found = labels_for(app, [(post_uri, author_did), ...], ["did:plc:ar7c4by46qjdydhdevvrndac"], 1.0)
    v = verdict(record_value, author_did, post_uri, found.labels_on(post_uri, author_did),
                unchecked=found.unchecked(post_uri, author_did))
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from gevent.pool import Pool

from feather import sql
from feather.atproto.identity import IdentityError, http_client_from_settings, resolver_for
from feather.atproto.labels import LabelerError, datetime_us, in_effect, query_labels
from feather.atproto.syntax import is_valid_datetime, is_valid_did
from feather.db import db
from feather.errors import ApiError
from feather.feeds.read import render
from feather.feeds.store import labels as cache
from feather.outbound import NetError

log = logging.getLogger(__name__)

SELF_LABELS = "com.atproto.label.defs#selfLabels"
MAX_SELF_LABELS = 10  # the lexicon's maxLength
HIDE = ("!hide", "!takedown", "!suspend")
# Masked behind "Show", most explicit first: a post with several is named by the first.
WARN = ("porn", "sexual", "graphic-media", "nudity", "!warn")
NAMES = {"porn": "Adult content", "sexual": "Sexually suggestive", "graphic-media": "Graphic media",
         "nudity": "Nudity", "!warn": "Content warning"}
PATTERNS_PER_CALL = 25  # subjects per queryLabels request (the URL stays well under 4 KiB)
MAX_CALLS = 8  # queryLabels requests one read may make, over all labelers
CONCURRENCY = 4
MAX_LABELERS = 20  # the most a client may ask for (Bluesky's app sends at most 20)
BACKOFF_S = 30.0


@dataclass(frozen=True)
class Verdict:
    hide: bool = False
    warn: str | None = None  # the label value the post is masked for (`porn`, `!warn`, …)
    unchecked: bool = False  # some labeler has not answered for this post or its author yet

    @property
    def warn_name(self) -> str | None:
        """The label's name as the page shows it."""
        return NAMES.get(self.warn) if self.warn else None


@dataclass(frozen=True)
class Wanted:
    """A labeler a client asked for; `redact`: drop what it hides instead of only labelling it."""
    did: str
    redact: bool = False


def self_labels(value: object, author_did: str, uri: str, cid: str | None = None,
                cts: str | None = None) -> list[dict]:
    """The record's own labels (`labels` → selfLabels) as label objects: src is the author."""
    found = value.get("labels") if isinstance(value, dict) else None
    if not isinstance(found, dict) or found.get("$type") != SELF_LABELS or not isinstance(found.get("values"), list):
        return []
    if cts is None:
        created = value.get("createdAt")
        cts = created if is_valid_datetime(created) else None
    out, seen = [], set()
    for item in found["values"][:MAX_SELF_LABELS]:
        val = item.get("val") if isinstance(item, dict) else None
        if not isinstance(val, str) or not 0 < len(val) <= 128 or val in seen:
            continue
        seen.add(val)
        label = {"src": author_did, "uri": uri, "val": val}
        if cid:
            label["cid"] = cid
        if cts:
            label["cts"] = cts
        out.append(label)
    return out


def verdict(record_value: object, author_did: str, uri: str, labels: Iterable[dict],
            unchecked: bool = False) -> Verdict:
    """What the page does with a post, from its self-labels and the labels in effect from labelers
    (those on `uri` or on the account `author_did`; others are ignored)."""
    vals = {label.get("val") for label in self_labels(record_value, author_did, uri)}
    vals |= {label.get("val") for label in labels if label.get("uri") in (uri, author_did)}
    if any(v in vals for v in HIDE):
        return Verdict(hide=True, unchecked=unchecked)
    return Verdict(warn=next((v for v in WARN if v in vals), None), unchecked=unchecked)


@dataclass
class Found:
    """Labels in effect per subject (post URI or DID), by labeler, and what nobody answered for."""
    labelers: list[str]
    by_labeler: dict[str, dict[str, list[dict]]] = field(default_factory=dict)
    missing: set[tuple[str, str]] = field(default_factory=set)  # (labeler, subject) never answered

    def labels_on(self, uri: str, did: str, labelers: Iterable[str] | None = None) -> list[dict]:
        out = []
        for src in (self.labelers if labelers is None else labelers):
            found = self.by_labeler.get(src, {})
            out += found.get(uri, []) + found.get(did, [])
        return out

    def unchecked(self, uri: str, did: str) -> bool:
        return any((src, s) in self.missing for src in self.labelers for s in (uri, did))


class Health:
    """Labelers that failed lately, per process: not asked again until their time is up."""

    def __init__(self, backoff_s: float = BACKOFF_S, clock: Callable[[], float] = time.monotonic):
        self.backoff_s, self.clock = backoff_s, clock
        self.down_until: dict[str, float] = {}

    def is_down(self, did: str) -> bool:
        return self.down_until.get(did, 0.0) > self.clock()

    def failed(self, did: str) -> None:
        self.down_until[did] = self.clock() + self.backoff_s
        while len(self.down_until) > 1000:  # bounded: strangers choose the labelers getFeed asks
            self.down_until.pop(next(iter(self.down_until)))

    def answered(self, did: str) -> None:
        self.down_until.pop(did, None)


def health(app) -> Health:
    found = app.extensions.get("feed_labelers_health")
    if found is None:
        found = app.extensions["feed_labelers_health"] = Health()
    return found


def labels_for(app, subjects: Iterable[tuple[str, str]], labelers: Iterable[str], deadline_s: float,
               admit: Callable[[], bool] | None = None, now_us: int | None = None) -> Found:
    """The labels each labeler has in effect on these (post URI, author DID) pairs: from the cache,
    and fetched (all within deadline_s seconds) for what it has not answered within the TTL.
    `admit` is asked once per labeler that needs the network; False skips it this time."""
    settings = app.config["FEATHER"]
    ttl_us = settings.feed_labels_ttl_secs * 1_000_000
    now_us = sql.now_us() if now_us is None else now_us
    wanted = [s for s in dict.fromkeys(subject for pair in subjects for subject in pair) if s]
    labelers = list(dict.fromkeys(labelers))
    found = Found(labelers)
    if not wanted or not labelers:
        return found
    stored: dict[str, tuple[dict[str, int], dict]] = {src: cache.load(src, wanted) for src in labelers}
    work: list[tuple[str, list[str]]] = []
    state = health(app)
    for src in labelers:
        checked, _labels = stored[src]
        stale = [s for s in wanted if now_us - checked.get(s, -ttl_us) >= ttl_us]
        if not stale or state.is_down(src) or (admit is not None and not admit()):
            continue
        for start in range(0, len(stale), PATTERNS_PER_CALL):
            work.append((src, stale[start:start + PATTERNS_PER_CALL]))
    fetched = _fetch(app, work[:MAX_CALLS], deadline_s, now_us) if work else {}
    if fetched:
        with db.atomic():
            cache.save(fetched, now_us)
    for src in labelers:
        checked, labels = stored[src]
        mine: dict[str, list[dict]] = {}
        for subject in wanted:
            if (src, subject) in fetched:
                held = fetched[(src, subject)]
            elif subject in checked:
                held = labels.get(subject, [])  # fresh, or stale while the labeler cannot answer
            else:
                found.missing.add((src, subject))
                continue
            shown = [label for label, exp_us in held if exp_us is None or exp_us > now_us]
            if shown:
                mine[subject] = shown
        found.by_labeler[src] = mine
    return found


def _fetch(app, work: list[tuple[str, list[str]]], deadline_s: float, now_us: int) -> dict:
    """Network only: {(labeler, subject): [(label in effect, exp_us)]} for every subject of every
    call that answered before the deadline (a subject without labels: [])."""
    settings = app.config["FEATHER"]
    resolver = resolver_for(app)
    http = http_client_from_settings(settings)
    http.connect_timeout = http.read_timeout = http.total_timeout = max(deadline_s, 0.05)
    state = health(app)
    results: dict = {}
    done: set[int] = set()

    def one(index: int, src: str, chunk: list[str]) -> None:
        try:
            endpoint = resolver.labeler_endpoint(src)
            got = query_labels(http, endpoint, chunk, src)
        except (IdentityError, LabelerError, NetError) as exc:
            log.info("feeds: labels from %s could not be fetched (asked again in %.0f s): %s", src,
                     state.backoff_s, exc)
            state.failed(src)
            return
        state.answered(src)
        subjects = set(chunk)
        effective: dict[str, list] = {s: [] for s in chunk}
        for label in in_effect([lb for lb in got if lb["uri"] in subjects], now_us):
            exp_us = datetime_us(label.get("exp")) if "exp" in label else None
            effective[label["uri"]].append((label, exp_us))
        results.update({(src, s): held for s, held in effective.items()})
        done.add(index)

    pool = Pool(CONCURRENCY)
    for index, (src, chunk) in enumerate(work):
        pool.spawn(one, index, src, chunk)
    if not pool.join(timeout=max(deadline_s, 0.0)):
        pool.kill(block=False)
        late = sorted({src for index, (src, _chunk) in enumerate(work) if index not in done})
        log.info("feeds: labels from %s did not come within %.1f s", ", ".join(late), deadline_s)
        for src in late:
            state.failed(src)
    return dict(results)


def page_verdicts(app, shown: list[dict], values: list[dict]) -> list[Verdict]:
    """The timeline page's verdict for each record (query.run's records, their parsed values),
    with the labelers the operator configured (FEED_LABELERS) and the page's wait."""
    settings = app.config["FEATHER"]
    found = labels_for(app, [(r["uri"], r["did"]) for r in shown], settings.feed_labelers,
                       settings.feed_labels_wait_ms / 1000.0)
    return [verdict(value, r["did"], r["uri"], found.labels_on(r["uri"], r["did"]),
                    unchecked=found.unchecked(r["uri"], r["did"])) for r, value in zip(shown, values)]


def requested(param: str | None, header: str | None) -> list[Wanted] | None:
    """The labelers a getFeed or listRecords caller asked for: `labelers=` (comma-separated DIDs)
    and the `atproto-accept-labelers` header (DIDs, each optionally `;redact`). None: neither."""
    if param is None and header is None:
        return None
    out: dict[str, Wanted] = {}
    for part in (param or "").split(","):
        if part.strip():
            out.setdefault(part.strip(), Wanted(part.strip()))
    for part in (header or "").split(","):
        did, *flags = [p.strip() for p in part.split(";")]
        if did:
            redact = "redact" in flags or out.get(did, Wanted(did)).redact
            out[did] = Wanted(did, redact)
    bad = [did for did in out if not is_valid_did(did)]
    if bad:
        raise ApiError(400, "InvalidRequest", f"labelers must be DIDs (like did:plc:abc123); {bad[0][:80]!r} is not one.")
    if len(out) > MAX_LABELERS:
        raise ApiError(400, "InvalidRequest", f"Ask for at most {MAX_LABELERS} labelers at once.")
    return list(out.values())


def attach(app, records: list[dict], wanted: list[Wanted], admit: Callable[[], bool] | None = None) -> list[dict]:
    """getFeed's and listRecords' `labels`: on each record, its self-labels (src = the author) and
    the labels in effect from the labelers asked, on the record or on its author's account, as the
    labeler sent them. A record a `;redact` labeler hides is left out. Returns the records kept."""
    settings = app.config["FEATHER"]
    found = labels_for(app, [(r["uri"], r["did"]) for r in records], [w.did for w in wanted],
                       settings.feed_labels_wait_ms / 1000.0, admit=admit)
    redacting = [w.did for w in wanted if w.redact]
    kept = []
    for r in records:
        if any(label.get("val") in HIDE for label in found.labels_on(r["uri"], r["did"], redacting)):
            continue
        value = r.get("value")
        created = value.get("createdAt") if isinstance(value, dict) else None
        cts = None if is_valid_datetime(created) else render.iso(r["time_us"])
        r["labels"] = self_labels(value, r["did"], r["uri"], r.get("cid"), cts) + found.labels_on(r["uri"], r["did"])
        kept.append(r)
    return kept
