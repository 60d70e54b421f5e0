"""Flask commands: `db upgrade`, `worker`, and whatever the features add."""
from __future__ import annotations

import click
from flask import Flask, current_app
from flask.cli import AppGroup, with_appcontext

from feather.auth import new_client_key

db_cli = AppGroup("db", help="Database commands.")


@db_cli.command("upgrade")
def db_upgrade():
    """Apply pending migrations (idempotent)."""
    # The process runtime (the Jetstream engine, the scheduler, the worker locks) is loaded by the
    # commands that run it, not by every app and stand-in app that only registers them.
    from feather.process.runtime import migrate  # noqa: PLC0415  heavy, only for this command

    applied = migrate(current_app)
    click.echo(f"applied {len(applied)} migration(s)" + (f": {applied}" if applied else ""))


@click.command("worker")
@with_appcontext
def worker():
    """Run the background workers (Jetstream consumers and scheduler) without a web server."""
    from feather.process.runtime import run_worker_process  # noqa: PLC0415  heavy, only for this command

    run_worker_process(current_app._get_current_object())


def init_app(app) -> None:
    app.cli.add_command(db_cli)
    app.cli.add_command(worker)


def stand_in_app(problem: str):
    """What the flask CLI gets when the configuration is invalid (app.py): only the commands that
    need no configuration, and `--help` says why the others are missing."""
    app = Flask("feather")
    app.cli.help = f"The configuration is invalid ({problem}), so only these commands are available."
    app.cli.add_command(new_client_key)
    return app
