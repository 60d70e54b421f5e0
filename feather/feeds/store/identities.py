"""feed_identities, the identity cache: this module alone writes it (docs/design.md, "Tables by
owner").

The read path (read/identities.py) decides what to look up and saves what it found; an identity
event in ingest (ingest/apply.py) makes a handle unverified again.
"""
from __future__ import annotations

from feather import sql
from feather.feeds.store import records


def forget_handles(dids) -> None:
    """An identity event: the handle may have changed, so the next read re-verifies it."""
    for chunk in records.chunks(sorted(set(dids)), 1):  # one statement for a batch's identity events
        sql.write(f"UPDATE feed_identities SET handle_checked_us = 0 WHERE did IN ({', '.join('?' * len(chunk))})",
                  chunk)


def save_handle(did: str, handle: str | None, checked_us: int) -> None:
    """A handle lookup finished: its answer (None: no handle verifies) and when."""
    sql.execute("INSERT INTO feed_identities (did, handle, handle_checked_us) VALUES (?, ?, ?)"
                " ON CONFLICT (did) DO UPDATE SET handle = excluded.handle,"
                " handle_checked_us = excluded.handle_checked_us", (did, handle, checked_us))


def handle_checked(did: str, checked_us: int) -> None:
    """Move only the handle's check time; a handle verified earlier stays."""
    sql.execute("INSERT INTO feed_identities (did, handle_checked_us) VALUES (?, ?)"
                " ON CONFLICT (did) DO UPDATE SET handle_checked_us = excluded.handle_checked_us", (did, checked_us))


def profile_checked(did: str, checked_us: int) -> None:
    sql.execute("INSERT INTO feed_identities (did, profile_checked_us) VALUES (?, ?)"
                " ON CONFLICT (did) DO UPDATE SET profile_checked_us = excluded.profile_checked_us", (did, checked_us))
