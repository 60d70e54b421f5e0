"""The listRecords pipeline shared by listRecords and getFeed: filters, sort, keyset, format.

SQL is assembled only from the config (table names, validated queryable paths) and fixed
fragments; every request value travels as a bound parameter. A feed read is the same pipeline
over another source: feed_items joined to the target's records (plus, for hybrid feeds, the
heavy authors' records merged at read time; see hybrid.py). `profiles=true` is the caller's
to add (web/xrpc.py, through identities.profiles_for): the pipeline reads the store only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from feather import sql
from feather.db import current_dialect
from feather.errors import ApiError
from feather.feeds.config import Collection, FeedsConfig, Queryable
from feather.feeds.read import cursor as cursors
from feather.feeds.store import records
from feather.feeds.store import search as searching
from feather.parsing import ascii_int

DEFAULT_LIMIT, MAX_LIMIT = 50, 200


@dataclass
class Source:
    """Where candidate rows come from; `r` is always the target's records table."""
    from_sql: str
    from_params: list = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    where_params: list = field(default_factory=list)
    t: str = "r.time_us"  # the time sort key (indexed on the source's driving table)
    u: str = "r.uri"
    reposts: bool = False  # rows may be reposts: `u` is then the repost's URI and `t` its time
    mixed: bool = False  # rows come from several collections: `r.collection` says which (read/mixed.py)


def collection_source(c: Collection, author: str | None = None) -> Source:
    source = Source(f"FROM {c.table} r")
    if author is not None:
        source.where.append("r.did = ?")
        source.where_params.append(author)
    return source


LISTED_COLUMNS = "CAST(? AS TEXT) AS uri, CAST(? AS TEXT) AS cid, CAST(? AS TEXT) AS did, " \
                 "CAST(? AS TEXT) AS rkey, CAST(? AS TEXT) AS record, CAST(? AS BIGINT) AS time_us"


def listed_source(c: Collection, rows: list[tuple]) -> Source:
    """Rows that are not stored, (uri, cid, did, rkey, record JSON, time_us) each, as the pipeline's
    `r`: an author's page fetched from their PDS answers the read with the same filters, sort and
    cursors as the store would, and nothing is written."""
    if not rows:
        return Source(f"FROM (SELECT {LISTED_COLUMNS}) r", from_params=[None] * 6, where=["r.uri IS NOT NULL"])
    union = " UNION ALL ".join([f"SELECT {LISTED_COLUMNS}"] * len(rows))
    return Source(f"FROM ({union}) r", from_params=[v for row in rows for v in row])


def feed_source(actor: str, target_nsid: str, c: Collection) -> Source:
    """feed_items drives: its (actor, collection, time_us DESC, uri) key yields rows in page order."""
    return Source(f"FROM feed_items f JOIN {c.table} r ON r.uri = f.uri",
                  where=["f.actor = ?", "f.collection = ?"], where_params=[actor, target_nsid],
                  t="f.time_us", u="f.uri")


def parse_limit(raw: str | None) -> int:
    # Contrail's leniency: an unreadable limit means the default. Readable means ASCII digits only,
    # so `limit=٣` is the default too, not 3.
    value = ascii_int(raw, signed=True)
    return DEFAULT_LIMIT if value is None else max(1, min(MAX_LIMIT, value))


def _field_expr(q: Queryable) -> str:
    return current_dialect().json_path_text("r.record", q.path)


def _bound(name: str, value: str) -> str:
    """A filter value as a bound parameter; NUL (which PostgreSQL refuses in text) is a 400."""
    if not cursors.bindable(value):
        raise ApiError(400, "InvalidRequest", f"The {name} parameter holds a character no filter can match (NUL).")
    return value


def _filters(c: Collection, params: Mapping[str, str]) -> tuple[list[str], list]:
    where, values = [], []
    for q in c.queryable.values():  # only configured fields: request keys are never interpolated
        expr = _field_expr(q)
        if q.range:
            for suffix, op in (("Min", ">="), ("Max", "<=")):
                value = params.get(q.param + suffix)
                if value:
                    where.append(f"{expr} {op} ?")
                    values.append(_bound(q.param + suffix, value))
        else:
            value = params.get(q.param)
            if value:  # `?text=` filters nothing (Contrail), rather than matching only empty strings
                where.append(f"{expr} = ?")
                values.append(_bound(q.param, value))
    return where, values


