"""Capability 1: the adoption probe against a scripted loopback relay."""
import logging

import pytest

from feather.db import db
from feather.outbound import GuardedClient
from feather.network import adoption
from feather.network.relay import MAX_PAGES, RelayClient, base_url
from tests.support.fake_relay import FakeNetwork


@pytest.fixture
def relay():
    net = FakeNetwork()
    yield net
    net.close()


@pytest.fixture
def http():
    return GuardedClient(allow_private_network=True, read_timeout=5, total_timeout=10)


def dids(n, prefix="r"):
    return [f"did:plc:{prefix}{i:05d}" for i in range(n)]


def stat_rows():
    with db.connection_context():
        return db.execute_sql("SELECT key, source, value, truncated FROM network_stat ORDER BY source").fetchall()


def test_a_bare_relay_host_means_https_and_a_full_url_is_taken_as_is():
    assert base_url("relay1.us-west.bsky.network") == "https://relay1.us-west.bsky.network"
    assert base_url("http://127.0.0.1:9/") == "http://127.0.0.1:9"


def test_pages_until_no_cursor_one_second_apart_with_the_user_agent(relay, http):
    relay.repos = dids(1200)
    sleeps = []
    obs = RelayClient(http, relay.url, sleep=sleeps.append).count_repos_with_collection()
    assert (obs.repos, obs.truncated, obs.source) == (1200, False, relay.url)
    calls = relay.relay_calls()
    assert [c[1].get("cursor") for c in calls] == [None, "500", "1000"]
    assert all(c[1]["limit"] == "500" and c[1]["collection"] == "community.lexicon.rss.subscription" for c in calls)
    assert all(c[2]["User-Agent"].startswith("Feather/") for c in calls)
    assert sleeps == [1.0, 1.0]


def test_stops_on_an_empty_page_even_when_a_cursor_comes_back(relay, http):
    relay.repos = dids(3)
    relay.echo_cursor = True
    obs = RelayClient(http, relay.url, sleep=lambda s: None, page_limit=2).count_repos_with_collection()
    assert (obs.repos, obs.truncated) == (3, False)
    assert len(relay.relay_calls()) == 3  # [2 dids + cursor], [1 did + cursor], [0 dids + cursor] -> stop


def test_page_cap_makes_the_count_a_floor_marked_truncated(relay, http, caplog):
    relay.endless = True
    with caplog.at_level(logging.WARNING):
        obs = RelayClient(http, relay.url, sleep=lambda s: None).count_repos_with_collection()
    assert (obs.repos, obs.truncated) == (MAX_PAGES, True)
    assert len(relay.relay_calls()) == 50
    assert "stopped after 50 pages" in caplog.text


def test_a_429_aborts_the_run_logs_retry_after_and_keeps_the_previous_row(make_app, relay, http, caplog):
    make_app()
    relay.repos = dids(7)
    with db.connection_context():
        adoption.probe(http, [relay.url], sleep=lambda s: None)
    assert stat_rows() == [("adoption.subscription", relay.url, 7, 0)]
    relay.repos = dids(1200)
    relay.new_run()
    relay.page_replies = {2: (429, {"Retry-After": "120"}, {"error": "RateLimitExceeded"})}
    before = len(relay.relay_calls())
    with caplog.at_level(logging.WARNING), db.connection_context():
        assert adoption.probe(http, [relay.url], sleep=lambda s: None) == []
    assert len(relay.relay_calls()) - before == 2  # no retry, no third page
    assert "Retry-After: 120" in caplog.text
    assert stat_rows() == [("adoption.subscription", relay.url, 7, 0)]


def test_a_malformed_reply_writes_no_row(make_app, relay, http, caplog):
    make_app()
    relay.page_replies = {1: (200, {}, {"repos": "nope"})}
    with caplog.at_level(logging.WARNING), db.connection_context():
        assert adoption.probe(http, [relay.url], sleep=lambda s: None) == []
    assert stat_rows() == []
    assert "malformed reply" in caplog.text


def test_an_unreachable_relay_keeps_its_row_and_the_others_still_count(make_app, relay, http):
    make_app()
    relay.repos = dids(4)
    with db.connection_context():
        adoption.probe(http, [relay.url], sleep=lambda s: None)
        adoption.probe(http, ["http://127.0.0.1:1", relay.url], sleep=lambda s: None)
    assert stat_rows() == [("adoption.subscription", relay.url, 4, 0)]


def test_each_relay_gets_its_own_row_and_the_maximum_is_surfaced(make_app, relay, http, caplog):
    make_app()
    other = FakeNetwork()
    try:
        relay.repos, other.repos = dids(3), dids(9)
        with caplog.at_level(logging.INFO), db.connection_context():
            adoption.probe(http, [relay.url, other.url], sleep=lambda s: None)
            best = adoption.current()
        assert sorted(v for *_, v, _t in stat_rows()) == [3, 9]
        assert (best.repos, best.truncated) == (9, False)
        assert "relays disagree" in caplog.text
        assert f"key=adoption.subscription source={other.url} repos=9 truncated=False" in caplog.text
    finally:
        other.close()


