"""Capability 2: the live projection, driven through the engine's batch entry point (no socket)."""
import random

import pytest

from feather import sql
from feather.db import db
from feather.jetstream import store as jstore
from feather.jetstream.events import AccountEvent, CommitEvent
from feather.network import store, subscriptions

NSID = "community.lexicon.rss.subscription"
T = 1_760_000_000_000_000


def ev(did, rkey, op="create", url="https://example.com/feed", t=None, **fields):
    t = t if t is not None else T
    if op == "delete":
        return CommitEvent(did, t, "delete", NSID, rkey, None, None)
    record = {"$type": NSID, "url": url, "createdAt": "2026-01-02T03:04:05.000Z", **fields}
    return CommitEvent(did, t, op, NSID, rkey, record, "bafyx")


@pytest.fixture
def net(make_app, monkeypatch):
    clock = iter(range(1, 10**9))
    monkeypatch.setattr(sql, "now_us", lambda: T + next(clock))  # indexed_at strictly increases

    class Net:
        def __init__(self, **settings):
            self.app = make_app(FEATHERREADER_NETWORK_INDEX=True, **settings)
            self.sub = subscriptions(self.app.config["FEATHER"])[0]

        def apply(self, events, cursor=None):
            with db.connection_context():
                jstore.apply_batch(self.sub, list(events), jstore.Cursor(cursor) if cursor else None)

        def rows(self):
            with db.connection_context():
                return db.execute_sql("SELECT did, rkey, feed_url FROM net_subscription ORDER BY did, rkey").fetchall()

        def rollup(self):
            with db.connection_context():
                return db.execute_sql("SELECT feed_url, subscriber_count, first_seen, last_seen FROM net_feed_rollup"
                                      " ORDER BY feed_url").fetchall()

        def group_by(self):
            with db.connection_context():
                return db.execute_sql("SELECT feed_url, count(DISTINCT did), min(indexed_at), max(indexed_at)"
                                      " FROM net_subscription GROUP BY feed_url ORDER BY feed_url").fetchall()

    return Net


def test_subscribes_to_exactly_the_rss_subscription_collection_and_only_when_indexing_is_on(make_app):
    app = make_app()
    assert subscriptions(app.config["FEATHER"]) == []
    app = make_app(FEATHERREADER_NETWORK_INDEX=True)
    (sub,) = subscriptions(app.config["FEATHER"])
    assert (sub.name, sub.collections, sub.dids) == ("network", [NSID], None)


def test_stores_only_the_canonical_feed_url_of_a_record(net):
    n = net()
    n.apply([ev("did:plc:a", "r1", url="HTTPS://Example.com/feed/?utm_source=bsky", title="Job hunt tips",
                siteUrl="https://example.com/site", folder="at://did:plc:a/community.lexicon.rss.folder/therapy",
                fetchHint="daily")])
    assert n.rows() == [("did:plc:a", "r1", "https://example.com/feed")]
    with db.connection_context():
        dump = repr([db.execute_sql(f"SELECT * FROM {t}").fetchall()
                     for t in ("net_subscription", "net_feed_rollup", "network_state")])
    for secret in ("Job hunt", "example.com/site", "therapy", "daily"):
        assert secret not in dump


def test_replaying_an_overlapping_window_converges_to_the_same_rows_and_rollup(net):
    n = net()
    log = [ev("did:plc:a", "1", url="https://a.example/feed", t=T + 1),
           ev("did:plc:b", "1", url="https://a.example/feed", t=T + 2),
           ev("did:plc:b", "1", op="update", url="https://b.example/feed", t=T + 3),
           ev("did:plc:c", "1", url="https://b.example/feed", t=T + 4),
           ev("did:plc:a", "1", op="delete", t=T + 5),
           ev("did:plc:a", "2", url="https://c.example/feed", t=T + 6)]
    n.apply(log, cursor=T + 6)
    once_rows, once_rollup = n.rows(), n.rollup()
    n.apply(log[2:], cursor=T + 6)  # the 5 s reconnect overlap
    n.apply(log, cursor=T + 6)
    assert n.rows() == once_rows == [("did:plc:a", "2", "https://c.example/feed"),
                                     ("did:plc:b", "1", "https://b.example/feed"),
                                     ("did:plc:c", "1", "https://b.example/feed")]
    assert n.rollup() == once_rollup
    assert [(u, c) for u, c, *_ in n.rollup()] == [("https://b.example/feed", 2), ("https://c.example/feed", 1)]


