"""Full-text search over the records of collections with `searchable` fields (the feeds file).

One index per such collection, `feed_search_<short>`, keyed by record URI and written only here,
always in the transaction that writes the record (store/records.py calls in on every store,
delete, author drop and trim), so a batch, its replay and a kill -9 leave the index and the
records in step: every stored record of a searchable collection has exactly one index row.
How the index is stored is the database's (feather/dialect.py: an FTS5 table on SQLite, a
tsvector with a GIN index on PostgreSQL); what a word is, is decided here, once, for both:

- a word is a run of letters and digits (with the marks that follow them), after Unicode NFKC and
  case folding; everything else separates words. Words longer than MAX_WORD_CHARS are not kept.
  So "Foo-bar" holds the words `foo` and `bar`, one after the other, on both databases (neither
  database's own parser is used: PostgreSQL's would keep `foo-bar` and `example.com` whole).
- a query (parse()) is words, all of which must match; `"quoted words"` must appear together in
  that order; a word made of several (`foo-bar`, `example.com`) is such a phrase too; `word*`
  matches every word starting with it; `OR` between two terms makes either one enough. Nothing
  else is an operator: quotes that do not close run to the end, and `NEAR`, `NOT`, `:` or `^` are
  plain text. The query reaches the database only as words this module made, bound as one
  parameter, so no input can make a syntax error there.

Relevance differs by database (bm25 on SQLite, ts_rank on PostgreSQL): the same records match
on both, and only their order by relevance may differ; ties are broken by time, then URI.
"""
from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass

import orjson

from feather import sql
from feather.db import current_dialect
from feather.feeds.config import Collection, FeedsConfig

MAX_QUERY_CHARS = 200  # what a search may be, in characters
MAX_QUERY_WORDS = 16  # and in words, across all its terms
MAX_WORD_CHARS = 64  # longer words are not indexed, and a search for one is refused
MAX_DOCUMENT_WORDS = 2048  # the words of a record that are indexed (a long post has a few hundred)
# PostgreSQL keeps at most 256 positions of one word in a record; past that, the word is replaced by
# a separator no search can match (on both databases), so phrases match alike and positions stay.
MAX_POSITIONS = 256
FILLER = "\u00b7"
REBUILD_CHUNK = 500

_ASCII_WORD = re.compile(r"[a-z0-9]+")
_PIECE = re.compile(r'"([^"]*)"?|([^\s"]+)')


class SearchError(ValueError):
    """A search that cannot run; the message says what to change."""


@dataclass(frozen=True)
class Query:
    """Every group must match; a group is terms joined by OR; a term is (words, prefix)."""
    groups: tuple[tuple[tuple[tuple[str, ...], bool], ...], ...]

    @property
    def words(self) -> list[str]:
        return [w for group in self.groups for words, _ in group for w in words]


def _in_word(ch: str) -> bool:
    return ch.isalnum() or unicodedata.category(ch)[0] == "M"


def words(text: str) -> list[str]:
    """The words of text, as the index keeps them."""
    if text.isascii():
        return _ASCII_WORD.findall(text.lower())
    out, current = [], []
    for ch in unicodedata.normalize("NFKC", text).casefold():
        if ch.isalnum() or (current and unicodedata.category(ch)[0] == "M"):
            current.append(ch)
        elif current:
            out.append("".join(current))
            current = []
    if current:
        out.append("".join(current))
    return out


def parse(raw: str | None) -> Query | None:
    """The search parameter as a Query; None when there is none (absent, or only spaces)."""
    if raw is None or not raw.strip():
        return None
    if len(raw) > MAX_QUERY_CHARS:
        raise SearchError(f"A search can be at most {MAX_QUERY_CHARS} characters long; shorten it.")
    groups: list[list[tuple[tuple[str, ...], bool]]] = []
    joined = False
    for m in _PIECE.finditer(raw):
        phrase, bare = m.groups()
        if bare == "OR":
            joined = bool(groups)
            continue
        if bare == "AND":  # what words do anyway
            continue
        found = words(phrase if phrase is not None else bare)
        if not found:
            continue
        if any(len(w) > MAX_WORD_CHARS for w in found):
            raise SearchError(f"A search word can be at most {MAX_WORD_CHARS} characters long.")
        stem = bare.rstrip("*") if bare is not None else ""
        prefix = bare is not None and stem != bare and _in_word(stem[-1:] or " ")
        term = (tuple(found), prefix)
        if joined:
            groups[-1].append(term)
        else:
            groups.append([term])
        joined = False
    query = Query(tuple(tuple(g) for g in groups))
    if not query.groups:
        raise SearchError("Search for at least one word (letters or digits).")
    if len(query.words) > MAX_QUERY_WORDS:
        raise SearchError(f"A search can hold at most {MAX_QUERY_WORDS} words; leave some out.")
    return query


