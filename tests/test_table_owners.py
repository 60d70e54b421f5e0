"""Every table has one owning module, which alone writes it; docs/design.md names that module.

Read from the source: a module writes a table when it holds an INSERT, UPDATE, DELETE or upsert
naming it, or a statement built from a table name (`DELETE FROM {table}`) beside that name as a
literal. The migrations create tables and `feather/network/schema.py` re-creates the catalogue's
(DDL, not writes). The records tables (`feed_records_<short>`) are named by the feeds config and
written by the records module; their search indexes (`feed_search_<short>`, and on SQLite the FTS5
table beside it with its own shadow tables) likewise, by store/search.py.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WRITE = re.compile(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+([a-z_][a-z0-9_]*|\{)", re.I)
ROW = re.compile(r"^\| (?P<owner>[^|]+?) \| `(?P<table>[a-z_<>]+)` \|", re.M)
MODULE = re.compile(r"`((?:[a-z_]+/)*[a-z_]+\.py)`")


def documented() -> dict[str, str]:
    """{table: owning module path under feather/} from the design doc's "Tables by owner"."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## Tables by owner", 1)[1].split("\n## ", 1)[0]
    found = {}
    for row in ROW.finditer(section):
        module = MODULE.search(row["owner"])
        assert module, f"the row for {row['table']} names no owning module: {row['owner']!r}"
        found[row["table"]] = "feather/" + module.group(1)
    return found


def writers(tables) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {table: set() for table in tables}
    for path in sorted((ROOT / "feather").rglob("*.py")):
        text, name = path.read_text(), str(path.relative_to(ROOT))
        literal = {m.group(1).lower() for m in WRITE.finditer(text)}
        dynamic = "{" in literal
        for table in tables:
            if table in literal or (dynamic and re.search(rf"[\"']{table}[\"']", text)):
                found[table].add(name)
    return found


def test_every_table_is_written_by_the_one_module_the_design_doc_names():
    owners = documented()
    tables = [t for t in owners if "<" not in t]
    assert {table: sorted(modules) for table, modules in writers(tables).items()} == {
        table: [owners[table]] for table in tables}


def test_the_design_doc_lists_every_table_a_migrated_database_has(app):
    from feather.db import db

    with app.app_context(), db.connection_context():
        present = {t for t in db.get_tables()
                   if t != "sqlite_sequence" and not t.startswith(("feed_records_", "feed_search_"))}
    assert set(documented()) - {"feed_records_<short>", "feed_search_<short>"} == present