def _sort(c: Collection, params: Mapping[str, str]) -> tuple[Queryable | None, str]:
    q = c.queryable.get(params.get("sort") or "")
    order = params.get("order")
    if q is None:
        return None, "desc"
    default = "desc" if q.range else "asc"
    return q, order if order in ("asc", "desc") else default


def run(config: FeedsConfig, c: Collection, params: Mapping[str, str], source: Source,
        stored: bool = False) -> dict:
    """One page: {"records": [...], "cursor": ...}. stored: each `value` as records.answer_value
    gives it (the stored text, for an answer that copies it), for a caller that never reads it."""
    d = current_dialect()
    limit = parse_limit(params.get("limit"))
    where, values = list(source.where), list(source.where_params)
    fw, fv = _filters(c, params)
    where += fw
    values += fv
    matching = _search(c, params, source)  # (join, its params, relevance) or None
    sort_field, direction = (None, "desc") if matching else _sort(c, params)
    kind = "search" if matching else f"field:{sort_field.param}" if sort_field else "time"
    cur = cursors.decode(params.get("cursor"), kind)
    if matching and cur is not None and not _number(cur.v):
        cur = None  # a search cursor carries its relevance: without one, page one
    if not matching and cur is not None and cur.v is not None and not isinstance(cur.v, str) and not d.is_sqlite:
        cur = None  # PostgreSQL's field values are text (->>): a number there is a forged cursor, page one
    t, u = source.t, source.u
    tie = f"({t} < ? OR ({t} = ? AND {u} > ?))"
    if matching:  # Contrail's search order: relevance, then time, then URI
        rank = matching[2]
        order_by = f"{rank} DESC, {t} DESC, {u} ASC"
        if cur:
            where.append(f"({rank} < ? OR ({rank} = ? AND {tie}))")
            values += [cur.v, cur.v, cur.t, cur.t, cur.u]
    elif sort_field is None:
        order_by = f"{t} DESC, {u} ASC"
        if cur:
            where.append(tie)
            values += [cur.t, cur.t, cur.u]
    else:
        expr = _field_expr(sort_field)
        order_by = f"{expr} {direction.upper()} NULLS LAST, {t} DESC, {u} ASC"
        if cur:
            if cur.v is None:
                where.append(f"({expr} IS NULL AND {tie})")
                values += [cur.t, cur.t, cur.u]
            else:
                beyond = "<" if direction == "desc" else ">"
                where.append(f"({expr} {beyond} ? OR ({expr} = ? AND {tie}) OR {expr} IS NULL)")
                values += [cur.v, cur.v, cur.t, cur.t, cur.u]
    select = (f"SELECT r.uri, r.cid, r.did, r.rkey, r.record, {t}, {u}"
              + (f", {matching[2]}" if matching else f", {_field_expr(sort_field)}" if sort_field else "")
              + (", r.time_us AS record_time_us" if source.reposts else "")
              + (", r.collection AS record_collection" if source.mixed else "")
              + f" {source.from_sql}" + (f" {matching[0]}" if matching else ""))
    arms = _arms(source, where, values) if not matching and sort_field is None else None
    if arms is not None:
        statement = " UNION ALL ".join(f"{select} WHERE {' AND '.join(w)}" for w, _ in arms) + \
            " ORDER BY 6 DESC, 7 ASC LIMIT ?"  # {t}, {u}: the compound's order is by position
        bound = [p for _, v in arms for p in source.from_params + v] + [limit]
    else:
        statement = select + (f" WHERE {' AND '.join(where)}" if where else "") + f" ORDER BY {order_by} LIMIT ?"
        bound = source.from_params + (matching[1] if matching else []) + values + [limit]
    rows = sql.rows(statement, bound)
    out: dict[str, Any] = {"records": _records(c, rows, source, stored)}
    if len(rows) == limit:
        last = rows[-1]
        valued = sort_field is not None or matching is not None
        out["cursor"] = cursors.encode(last[5], last[6], kind, last[7] if valued else None, with_v=valued)
    return out


