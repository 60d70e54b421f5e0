"""The catalogue's part of "your data" (feather/personal.py) and its panel on the signed-in home page.

About a person the catalogue may hold: their indexed public subscription records (when indexing is
on), their attribution choice, and an opt-out. Deleting removes the rows and the attribution; an
opt-out stays, because it is what keeps the account out of the index (deleting it would let the
next event put the rows back), and it holds nothing but the DID.
"""
from __future__ import annotations

from flask import url_for

from feather import sql
from feather.network import store
from feather.network.absent import absent_reads_as
from feather.personal import Holding, register_panel
from feather.personal import register as add


@absent_reads_as(list)
def _rows(did: str) -> list[tuple]:
    return sql.execute("SELECT rkey, feed_url, created_at FROM net_subscription WHERE did = ?"
                       " ORDER BY rkey", (did,)).fetchall()


def describe(did: str) -> list[str]:
    lines = []
    n = store.rows_for_did(did)
    if n:
        lines.append(f"{n:,} public RSS subscription record{'s' if n != 1 else ''} of yours (feed URL, record "
                     "key and date), counted anonymously in the catalogue.")
    if store.is_attributed(did):
        lines.append("Your choice to be named next to the feeds you subscribe to, with your handle.")
    if store.is_opted_out(did):
        lines.append("Your opt-out of the catalogue (only your DID). It stays after a deletion, so you stay out.")
    return lines


def export(did: str) -> dict:
    return {"indexed_records": [{"rkey": r, "feed_url": u, "created_at": c} for r, u, c in _rows(did)],
            "attributed": store.is_attributed(did), "opted_out": store.is_opted_out(did)}


def delete(did: str) -> None:
    store.lock_did(did)  # ordered against a batch or rebuild writing this DID's rows (store.lock_did)
    touched: set[str] = set()
    store.forget_did(did, touched)
    store.refresh_rollup(touched)


def panel(account):
    return "network/_home.html", {"attributed": store.is_attributed(account.did),
                                  "opted_out": store.is_opted_out(account.did),
                                  "url": url_for("network.attribution")}


def register(app) -> None:
    add(app, Holding("network", "The network catalogue", describe, export, delete, order=30))
    register_panel(app, panel, order=30)
