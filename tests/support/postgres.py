"""PostgreSQL helpers shared by the test fixtures and the benches: scratch databases, and who
holds which Feather claim."""
from __future__ import annotations

import contextlib
import os
import uuid

# A tablespace to make the scratch databases in (FEATHER_TEST_PG_TABLESPACE; .ci/run makes one on
# tmpfs). The PostgreSQL pass copies a database for nearly every test: on this machine's disk (ext4
# mounted with `discard`) a copy made between drops took 0.2-0.4 s, on tmpfs 0.02 s.
TABLESPACE = os.environ.get("FEATHER_TEST_PG_TABLESPACE", "")


def admin(url: str, sql: str) -> None:
    """Run one statement outside a transaction (CREATE/DROP DATABASE cannot run inside one)."""
    import psycopg2

    conn = psycopg2.connect(url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


@contextlib.contextmanager
def scratch_database(url: str, prefix: str, before_drop=None, template: str | None = None):
    """A new database beside the one `url` names (its role may CREATE DATABASE), dropped on exit;
    before_drop runs first, to close pools that still hold connections to it. Empty, or a copy
    of `template` (see migrated_template)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    # FILE_COPY copies the template's few files; the default WAL_LOG writes every page to the WAL.
    where = f" TABLESPACE {TABLESPACE}" if TABLESPACE else ""
    admin(url, f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY{where}" if template
          else f"CREATE DATABASE {name}{where}")
    try:
        yield f"{url.rsplit('/', 1)[0]}/{name}"
    finally:
        if before_drop is not None:
            before_drop()
        admin(url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextlib.contextmanager
def migrated_template(url: str):
    """A database with every migration applied, to copy per test: a copy takes about half the
    time of running fifty migrations into an empty database. Dropped on exit."""
    from feather.db import make_database
    from feather.migrate import upgrade

    with scratch_database(url, "feather_tpl") as template_url:
        database = make_database(template_url)
        try:
            upgrade(database)
        finally:
            database.close_all()
        yield template_url.rsplit("/", 1)[1]


def claim_owners() -> dict[int, set[int]]:
    """{advisory lock key: OS pids holding it}, read from the claims connections' application_name
    (`feather-claims:<pid>`) on the database feather.db is bound to."""
    from feather.db import db

    with db.connection_context():
        rows = db.execute_sql(
            "SELECT (l.classid::bigint << 32) | l.objid::bigint, a.application_name FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND starts_with(a.application_name, 'feather-claims:')"
            # Advisory locks are per database; another test's process still winding down on its own
            # scratch database holds the same keys (seen once in CI: a foreign pid among the owners).
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
    owners: dict[int, set[int]] = {}
    for key, name in rows:
        signed = ((key + 2**63) % 2**64) - 2**63  # lock_key() is a signed 64-bit value
        owners.setdefault(signed, set()).add(int(name.split(":", 1)[1]))
    return owners
