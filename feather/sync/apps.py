"""The apps graph sync knows: follow and profile collections, verified from each app's lexicons.

Sources: each app's published lexicons. Adding an app means a row here plus its key in
lexicons/run/airglow/graphSync.json (apps.items.knownValues); tests/test_sync_apps.py fails until
both agree.

Semble is the odd one: its follow subject may be a collection AT-URI (only `did:` subjects are
synced), and it has no profile record of its own — it reads Bluesky profiles, so "can be followed
on Semble" is checked against app.bsky.actor.profile and is never watched live.
"""
from __future__ import annotations

from dataclasses import dataclass

from feather.jetstream.subscriptions import collection_matches

PROFILE_RKEY = "self"
LIVE_RECHECK_DAYS = 7  # waits on apps whose profile creates we watch: the sweep is only a safety net
SWEEP_RECHECK_DAYS = 2  # waits on apps we cannot watch live: the sweep is the only way out


@dataclass(frozen=True)
class App:
    key: str
    name: str
    follow: str  # the follow record collection (record key type: tid)
    profile: str  # the collection whose `self` record says "this DID can be followed here"
    own_profile: bool  # False when `profile` belongs to another app (Semble reads Bluesky's)


APPS: tuple[App, ...] = (
    App("bluesky", "Bluesky", "app.bsky.graph.follow", "app.bsky.actor.profile", True),
    App("tangled", "Tangled", "sh.tangled.graph.follow", "sh.tangled.actor.profile", True),
    App("sifa", "Sifa", "id.sifa.graph.follow", "id.sifa.profile.self", True),
    App("grain", "Grain", "social.grain.graph.follow", "social.grain.actor.profile", True),
    App("semble", "Semble", "network.cosmik.follow", "app.bsky.actor.profile", False),
)
BY_KEY = {app.key: app for app in APPS}
BY_FOLLOW = {app.follow: app for app in APPS}


def _allowed(nsid: str, settings) -> bool:
    if collection_matches(nsid, settings.nsid_blocklist):
        return False
    allow = settings.nsid_allowlist
    return not allow or collection_matches(nsid, allow)


def offered(settings) -> list[App]:
    """The apps this instance offers: both the follow and the (own) profile collection allowed."""
    out = []
    for app in APPS:
        checked = [app.follow] + ([app.profile] if app.own_profile else [])
        if all(_allowed(nsid, settings) for nsid in checked):
            out.append(app)
    return out


def offered_keys(settings) -> list[str]:
    return [app.key for app in offered(settings)]


def watched_live(app: App, settings) -> bool:
    """Profile creates for this app arrive on the global stream (so late joiners follow at once)."""
    return app.own_profile and not collection_matches(app.profile, settings.nsid_requires_dids)


def live_profile_collections(settings) -> list[str]:
    return sorted({app.profile for app in offered(settings) if watched_live(app, settings)})


def apps_for_profile(collection: str, settings) -> list[App]:
    """Offered apps whose follows wait on records of this profile collection."""
    return [app for app in offered(settings) if app.profile == collection]


def recheck_days(app: App, settings) -> int:
    return LIVE_RECHECK_DAYS if watched_live(app, settings) else SWEEP_RECHECK_DAYS


def normalize_keys(keys, settings) -> list[str]:
    """Registry order, duplicates dropped. Raises ValueError naming the first unknown or hidden key."""
    allowed = set(offered_keys(settings))
    wanted = []
    for key in keys:
        if not isinstance(key, str) or key not in allowed:
            raise ValueError(f"{key!r} is not an app this instance syncs; choose from {', '.join(sorted(allowed))}")
        wanted.append(key)
    return [app.key for app in APPS if app.key in wanted]
