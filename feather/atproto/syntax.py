"""atproto identifier syntax: DID, handle, NSID, AT-URI, record key, TID and datetime.

The rules follow the atproto specs and are checked against the interop vectors in
tests/fixtures/atproto-syntax. Validation is purely syntactic: nothing here resolves anything.
"""
from __future__ import annotations

import re
import secrets
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Callable, NamedTuple

from feather.parsing import ascii_int


class InvalidSyntax(ValueError):
    """A string is not a well-formed atproto identifier of the expected kind."""


# fullmatch() everywhere: `$` would also accept a trailing newline.
_DID = re.compile(r"did:[a-z]+:[a-zA-Z0-9._:%-]*[a-zA-Z0-9._-]")
_HANDLE = re.compile(
    r"([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
)
_NSID = re.compile(
    r"[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
    r"(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)+"
    r"\.[a-zA-Z][a-zA-Z0-9]{0,62}"
)
_RECORD_KEY = re.compile(r"[a-zA-Z0-9._:~-]{1,512}")
_TID = re.compile(r"[234567abcdefghij][234567abcdefghijklmnopqrstuvwxyz]{12}")
# Authority, collection and rkey are checked by their own validators once split apart;
# query strings and fragments are not part of the strict (Lexicon) AT-URI form.
_AT_URI = re.compile(r"at://(?P<authority>[^/?#\s]+)(?:/(?P<collection>[^/?#\s]+)(?:/(?P<rkey>[^/?#\s]+))?)?")
_DATETIME = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})"
    r"T(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})(?:\.(?P<frac>[0-9]{1,20}))?"
    r"(?P<tz>Z|[+-][0-9]{2}:[0-9]{2})"
)

MAX_DID_LENGTH = 2048
MAX_HANDLE_LENGTH = 253
MAX_NSID_LENGTH = 317
MAX_AT_URI_LENGTH = 8 * 1024

# Syntactically valid, but the handle spec says these never resolve.
DISALLOWED_HANDLE_TLDS = frozenset(
    {"alt", "arpa", "example", "internal", "invalid", "local", "localhost", "onion"}
)


def _shown(s: object) -> str:
    text = repr(s)
    return text if len(text) <= 80 else text[:77] + "..."


def is_valid_did(s: object) -> bool:
    return isinstance(s, str) and len(s) <= MAX_DID_LENGTH and _DID.fullmatch(s) is not None


def is_valid_handle(s: object) -> bool:
    return (
        isinstance(s, str)
        and len(s) <= MAX_HANDLE_LENGTH
        and _HANDLE.fullmatch(s) is not None
    )


def is_disallowed_handle_tld(handle: str) -> bool:
    return handle.rsplit(".", 1)[-1].lower() in DISALLOWED_HANDLE_TLDS


def normalize_handle(s: str) -> str:
    """Handles compare case-insensitively; store and compare the lowercase form."""
    return ensure_valid_handle(s).lower()


def is_valid_at_identifier(s: object) -> bool:
    return is_valid_did(s) or is_valid_handle(s)


def is_valid_nsid(s: object) -> bool:
    return isinstance(s, str) and len(s) <= MAX_NSID_LENGTH and _NSID.fullmatch(s) is not None


def is_valid_record_key(s: object) -> bool:
    return (
        isinstance(s, str)
        and s not in (".", "..")
        and _RECORD_KEY.fullmatch(s) is not None
    )


def is_valid_tid(s: object) -> bool:
    return isinstance(s, str) and _TID.fullmatch(s) is not None


class AtUri(NamedTuple):
    did_or_handle: str
    collection: str | None = None
    rkey: str | None = None

    def __str__(self) -> str:
        parts = ["at://" + self.did_or_handle]
        if self.collection is not None:
            parts.append(self.collection)
            if self.rkey is not None:
                parts.append(self.rkey)
        return "/".join(parts)


def _split_at_uri(s: object) -> AtUri | None:
    if not isinstance(s, str) or len(s) > MAX_AT_URI_LENGTH:
        return None
    m = _AT_URI.fullmatch(s)
    if m is None:
        return None
    uri = AtUri(m["authority"], m["collection"], m["rkey"])
    if not is_valid_at_identifier(uri.did_or_handle):
        return None
    if uri.collection is not None and not is_valid_nsid(uri.collection):
        return None
    if uri.rkey is not None and not is_valid_record_key(uri.rkey):
        return None
    return uri


def is_valid_at_uri(s: object) -> bool:
    return _split_at_uri(s) is not None


def parse_at_uri(s: str) -> AtUri:
    uri = _split_at_uri(s)
    if uri is None:
        raise InvalidSyntax(f"{_shown(s)} is not a valid AT-URI.")
    return uri


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _datetime_fields(s: object) -> dict | None:
    if not isinstance(s, str):
        return None
    m = _DATETIME.fullmatch(s)
    if m is None or m["tz"] == "-00:00":  # RFC 3339 "unknown offset" is not ISO 8601
        return None
    f = {k: int(m[k]) for k in ("y", "mo", "d", "h", "mi", "s")}
    if not (1 <= f["mo"] <= 12 and 1 <= f["d"] <= _days_in_month(f["y"], f["mo"])):
        return None
    if f["h"] > 23 or f["mi"] > 59 or f["s"] > 59:
        return None
    offset = 0
    if m["tz"] != "Z":
        oh, om = int(m["tz"][1:3]), int(m["tz"][4:6])
        if oh > 23 or om > 59:
            return None
        offset = (oh * 60 + om) * (1 if m["tz"][0] == "+" else -1)
    # A positive offset on the first minutes of year 0 would land before year 0 in UTC.
    if f["y"] == 0 and f["mo"] == 1 and f["d"] == 1 and f["h"] * 60 + f["mi"] < offset:
        return None
    f["frac"] = m["frac"] or ""
    f["offset"] = offset
    return f


