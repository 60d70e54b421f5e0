"""/feeds/publish (operators only) and `flask feeds publish|unpublish` for scripts.

The page works without JavaScript: plain forms, POST answered with a 303 back and a flash. The
write permission for the generator collection is asked for only when an operator clicks Publish
or Unpublish and has not granted it yet (feather/auth's consent page, then back here with the
form's values filled in again, so one more click finishes).
"""
from __future__ import annotations

from contextlib import contextmanager
from urllib.parse import urlencode

import click
from flask import Blueprint, abort, current_app, flash, redirect, render_template, request, url_for
from flask.cli import AppGroup

from feather.atproto.identity import IdentityError, http_client_from_settings, resolver_for
from feather.atproto.pds import BearerAuth, PdsClient, PdsError
from feather.auth import consent_url, current_account, has_scopes, is_admin, login_required, pds_client
from feather.auth.grants import NeedsReauth
from feather.db import db
from feather.feeds.web import context, generator, publish

bp = Blueprint("feed_publish", __name__)

WHY = ("Publishing writes the feed's record (app.bsky.feed.generator) to your own repository, so Feather "
       "needs your permission to write records of that kind, and only that kind.")


def _admin():
    account = current_account()
    if not is_admin(account.did):
        abort(403, "Only this instance's operators (FEATHERREADER_ADMIN_DIDS) publish feeds.")
    return account


@bp.get("/feeds/publish")
@login_required
def page():
    account = _admin()
    config, settings = context.config(), current_app.config["FEATHER"]
    return render_template("timeline/publish.html", account=account, feeds=generator.publishable(config),
                           published=publish.publications(), service_did=generator.service_did(settings),
                           prefill={k: request.args.get(k, "") for k in ("feed", "display_name", "description")})


@bp.post("/feeds/publish")
@login_required
def act():
    account = _admin()
    config, settings = context.config(), current_app.config["FEATHER"]
    action, feed = request.form.get("action"), request.form.get("feed", "")
    name, desc = request.form.get("display_name", ""), request.form.get("description", "")
    back = url_for("feed_publish.page")
    if action not in ("publish", "unpublish"):
        abort(400, "Unknown action; the page sends publish or unpublish.")
    try:
        if action == "publish":
            publish.check_text(name, desc)  # say so now, not after a trip to the consent page
        if not has_scopes(account.did, [publish.REPO_SCOPE]):
            again = back + "?" + urlencode({"feed": feed, "display_name": name, "description": desc})
            return redirect(consent_url([publish.REPO_SCOPE], again, WHY), 303)
        client = pds_client(account.did)
        if action == "publish":
            uri = publish.publish(client, config, account.did, feed, name, desc, generator.service_did(settings))
            flash(f"Published: {uri}. In the Bluesky app it is on your profile's Feeds tab.", "info")
        else:
            uri = publish.unpublish(client, account.did, feed)
            flash(f"Unpublished: {uri} was deleted from your repository.", "info")
    except publish.PublishError as exc:
        flash(str(exc), "error")
    except NeedsReauth as exc:
        flash(str(exc), "error")
        return redirect(url_for("auth.login_form", next=back), 303)
    except PdsError as exc:
        flash(f"Your server refused the write: {exc}", "error")
    return redirect(back, 303)


feeds_cli = AppGroup("feeds", help="Feeds: publish a feed generator record.")


def _client_for(identifier: str, app_password: str | None):
    """(did, a PdsClient acting as them): with an app password, a session of its own; otherwise
    the grant this account left by signing in here."""
    ident = resolver_for(current_app).resolve_identity(identifier)
    if not app_password:
        return ident.did, pds_client(ident.did)
    http = http_client_from_settings(current_app.config["FEATHER"])
    session = PdsClient(http, ident.pds).call("POST", "com.atproto.server.createSession",
                                              body={"identifier": ident.did, "password": app_password})
    return ident.did, PdsClient(http, ident.pds, BearerAuth(session["accessJwt"], did=ident.did))


@contextmanager
def _failures_as_messages():
    """A script gets one line saying what went wrong (and exit status 1), not a traceback."""
    try:
        with db.connection_context():
            yield
    except (publish.PublishError, PdsError, IdentityError) as exc:
        raise click.ClickException(str(exc)) from None


_ACCOUNT = click.option("--as", "account", required=True, help="Handle or DID whose repository holds the record.")
_PASSWORD = click.option("--app-password", envvar="FEATHER_PUBLISH_APP_PASSWORD", default=None,
                         help="An app password of that account (or FEATHER_PUBLISH_APP_PASSWORD); without it, "
                              "the sign-in the account left here is used.")


@feeds_cli.command("publish")
@click.argument("feed")
@_ACCOUNT
@click.option("--display-name", required=True)
@click.option("--description", default="")
@_PASSWORD
def publish_command(feed, account, display_name, description, app_password):
    """Publish FEED (a feed of the feeds config) as a Bluesky feed generator."""
    with _failures_as_messages():
        did, client = _client_for(account, app_password)
        uri = publish.publish(client, context.config(), did, feed, display_name, description,
                              generator.service_did(current_app.config["FEATHER"]))
    click.echo(uri)


@feeds_cli.command("unpublish")
@click.argument("feed")
@_ACCOUNT
@_PASSWORD
def unpublish_command(feed, account, app_password):
    """Delete FEED's generator record from the account's repository."""
    with _failures_as_messages():
        did, client = _client_for(account, app_password)
        click.echo(publish.unpublish(client, did, feed))