def test_a_delete_removes_the_row_and_the_feed_leaves_the_rollup_at_zero(net):
    n = net()
    n.apply([ev("did:plc:a", "1", t=T + 1)])
    assert [(u, c) for u, c, *_ in n.rollup()] == [("https://example.com/feed", 1)]
    n.apply([ev("did:plc:a", "1", op="delete", t=T + 2)])
    assert n.rows() == [] and n.rollup() == []


def test_a_create_and_a_delete_at_the_same_time_converge_whichever_arrives_first(net):
    n = net()
    for did, order in (("did:plc:a", ("create", "delete")), ("did:plc:b", ("delete", "create"))):
        for op in order:
            n.apply([ev(did, "1", op=op, t=T + 5)])
        assert (order, n.rows(), n.rollup()) == (order, [], [])  # the delete wins the tie either way


def test_over_the_row_cap_the_oldest_indexed_rows_are_evicted_in_the_same_batch(net):
    n = net(FEATHERREADER_NET_MAX_ROWS=3)
    for i in range(3):
        n.apply([ev(f"did:plc:{i}", "1", url=f"https://f{i}.example/feed", t=T + i)])
    n.apply([ev("did:plc:3", "1", url="https://f3.example/feed", t=T + 3),
             ev("did:plc:4", "1", url="https://f4.example/feed", t=T + 4)])
    assert [d for d, *_ in n.rows()] == ["did:plc:2", "did:plc:3", "did:plc:4"]
    assert [u for u, *_ in n.rollup()] == ["https://f2.example/feed", "https://f3.example/feed",
                                           "https://f4.example/feed"]


def test_one_account_keeps_at_most_the_per_did_cap_of_records(net):
    n = net(FEATHERREADER_NET_MAX_RECORDS_PER_DID=2)
    n.apply([ev("did:plc:a", str(i), url=f"https://f{i}.example/feed", t=T + i) for i in range(4)])
    assert [r for _, r, _ in n.rows()] == ["0", "1"]
    n.apply([ev("did:plc:a", "1", op="update", url="https://moved.example/feed", t=T + 9)])  # updates still apply
    assert n.rows()[1] == ("did:plc:a", "1", "https://moved.example/feed")


def test_subscribers_are_distinct_accounts_not_records(net):
    n = net()
    n.apply([ev("did:plc:a", str(i), t=T + i) for i in range(5)])
    assert [(u, c) for u, c, *_ in n.rollup()] == [("https://example.com/feed", 1)]


def test_secret_bearing_urls_are_dropped_at_index_time(net):
    n = net()
    n.apply([ev("did:plc:a", "1", url="https://example.com/feed?token=abcdefgh12", t=T + 1),
             ev("did:plc:b", "1", url="https://x.substack.com/feed/private/zz", t=T + 1),
             ev("did:plc:c", "1", url="javascript:alert(1)", t=T + 1),
             ev("did:plc:d", "1", url="https://public.example/feed", t=T + 1)])
    assert n.rows() == [("did:plc:d", "1", "https://public.example/feed")]
    n.apply([ev("did:plc:d", "1", op="update", url="https://public.example/feed?key=abcdefgh12", t=T + 2)])
    assert n.rows() == [] and n.rollup() == []


def test_opting_out_deletes_the_accounts_rows_and_blocks_its_future_records(net):
    n = net()
    n.apply([ev("did:plc:a", "1", t=T + 1), ev("did:plc:a", "2", url="https://b.example/feed", t=T + 1),
             ev("did:plc:b", "1", t=T + 1)])
    with db.connection_context(), db.atomic():
        assert store.opt_out("did:plc:a") == 2
    assert n.rows() == [("did:plc:b", "1", "https://example.com/feed")]
    assert [(u, c) for u, c, *_ in n.rollup()] == [("https://example.com/feed", 1)]
    n.apply([ev("did:plc:a", "3", url="https://c.example/feed", t=T + 2)])
    assert [d for d, *_ in n.rows()] == ["did:plc:b"]


def test_a_deleted_account_disappears_from_the_catalogue(net):
    n = net()
    n.apply([ev("did:plc:a", "1", t=T + 1), ev("did:plc:b", "1", t=T + 1)])
    n.apply([AccountEvent("did:plc:a", T + 2, False, "deleted"),
             AccountEvent("did:plc:b", T + 2, False, "deactivated")])
    assert [d for d, *_ in n.rows()] == ["did:plc:b"]


