"""Feather: timelines, a consent-first network catalogue, and follow-graph sync for atproto.

`create_app` wires configuration, the database, blueprints and error handlers. It starts
nothing: no thread, no socket, no scheduler (see feather/process/ for those).
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    # Here, not at the top: this is the package root, which every `import feather.x` runs first. At
    # the top, importing any one module (feather.db, feather.sql: 3 feather modules) would load the
    # app's parts and what they import (48 of them).
    from feather import admin, auth, cli, errors, features, health, pages, security  # noqa: PLC0415  see above
    from feather import db as dbmod  # noqa: PLC0415  see above
    from feather.config import load_settings  # noqa: PLC0415  see above
    from feather.jetstream import dev as dev_injection  # noqa: PLC0415  see above

    settings = load_settings(overrides=config)
    app = Flask(
        __name__,
        template_folder="../templates",
        static_folder="../static",
    )
    app.config.update(
        SECRET_KEY=settings.secret_key,
        FEATHER=settings,
        TESTING=settings.featherreader_env == "test",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.is_production,
        WTF_CSRF_TIME_LIMIT=None,
        MAX_CONTENT_LENGTH=1024 * 1024,
    )
    logging.basicConfig(
        level=settings.featherreader_log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if settings.featherreader_log_level != "DEBUG":
        # APScheduler logs every run of every job at INFO; our jobs log what they do themselves.
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
    if settings.featherreader_trusted_proxies:
        # Believe exactly as many forwarding hops as the operator says sit in front of us: with
        # more, a client could pick its own address (and rate-limit bucket) by sending the header.
        hops = settings.featherreader_trusted_proxies
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops)
    dbmod.bind(settings.database_url)
    dbmod.init_app(app)
    security.init_app(app)
    errors.init_app(app)
    app.register_blueprint(pages.bp)
    errors.form_retry(app, "pages.delete", pages.retry_delete)
    app.register_blueprint(health.bp)
    admin.init_app(app)
    # The Jetstream engine's development tool (POST /admin/dev/jetstream-event, `flask dev-event`):
    # not a feature, it has no subscription or job and only replays a hand-made event into the
    # features' handlers. Always registered: the route and the command refuse outside development.
    dev_injection.init_app(app)
    features.register_blueprints(app)
    # Core, not a feature: feeds and sync import feather.auth (sign-in, sessions, scopes). Wired after
    # the features, because they declare their OAuth scopes in init_app and a production app builds
    # its client metadata from the declared scopes when auth starts.
    auth.init_app(app)
    cli.init_app(app)
    return app