def is_valid_datetime(s: object) -> bool:
    return _datetime_fields(s) is not None


def parse_datetime(s: str) -> datetime:
    """An aware UTC datetime. Python cannot represent year 0, which the spec allows."""
    f = _datetime_fields(s)
    if f is None:
        raise InvalidSyntax(f"{_shown(s)} is not a valid atproto datetime.")
    if f["y"] == 0:
        raise InvalidSyntax(f"{_shown(s)} is valid but too early to represent.")
    micros = int((f["frac"] + "000000")[:6])
    local = datetime(f["y"], f["mo"], f["d"], f["h"], f["mi"], f["s"], micros,
                     tzinfo=timezone(timedelta(minutes=f["offset"])))
    try:
        return local.astimezone(timezone.utc)
    except OverflowError:  # `9999-12-31T23:59:59-01:00` is year 10000 in UTC
        raise InvalidSyntax(f"{_shown(s)} is valid but too late or too early to represent in UTC.") from None


def _ensure(check: Callable[[object], bool], what: str) -> Callable[[str], str]:
    def ensure(s: str) -> str:
        if not check(s):
            raise InvalidSyntax(f"{_shown(s)} is not a valid {what}.")
        return s

    ensure.__name__ = f"ensure_valid_{check.__name__.removeprefix('is_valid_')}"
    ensure.__doc__ = f"Return s unchanged, or raise InvalidSyntax if it is not a valid {what}."
    return ensure


ensure_valid_did = _ensure(is_valid_did, "DID")
ensure_valid_handle = _ensure(is_valid_handle, "handle")
ensure_valid_at_identifier = _ensure(is_valid_at_identifier, "handle or DID")
ensure_valid_nsid = _ensure(is_valid_nsid, "NSID")
ensure_valid_record_key = _ensure(is_valid_record_key, "record key")
ensure_valid_tid = _ensure(is_valid_tid, "TID")
ensure_valid_at_uri = _ensure(is_valid_at_uri, "AT-URI")
ensure_valid_datetime = _ensure(is_valid_datetime, "atproto datetime")


# --- TIDs -------------------------------------------------------------------------------------

_B32_SORTABLE = "234567abcdefghijklmnopqrstuvwxyz"
_B32_INDEX = {c: i for i, c in enumerate(_B32_SORTABLE)}
_TID_LENGTH = 13
_MAX_TIMESTAMP_US = (1 << 53) - 1
_CLOCK_ID_BITS = 10


def encode_tid(timestamp_us: int, clock_id: int) -> str:
    if not 0 <= timestamp_us <= _MAX_TIMESTAMP_US:
        raise ValueError("A TID timestamp must fit in 53 bits of microseconds.")
    if not 0 <= clock_id < (1 << _CLOCK_ID_BITS):
        raise ValueError("A TID clock id must fit in 10 bits.")
    n = (timestamp_us << _CLOCK_ID_BITS) | clock_id
    chars = []
    for _ in range(_TID_LENGTH):
        chars.append(_B32_SORTABLE[n & 31])
        n >>= 5
    return "".join(reversed(chars))


def decode_tid(tid: str) -> tuple[int, int]:
    """(timestamp in microseconds since the epoch, clock id)."""
    ensure_valid_tid(tid)
    n = 0
    for c in tid:
        n = (n << 5) | _B32_INDEX[c]
    return n >> _CLOCK_ID_BITS, n & ((1 << _CLOCK_ID_BITS) - 1)


def _wall_clock_us() -> int:
    return time.time_ns() // 1000


class TidClock:
    """Issues TIDs that strictly increase for the life of the process.

    The timestamp never goes backwards: when the wall clock stalls, repeats or steps back, the
    clock issues last+1 microsecond instead, so record keys minted here never collide or reorder.
    """

    def __init__(self, clock_id: int | None = None, now_us: Callable[[], int] = _wall_clock_us):
        self.clock_id = secrets.randbelow(1 << _CLOCK_ID_BITS) if clock_id is None else clock_id
        encode_tid(0, self.clock_id)  # validates the clock id up front
        self._now_us = now_us
        self._last_us = -1
        self._lock = threading.Lock()

    def next_tid(self) -> str:
        with self._lock:
            ts = max(self._now_us(), self._last_us + 1)
            self._last_us = ts
        return encode_tid(ts, self.clock_id)


_process_clock = TidClock()


def next_tid() -> str:
    return _process_clock.next_tid()


_WEB_HOST = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*")


def did_web_host(did: str) -> str | None:
    """The host (with a port only for localhost) a did:web document is fetched from, or None.

    The one escape did:web defines is `%3A` for a port's colon. Decoding anything else would let the
    DID write the URL: `did:web:host%2Fattacker%23` is `https://host/attacker#/.well-known/did.json`.
    A path-based did:web (`did:web:host:path`) is not allowed in atproto.
    """
    raw = did[len("did:web:"):] if isinstance(did, str) and did.startswith("did:web:") else ""
    if not re.fullmatch(r"(?:[^%]|%3[aA])+", raw):
        return None
    host, _, port = raw.replace("%3a", ":").replace("%3A", ":").lower().partition(":")
    if len(host) > 253 or not _WEB_HOST.fullmatch(host):
        return None
    if port and (host != "localhost" or not 0 < (ascii_int(port) or 0) < 65536):
        return None
    return f"{host}:{port}" if port else host