def test_the_rollup_always_equals_a_direct_group_by(net):
    n = net(FEATHERREADER_NET_MAX_ROWS=40, FEATHERREADER_NET_MAX_RECORDS_PER_DID=4)
    rng = random.Random(7)
    t = T
    for _ in range(30):
        batch = []
        for _ in range(rng.randint(1, 12)):
            t += 1
            did, rkey = f"did:plc:{rng.randint(0, 14)}", str(rng.randint(0, 5))
            op = rng.choice(["create", "create", "update", "delete"])
            batch.append(ev(did, rkey, op=op, url=f"https://f{rng.randint(0, 6)}.example/feed", t=t))
        n.apply(batch)
        assert n.rollup() == n.group_by()
    assert len(n.rows()) <= 40


def test_the_stream_gets_a_cursor_before_it_first_connects(make_app):
    app = make_app(FEATHERREADER_NETWORK_INDEX=True)
    with db.connection_context():
        assert jstore.load_cursor("network") is None
    (sub,) = subscriptions(app.config["FEATHER"])
    with db.connection_context():
        assert jstore.load_cursor("network") is None  # listing the subscription prepares nothing
    with app.app_context():
        sub.extra["prepare"]()  # what the engine runs once it claims the stream, before connecting
    with db.connection_context():
        assert jstore.load_cursor("network").time_us > 0


def test_no_page_outside_the_network_surfaces_reads_the_network_tables():
    from tests.conftest import REPO

    tables = ("net_subscription", "net_feed_rollup", "net_optout", "net_attribution", "net_tombstone",
              "net_backfill_queue", "network_state")
    files = list((REPO / "feather").rglob("*.py")) + list((REPO / "templates").rglob("*.html"))
    offenders = [str(p.relative_to(REPO)) for p in files
                 if "network" not in p.parts and any(t in p.read_text() for t in tables)]
    assert offenders == []


@pytest.mark.parametrize("indexing", [False, True])
def test_the_landing_page_renders_the_same_with_the_catalogue_empty_full_or_off(net, make_app, indexing):
    n = net() if indexing else None
    app = n.app if n else make_app()
    empty = app.test_client().get("/")
    assert empty.status_code == 200
    if n:
        n.apply([ev(f"did:plc:{i}", "1", t=T + i) for i in range(6)])
        assert app.test_client().get("/").data == empty.data


BOUNDED = [
    ("net_subscription", "SELECT count(*) FROM net_subscription WHERE did = ?", ("did:plc:a",)),
    ("net_subscription", "SELECT feed_url, rev_us FROM net_subscription WHERE did = ? AND rkey = ?", ("d", "r")),
    ("net_subscription", "SELECT count(DISTINCT did), min(indexed_at), max(indexed_at) FROM net_subscription"
                         " WHERE feed_url = ?", ("https://x/",)),
    ("net_subscription", "SELECT did, rkey, feed_url FROM net_subscription ORDER BY indexed_at, did, rkey LIMIT ?",
     (10,)),
    ("net_tombstone", "DELETE FROM net_tombstone WHERE time_us < ?", (5,)),
    ("net_backfill_queue", "SELECT did FROM net_backfill_queue WHERE state = ? ORDER BY did LIMIT ?", ("pending", 50)),
    ("net_feed_rollup", "SELECT feed_url, subscriber_count, first_seen FROM net_feed_rollup WHERE subscriber_count >= ?"
                        " ORDER BY subscriber_count DESC, feed_url ASC LIMIT ?", (5, 25)),
    ("net_feed_rollup", "SELECT feed_url, subscriber_count, first_seen FROM net_feed_rollup WHERE subscriber_count >= ?"
                        " ORDER BY first_seen DESC, feed_url ASC LIMIT ?", (5, 25)),
]


@pytest.mark.parametrize("table,sql,params", BOUNDED, ids=[s[:60] for _, s, _ in BOUNDED])
def test_maintenance_and_read_statements_use_an_index(make_app, table, sql, params):
    from feather.db import current_dialect

    make_app()
    with db.connection_context():
        d = current_dialect()
        if not d.is_sqlite:
            db.execute_sql("SET enable_seqscan = off")  # empty tables: ask whether an index path exists at all
        plan = d.explain(db, d.q(sql), params)
    assert not d.has_full_scan(plan, table), plan


def test_a_createdat_longer_than_64_characters_is_not_kept():
    """Only the feed URL and a bounded createdAt leave the record: a long one is not a timestamp."""
    from feather.network.apply import record_fields

    url = "https://example.com/feed.xml"
    stamp = "2026-01-02T03:04:05Z"
    assert record_fields({"url": url, "createdAt": stamp.ljust(64, "0")}) == (url, stamp.ljust(64, "0"))
    assert record_fields({"url": url, "createdAt": stamp.ljust(65, "0")}) == (url, None)