def test_the_stat_table_holds_counts_never_dids(make_app, relay, http):
    make_app()
    relay.repos = dids(2, prefix="secretperson")
    with db.connection_context():
        adoption.probe(http, [relay.url], sleep=lambda s: None)
        dumped = repr(db.execute_sql("SELECT * FROM network_stat").fetchall())
    assert "secretperson" not in dumped


def test_a_private_relay_address_is_refused_by_the_guard_outside_development(make_app, relay):
    make_app()
    relay.repos = dids(2)
    strict = GuardedClient(allow_private_network=False)
    with db.connection_context():
        assert adoption.probe(strict, [relay.url.replace("http://", "https://")], sleep=lambda s: None) == []
    assert relay.relay_calls() == []


def test_the_first_run_after_boot_is_jittered_and_zero_disables_the_probe(make_app):
    from feather import network

    assert adoption.first_run_delay(86400, rand=lambda: 0.0) == 60.0
    assert adoption.first_run_delay(86400, rand=lambda: 1.0) == 60.0 + 8640.0  # up to 10 % of the interval
    app = make_app(FEATHERREADER_ADOPTION_INTERVAL_SECS=86400)
    job = next(j for j in network.jobs(app.config["FEATHER"]) if j.id == "network-adoption")
    assert job.seconds == 600.0 and 60.0 <= job.first_run_delay <= 8700.0
    app = make_app(FEATHERREADER_ADOPTION_INTERVAL_SECS=0)
    assert [j.id for j in network.jobs(app.config["FEATHER"])] == []


def test_the_probe_runs_once_per_interval_across_restarts_failed_runs_included(make_app, relay, http):
    relay.repos = dids(3)
    settings = make_app(FEATHERREADER_ADOPTION_INTERVAL_SECS=1000, FEATHERREADER_RELAY_HOSTS=relay.url).config["FEATHER"]

    def run(now, rand=lambda: 0.5):
        with db.connection_context():
            return adoption.run_if_due(settings, http=http, now=now, rand=rand, sleep=lambda s: None)

    assert run(5000.0, rand=lambda: 1.0) is True  # never run: due at once; next in 1.1 x 1000 s
    assert [r[2] for r in stat_rows()] == [3]
    # A restart builds a new job; the last run is in the database, so nothing runs early.
    assert [run(t) for t in (5001.0, 6000.0, 6099.0)] == [False, False, False]
    relay.page_replies[2] = (500, {}, {"error": "InternalServerError"})
    assert run(6100.0, rand=lambda: 0.0) is True  # due at 5000 + 1100; it fails, and still counts
    assert run(6100.0 + 899.0) is False and run(6100.0 + 900.0) is True  # 0.9 x 1000 after the failed run
    assert len(relay.relay_calls()) == 3


def _observe(source, value, truncated, when="2026-03-04T05:06:07Z"):
    from feather.network.relay import AdoptionObservation

    with db.connection_context(), db.atomic():
        adoption.save(AdoptionObservation(source, "community.lexicon.rss.subscription", value, truncated, when))


def test_about_shows_the_quiet_line_only_when_enabled(make_app):
    app = make_app(FEATHERREADER_RELAY_HOSTS="a.example,b.example")
    _observe("a.example", 12, False)
    assert b"community.lexicon.rss.subscription" not in app.test_client().get("/about").data
    app = make_app(FEATHERREADER_RELAY_HOSTS="a.example,b.example", FEATHERREADER_SHOW_ADOPTION=True)
    _observe("b.example", 40, False)
    html = app.test_client().get("/about").get_data(as_text=True)
    assert "40 accounts\non the atproto network" in html
    assert "relays on 2026-03-04" in html


def test_about_says_at_least_when_the_largest_count_was_truncated(make_app):
    app = make_app(FEATHERREADER_RELAY_HOSTS="a.example,b.example", FEATHERREADER_SHOW_ADOPTION=True)
    _observe("a.example", 25000, True)
    _observe("b.example", 3, False)
    assert "At least 25000 accounts" in app.test_client().get("/about").get_data(as_text=True)


def test_health_never_carries_the_adoption_count(make_app):
    app = make_app(FEATHERREADER_RELAY_HOSTS="a.example", FEATHERREADER_SHOW_ADOPTION=True)
    _observe("a.example", 4321, False)
    body = app.test_client().get("/health").get_data(as_text=True)
    assert "4321" not in body and "adoption" not in body


def test_an_exact_count_beats_a_floor_of_the_same_size(make_app):
    app = make_app(FEATHERREADER_RELAY_HOSTS="a.example,b.example", FEATHERREADER_SHOW_ADOPTION=True)
    _observe("a.example", 25000, True)  # stopped at the page cap: a floor
    _observe("b.example", 25000, False)  # walked to the end: exactly this many
    with db.connection_context():
        assert adoption.current(["a.example", "b.example"]).truncated is False
    html = app.test_client().get("/about").get_data(as_text=True)
    assert "25000 accounts" in html and "At least" not in html
