"""The features the app is made of, and the only place that lists them.

Features never import each other; they meet here (blueprints, subscriptions, jobs) and in
the database. A feature module may define:
  init_app(app)            register blueprints / template helpers
  subscriptions(settings)  -> list of feather.jetstream.subscriptions.Subscription
  jobs(settings)           -> list of Job (below), run by feather/process/scheduler.py
  operator_status(settings) -> dict of figures for the operator's status page (/admin)
  ensure_schema(settings)  create what the migrations cannot know (tables named by a config) or
                           what an operator may drop (the catalogue's projection); run once at
                           every process start, right after the migrations, never per request
and, in init_app, register with `add_people_source(app, source)` what it already knows about
people (`source(dids) -> {did: (verified handle or None, display name or None)}`, database reads
only), so another feature can name a person without asking the network: `known_people(app, dids)`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

FEATURE_MODULES: tuple[str, ...] = (
    "feather.feeds",
    "feather.network",
    "feather.sync",
)
# Core, not features: the features build on them (feeds and sync import feather.auth for sign-in,
# sessions and scopes), so the app factory wires them itself (feather/__init__.py). Their hooks
# other than init_app are collected here with the features' (feather.auth: its cleanup job).
CORE_MODULES: tuple[str, ...] = ("feather.auth",)


@dataclass(frozen=True)
class Job:
    """A scheduled job, as the `jobs` hook declares it. Here rather than beside the scheduler so
    that a feature declares its jobs without importing the process runtime (feather/process)."""

    id: str
    func: Callable[[], Any]
    seconds: float  # interval between runs
    jitter: float | None = None  # seconds of random jitter APScheduler adds to each run
    first_run_delay: float = 0.0
    kwargs: dict = field(default_factory=dict)
    # False: the job runs in every worker process even where claims exist (it coordinates its
    # own work through the database, like the sync runner's lane leases).
    claimed: bool = True


def _extra(settings) -> tuple[str, ...]:
    return tuple(settings.featherreader_extra_features) if settings is not None else ()


def modules(settings=None) -> list[ModuleType]:
    """The features, FEATHERREADER_EXTRA_FEATURES included."""
    return [importlib.import_module(name) for name in FEATURE_MODULES + _extra(settings)]


def _hooked(settings) -> list[ModuleType]:
    """Whose subscriptions, jobs and figures are collected: the features and the core modules."""
    return [importlib.import_module(name) for name in FEATURE_MODULES + CORE_MODULES + _extra(settings)]


def register_blueprints(app) -> None:
    """Each feature's init_app (the core modules' are called by the app factory)."""
    for module in modules(app.config["FEATHER"]):
        if hasattr(module, "init_app"):
            module.init_app(app)


def subscriptions(settings) -> list:
    found = []
    for module in _hooked(settings):
        if hasattr(module, "subscriptions"):
            found.extend(module.subscriptions(settings))
    return found


def jobs(settings) -> list:
    found = []
    for module in _hooked(settings):
        if hasattr(module, "jobs"):
            found.extend(module.jobs(settings))
    return found


def operator_status(settings) -> dict:
    """{feature module name: its figures}, for /admin; a feature's own tables stay its own."""
    return {module.__name__: module.operator_status(settings)
            for module in _hooked(settings) if hasattr(module, "operator_status")}


def ensure_schema(settings) -> None:
    """Each feature's ensure_schema, in FEATURE_MODULES order (process start, after migrations)."""
    for module in _hooked(settings):
        if hasattr(module, "ensure_schema"):
            module.ensure_schema(settings)


def add_people_source(app, source) -> None:
    app.extensions.setdefault("people_sources", []).append(source)


def known_people(app, dids) -> dict[str, tuple[str | None, str | None]]:
    """{did: (handle, display name)} from every registered source; the first to know a field wins."""
    found: dict[str, tuple[str | None, str | None]] = {}
    for source in app.extensions.get("people_sources", []):
        for did, (handle, name) in source(list(dids)).items():
            old_handle, old_name = found.get(did, (None, None))
            found[did] = (old_handle or handle, old_name or name)
    return found
