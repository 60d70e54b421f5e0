"""Who is served (FEED_SERVE), as the database holds it, and the version that says it changed.

Sign-ins and readers arrive in web processes while one other process ingests, so the served set
lives here: feed_actors (readers and sign-ins recorded by feeds), every account that ever signed
in (auth's auth_grant, read only), plus the config's `actors`. Every change to who is served, or
to whom a served actor follows, bumps feed_admission_state.version; the ingest filter
(ingest/admission.py) rebuilds its in-memory sets when it moved. This module alone writes
feed_actors and feed_admission_state (docs/design.md, "Tables by owner").
"""
from __future__ import annotations

from feather import sql
from feather.db import current_dialect
from feather.atproto.syntax import is_valid_did
from feather.feeds.config import FeedsConfig
from feather.feeds.store.schema import subject_expr

ALL, READERS, SIGNED_IN = "all", "readers", "signed-in"  # the FEED_SERVE modes

# UNION ALL, deduplicated here: on PostgreSQL the two did columns have different collations.
SERVED_SQL = "SELECT did FROM feed_actors UNION ALL SELECT did FROM auth_grant"


def served_set(config: FeedsConfig) -> set[str]:
    """Every served actor: the config's, readers and sign-ins recorded here, and every account that
    ever signed in (auth_grant), so accounts from before admission existed are served too."""
    return set(config.actors) | {row[0] for row in sql.rows(SERVED_SQL)}


def is_served(config: FeedsConfig, did: str) -> bool:
    if did in config.actors:
        return True
    return sql.one("SELECT 1 FROM feed_actors WHERE did = ? UNION ALL"
                   " SELECT 1 FROM auth_grant WHERE did = ?", (did, did)) is not None


def keeps(config: FeedsConfig, settings, did: str) -> bool:
    """Whether the store keeps did's records: everyone's under `all`; otherwise a served actor's,
    or an author someone served follows. Under admission only follows *by* served actors are
    stored, so any stored follow of did means a served actor follows them."""
    return settings.feed_serve == ALL or is_served(config, did) or followed(config, did)


def followed(config: FeedsConfig, did: str) -> bool:
    """Whether any stored follow has did for subject (under admission: a served actor's)."""
    tables = sorted({config.collections[f.follow].table for f in config.feeds.values()})
    return any(sql.one(f"SELECT 1 FROM {t} f WHERE {subject_expr('f')} = ? LIMIT 1", (did,))
               for t in tables)


def followees_sql(config: FeedsConfig, follow_table: str) -> str:
    return f"SELECT {subject_expr('f')} FROM {follow_table} f WHERE f.did = ?"


def followees_of(config: FeedsConfig, actors) -> set[str]:
    tables = sorted({config.collections[f.follow].table for f in config.feeds.values()})
    out: set[str] = set()
    for table in tables:
        statement = followees_sql(config, table)
        for actor in actors:
            out.update(row[0] for row in sql.rows(statement, (actor,)) if is_valid_did(row[0]))
    return out


def served_followees_sql(config: FeedsConfig, follow_table: str) -> str:
    """Whom the recorded served actors follow, in one statement: the ingest filter's rebuild at a
    hundred thousand readers is one scan, not a query per reader. auth_grant's did column has the
    default collation, the feeds tables byte-wise ("C") on PostgreSQL: the subquery says which."""
    c = "" if current_dialect().is_sqlite else ' COLLATE "C"'
    return (f"SELECT DISTINCT {subject_expr('f')} FROM {follow_table} f"
            f" WHERE f.did IN (SELECT did FROM feed_actors) OR f.did IN (SELECT did{c} FROM auth_grant)")


def served_followees(config: FeedsConfig) -> tuple[set[str], set[str]]:
    """(every served actor, whom they follow): served_set and followees_of(served_set), in one
    statement per follow table plus one per config actor not recorded in the tables."""
    recorded = {row[0] for row in sql.rows(SERVED_SQL)}
    found = set(config.actors) | recorded
    tables = sorted({config.collections[f.follow].table for f in config.feeds.values()})
    out: set[str] = set()
    for table in tables:
        out.update(row[0] for row in sql.rows(served_followees_sql(config, table)) if is_valid_did(row[0]))
    out |= followees_of(config, sorted(set(config.actors) - recorded))
    return found, out


def bump() -> None:
    """Tell the ingesting process to rebuild its sets (one primary-key write)."""
    sql.execute("UPDATE feed_admission_state SET version = version + 1 WHERE id = 1")


def version() -> int:
    return int(sql.scalar("SELECT version FROM feed_admission_state WHERE id = 1"))


def serve(did: str, source: str) -> bool:
    """Record did as served; True (and the version bumped) when it was not already."""
    added = sql.execute("INSERT INTO feed_actors (did, source, added_us) VALUES (?, ?, ?)"
                        " ON CONFLICT DO NOTHING", (did, source, sql.now_us())).rowcount == 1
    if added:
        bump()
    return added


def forget(did: str) -> bool:
    """did is no longer recorded as served ("delete my data"); True (and the version bumped, so the
    ingesting process rebuilds its filter) when it was."""
    removed = sql.execute("DELETE FROM feed_actors WHERE did = ?", (did,)).rowcount > 0
    if removed:
        bump()
    return removed


def readers() -> int:
    """How many actors feeds records as served (the FEED_SERVE_MAX_ACTORS cap counts these)."""
    return int(sql.scalar("SELECT count(*) FROM feed_actors"))
