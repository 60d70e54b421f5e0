"""Disk pressure: when the streams stop writing so the reader's own data keeps its disk.

One answer from two rules. An explicit FEATHERREADER_DB_SIZE_WATERMARK_BYTES (above 0) is the byte
rule: the database at or over that size. Otherwise, by default, the free-space rule: the disk that
holds the SQLite file has less than the larger of MIN_FREE_BYTES or MIN_FREE_FRACTION of it free.
A default install that fills its disk therefore pauses, prunes the catalogue first and holds the
rebuild back, instead of failing writes at 100 %. On PostgreSQL the server's disk is not this
process's to see, so only the byte rule applies there (docs/operating.md says to set it).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import peewee

from feather.db import db
from feather.jetstream.store import db_size_bytes

log = logging.getLogger(__name__)

MIN_FREE_BYTES = 1 << 30  # 1 GiB
MIN_FREE_FRACTION = 0.05
statvfs = os.statvfs  # a module attribute, so a test can stand in for a full disk


@dataclass(frozen=True)
class Pressure:
    reason: str  # a sentence for the pause state and the log
    size: int  # the database's size now, in bytes


def sqlite_dir() -> str | None:
    """The directory of the SQLite file, or None (PostgreSQL, or an in-memory database)."""
    database = db.obj
    if not isinstance(database, peewee.SqliteDatabase) or database.database in ("", ":memory:"):
        return None
    return os.path.dirname(os.path.abspath(database.database))


def free_needed(total: int) -> int:
    """How many bytes the free-space rule keeps free on a disk of total bytes."""
    return max(MIN_FREE_BYTES, int(total * MIN_FREE_FRACTION))


def pressure(settings) -> Pressure | None:
    """Why writing should pause now, or None. Reads the database's size (and statvfs) only."""
    limit = settings.featherreader_db_size_watermark_bytes
    if limit:
        size = db_size_bytes()
        return Pressure(f"database size {size} >= watermark {limit}", size) if size >= limit else None
    path = sqlite_dir()
    if path is None:
        return None
    st = statvfs(path)
    free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    need = free_needed(total)
    if free >= need:
        return None
    return Pressure(f"disk has {free} bytes free, under the {need} kept free", db_size_bytes())