def _value(text: str | None):
    if not text:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            return json.loads(text)  # what orjson refuses, like an integer past 64 bits
        except ValueError:
            return None


def document(c: Collection, text: str | None) -> list[str]:
    """The words of a record's searchable fields (a string, or the strings of a list), in order."""
    value = _value(text)
    found: list[str] = []
    for path in c.searchable:
        v = value
        for key in path:
            v = v.get(key) if isinstance(v, dict) else None
        for s in [v] if isinstance(v, str) else v if isinstance(v, list) else []:
            if isinstance(s, str):
                found += words(s)
    kept = [w for w in found if len(w) <= MAX_WORD_CHARS][:MAX_DOCUMENT_WORDS]
    seen: dict[str, int] = {}
    for i, w in enumerate(kept):
        seen[w] = seen.get(w, 0) + 1
        if seen[w] > MAX_POSITIONS:
            kept[i] = FILLER
    return kept


# --- the index tables ---------------------------------------------------------------------------

def objects(config: FeedsConfig) -> list[tuple[str, str, bool]]:
    """(DDL, the object it names, whether it exists afterwards), for store/schema.py's ensure():
    the index of every searchable collection, and none for the others (a stale one would miss
    what was stored while it was off)."""
    d = current_dialect()
    out = []
    for c in config.collections.values():
        made = d.search_objects(c.search_table)
        if c.searchable:
            out += [(statement, name, True) for statement, name in made]
        else:  # the table first: on PostgreSQL its index goes with it
            out += [(f"DROP TABLE IF EXISTS {name}", name, False) for _, name in made]
    return out


def names(c: Collection) -> set[str]:
    """The objects c's index consists of."""
    return {name for _, name in current_dialect().search_objects(c.search_table)}


def searchable(config: FeedsConfig) -> list[Collection]:
    return [c for c in config.collections.values() if c.searchable]


def _chunks(rows: list, width: int):
    size = max(1, current_dialect().max_params // width)
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


def index(c: Collection, rows: list[tuple[str, str | None]]) -> None:
    """(Re)index records just stored, (uri, record JSON text) each, each uri at most once."""
    if not c.searchable or not rows:
        return
    d = current_dialect()
    pairs = [(uri, d.search_document(document(c, text))) for uri, text in rows]
    for chunk in _chunks(pairs, 2):
        params = [v for pair in chunk for v in pair]
        for statement in d.search_upsert_sql(c.search_table, len(chunk)):
            sql.write(statement, params)


def forget(c: Collection, uris: list[str]) -> None:
    """Remove the index rows of these records (deleted in the same transaction)."""
    if not c.searchable or not uris:
        return
    for chunk in _chunks(sorted(uris), 1):
        for statement in forget_sql(c, ", ".join("?" * len(chunk))):
            sql.write(statement, chunk)


def forget_sql(c: Collection, uris: str) -> list[str]:
    """The statements removing the index rows of the URIs `uris` lists (bound values, or a SELECT of
    the records about to be deleted, run first with that delete's own condition and parameters)."""
    return current_dialect().search_delete_sql(c.search_table, uris)


def forget_selected(c: Collection, select_uris: str, params) -> None:
    if c.searchable:
        for statement in forget_sql(c, select_uris):
            sql.execute(statement, params)


def rebuild(c: Collection) -> int:
    """Index every stored record of c, in URI order (a new index, made when a process starts)."""
    done, after = 0, ""
    while True:
        rows = sql.rows(f"SELECT uri, record FROM {c.table} WHERE uri > ? ORDER BY uri LIMIT ?",
                        (after, REBUILD_CHUNK))
        if not rows:
            return done
        index(c, [(row[0], row[1]) for row in rows])
        done += len(rows)
        after = rows[-1][0]


# --- reading ------------------------------------------------------------------------------------

def join(c: Collection, query: Query, probe: bool = False) -> tuple[str, list, str]:
    """(a JOIN keeping the records alias `r` that match, its parameters, the relevance expression
    (higher is more relevant)) for the listRecords pipeline (read/query.py). probe: the rows come
    from a reader's timeline, each looked up in the index (dialect.search_join)."""
    d = current_dialect()
    join_sql, rank = d.search_join(c.search_table, probe=probe)
    return join_sql, [d.search_query(query.groups)], rank
