"""Jetstream frame → typed event. Pure: no socket, no database, no clock.

Unknown kinds and unknown fields are ignored (the wire grows); a frame that is not what
Jetstream promises raises DecodeError, which the consumer counts and skips.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import orjson  # ~6x json.loads on Jetstream frames; it also rejects invalid UTF-8 and deep nesting

from feather.parsing import MAX_JSON_DEPTH, json_depth_ok

MAX_FRAME_BYTES = 2 * 1024 * 1024  # Jetstream records are ≤ 1 MiB of JSON; leave headroom.
# orjson reads 1,024 levels, more than json (which stores and reads records) recurses through: such
# a record would fail its batch on every replay, or every page that shows it. A record may nest as
# deep as any other JSON we accept; the frame and its commit are the two levels around it.
MAX_FRAME_DEPTH = MAX_JSON_DEPTH + 2
OPERATIONS = ("create", "update", "delete")


class DecodeError(ValueError):
    """The frame is malformed or oversize; the message says why, without the payload."""


@dataclass(frozen=True, slots=True)
class CommitEvent:
    did: str
    time_us: int
    operation: str  # create | update | delete
    collection: str
    rkey: str
    record: dict | None  # None on delete
    cid: str | None  # None on delete
    rev: str | None = None
    seq: int | None = None  # Jetstream v2 `cursor`, when the host sends one

    kind = "commit"

    @property
    def uri(self) -> str:
        return f"at://{self.did}/{self.collection}/{self.rkey}"


@dataclass(frozen=True, slots=True)
class IdentityEvent:
    did: str
    time_us: int
    handle: str | None = None
    seq: int | None = None

    kind = "identity"


@dataclass(frozen=True, slots=True)
class AccountEvent:
    did: str
    time_us: int
    active: bool
    status: str | None = None
    seq: int | None = None

    kind = "account"


Event = Union[CommitEvent, IdentityEvent, AccountEvent]


def decode(frame: str | bytes) -> Event | None:
    """Decode one text frame. None means "a kind we do not handle" (not an error)."""
    if len(frame) > MAX_FRAME_BYTES:
        raise DecodeError(f"frame of {len(frame)} bytes exceeds {MAX_FRAME_BYTES}")
    try:
        data = orjson.loads(frame)
    except (orjson.JSONDecodeError, UnicodeEncodeError) as exc:
        raise DecodeError(f"not JSON: {exc.__class__.__name__}") from None
    if not isinstance(data, dict):
        raise DecodeError("frame is not a JSON object")
    # Fewer brackets than levels allowed, in strings or not: nearly every frame stops at two counts.
    square, curly = (b"[", b"{") if isinstance(frame, bytes) else ("[", "{")
    if frame.count(square) + frame.count(curly) > MAX_FRAME_DEPTH and not json_depth_ok(frame, MAX_FRAME_DEPTH):
        raise DecodeError(f"frame nested deeper than {MAX_FRAME_DEPTH} levels")
    did = data.get("did")
    time_us = data.get("time_us")
    if not isinstance(did, str) or not did.startswith("did:"):
        raise DecodeError("missing or invalid did")
    if not isinstance(time_us, int) or isinstance(time_us, bool) or time_us < 0:
        raise DecodeError("missing or invalid time_us")
    seq = data.get("cursor")
    seq = seq if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0 else None
    kind = data.get("kind")
    if kind == "commit":
        return _commit(did, time_us, seq, data.get("commit"))
    if kind == "identity":
        body = _object(data.get("identity"), "identity")
        handle = body.get("handle")
        return IdentityEvent(did, time_us, handle if isinstance(handle, str) else None, seq)
    if kind == "account":
        body = _object(data.get("account"), "account")
        active = body.get("active")
        if not isinstance(active, bool):
            raise DecodeError("account.active is not a boolean")
        status = body.get("status")
        return AccountEvent(did, time_us, active, status if isinstance(status, str) else None, seq)
    return None


def _object(value: Any, name: str) -> dict:
    if not isinstance(value, dict):
        raise DecodeError(f"{name} is missing or not an object")
    return value


def _commit(did: str, time_us: int, seq: int | None, value: Any) -> CommitEvent:
    body = _object(value, "commit")
    operation = body.get("operation")
    collection = body.get("collection")
    rkey = body.get("rkey")
    if operation not in OPERATIONS:
        raise DecodeError(f"unknown commit operation {str(operation)[:32]!r}")
    if not isinstance(collection, str) or not collection:
        raise DecodeError("commit.collection missing")
    if not isinstance(rkey, str) or not rkey:
        raise DecodeError("commit.rkey missing")
    rev = body.get("rev") if isinstance(body.get("rev"), str) else None
    if operation == "delete":
        return CommitEvent(did, time_us, operation, collection, rkey, None, None, rev, seq)
    record = body.get("record")
    cid = body.get("cid")
    if not isinstance(record, dict):
        raise DecodeError(f"commit.{operation} without a record object")
    if not isinstance(cid, str) or not cid:
        raise DecodeError(f"commit.{operation} without a cid")
    return CommitEvent(did, time_us, operation, collection, rkey, record, cid, rev, seq)
