"""Settings from the environment: one table of every knob, validated once at start.

Every setting a spec names keeps its exact name. The settings table in docs/settings.md is checked
against SETTINGS by a test, so a knob cannot be added without being documented.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Mapping

from feather.config_values import (  # noqa: F401 - ConfigError is imported from here everywhere
    ConfigError,
    Setting,
    database_url_value,
    flag,
    names,
    one_of,
    text,
    whole,
)

# Values a production SECRET_KEY must never be: framework defaults and our own examples.
KNOWN_WEAK_SECRETS = {"", "dev", "secret", "changeme", "change-me", "development", "test"}
ENVIRONMENTS = ("production", "development", "test")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


HOUR_US = 3_600_000_000

SETTINGS: tuple[Setting, ...] = (
    # --- the ecosystem's own names
    Setting("DATABASE_URL", database_url_value, "",
            "Database. Empty: the SQLite file `feather.db` in `FEATHERREADER_DATA_DIR`. "
            "`sqlite:////abs/path.db` names another file; `postgresql://user:pw@host/db` selects PostgreSQL."),
    Setting("PORT", whole(1, 65535), "8000", "HTTP port `make run` and the Procfile bind."),
    Setting("HOST", text, "127.0.0.1",
            "Address `make run` binds: loopback by default; `0.0.0.0` serves other machines too. (The Procfile "
            "binds 0.0.0.0: a PaaS routes to it.)"),
    Setting("SECRET_KEY", text, "",
            "Signs session cookies and CSRF tokens. Required in production (a known default is refused); "
            "in development a random key is generated once and kept in the data directory."),
    # --- app-level
    Setting("FEATHERREADER_ENV", one_of(*ENVIRONMENTS), "production",
            "`production`, `development` (`make run` sets it) or `test`. Development enables the "
            "loopback-only dev tools and a generated SECRET_KEY."),
    Setting("FEATHERREADER_DATA_DIR", text, "instance",
            "Folder for the default SQLite file, the worker lock and the generated dev secret."),
    Setting("FEATHERREADER_LOG_LEVEL", one_of(*LOG_LEVELS, upper=True), "INFO", "Log level."),
    Setting("FEATHERREADER_RUN_WORKERS", flag, "1",
            "Whether a web process also runs the background workers (Jetstream consumers and the "
            "scheduler). Only one process ever runs them: the others serve web only."),
    Setting("FEATHERREADER_DISABLE_SCHEDULER", flag, "0",
            "Kill switch for every background task: no consumer, no scheduled job, in any process."),
    Setting("FEATHERREADER_ALLOW_PRIVATE_NETWORK", flag, "0",
            "Allow outbound fetches and Jetstream hosts on loopback/private addresses and plain http. "
            "Development and tests only: production refuses it unless the override below is also set."),
    Setting("FEATHERREADER_UNSAFE_PRIVATE_NETWORK_IN_PRODUCTION", flag, "0",
            "1: let production start with FEATHERREADER_ALLOW_PRIVATE_NETWORK=1, turning the SSRF guard and "
            "the https rule off for every outbound fetch. Only for a closed network you control."),
    Setting("FEATHERREADER_TRUSTED_PROXIES", whole(0, 10), "0",
            "Reverse proxies in front of the app (a PaaS router, nginx) whose `X-Forwarded-For` and "
            "`X-Forwarded-Proto` are believed, one hop each (Werkzeug's ProxyFix). Rate limits key on the "
            "client address this yields. 0: the socket's address, and forwarded headers are ignored."),
    Setting("FEATHERREADER_HTTP_TIMEOUT_SECS", whole(1, 300), "15", "Read timeout of outbound HTTP calls."),
    Setting("FEATHERREADER_HTTP_MAX_BODY_BYTES", whole(1024), str(8 * 1024 * 1024),
            "Largest response body an outbound fetch accepts."),
    Setting("FEATHERREADER_JETSTREAM_HOSTS", names, "jetstream.us-east.bsky.network",
            "Jetstream endpoints tried in order. A bare host means `wss://HOST/subscribe`; "
            "a full `ws://` or `wss://` URL is used as is, and one with no path gets `/subscribe`."),
    Setting("FEATHERREADER_DB_SIZE_WATERMARK_BYTES", whole(0), "0",
            "When the database reaches this size, consumers stop writing and disconnect, re-checking "
            "every 60 s; the catalogue is pruned first and its rebuild waits. 0 (the default): the same "
            "happens when the disk holding the SQLite file has less than the larger of 1 GiB or 5 % free "
            "(on PostgreSQL, whose disk Feather cannot see, set a size here)."),
    Setting("FEATHERREADER_ADMIN_DIDS", names, "",
            "Comma-separated DIDs of this instance's operators: once signed in they may open `/admin` (the "
            "status page) and publish feed generators. Empty: nobody; everyone else gets 403."),
    Setting("FEATHERREADER_HEALTH_MAX_LAG_SECS", whole(1), "300",
            "`/health` says `degraded` when a connected stream has events waiting and its last applied "
            "event is older than this (seconds)."),
    Setting("FEATHERREADER_HEALTH_JOB_FAILURES", whole(1), "3",
            "`/health` says `degraded` when a scheduled job has failed this many runs in a row."),
    Setting("FEATHERREADER_EXTRA_FEATURES", names, "",
            "Comma-separated extra feature modules to load (plugins; the test suite uses it). "
            "Each may define init_app, subscriptions and jobs like the built-in ones."),
    # --- feeds (feather/feeds)
    Setting("FEATHERREADER_CONFIG", text, "",
            "Path of the feeds TOML file (namespace, collections, feeds). Empty: the built-in default "
            "(`follow`, `post`, `profile`; feed `timeline` = follow → [post])."),
    Setting("FEED_PRUNE_SWEEP_ACTORS", whole(1), "500",
            "Feed actors one prune slice visits; a full pass takes ceil(actors / this) slices."),
    Setting("FEED_PRUNE_RECOVERY_INTERVAL_MS", whole(1000), str(6 * 3_600_000),
            "A fresh prune pass starts this long after the last completed full pass, even on an idle stream (ms)."),
    Setting("FEED_SERVE", one_of("signed-in", "readers", "all"), "signed-in",
            "Whose timelines are kept. `signed-in`: accounts that signed in here plus the feeds config's "
            "`actors`; `readers`: also anyone who reads a feed (up to FEED_SERVE_MAX_ACTORS); `all`: admit the "
            "whole network (a full index). Under the first two, only records that matter to a served actor "
            "are stored."),
    Setting("FEED_SERVE_MAX_ACTORS", whole(1), "1000",
            "With FEED_SERVE=readers: most actors served; a new reader past it is refused (503)."),
    Setting("FEED_NARROW_MAX_DIDS", whole(0, 100_000), "30000",
            "With FEED_SERVE signed-in or readers: while the served actors, whom they follow and the authors "
            "of what they repost number at most this many DIDs, the feeds' collections come on DID-filtered "
            "streams (`feeds:0` … `feeds:N`, N = this / 10,000; Jetstream's `wantedDids`) instead of the whole "
            "network's `global` stream. 0: always the whole stream."),
    Setting("FEED_SERVICE_AUTH", flag, "0",
            "1: getFeed requires an atproto service-auth JWT whose issuer is the `actor` "
            "(aud = FEATHERREADER_FEED_SERVICE_DID, lxm = the getFeed method)."),
    Setting("FEATHERREADER_FEED_SERVICE_DID", text, "",
            "This service's DID, the `aud` a getFeed service-auth token must carry. Required when FEED_SERVICE_AUTH=1."),
    Setting("FEED_LABELERS", names, "did:plc:ar7c4by46qjdydhdevvrndac",
            "Comma-separated DIDs of the labelers whose labels `/timeline` honours (asked with queryLabels at "
            "each one's `#atproto_labeler` endpoint); the default is Bluesky's moderation service. Empty: only "
            "the posts' own self-labels."),
    Setting("FEED_LABELS_TTL_SECS", whole(1), "900",
            "How long a labeler's answer about a post or account is kept before it is asked again (seconds)."),
    Setting("FEED_LABELS_WAIT_MS", whole(0, 10_000), "1000",
            "The longest a page or getFeed waits for labelers (ms); posts not checked in time are shown with "
            "a note saying so."),
    # --- identity and sign-in (feather/atproto, feather/auth)
    Setting("FEATHERREADER_HANDLE_RESOLVER", text, "https://bsky.social",
            "Service whose `com.atproto.identity.resolveHandle` is asked when a handle has neither a DNS "
            "TXT record nor a `/.well-known/atproto-did`. Empty: DNS and well-known only."),
    Setting("FEATHERREADER_PLC_URL", text, "https://plc.directory", "The did:plc directory."),
    Setting("FEATHERREADER_PUBLIC_URL", text, "",
            "The https origin this instance is reached at (e.g. `https://feather.example.com`); the OAuth "
            "client_id is `<this>/oauth-client-metadata.json`. Required in production. Empty outside "
            "production: a loopback development client (redirects to http://127.0.0.1:PORT)."),
    Setting("FEATHERREADER_OAUTH_CLIENT_KEYS", text, "",
            "The OAuth client's ES256 private keys, as a JSON JWK or JWK Set, each with a `kid`. The first "
            "signs; keep retired keys listed until their sessions end. Required with FEATHERREADER_PUBLIC_URL."),
    Setting("FEATHERREADER_TOKEN_KEYS", text, "",
            "Comma-separated base64url 32-byte keys that encrypt tokens and DPoP keys at rest (AES-GCM); the "
            "first encrypts, all decrypt (rotation). Empty: derived from SECRET_KEY."),
    Setting("FEATHERREADER_ALLOW_APP_PASSWORDS", flag, "0",
            "1: also offer sign-in with an app password (createSession), for self-hosters, scripts and tests."),
    Setting("FEATHERREADER_LOGIN_RATE_LIMIT", whole(1), "10",
            "Sign-in attempts allowed per client address per 5 minutes (login form and POST /api/session)."),
    Setting("FEATHERREADER_SESSION_DAYS", whole(1, 400), "30", "How long a browser stays signed in."),
    # --- network catalogue (feather/network)
    Setting("FEATHERREADER_RELAY_HOSTS", names, "relay1.us-west.bsky.network,relay1.us-east.bsky.network",
            "Relays asked `listReposByCollection` (adoption count, rebuild enumeration). A bare host means "
            "`https://HOST`; a full `https://` URL is used as is."),
    Setting("FEATHERREADER_ADOPTION_INTERVAL_SECS", whole(0), "86400",
            "Adoption probe cadence in seconds, ±10 % jitter. 0 disables the probe."),
    Setting("FEATHERREADER_SHOW_ADOPTION", flag, "0",
            "Show the adoption count as one quiet line on /about (the largest count over the relays)."),
    Setting("FEATHERREADER_PORTABILITY_DID", text, "did:plc:ohutz6x5acjmpuulp3x7wxxc",
            "The account whose public subscription records the live portability test reads."),
    Setting("FEATHERREADER_NETWORK_INDEX", flag, "0",
            "Master switch of the catalogue: index public `community.lexicon.rss.subscription` records "
            "(live stream + rebuild). Off: nothing is indexed and the tables stay empty."),
    Setting("FEATHERREADER_NET_MAX_ROWS", whole(1), "200000",
            "Hard cap on indexed subscription rows; past it the oldest-indexed rows are evicted."),
    Setting("FEATHERREADER_NET_MAX_RECORDS_PER_DID", whole(1), "5000",
            "Most subscription records kept for one account (live and rebuild)."),
    Setting("FEATHERREADER_NET_K", whole(2), "5",
            "k-anonymity floor: a feed with fewer distinct subscribers is never shown or counted anywhere."),
    Setting("FEATHERREADER_NETWORK_PAGE", flag, "0",
            "Serve GET /network (linked only from /about) and the per-feed count API."),
    Setting("FEATHERREADER_NET_STALE_CURSOR_SECS", whole(60), "82800",
            "How far the catalogue's live stream may fall behind (seconds between its last applied event, or "
            "the last rebuild, and now) before the gap is filled by a rebuild instead of a replay: outages, "
            "disk-watermark pauses, a silent socket or downtime. An hour under Jetstream's 24 h retention."),
    Setting("FEATHERREADER_NET_REBUILD", flag, "0",
            "One-shot: on boot, the process that takes the network stream empties the catalogue before it "
            "connects and rebuilds it from the relays and PDSes (logged loudly). Unset it after the restart."),
    # --- graph sync (feather/sync)
    Setting("SYNC_JETSTREAM_MAX_LOOKBACK_US", whole(1), str(24 * HOUR_US),
            "Resume window for sync shards (µs). A saved cursor older than this is a gap on every host (a v2 "
            "cursor is judged by the time of the last event it applied, not its sequence): the shard resumes at "
            "the window's start, the gap is logged and every sync set's sweep is made due (follows are "
            "recovered; unfollows in the gap are lost)."),
    Setting("SYNC_SHARD_COUNT", whole(1, 1000), "1",
            "Jetstream subscriptions synced users are hashed into (Jetstream takes 10,000 DIDs per "
            "subscription). Raising or lowering it is safe: Feather remembers the count the cursors were saved "
            "under, and after a change every shard whose owners changed resumes from the oldest cursor any of "
            "them had (cursors only go back; the replay is idempotent). Restart every worker together."),
    Setting("SYNC_HOURLY_POINTS", whole(3), "1500",
            "PDS write points sync may spend per account per rolling hour (a create costs 3, a delete 1)."),
    Setting("SYNC_DAILY_POINTS", whole(3), "15000",
            "PDS write points sync may spend per account per rolling day."),
    Setting("SYNC_APP_DAILY_FOLLOW_CAP", lambda name, raw: whole(1)(name, raw) if raw.strip() else None, "",
            "Most follows sync writes per account per app per rolling day. Empty: no cap beyond the points budget."),
    Setting("NSID_ALLOWLIST", names, "",
            "Comma-separated NSIDs (or `prefix.*`) this instance works with. Empty: all. Graph sync does not "
            "offer an app whose follow or profile collection is outside it."),
    Setting("NSID_BLOCKLIST", names, "",
            "Comma-separated NSIDs (or `prefix.*`) this instance refuses; wins over the allow list. Graph sync "
            "does not offer an app whose follow or profile collection is blocked."),
    Setting("NSID_REQUIRES_DIDS", names, "app.bsky.*",
            "Collections too busy to watch for every DID (`prefix.*` allowed): only ever subscribed with a DID "
            "filter. Graph sync does not watch these profile collections live; late joiners wait for the sweep."),
)

_BY_NAME = {s.name: s for s in SETTINGS}


def readme_table() -> str:
    """The settings table, generated from SETTINGS (a test checks docs/settings.md holds it)."""
    lines = ["| Variable | Default | Meaning |", "|---|---|---|"]
    lines += [f"| `{s.name}` | `{s.default or '(empty)'}` | {s.help} |" for s in SETTINGS]
    return "\n".join(lines)


class Settings:
    """Parsed settings; attribute names are the lower-cased variable names."""

    def __init__(self, values: Mapping[str, Any]):
        self._values = dict(values)
        for name, value in self._values.items():
            setattr(self, name.lower(), value)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    @property
    def is_production(self) -> bool:
        return self.featherreader_env == "production"

    @property
    def is_development(self) -> bool:
        return self.featherreader_env == "development"

    @property
    def sqlite_path(self) -> Path | None:
        url = self.database_url
        if url.startswith("postgres"):
            return None
        if url == "sqlite://:memory:":
            return None
        return Path(url[len("sqlite:///"):])


def load_settings(env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None) -> Settings:
    """Parse every setting from env (default os.environ); overrides win and are taken as typed values."""
    env = os.environ if env is None else env
    overrides = dict(overrides or {})
    unknown = [k for k in overrides if k not in _BY_NAME]
    if unknown:
        raise ConfigError(unknown[0], "is not a Feather setting")
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.name in overrides:
            raw = overrides[setting.name]
            values[setting.name] = setting.parse(setting.name, raw) if isinstance(raw, str) else raw
        else:
            values[setting.name] = setting.parse(setting.name, env.get(setting.name, setting.default))
    data_dir = Path(values["FEATHERREADER_DATA_DIR"]).absolute()
    values["FEATHERREADER_DATA_DIR"] = str(data_dir)
    if not values["DATABASE_URL"]:
        values["DATABASE_URL"] = f"sqlite:///{data_dir / 'feather.db'}"
    values["SECRET_KEY"] = _secret_key(values, data_dir)
    if (values["FEATHERREADER_ENV"] == "production" and values["FEATHERREADER_ALLOW_PRIVATE_NETWORK"]
            and not values["FEATHERREADER_UNSAFE_PRIVATE_NETWORK_IN_PRODUCTION"]):
        raise ConfigError("FEATHERREADER_ALLOW_PRIVATE_NETWORK",
                          "production refuses it: it turns off the SSRF guard for every fetch a stranger can "
                          "trigger. Unset it, or also set FEATHERREADER_UNSAFE_PRIVATE_NETWORK_IN_PRODUCTION=1")
    return Settings(values)


def _secret_key(values: dict[str, Any], data_dir: Path) -> str:
    key = values["SECRET_KEY"]
    env = values["FEATHERREADER_ENV"]
    if env == "production":
        if key.lower() in KNOWN_WEAK_SECRETS or len(key) < 16:
            raise ConfigError(
                "SECRET_KEY",
                "production needs a random value of at least 16 characters "
                "(e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`), "
                "or set FEATHERREADER_ENV=development for a generated one",
            )
        return key
    if key:
        return key
    if env == "test":
        return secrets.token_hex(32)
    # Development: generate once and keep it, so sessions survive a restart.
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "dev-secret-key"
    if not path.exists():
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()
