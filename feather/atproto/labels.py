"""Labels: `com.atproto.label.queryLabels` on a labeler, and the rules that say which labels are in
effect (negations and expiry).

A labeler publishes labels at the `#atproto_labeler` endpoint of its DID document
(IdentityResolver.labeler_endpoint). Everything it sends is a stranger's JSON: each label is
checked and bounded here, and one that does not parse is left out. All HTTP goes through the
guarded client.

    labels = query_labels(http, "https://mod.example.com", ["at://did:plc:a/app.bsky.feed.post/3k", "did:plc:a"],
                          source="did:plc:labeler")
    shown = in_effect(labels, now_us)
"""
from __future__ import annotations

import logging
from typing import Any, Iterable

from feather.atproto.syntax import InvalidSyntax, is_valid_did, parse_datetime
from feather.outbound import GuardedClient, NetError

log = logging.getLogger(__name__)

METHOD = "com.atproto.label.queryLabels"
PAGE_LIMIT = 250  # the lexicon's most labels per page
MAX_PAGES = 8  # per call: a labeler that keeps sending cursors is stopped here
MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_URI_CHARS = 8192
MAX_VAL_CHARS = 128  # the lexicon's maxLength
KEPT = ("ver", "src", "uri", "cid", "val", "neg", "cts", "exp", "sig")  # a label's fields, as the labeler sent them


class LabelerError(Exception):
    """The labeler could not be asked (unreachable, an error, a reply that is not queryLabels')."""


def datetime_us(value: Any) -> int | None:
    """Microseconds since the epoch of an atproto datetime, or None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        moment = parse_datetime(value)
    except InvalidSyntax:
        return None
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def parse_label(raw: Any) -> dict | None:
    """The label as sent (its known fields only), or None when it is malformed or too large."""
    if not isinstance(raw, dict):
        return None
    src, uri, val = raw.get("src"), raw.get("uri"), raw.get("val")
    if not is_valid_did(src) or not isinstance(uri, str) or not 0 < len(uri) <= MAX_URI_CHARS:
        return None
    if not isinstance(val, str) or not 0 < len(val) <= MAX_VAL_CHARS:
        return None
    if datetime_us(raw.get("cts")) is None:
        return None
    if "exp" in raw and datetime_us(raw.get("exp")) is None:
        return None
    if "neg" in raw and not isinstance(raw["neg"], bool):
        return None
    if "cid" in raw and not (isinstance(raw["cid"], str) and len(raw["cid"]) <= 128):
        return None
    label = {k: raw[k] for k in KEPT if k in raw}
    if "sig" in label and not (isinstance(label["sig"], dict) and len(str(label["sig"])) <= 1024):
        del label["sig"]  # kept only in its lexicon shape ({"$bytes": ...}) and size
    if "ver" in label and not isinstance(label["ver"], int):
        del label["ver"]
    return label


def in_effect(labels: Iterable[dict], now_us: int) -> list[dict]:
    """The labels that hold now: for each (src, uri, val) the newest by `cts` (on a tie, the one
    listed last), unless that one is a negation (`neg: true`) or has expired (`exp` at or before
    now). Order: as the newest of each first appeared."""
    newest: dict[tuple[str, str, str], tuple[int, int, dict]] = {}
    for position, label in enumerate(labels):
        key = (label["src"], label["uri"], label["val"])
        cts = datetime_us(label["cts"]) or 0
        held = newest.get(key)
        if held is None or cts >= held[0]:
            newest[key] = (cts, held[1] if held else position, label)
    out = []
    for _cts, _first, label in sorted(newest.values(), key=lambda v: v[1]):
        if label.get("neg"):
            continue
        exp = datetime_us(label.get("exp")) if "exp" in label else None
        if exp is not None and exp <= now_us:
            continue
        out.append(label)
    return out


def query_labels(http: GuardedClient, endpoint: str, uri_patterns: list[str], source: str, *,
                 limit: int = PAGE_LIMIT, max_pages: int = MAX_PAGES) -> list[dict]:
    """Every label `source` publishes on these URI patterns, all pages, as sent (valid ones only,
    only those whose src is `source`). Raises LabelerError."""
    url = f"{endpoint.rstrip('/')}/xrpc/{METHOD}"
    out: list[dict] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(max_pages):
        params: list[tuple[str, str]] = [("uriPatterns", p) for p in uri_patterns]
        params += [("sources", source), ("limit", str(limit))]
        if cursor:
            params.append(("cursor", cursor))
        try:
            resp = http.get(url, params=params, max_body_bytes=MAX_BODY_BYTES,
                            headers={"Accept": "application/json"})
        except NetError as e:
            raise LabelerError(f"Could not reach the labeler {source} at {endpoint}: {e}") from None
        if resp.status_code != 200:
            raise LabelerError(f"The labeler {source} answered queryLabels with HTTP {resp.status_code}.")
        try:
            data = resp.json()
        except ValueError:
            data = None
        labels = data.get("labels") if isinstance(data, dict) else None
        if not isinstance(labels, list):
            raise LabelerError(f"The labeler {source} sent a queryLabels reply without labels.")
        for raw in labels:
            label = parse_label(raw)
            if label is not None and label["src"] == source:
                out.append(label)
        cursor = data.get("cursor") if isinstance(data.get("cursor"), str) else None
        if not labels or not cursor or cursor in seen:
            return out
        seen.add(cursor)
    log.warning("queryLabels on %s stopped after %d pages", source, max_pages)
    return out
