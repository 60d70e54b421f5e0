"""The records store: one table per configured collection, written by ingest and backfill, and
feed_tombstones. This module alone writes them (docs/design.md, "Tables by owner"): the records
sweep (tasks/records_sweep.py) decides whose records go, the statements are here."""
from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime

import orjson

from feather import sql
from feather.atproto.syntax import InvalidSyntax, parse_datetime
from feather.db import current_dialect
from feather.feeds.config import Collection
from feather.feeds.store import search

LOAD_CHUNK = 500  # bound parameters per statement, under SQLite's 999 floor on old builds
# The largest record JSON the store keeps. A Bluesky post at its limits (3,000 bytes of text, its
# facets, four images with long alt texts) is well under 32 KiB; anything bigger is someone
# filling the disk, so it is neither stored nor fanned out, from the stream or from a PDS.
MAX_RECORD_BYTES = 64 * 1024
_arrival_lock = threading.Lock()
_last_arrival = 0


def next_arrival() -> int:
    """A strictly increasing stamp for this process: the order records were stored in.

    Hybrid fan-out compares a post's arrival with the follow's to decide whether live fan-out
    would have copied it, so two stores in one microsecond must still be ordered.
    """
    global _last_arrival
    with _arrival_lock:
        _last_arrival = max(sql.now_us(), _last_arrival + 1)
        return _last_arrival


# The shape nearly every app writes (`2025-01-01T00:00:00.000Z`): a subset of what
# parse_datetime accepts, read without its general path (a tenth of ingest's Python time).
_CANONICAL = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?Z")


def _canonical_stamp(created: str) -> datetime | None:
    """parse_datetime's answer for the canonical shape, or None to take its general path (which
    also decides what is invalid: a day past the month's end, hour 24, second 60, year 0 —
    exactly what datetime() refuses too)."""
    m = _CANONICAL.fullmatch(created)
    if m is None:
        return None
    y, mo, d, h, mi, sec, frac = m.groups()
    try:
        return datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec),
                        int(frac.ljust(6, "0")) if frac else 0, tzinfo=UTC)
    except ValueError:
        return None


def record_time_us(record: dict | None, source_time_us: int) -> int:
    """min(createdAt, source time): a backdated record sorts by its claim, a future-dated one by arrival."""
    created = record.get("createdAt") if isinstance(record, dict) else None
    if isinstance(created, str):
        try:
            stamp = _canonical_stamp(created) or parse_datetime(created)
        except (InvalidSyntax, ValueError, OverflowError):
            return source_time_us
        claimed = int(stamp.timestamp()) * 1_000_000 + stamp.microsecond
        return min(claimed, source_time_us)
    return source_time_us


def _uri_in(select: str, uris: list[str]) -> list[tuple]:
    """Rows of `select … WHERE uri IN` for uris, LOAD_CHUNK bound parameters per statement."""
    found: list[tuple] = []
    for start in range(0, len(uris), LOAD_CHUNK):
        chunk = uris[start:start + LOAD_CHUNK]
        found += sql.rows(f"{select} ({', '.join('?' * len(chunk))})", chunk)
    return found


def load_many(c: Collection, uris: list[str]) -> dict[str, tuple[str | None, str | None, int]]:
    """{uri: (cid, record JSON text, time_us)} for those of uris that are stored."""
    rows = _uri_in(f"SELECT uri, cid, record, time_us FROM {c.table} WHERE uri IN", uris)
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def dumps(record) -> str:
    """The record as stored: compact JSON. orjson (the stream's decoder) writes it ~5x faster; a
    record it refuses (an integer past 64 bits) goes through json."""
    try:
        return orjson.dumps(record).decode()
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


_CID = re.compile(r"[A-Za-z0-9]{8,256}")


def clean_cid(cid: object) -> str | None:
    """A CID as a remote server sent it, when it has a CID's shape (base32/base58 letters); else None.
    What a PDS lists is stored as text, and a NUL or a megabyte there is not a CID."""
    return cid if isinstance(cid, str) and _CID.fullmatch(cid) else None


