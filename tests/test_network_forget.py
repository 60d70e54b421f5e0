"""An opt-out (and "delete my data") leaves no row naming the DID in any catalogue table but
net_optout, and neither a replay of the DID's old events nor a rebuild brings one back."""
import pytest

from feather import sql
from feather.db import db
from feather.jetstream import store as jstore
from feather.jetstream.events import CommitEvent
from feather.network import personal, store, subscriptions
from tests.support.fake_relay import subscription
from tests.test_network_rebuild import fake, setup, tick  # noqa: F401 (fixtures)

NSID = "community.lexicon.rss.subscription"
DID = "did:plc:carol"
# Every catalogue table with a did column (migrations/0030_network.py).
DID_TABLES = ("net_subscription", "net_tombstone", "net_backfill_queue", "net_attribution", "net_optout")


def counts(did: str) -> dict[str, int]:
    with db.connection_context():
        return {t: sql.execute(f"SELECT count(*) FROM {t} WHERE did = ?", (did,)).fetchone()[0]
                for t in DID_TABLES}


def create(did, rkey, url, at):
    return CommitEvent(did, at, "create", NSID, rkey, {"url": url, "createdAt": "2026-01-02T03:04:05Z"}, "bafy")


def drop(did, rkey, at):
    return CommitEvent(did, at, "delete", NSID, rkey, None, None)


def apply(app, events):
    (sub,) = subscriptions(app.config["FEATHER"])
    with db.connection_context():
        jstore.apply_batch(sub, events, None)


def history(t):
    """carol's past: two records, one of them deleted again (a tombstone)."""
    return [create(DID, "kept", "https://kept.example/feed", t + 1), create(DID, "gone", "https://gone.example/feed", t + 2),
            drop(DID, "gone", t + 3)]


def everywhere(app, t):
    apply(app, history(t))
    with db.connection_context(), db.atomic():
        store.set_attribution(DID, "carol.example", True)
        sql.execute("INSERT INTO net_backfill_queue (did, state, updated_at) VALUES (?, ?, ?)",
                    (DID, "pending", t))
    assert counts(DID) == {"net_subscription": 1, "net_tombstone": 1, "net_backfill_queue": 1,
                           "net_attribution": 1, "net_optout": 0}


def rollup():
    with db.connection_context():
        return db.execute_sql("SELECT feed_url, subscriber_count FROM net_feed_rollup ORDER BY feed_url").fetchall()


def test_an_opt_out_removes_every_row_naming_the_did_and_neither_a_replay_nor_a_rebuild_brings_one_back(setup, fake):
    app, kit = setup()
    t = sql.now_us() - 10_000_000
    everywhere(app, t)
    with db.connection_context(), db.atomic():
        store.opt_out(DID)
    nothing = {"net_subscription": 0, "net_tombstone": 0, "net_backfill_queue": 0, "net_attribution": 0}
    assert counts(DID) == {**nothing, "net_optout": 1}
    assert rollup() == []
    apply(app, history(t))  # the stream replays carol's old events
    fake.add_account(DID, [("kept", subscription("https://kept.example/feed"))])
    fake.add_account("did:plc:dave", [("d", subscription("https://dave.example/feed"))])
    tick(app, kit)
    assert counts(DID) == {**nothing, "net_optout": 1}
    assert rollup() == [("https://dave.example/feed", 1)]
    assert fake.record_calls(DID) == []
    with db.connection_context():
        assert store.get_state("backfill.result") == "1/1/0"  # carol was never queued: dave alone


def test_delete_my_data_removes_every_catalogue_row_naming_the_did(setup):
    app, _ = setup()
    everywhere(app, sql.now_us() - 10_000_000)
    with app.app_context(), db.connection_context(), db.atomic():
        personal.delete(DID)
    assert counts(DID) == {"net_subscription": 0, "net_tombstone": 0, "net_backfill_queue": 0,
                           "net_attribution": 0, "net_optout": 0}
    assert rollup() == []


@pytest.mark.parametrize("stale", ["replay", "rebuild"])
def test_after_a_cleared_opt_out_a_write_older_than_the_opt_out_cannot_bring_back_a_deleted_record(setup, fake, stale):
    app, kit = setup()
    t = sql.now_us() - 10_000_000
    with db.connection_context():
        store.set_state("backfill.status", "done")  # no rebuild of its own in the first tick
    everywhere(app, t)
    with db.connection_context(), db.atomic():
        store.opt_out(DID)
    with db.connection_context(), db.atomic():
        assert store.clear_opt_out(DID) is True
    if stale == "replay":
        apply(app, history(t)[:2])  # the creates only, as a batch boundary would leave them
    else:
        fake.add_account(DID, [("gone", subscription("https://gone.example/feed"))])
        with db.connection_context():
            store.set_state("backfill.status", "running")
            store.set_state("backfill.cursor_us", str(t))  # a rebuild whose T0 is before the opt-out
        tick(app, kit)
        assert len(fake.record_calls(DID)) == 1
    with db.connection_context():
        assert sql.execute("SELECT count(*) FROM net_subscription WHERE did = ?",
                           (DID,)).fetchone()[0] == 0
    apply(app, [create(DID, "new", "https://new.example/feed", sql.now_us())])  # what comes next counts
    assert rollup() == [("https://new.example/feed", 1)]
