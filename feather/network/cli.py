"""`flask network status`: the operator's view of the catalogue (adoption, rebuild progress, size)."""
from __future__ import annotations

import json

import click
from flask import current_app
from flask.cli import AppGroup

from feather import sql
from feather.db import db
from feather.network import rebuild, store

network_cli = AppGroup("network", help="The network catalogue.")


@network_cli.command("status")
def status():
    """Print adoption counts, rebuild progress (DIDs done / total) and row counts as JSON."""
    settings = current_app.config["FEATHER"]
    with db.connection_context():
        stats = sql.execute("SELECT source, value, truncated, observed_at FROM network_stat"
                            " ORDER BY source").fetchall()
        rows = sql.execute("SELECT count(*) FROM net_subscription").fetchone()[0]
        feeds = sql.execute("SELECT count(*) FROM net_feed_rollup").fetchone()[0]
        out = {
            "indexing": settings.featherreader_network_index,
            "adoption": [{"source": s, "repos": v, "truncated": bool(t), "observed_at": o} for s, v, t, o in stats],
            "rebuild": rebuild.status(),
            "rows": rows,
            "feeds": feeds,
            "rollup_updated_at_us": store.get_state("rollup.updated_at"),
        }
    click.echo(json.dumps(out, indent=2))


def init_app(app) -> None:
    app.cli.add_command(network_cli)
