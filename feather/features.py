"""The features the app is made of, and the only place that lists them.

Features never import each other; they meet here (blueprints, subscriptions, jobs) and in
the database. A feature module may define:
  init_app(app)            register blueprints / template helpers
  subscriptions(settings)  -> list of feather.jetstream.subscriptions.Subscription
  jobs(settings)           -> list of feather.scheduler.Job
  operator_status(settings) -> dict of figures for the operator's status page (/admin)
"""
from __future__ import annotations

import importlib
from types import ModuleType

FEATURE_MODULES: tuple[str, ...] = (
    "feather.jetstream.feature",
    "feather.feeds",
    "feather.network",
    "feather.sync",
    "feather.auth",
)


def modules(settings=None) -> list[ModuleType]:
    extra = tuple(settings.featherreader_extra_features) if settings is not None else ()
    return [importlib.import_module(name) for name in FEATURE_MODULES + extra]


def register_blueprints(app) -> None:
    for module in modules(app.config["FEATHER"]):
        if hasattr(module, "init_app"):
            module.init_app(app)


def subscriptions(settings) -> list:
    found = []
    for module in modules(settings):
        if hasattr(module, "subscriptions"):
            found.extend(module.subscriptions(settings))
    return found


def jobs(settings) -> list:
    found = []
    for module in modules(settings):
        if hasattr(module, "jobs"):
            found.extend(module.jobs(settings))
    return found


def operator_status(settings) -> dict:
    """{feature module name: its figures}, for /admin; a feature's own tables stay its own."""
    return {module.__name__: module.operator_status(settings)
            for module in modules(settings) if hasattr(module, "operator_status")}
