"""/network's names come from the opt-in set, never from a walk of every subscription on the
network: the attribution statement is planned with EXPLAIN as the feeds guardrail plans its own."""
from __future__ import annotations

from feather import sql
from feather.db import current_dialect, db
from feather.network import queries
from tests.test_feeds_explain import plan, unbounded_scans


def test_the_page_names_statement_never_walks_the_networks_subscriptions(make_app):
    app = make_app(FEATHERREADER_NETWORK_PAGE=True)
    shown = ["https://a.example/feed", "https://b.example/feed"]
    with app.app_context(), db.connection_context():
        lines = plan(*queries.attributions_sql(shown, 5, 0))
    assert unbounded_scans(lines, ["net_subscription", "s", "net_feed_rollup", "r"]) == [], lines
    assert not any(current_dialect().has_full_scan(lines, t) for t in ("net_subscription", "s", "net_feed_rollup", "r"))


def test_names_are_given_only_for_the_feeds_asked_about_and_at_the_floor(make_app):
    from tests.test_network_page import seed

    app = make_app(FEATHERREADER_NETWORK_PAGE=True)
    seed(app, {"https://big.example/feed": 5, "https://other.example/feed": 5, "https://small.example/feed": 4})
    from feather.network import store

    with app.app_context(), db.connection_context():
        with db.atomic():
            store.set_attribution("did:plc:s3", "carol.example", True)
            store.set_attribution("did:plc:s0", None, True)
        asked = ["https://big.example/feed", "https://small.example/feed"]
        got = queries.attributions(asked, 5, 0)
        stale = queries.attributions(asked, 5, sql.now_us() + 1)  # carol's handle check is too old
        assert queries.attributions([], 5, 0) == {}
    # other.example is not asked about; small.example is below the floor of 5.
    assert got == {"https://big.example/feed": ["carol.example", "did:plc:s0"]}
    assert stale == {"https://big.example/feed": ["did:plc:s0", "did:plc:s3"]}


def test_recently_added_walks_only_the_covering_index_in_page_order(make_app):
    """Most feeds are below the floor, so the walk passes many it does not show: it must read the
    index that carries the count, in the page's order, and never the table or a sort."""
    app = make_app(FEATHERREADER_NETWORK_PAGE=True)
    with app.app_context(), db.connection_context():
        lines = plan(*queries.recently_added_sql(5))
    if current_dialect().is_sqlite:
        assert lines == ["SCAN net_feed_rollup USING COVERING INDEX net_feed_rollup_recent"], lines
    else:
        assert any("Index Only Scan using net_feed_rollup_recent" in line for line in lines), lines
        assert not any("Sort" in line for line in lines), lines
