"""The rebuild lists a relay until its cursor ends, a bounded number of pages per run, resuming
at the saved cursor, and is never done while a listing is unfinished."""
from feather.db import db
from feather.network import rebuild, relay
from tests.test_network_rebuild import accounts, fake, rows, setup, state, tick  # noqa: F401 (fixtures)


def queued() -> int:
    with db.connection_context():
        return db.execute_sql("SELECT count(*) FROM net_backfill_queue").fetchone()[0]


def test_a_listing_longer_than_the_probes_page_cap_is_read_to_its_end(setup, fake):
    app, kit = setup()
    fake.page_size = 2
    accounts(fake, 2 * relay.MAX_PAGES + 20)  # 60 pages
    tick(app, kit)
    assert len(fake.relay_calls()) == relay.MAX_PAGES + 10
    assert state("backfill.status") == "done"
    assert state("backfill.result") == f"{2 * relay.MAX_PAGES + 20}/{2 * relay.MAX_PAGES + 20}/0"
    assert len(rows()) == 2 * relay.MAX_PAGES + 20


def test_an_unfinished_listing_is_not_done_and_the_next_run_resumes_at_its_cursor(setup, fake, monkeypatch):
    app, kit = setup()
    monkeypatch.setattr(rebuild, "ENUM_PAGES_PER_RUN", 4)
    fake.page_size = 2
    accounts(fake, 13)  # 7 pages
    tick(app, kit)
    assert state("backfill.status") == "running" and state("backfill.enumerated") is None
    assert len(fake.relay_calls()) == 4 and len(rows()) == 8  # what was listed is read meanwhile
    assert queued() == 8
    tick(app, kit)
    assert [c[1].get("cursor") for c in fake.relay_calls()] == [None, "2", "4", "6", "8", "10", "12"]
    assert state("backfill.status") == "done" and state("backfill.result") == "13/13/0"
    assert len(rows()) == 13


def test_an_endless_listing_is_never_done(setup, fake, monkeypatch):
    app, kit = setup()
    monkeypatch.setattr(rebuild, "ENUM_PAGES_PER_RUN", 3)
    fake.endless = True
    for _ in range(3):
        tick(app, kit)
    assert state("backfill.status") == "running"
    assert [c[1].get("cursor") for c in fake.relay_calls()] == [None, "1", "2", "3", "4", "5", "6", "7", "8"]
    assert queued() == 9
