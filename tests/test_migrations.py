"""Migrations: numbered, forward-only, idempotent, safe when two processes start at once."""
import subprocess
import sys

import pytest

from feather.db import db
from feather.migrate import applied_versions, discover, upgrade
from tests.conftest import REPO

pytestmark = pytest.mark.empty_database  # these apply the migrations themselves


def test_migrations_apply_from_empty_in_order(make_app):
    make_app(migrate=False)
    expected = [m.version for m in discover()]
    assert upgrade(db.obj) == expected
    with db.connection_context():
        assert applied_versions(db.obj) == set(expected)
        assert "jetstream_cursor" in db.get_tables()


def test_second_upgrade_applies_nothing(make_app):
    make_app(migrate=False)
    upgrade(db.obj)
    assert upgrade(db.obj) == []


def test_migration_numbers_are_unique_and_sorted():
    versions = [m.version for m in discover()]
    assert versions == sorted(set(versions))


def test_two_processes_migrating_at_once_apply_each_file_once(database_url, tmp_path):
    script = (
        "import sys; from feather.db import bind; from feather.migrate import upgrade;"
        "d = bind(sys.argv[1]); print(len(upgrade(d)))"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, database_url], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    counts = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        counts.append(int(out.strip()))
    assert sum(counts) == len(discover())


def test_flask_db_upgrade_command(make_app):
    app = make_app(migrate=False)
    result = app.test_cli_runner().invoke(args=["db", "upgrade"])
    assert result.exit_code == 0
    assert result.output.startswith(f"applied {len(discover())} migration(s)")
    again = app.test_cli_runner().invoke(args=["db", "upgrade"])
    assert again.output.strip() == "applied 0 migration(s)"


def test_feed_items_page_key_migration_keeps_every_row_and_refuses_a_duplicate(make_app, tmp_path):
    """0049 rebuilds feed_items around its page key: rows written under the old (actor, uri) key
    survive unchanged, and the new key still turns a repeated row into a no-op."""
    import shutil

    from feather.db import current_dialect
    from feather.migrate import MIGRATIONS_DIR

    make_app(migrate=False)
    older = tmp_path / "older"
    older.mkdir()
    for path in MIGRATIONS_DIR.glob("*.py"):
        if path.name[:4].isdigit() and int(path.name[:4]) < 49:
            shutil.copy(path, older / path.name)
    upgrade(db.obj, older)
    post = "app.bsky.feed.post"
    rows = [(f"did:plc:reader{a}", f"at://did:plc:author{u}/{post}/r{u}", post, 1_000 + u * 7 % 5)
            for a in range(3) for u in range(4)]
    q = current_dialect().q
    with db.connection_context():
        for row in rows:
            db.execute_sql(q("INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?)"), row)
    assert upgrade(db.obj) == [m.version for m in discover() if m.version >= 49]
    with db.connection_context():
        kept = db.execute_sql("SELECT actor, uri, collection, time_us FROM feed_items"
                              " ORDER BY actor, time_us DESC, uri").fetchall()
        again = db.execute_sql(q("INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?)"
                                 " ON CONFLICT DO NOTHING"), rows[5]).rowcount
    assert [tuple(r) for r in kept] == sorted(rows, key=lambda r: (r[0], -r[3], r[1]))
    assert again == 0


@pytest.mark.once
def test_two_migration_files_with_one_number_stop_discovery_naming_both(tmp_path):
    for name in ("0001_first.py", "0002_second.py", "0002_other.py", "notes.py"):
        (tmp_path / name).write_text("def up(m):\n    pass\n")
    with pytest.raises(RuntimeError) as err:
        discover(tmp_path)
    assert str(err.value) == "two migrations share number 0002: other, second"
