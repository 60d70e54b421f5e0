"""feed_labels and feed_label_checks, the labels cache: this module alone writes them (docs/design.md,
"Tables by owner").

The read path (read/labels.py) asks labelers what they say about the posts and accounts a page
shows, then saves each answer here in one short transaction: for every (labeler, subject) asked,
the labels in effect replace the ones stored, and the check time moves, so "no labels" is cached
as well. Each statement names its rows by the primary key; the cache is trimmed by its time
indexes as new answers are written.
"""
from __future__ import annotations

import json

from feather import sql

LOAD_CHUNK = 400  # subjects per statement (well under either database's bound parameters)
KEEP_US = 24 * 3_600_000_000  # rows older than this are dropped: stale answers help only during an outage

Subject = tuple[str, str]  # (labeler DID, subject URI or DID)
REPLACE_SQL = "DELETE FROM feed_labels WHERE src = ? AND uri = ?"  # a new answer replaces the stored one


def load(src: str, uris: list[str]) -> tuple[dict[str, int], dict[str, list[tuple[dict, int | None]]]]:
    """({uri: checked_us}, {uri: [(label as sent, exp_us)]}) of one labeler's stored answers."""
    checked: dict[str, int] = {}
    found: dict[str, list[tuple[dict, int | None]]] = {}
    uris = sorted(set(uris))
    for begin in range(0, len(uris), LOAD_CHUNK):
        (checks, params), (labels, _same) = load_sql(src, uris[begin:begin + LOAD_CHUNK])
        for uri, at in sql.rows(checks, params):
            checked[uri] = at
        for uri, text, exp_us in sql.rows(labels, params):
            try:
                label = json.loads(text)
            except ValueError:
                continue
            if isinstance(label, dict):
                found.setdefault(uri, []).append((label, exp_us))
    return checked, found


def save(answers: dict[Subject, list[tuple[dict, int | None]]], now_us: int) -> None:
    """Inside the caller's (short) transaction: each (labeler, subject)'s labels in effect, as
    (label, exp_us), replace what was stored; then rows past KEEP_US are trimmed."""
    for (src, uri) in sorted(answers):
        sql.execute(REPLACE_SQL, (src, uri))
        for label, exp_us in answers[(src, uri)]:
            sql.execute("INSERT INTO feed_labels (src, uri, val, label, exp_us, fetched_us) VALUES (?, ?, ?, ?, ?, ?)"
                        " ON CONFLICT (src, uri, val) DO UPDATE SET label = excluded.label, exp_us = excluded.exp_us,"
                        " fetched_us = excluded.fetched_us",
                        (src, uri, label["val"], json.dumps(label, separators=(",", ":")), exp_us, now_us))
        sql.execute("INSERT INTO feed_label_checks (src, uri, checked_us) VALUES (?, ?, ?)"
                    " ON CONFLICT (src, uri) DO UPDATE SET checked_us = excluded.checked_us", (src, uri, now_us))
    trim(now_us - KEEP_US)


def trim_sql(before_us: int) -> list[tuple[str, tuple]]:
    return [("DELETE FROM feed_labels WHERE fetched_us < ?", (before_us,)),
            ("DELETE FROM feed_label_checks WHERE checked_us < ?", (before_us,))]


def trim(before_us: int) -> int:
    return sum(sql.execute(statement, params).rowcount for statement, params in trim_sql(before_us))


def load_sql(src: str, uris: list[str]) -> list[tuple[str, list]]:
    """The two reads load() runs, for the EXPLAIN test."""
    marks = ", ".join("?" * len(uris))
    return [(f"SELECT uri, checked_us FROM feed_label_checks WHERE src = ? AND uri IN ({marks})", [src, *uris]),
            (f"SELECT uri, label, exp_us FROM feed_labels WHERE src = ? AND uri IN ({marks}) ORDER BY uri, val",
             [src, *uris])]
