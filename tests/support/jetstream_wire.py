"""Jetstream legacy (v1) wire helpers: frame shaping and subscriber-option parsing.

Pure functions, no I/O. Used by tests/support/fake_jetstream.py and usable from tests.
Facts come from Jetstream's documented wire format (event shapes, query parameters, options_update).
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import time
from dataclasses import dataclass, field

KINDS = ("commit", "account", "identity")
_COMMIT_KEYS = ("rev", "operation", "collection", "rkey", "record", "cid")
# indigo atproto/syntax regexes (ParseNSID / ParseDID), used by legacy parseSubscriberOptions.
_NSID_RE = re.compile(r"[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)+"
                      r"(\.[a-zA-Z]([a-zA-Z]{0,61}[a-zA-Z])?)")
_DID_RE = re.compile(r"did:[a-z]+:[a-zA-Z0-9._:%-]*[a-zA-Z0-9._-]")
_INT_RE = re.compile(r"[+-]?[0-9]+")
_TID_ALPHABET = "234567abcdefghijklmnopqrstuvwxyz"
_seq = itertools.count(1)


def valid_nsid(s: str) -> bool:
    return 0 < len(s) <= 317 and _NSID_RE.fullmatch(s) is not None


def valid_did(s: str) -> bool:
    return 0 < len(s) <= 2048 and _DID_RE.fullmatch(s) is not None


def parse_go_int(s: str) -> int | None:
    """strconv.ParseInt(s, 10, 64): optional sign, digits only, int64 range; None on error."""
    if not _INT_RE.fullmatch(s):
        return None
    v = int(s)
    return v if -(1 << 63) <= v < (1 << 63) else None


def max_size_from_query(s: str) -> int:
    """ParseMaxMessageSizeBytes(string): empty/non-int/negative -> 0 (no limit); uint32 cast."""
    v = parse_go_int(s) if s else None
    return 0 if v is None or v < 0 else v & 0xFFFFFFFF


class OptionsError(ValueError):
    """str(err) is the exact legacy error text (`invalid subscriber options[: ...]`)."""


@dataclass
class Filter:
    collections: set = field(default_factory=set)   # full NSIDs
    prefixes: list = field(default_factory=list)    # "app.bsky.graph." (the "*" trimmed)
    dids: set = field(default_factory=set)
    max_size: int = 0
    raw_collections: list = field(default_factory=list)

    def wants(self, did: str, collection: str) -> bool:
        """collection is "" for identity/account (legacy WantsCollection passes those)."""
        if self.dids and did not in self.dids:
            return False
        if not collection or not (self.collections or self.prefixes):
            return True
        return collection in self.collections or any(collection.startswith(p) for p in self.prefixes)

    def describe(self) -> dict:
        return {"wantedCollections": self.raw_collections, "wantedDids": sorted(self.dids),
                "maxMessageSizeBytes": self.max_size}


def parse_options(collections, dids, max_size: int = 0) -> Filter:
    """Legacy parseSubscriberOptions. Raises OptionsError with the exact legacy message."""
    f = Filter(max_size=max_size, raw_collections=list(collections or []))
    for c in collections or []:
        if c.endswith(".*"):
            f.prefixes.append(c[:-1])           # prefixes are not validated (V1 parity)
        elif valid_nsid(c):
            f.collections.add(c)
        else:
            raise OptionsError(f"invalid subscriber options: invalid collection: {c}")
    for d in dids or []:
        if not valid_did(d):
            raise OptionsError("invalid subscriber options")
        f.dids.add(d)
    if len(f.dids) > 10_000:
        raise OptionsError("invalid subscriber options: too many wanted DIDs")
    if len(f.prefixes) + len(f.collections) > 100:
        raise OptionsError("invalid subscriber options: too many wanted collections")
    return f


def parse_options_update(text: str) -> Filter | None:
    """Parse a client text message. None = not an options_update (ignored).
    Raises OptionsError(reason) where legacy would Terminate(reason) (close 1000)."""
    try:
        msg = json.loads(text)
        if not isinstance(msg, dict) or not isinstance(msg.get("type", ""), str):
            raise ValueError("cannot unmarshal into SubscriberSourcedMessage")
    except ValueError as e:
        raise OptionsError(f"failed to unmarshal subscriber sourced message: {e}") from None
    if msg.get("type") != "options_update":
        return None
    try:
        if "payload" not in msg:
            raise ValueError("unexpected end of JSON input")
        p = msg["payload"] if msg["payload"] is not None else {}
        if not isinstance(p, dict):
            raise ValueError("cannot unmarshal payload into SubscriberOptionsUpdatePayload")
        cols, dids, size = p.get("wantedCollections"), p.get("wantedDids"), p.get("maxMessageSizeBytes")
        for name, v in (("wantedCollections", cols), ("wantedDids", dids)):
            if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
                raise ValueError(f"cannot unmarshal {name}: want []string")
        if size is not None and type(size) is not int:
            raise ValueError("cannot unmarshal maxMessageSizeBytes: want int")
    except ValueError as e:
        raise OptionsError(f"failed to unmarshal subscriber options update: {e}") from None
    size = 0 if size is None or size < 0 else size & 0xFFFFFFFF
    try:
        return parse_options(cols, dids, size)
    except OptionsError as e:
        raise OptionsError(f"failed to parse subscriber options: {e}") from None


_BLOB_KEYS = ("$type", "ref", "mimeType", "size")


def _sorted(v):
    """Go marshals record maps with sorted keys, except blobs (a typed struct: $type, ref, mimeType, size)."""
    if isinstance(v, dict):
        order = sorted(v)
        if v.get("$type") == "blob":
            order = [k for k in _BLOB_KEYS if k in v] + [k for k in order if k not in _BLOB_KEYS]
        return {k: _sorted(v[k]) for k in order}
    return [_sorted(x) for x in v] if isinstance(v, list) else v


def check_frame(frame) -> str:
    """Validate an appended frame; return its commit collection ("" for other kinds).

    A test knob for a misbehaving upstream: {"$raw": text, "did": d} is sent verbatim, as if it
    were a frame of no collection from did d (malformed JSON, unknown kinds, oversize frames).
    """
    if isinstance(frame, dict) and isinstance(frame.get("$raw"), str):
        frame.setdefault("did", "did:plc:raw")
        return ""
    if not isinstance(frame, dict) or not isinstance(frame.get("did"), str):
        raise ValueError("frame needs a string 'did'")
    kind = frame.get("kind")
    if kind not in KINDS or not isinstance(frame.get(kind), dict):
        raise ValueError(f"frame needs kind in {KINDS} and a matching object")
    if "time_us" in frame and type(frame["time_us"]) is not int:
        raise ValueError("time_us must be an int")
    return frame["commit"].get("collection", "") if kind == "commit" else ""


def encode_frame(frame: dict, time_us: int, cursor: int = 0) -> bytes:
    """Serialize like the Go server: key order did, time_us, [cursor], kind, payload;
    commit fields in struct order with omitempty; record / identity / account keys sorted."""
    if "$raw" in frame:
        return frame["$raw"].encode()
    kind = frame["kind"]
    out = {"did": frame["did"], "time_us": time_us}
    if cursor:
        out["cursor"] = cursor
    out["kind"] = kind
    body = frame[kind]
    if kind == "commit":
        out[kind] = {k: (_sorted(body[k]) if k == "record" else body[k])
                     for k in _COMMIT_KEYS if body.get(k) not in (None, "")}
    else:
        out[kind] = _sorted(body)
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()


# ---- frame generators (exact wire shape of tests/fixtures/jetstream-events.jsonl) ----

def tid(micros: int | None = None, clock_id: int = 0) -> str:
    n = ((micros if micros is not None else time.time_ns() // 1000) << 10) | (clock_id & 0x3FF)
    return "".join(_TID_ALPHABET[(n >> (5 * i)) & 31] for i in range(12, -1, -1))


def fake_cid(data) -> str:
    """A syntactically real CIDv1 (dag-cbor, sha256, base32) over the JSON of `data`."""
    raw = json.dumps(data, sort_keys=True).encode()
    digest = bytes([0x01, 0x71, 0x12, 0x20]) + hashlib.sha256(raw).digest()
    return "b" + base64.b32encode(digest).decode().lower().rstrip("=")


def iso_now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def _frame(did, kind, body, time_us):
    f = {"did": did}
    if time_us is not None:
        f["time_us"] = time_us
    f["kind"] = kind
    f[kind] = body
    return f


def make_commit(did, collection, rkey, op, record=None, cid=None, time_us=None, rev=None) -> dict:
    """op: create|update|delete. delete carries no record and no cid (Jetstream's wire format)."""
    if op not in ("create", "update", "delete"):
        raise ValueError(f"bad op {op!r}")
    body = {"rev": rev or tid(), "operation": op, "collection": collection, "rkey": rkey}
    if op != "delete":
        rec = record if record is not None else {"$type": collection, "createdAt": iso_now()}
        body["record"] = _sorted(rec)
        body["cid"] = cid or fake_cid(rec)
    return _frame(did, "commit", body, time_us)


def make_identity(did, handle=None, seq=None, time=None, time_us=None) -> dict:
    body = {"did": did}
    if handle is not None:
        body["handle"] = handle
    body["seq"] = seq if seq is not None else next(_seq)
    body["time"] = time or iso_now()
    return _frame(did, "identity", body, time_us)


def make_account(did, active=True, status=None, seq=None, time=None, time_us=None) -> dict:
    body = {"active": active, "did": did, "seq": seq if seq is not None else next(_seq)}
    if status is not None:
        body["status"] = status
    body["time"] = time or iso_now()
    return _frame(did, "account", body, time_us)
