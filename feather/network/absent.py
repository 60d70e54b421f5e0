"""Reads that survive their table being dropped while the process runs: they answer as the empty
catalogue (logged once each) until the next start re-creates the table (feather/network/schema.py)."""
from __future__ import annotations

import functools
import logging

import peewee

from feather.db import db

log = logging.getLogger(__name__)


def is_missing_table(error: Exception) -> bool:
    """The database's own word for "no such table", on either engine."""
    # peewee raises its own type while handling the driver's exception, which is thus the context.
    if getattr(error.__context__, "pgcode", None) == "42P01":  # PostgreSQL's undefined_table
        return True
    return str(error).startswith("no such table")  # SQLite's message, its only signal


def absent_reads_as(empty):
    """A read that answers `empty` when its table was dropped while the process runs (logged once
    per read). Only outside a transaction: inside one (a batch) PostgreSQL has already aborted it,
    so the error goes up and the batch is retried, which the restart's re-creation then lets pass."""
    def wrap(read):
        @functools.wraps(read)
        def guarded(*args, **kwargs):
            try:
                return read(*args, **kwargs)
            except peewee.DatabaseError as error:
                if db.in_transaction() or not is_missing_table(error):
                    raise
                if not guarded.logged:
                    guarded.logged = True
                    log.warning("network: %s read a dropped table (%s); answering empty until a restart "
                                "re-creates it", read.__qualname__, error)
                return empty() if callable(empty) else empty
        guarded.logged = False
        return guarded
    return wrap