def _arms(source: Source, where: list[str], values: list) -> list[tuple[list[str], list]] | None:
    """A time-ordered read of feed_items over several collections (posts and the reposts beside
    them), split into one arm per collection: [(where, values)] each, or None to run it whole.

    feed_items' key is (actor, collection, time_us DESC, uri), so `f.collection IN (…)` is one
    key range per collection and no index yields their union in page order: SQLite read every row
    the reader has of them (up to the caps), probed each one's repost rules and record, and sorted
    them all for one page (a temporary B-tree). Each arm is in key order, and the compound's ORDER
    BY merges them (SQLite's MERGE, PostgreSQL's Merge Append), so the read stops after `limit`
    rows. The same rows either way: every row has one collection, so it is in exactly one arm. Not
    for a source that brings its own subquery (a mixed feed's union of tables, hybrid's): each arm
    would run it again."""
    if source.from_params or (source.t, source.u) != ("f.time_us", "f.uri"):
        return None
    for i, clause in enumerate(where):
        n = clause.count("?")
        if n < 2 or clause != f"f.collection IN ({', '.join('?' * n)})":
            continue
        at = sum(w.count("?") for w in where[:i])  # this clause's values among the bound ones
        return [(where[:i] + ["f.collection = ?"] + where[i + 1:], values[:at] + [value] + values[at + n:])
                for value in values[at:at + n]]
    return None


def _search(c: Collection, params: Mapping[str, str], source: Source) -> tuple[str, list, str] | None:
    """`search=` (store/search.py): the index join keeping the matching records, or None when
    there is no search (absent or blank). A search that cannot run is a 400 saying why. A source
    driven by another table than `r` (a timeline) probes the index row by row; the collection's
    own rows are found through the index."""
    try:
        query = searching.parse(params.get("search"))
    except searching.SearchError as exc:
        raise ApiError(400, "InvalidRequest", str(exc)) from None
    if query is None:
        return None
    if not c.searchable:
        raise ApiError(400, "InvalidRequest", f"{c.nsid} records cannot be searched here; leave out search.")
    return searching.join(c, query, probe=source.u != "r.uri")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _records(c: Collection, rows: list, source: Source, stored: bool) -> list[dict]:
    """The page's rows as records (format_record's shape), in one pass: this runs for every row
    of every read. A mixed source's last column is the row's collection; a repost source's last
    before it is the record's own time, which the record keeps, and a row a repost brought (its
    key, row[6], is the repost's URI) says in `reason` which repost, whose, and when (the time
    the feed orders it by)."""
    value = records.answer_value if stored else records.parse_value
    nsid, mixed, reposts = c.nsid, source.mixed, source.reposts
    out = []
    for row in rows:
        record = {"uri": row[0], "cid": row[1], "did": row[2], "collection": row[-1] if mixed else nsid,
                  "rkey": row[3], "time_us": (row[-2] if mixed else row[-1]) if reposts else row[5],
                  "value": value(row[4])}
        if reposts and row[6] != row[0]:
            record["reason"] = {"$type": REASON_REPOST, "repost": row[6], "by": row[6].split("/")[2],
                                "time_us": row[5]}
        out.append(record)
    return out


REASON_REPOST = "app.bsky.feed.defs#skeletonReasonRepost"


def format_record(c: Collection, row) -> dict:
    uri, cid, did, rkey, text, time_us = row[:6]
    return {"uri": uri, "cid": cid, "did": did, "collection": c.nsid, "rkey": rkey,
            "time_us": time_us, "value": records.parse_value(text)}


def get_record(c: Collection, uri: str) -> dict | None:
    row = sql.one(f"SELECT uri, cid, did, rkey, record, time_us FROM {c.table} WHERE uri = ?", (uri,))
    return format_record(c, row) if row else None