def fits(text: str) -> bool:
    """Whether a record's JSON text is within MAX_RECORD_BYTES (its UTF-8 length)."""
    # A character is at most four bytes: short texts (nearly all) skip the encode.
    return len(text) * 4 <= MAX_RECORD_BYTES or len(text.encode("utf-8", "surrogatepass")) <= MAX_RECORD_BYTES


COLUMNS = ("uri", "did", "rkey", "cid", "record", "time_us", "indexed_at", "arrival")
_UPSERT = (" ON CONFLICT (uri) DO UPDATE SET cid = excluded.cid, record = excluded.record,"
           " time_us = excluded.time_us, indexed_at = excluded.indexed_at, arrival = excluded.arrival")


def chunks(rows: list, width: int):
    """rows in slices whose parameters (width each) fit one statement."""
    size = max(1, current_dialect().max_params // width)
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


def store_many_sql(c: Collection, rows: list[tuple]):
    """Upsert of whole rows (COLUMNS order), one statement; each uri at most once."""
    values = ", ".join(["(" + ", ".join("?" * len(COLUMNS)) + ")"] * len(rows))
    return (f"INSERT INTO {c.table} ({', '.join(COLUMNS)}) VALUES {values}{_UPSERT}",
            [v for row in rows for v in row])


def store_many(c: Collection, rows: list[tuple]) -> None:
    rows = [row for row in rows if row[4] is None or fits(row[4])]
    for chunk in chunks(rows, len(COLUMNS)):
        statement, params = store_many_sql(c, chunk)
        sql.write(statement, params)
    search.index(c, [(row[0], row[4]) for row in rows])  # the index moves with the record


def store(c: Collection, *, uri: str, did: str, rkey: str, cid: str | None, record: dict | None,
          time_us: int, arrival: int | None = None, text: str | None = None) -> str:
    """Upsert; returns the record JSON text as stored."""
    text = dumps(record) if text is None else text
    store_many(c, [(uri, did, rkey, cid, text, time_us, sql.now_us(), arrival or next_arrival())])
    return text


def store_if_absent(c: Collection, *, uri: str, did: str, rkey: str, cid: str | None, record: dict | None,
                    time_us: int, text: str | None = None) -> bool:
    """Backfill's write: never overwrite what the live stream stored. True if inserted (a record
    past MAX_RECORD_BYTES never is). text: the record's JSON when the caller already has it."""
    text = dumps(record) if text is None else text
    if not fits(text):
        return False
    cid = clean_cid(cid)
    cur = sql.execute(f"INSERT INTO {c.table} (uri, did, rkey, cid, record, time_us, indexed_at, arrival)"
                      " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uri) DO NOTHING",
                      (uri, did, rkey, cid, text, time_us, sql.now_us(), next_arrival()))
    if cur.rowcount > 0:
        search.index(c, [(uri, text)])
    return cur.rowcount > 0


def tombstones(uris: list[str]) -> dict[str, int]:
    """{uri: time_us of its latest delete} for those of uris that were deleted (see 0042)."""
    return dict(_uri_in("SELECT uri, time_us FROM feed_tombstones WHERE uri IN", uris))


def bury_many(stones: dict[str, int]) -> None:
    """Remember deletes {uri: time_us}; a tombstone only ever moves forward, like the cursor."""
    d = current_dialect()
    rows = sorted(stones.items())
    for chunk in chunks(rows, 2):
        sql.write(f"INSERT INTO feed_tombstones (uri, time_us) VALUES {', '.join(['(?, ?)'] * len(chunk))}"
                  " ON CONFLICT (uri) DO UPDATE"
                  f" SET time_us = {d.greatest('feed_tombstones.time_us', 'excluded.time_us')}",
                  [v for row in chunk for v in row])


def sweep_tombstones(before_us: int) -> int:
    return sql.execute("DELETE FROM feed_tombstones WHERE time_us < ?", (before_us,)).rowcount


def delete_many(c: Collection, uris: list[str]) -> None:
    search.forget(c, uris)
    for chunk in chunks(sorted(uris), 1):
        sql.write(f"DELETE FROM {c.table} WHERE uri IN ({', '.join('?' * len(chunk))})", chunk)


def _unless_reposted(table: str, reposted: bool) -> str:
    """A record reposted into someone's timeline stays while that repost row does: the feed shows
    it through the repost, whoever its author is (the partial subject index, one probe)."""
    return f" AND NOT EXISTS (SELECT 1 FROM feed_items g WHERE g.subject = {table}.uri)" if reposted else ""


def drop_author_sql(table: str, did: str, reposted: bool = False):
    """Every record of did in one records table (the (did, time_us) index's prefix)."""
    return f"DELETE FROM {table} WHERE did = ?{_unless_reposted(table, reposted)}", (did,)


def trim_author_sql(table: str, did: str, cap: int, reposted: bool = False):
    """did's records older than their cap-th newest; ties with it stay, like the prune."""
    return (f"DELETE FROM {table} WHERE did = ? AND time_us < ("
            f"SELECT time_us FROM {table} WHERE did = ? ORDER BY time_us DESC LIMIT 1 OFFSET ?)"
            f"{_unless_reposted(table, reposted)}",
            (did, did, max(0, cap - 1)))


def _delete_with_index(c: Collection, statement: str, params) -> int:
    """Run a records DELETE (`DELETE FROM <table> WHERE …`) after removing the index rows of the
    records its condition selects, in the same transaction: the records sweep's author drop and trim."""
    search.forget_selected(c, selected_uris_sql(c, statement), params)
    return sql.execute(statement, params).rowcount


def selected_uris_sql(c: Collection, statement: str) -> str:
    """The URIs a records DELETE of c removes: the same condition, the same parameters."""
    return f"SELECT uri FROM {c.table} WHERE {statement.split(' WHERE ', 1)[1]}"


def drop_author(c: Collection, did: str, reposted: bool = False) -> int:
    return _delete_with_index(c, *drop_author_sql(c.table, did, reposted))


def trim_author(c: Collection, did: str, cap: int, reposted: bool = False) -> int:
    return _delete_with_index(c, *trim_author_sql(c.table, did, cap, reposted))


class Stored:
    """A record's stored JSON text, for an answer that copies it as it is instead of reading it
    and writing it again (web/xrpc.py::_json writes it as an orjson.Fragment). `value` reads it."""
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    @property
    def value(self):
        return parse_value(self.text)


def answer_value(text: str | None):
    """The record as an answer carries it: the stored text itself (Stored) when it is JSON, else
    what parse_value reads. Reading each record and writing it again was a fifth of a getFeed page
    (bench/getfeed.py --profile).

    Every text here was written by `dumps` (its two writers, the batch and the author backfill, go
    through it): orjson's strict JSON, or json's, which is JSON too except for a non-finite float
    (NaN, Infinity), which it writes as a bare word. A text that holds either word, or does not
    look like an object, takes the reading path, which turns them into null (as before); a word
    in a post's text only costs it the slower path."""
    if text is not None and text[:1] == "{" and text[-1:] == "}" and not _maybe_non_finite(text):
        return Stored(text)
    return parse_value(text)


def _maybe_non_finite(text: str) -> bool:
    # A one-letter search is a memchr: most records have no capital N or I and skip the word
    # searches, which cost several times as much (a common letter, `a`, keeps "NaN"'s skips short).
    return ("N" in text and "NaN" in text) or ("I" in text and "Infinity" in text)


def parse_value(text: str | None):
    """The record JSON as stored; invalid JSON comes back as the raw string (Contrail's formatRecord).

    orjson first: json.loads of each record was half a millisecond of a getFeed page (50 records).
    orjson refuses some of what json accepts (NaN, a lone surrogate) and reads an integer past 64
    bits as a float, silently. So its answer is kept only when writing it back gives the stored
    text exactly, as it does for what `dumps` stored through orjson (nearly every record): an
    integer read as a float would come back as a float. Anything else is json's to read, as before."""
    if text is None:
        return None
    try:
        value = orjson.loads(text)
        if orjson.dumps(value) == text.encode():
            return value
    except (orjson.JSONDecodeError, orjson.JSONEncodeError, UnicodeEncodeError):
        pass  # json accepts more (or nests deeper than orjson writes), or it is not JSON at all
    try:
        return json.loads(text)
    except ValueError:
        return text
