"""What the server holds about one person, across features, without features importing each other.

Each feature registers, in its init_app, a Holding: how to describe what it keeps about a DID
(plain sentences for the privacy page), export it (JSON-able), and delete it. The core pages
(feather/pages.py) list, export and delete through this registry only. Sign-in registers last
(order 100): its delete revokes the session at the person's server, which needs the grant the
other deletes leave alone.

Home panels work the same way: a feature registers `panel(account) -> (template, context) | None`
for the signed-in home page.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from feather.db import db


@dataclass(frozen=True)
class Holding:
    key: str  # "sync", "timelines", …: the export's top-level key
    title: str  # the privacy page's heading for it
    describe: Callable[[str], list[str]]  # did -> sentences about what is held now (empty: nothing)
    export: Callable[[str], Any]  # did -> JSON-able data
    delete: Callable[[str], None]  # did -> removes it (inside the caller's transaction unless `outside`)
    order: int = 50
    outside_transaction: bool = False  # True: makes network calls, so it runs after the commit


def register(app, holding: Holding) -> None:
    app.extensions.setdefault("personal_data", []).append(holding)


def holdings(app) -> list[Holding]:
    return sorted(app.extensions.get("personal_data", []), key=lambda h: (h.order, h.key))


def register_panel(app, panel: Callable, order: int = 50) -> None:
    app.extensions.setdefault("home_panels", []).append((order, panel))


def panels(app, account) -> list[tuple[str, dict]]:
    found = []
    for _, panel in sorted(app.extensions.get("home_panels", []), key=lambda p: p[0]):
        shown = panel(account)
        if shown is not None:
            found.append(shown)
    return found


def export(app, did: str) -> dict:
    return {h.key: h.export(did) for h in holdings(app)}


def delete(app, did: str) -> list[str]:
    """Delete everything every feature holds about did; returns the keys of what was deleted.
    The database part is one transaction (all or nothing); a network step after it is best effort."""
    done = []
    with db.atomic():
        for h in holdings(app):
            if not h.outside_transaction:
                h.delete(did)
                done.append(h.key)
    for h in holdings(app):
        if h.outside_transaction:
            h.delete(did)
            done.append(h.key)
    return done
