"""Feeds: fan-out-on-write timelines (docs/design.md, "Timelines").

Feature hooks (feather/features.py): init_app registers the XRPC blueprint, the timeline page,
the Bluesky feed generator and its publishing page (web/), ensure_schema makes the records tables
when a process starts (store/schema.py), subscriptions joins the shared "global" stream with the
configured collections (filtered by FEED_SERVE, see ingest/admission.py), jobs adds the prune
tick (with the records sweep), the tombstone sweep and the author fetches (tasks/).

The sub-packages are layered (.importlinter, feeds-layers): web, then tasks, then ingest and read
(which never import each other), then store, then the config.
"""
from __future__ import annotations

import os
from functools import lru_cache

from flask import current_app

from feather.auth.service import declare_scopes
from feather.config import ConfigError
from feather.features import Job
from feather.feeds import personal
from feather.feeds.config import FeedsConfig, FeedsConfigError, load
from feather.feeds.ingest import narrow
from feather.feeds.ingest.apply import handler
from feather.feeds.read import operator
from feather.feeds.store import schema
from feather.feeds.tasks.authors import FETCH_TICK_SECS, fetch_tick
from feather.feeds.tasks.backfill import on_sign_in
from feather.feeds.tasks.prune import prune_tick
from feather.feeds.tasks.tombstones import sweep_tombstones
from feather.feeds.web import generator, publish, publish_views, reader_feed, timeline_page
from feather.feeds.web.xrpc import make_blueprint
from feather.jetstream.subscriptions import Handler, Subscription

PRUNE_TICK_SECS = 10.0  # Contrail's persistent-loop FEED_SWEEP_INTERVAL_MS
TOMBSTONE_SWEEP_SECS = 60.0


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime: float) -> FeedsConfig:
    return load(path)


def config_for(settings) -> FeedsConfig:
    """The parsed feeds config for these settings (validated; cached per file version)."""
    path = settings.featherreader_config or ""
    mtime = os.stat(path).st_mtime if path and os.path.exists(path) else 0.0
    return _load_cached(path, mtime)


def ensure_schema(settings) -> None:
    """The feature's start hook (feather/features.py, run by feather/process/runtime.py after the
    migrations, with a connection open): the records tables this config names, created before any
    batch, request or job of this process needs them."""
    config = config_for(settings)
    if config.collections:
        schema.ensure(config)


def init_app(app) -> None:
    settings = app.config["FEATHER"]
    try:
        config = config_for(settings)
    except FeedsConfigError as exc:
        raise ConfigError("FEATHERREADER_CONFIG", str(exc)) from None
    if settings.feed_service_auth and not settings.featherreader_feed_service_did.startswith("did:"):
        raise ConfigError("FEATHERREADER_FEED_SERVICE_DID",
                          "FEED_SERVICE_AUTH=1 needs this service's DID (the `aud` of getFeed tokens)")
    app.extensions["feeds"] = config
    app.register_blueprint(make_blueprint(config))
    _init_pages(app, settings)
    personal.register(app, config)
    if settings.feed_serve != "all" and config.feeds:
        target = app  # the hook is called with the DID only; it needs this app
        app.extensions.setdefault("sign_in_hooks", []).append(lambda did: on_sign_in(target, did))


def _init_pages(app, settings) -> None:
    """The timeline page, the Bluesky feed generator and publishing (issue 16)."""
    declare_scopes(publish.REPO_SCOPE)  # the client metadata must list every scope we may ask for
    app.register_blueprint(timeline_page.bp)
    app.register_blueprint(publish_views.bp)
    app.register_blueprint(reader_feed.bp)
    app.cli.add_command(publish_views.feeds_cli)
    generator.init_app(app, settings)


def operator_status(settings) -> dict | None:
    """The timelines' figures for /admin (feather/features.py collects them)."""
    found = operator.status()
    limit = settings.feed_narrow_max_dids if settings.feed_serve != "all" else 0
    if found is not None and limit:
        mode, count = narrow.current_mode(config_for(settings), limit)
        found["ingest"] = {"mode": mode, "dids": count, "limit": limit,
                           "shards": len(narrow.shard_names(limit))}
    elif found is not None:
        found["ingest"] = {"mode": "shared", "dids": None, "limit": 0, "shards": 0}
    return found


def subscriptions(settings) -> list:
    config = config_for(settings)
    if not config.collections:
        return []
    nsids = sorted({c.nsid for c in config.collections.values()})
    # Identity events too: they invalidate cached handles (profiles=true). One handler (one
    # admission filter) for every stream that may carry these collections.
    apply = handler(config, settings)
    feeds = Handler(feature="feeds", apply_batch=apply, collections=frozenset(nsids), identity_and_account=True)
    limit = settings.feed_narrow_max_dids if settings.feed_serve != "all" else 0
    if not limit:
        return [Subscription(narrow.SHARED_STREAM, nsids, [feeds])]
    # Narrow subscriptions while few DIDs matter (ingest/narrow.py): `feeds` and the shards take turns.
    narrowing = narrow.Narrowing(config, limit)
    narrowing.admission = apply.admission
    apply.admission.joins = {}  # a reposted stranger's shard replays from the repost (narrow.py)
    extra = {"prepare": narrowing.prepare, "narrowing": narrowing}
    subs = [Subscription(narrow.FULL_STREAM, nsids, [feeds], active=narrowing.full_active, claim=narrow.CLAIM,
                         extra=dict(extra))]
    for k, name in enumerate(narrow.shard_names(limit)):
        subs.append(Subscription(name, nsids, [feeds], dids=lambda k=k: narrowing.members(k), claim=narrow.CLAIM,
                                 rewind=lambda k=k: narrowing.rewind(k), extra=dict(extra, shard=k)))
    return subs


def jobs(settings) -> list:
    config = config_for(settings)
    streams = narrow.family_names(settings.feed_narrow_max_dids if settings.feed_serve != "all" else 0)
    out = [Job("feeds-tombstones", lambda: sweep_tombstones(streams), TOMBSTONE_SWEEP_SECS, jitter=5.0,
               first_run_delay=TOMBSTONE_SWEEP_SECS)] if config.collections else []
    if not config.feeds:
        return out
    out.append(Job("feeds-prune", lambda: prune_tick(config, settings), PRUNE_TICK_SECS, jitter=1.0,
                   first_run_delay=PRUNE_TICK_SECS))
    if settings.feed_serve != "all":
        def fetch() -> None:
            fetch_tick(current_app._get_current_object(), config)
        out.append(Job("feeds-fetch", fetch, FETCH_TICK_SECS, jitter=0.5, first_run_delay=FETCH_TICK_SECS))
    return out
