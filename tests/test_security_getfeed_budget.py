"""Anonymous reads cannot make the instance do unbounded outbound work, and the budget that bounds
it never refuses a read the store can answer.

These run the production sources (feather.feeds.read.sources.AtprotoSources) over an identity resolver
whose HTTP client and DNS only record what they were asked: every recorded call is one outbound
lookup a stranger made this instance perform."""
from __future__ import annotations

import time

import pytest

from feather.atproto.identity import IdentityResolver
from feather.feeds.web.budget import OVER_BUDGET, OutboundBudget
from tests.fixtures.feeds.feedkit import feeds_app, join_backfills, rows, toml
from tests.test_feeds_auth import LXM, P256, SERVICE, mint
from tests.test_identity import FakeDns, FakeHttp

GET_FEED = "/xrpc/com.example.getFeed"
PLC = "https://plc.test.invalid"


def wire(app):
    http, dns = FakeHttp({}), FakeDns()
    app.extensions["identity_resolver"] = IdentityResolver(http, plc_url=PLC, handle_resolver="", txt_lookup=dns)
    return http, dns


@pytest.fixture
def app(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, toml())
    yield app
    join_backfills(app)


def read(app, actor, client="198.51.100.7", token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return app.test_client().get(f"{GET_FEED}?feed=timeline&actor={actor}", headers=headers,
                                 environ_base={"REMOTE_ADDR": client})


@pytest.mark.parametrize("spray, fetched", [
    ("did:plc:spray{}", PLC + "/did:plc:spray{}"),
    ("did:web:spray{}.attacker.example", "https://spray{}.attacker.example/.well-known/did.json"),
])
def test_a_spray_of_new_actors_starts_at_most_the_client_budget_of_backfills(app, spray, fetched):
    http, _ = wire(app)
    statuses = [read(app, spray.format(i)).status_code for i in range(50)]
    join_backfills(app)
    assert statuses == [200] * 50  # over budget the read is answered from the store, unclaimed
    assert read(app, spray.format(50)).json == {"records": []}
    assert rows(app, "SELECT count(*) FROM feed_backfills") == [(10,)]
    assert sorted(http.calls) == sorted(fetched.format(i) for i in range(10))


def test_the_budget_is_per_client_and_global(app):
    http, _ = wire(app)
    app.extensions["feeds_outbound_budget"] = OutboundBudget(global_burst=15, global_per_minute=0.001,
                                                             client_burst=10, client_per_minute=0.001)
    first = [read(app, f"did:plc:a{i}", client="198.51.100.1").status_code for i in range(11)]
    second = [read(app, f"did:plc:b{i}", client="198.51.100.2").status_code for i in range(6)]
    assert (first, second) == ([200] * 11, [200] * 6)
    join_backfills(app)
    claimed = [r[0] for r in rows(app, "SELECT actor FROM feed_backfills ORDER BY actor")]
    # The second client ran into the global cap after five.
    assert claimed == sorted([f"did:plc:a{i}" for i in range(10)] + [f"did:plc:b{i}" for i in range(5)])
    assert len(http.calls) == 15


def test_paging_a_timeline_whose_backfill_failed_does_not_claim_it_again_on_every_page(app):
    """The PLC directory is down (every lookup fails): the first read claims and fails; the pages
    after it, within the retry backoff, neither claim nor pay."""
    http, _ = wire(app)
    app.extensions["feeds_outbound_budget"] = budget = OutboundBudget(client_burst=3, client_per_minute=0.001)
    statuses = []
    for _ in range(20):
        statuses.append(read(app, "did:plc:reader").status_code)
        join_backfills(app)
    assert statuses == [200] * 20
    assert rows(app, "SELECT retries FROM feed_backfills") == [(1,)]
    assert http.calls == [f"{PLC}/did:plc:reader"]
    assert [budget.take("198.51.100.7"), budget.take("198.51.100.7"), budget.take("198.51.100.7")] == [
        True, True, False]  # one token of three was spent, by the one claim


def test_a_failed_backfill_is_claimed_again_after_its_backoff(app):
    from feather.feeds.tasks import backfill

    http, _ = wire(app)
    read(app, "did:plc:reader")
    join_backfills(app)
    assert len(http.calls) == 1
    from feather.db import current_dialect, db

    # The backoff is read from the row's stamp (the failure's time): age it instead of waiting.
    with app.app_context(), db.connection_context():
        db.execute_sql(current_dialect().q("UPDATE feed_backfills SET started_at = started_at - ?"),
                       (backfill.RETRY_BASE_MS - 1000,))
    read(app, "did:plc:reader")
    join_backfills(app)
    assert len(http.calls) == 1  # 59 s after the failure: still resting
    with app.app_context(), db.connection_context():
        db.execute_sql("UPDATE feed_backfills SET started_at = started_at - 1000")
    read(app, "did:plc:reader")
    join_backfills(app)
    assert (len(http.calls), rows(app, "SELECT retries FROM feed_backfills")) == (2, [(2,)])


def test_backfill_backoff_doubles_per_failure_up_to_the_stale_limit():
    from feather.feeds.tasks.backfill import wait_ms

    assert [wait_ms(n) for n in range(6)] == [300_000, 60_000, 120_000, 240_000, 300_000, 300_000]


def test_a_spray_of_handles_resolves_at_most_the_client_budget(app):
    http, dns = wire(app)
    answers = [read(app, f"spray{i}.attacker.net") for i in range(30)]
    # Unresolvable (400) while the budget lasts; then refused, since the read needs the lookup.
    assert [a.status_code for a in answers] == [400] * 10 + [429] * 20
    assert answers[-1].json == {"error": "RateLimitExceeded", "message": OVER_BUDGET}
    assert answers[-1].headers["Retry-After"] == "6"  # ten tokens a minute: one every six seconds
    assert dns.calls == [f"_atproto.spray{i}.attacker.net" for i in range(10)]
    assert http.calls == [f"https://spray{i}.attacker.net/.well-known/atproto-did" for i in range(10)]


def test_service_auth_issuers_are_looked_up_within_the_budget(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, toml(), FEED_SERVICE_AUTH=True, FEATHERREADER_FEED_SERVICE_DID=SERVICE)
    http, _ = wire(app)
    now = int(time.time())
    statuses = []
    for i in range(15):
        issuer = f"did:web:issuer{i}.attacker.example"
        token = mint(P256, iss=issuer, aud=SERVICE, lxm=LXM, iat=now, exp=now + 60)
        statuses.append(read(app, issuer, token=token).status_code)
    assert statuses == [401] * 10 + [429] * 5  # the key cannot be fetched (401) while the budget lasts
    assert read(app, "did:web:issuer0.attacker.example", token=token).headers["Retry-After"] == "6"
    assert http.calls == [f"https://issuer{i}.attacker.example/.well-known/did.json" for i in range(10)]


def test_buckets_refill_with_time():
    now = [0.0]
    budget = OutboundBudget(global_burst=100, global_per_minute=6000, client_burst=2, client_per_minute=60,
                            clock=lambda: now[0])
    assert [budget.take("a") for _ in range(3)] == [True, True, False]
    now[0] += 1.0  # one token a second for a client
    assert [budget.take("a"), budget.take("a"), budget.take("b")] == [True, False, True]


def test_an_empty_client_bucket_spends_nothing_from_the_global_one():
    budget = OutboundBudget(global_burst=3, global_per_minute=0.001, client_burst=1, client_per_minute=0.001,
                            clock=lambda: 0.0)
    assert [budget.take("a"), budget.take("a"), budget.take("a"), budget.take("b"), budget.take("c"),
            budget.take("d")] == [True, False, False, True, True, False]


def test_a_spray_of_list_records_authors_fetches_at_most_the_client_budget(app):
    """listRecords?actor= fetches the author's records from their PDS (Contrail's author backfill):
    the same anonymous budget bounds it."""
    http, _ = wire(app)
    client = app.test_client()
    statuses = [client.get(f"/xrpc/com.example.post.listRecords?actor=did:plc:list{i}",
                           environ_base={"REMOTE_ADDR": "198.51.100.9"}).status_code for i in range(30)]
    assert statuses == [200] * 30  # over budget: answered from the store, nothing fetched
    assert sorted(http.calls) == sorted(f"{PLC}/did:plc:list{i}" for i in range(10))


def test_a_spray_of_signed_skeleton_readers_starts_at_most_the_client_budget_of_backfills(make_app, tmp_path):
    """getFeedSkeleton's first-read backfill pays like getFeed's. The issuers' keys are known
    locally here (no key fetch to pay for), so the backfill is the only outbound work a new
    viewer starts."""
    from tests.fixtures.feeds.feedkit import FakeSources
    from tests.test_feed_generator import FEED_URI, PUBLIC, SKELETON, remember_published

    viewers = [f"did:plc:viewer{i:02d}" for i in range(15)]
    app = feeds_app(make_app, tmp_path, toml(), sources=FakeSources(keys={v: P256.public_key() for v in viewers}),
                    FEATHERREADER_PUBLIC_URL=PUBLIC)
    remember_published(app)
    try:
        statuses = [app.test_client().get(f"/xrpc/{SKELETON}", query_string={"feed": FEED_URI}, headers={
            "Authorization": f"Bearer {mint(P256, iss=v, aud='did:web:localhost%3A5123', lxm=SKELETON)}"},
            environ_base={"REMOTE_ADDR": "198.51.100.8"}).status_code for v in viewers]
    finally:
        join_backfills(app)
    assert statuses == [200] * 15  # the last five are answered unclaimed
    assert rows(app, "SELECT actor FROM feed_backfills ORDER BY actor") == [(v,) for v in viewers[:10]]


def test_an_idle_client_saves_up_no_more_than_its_burst():
    now = [0.0]
    budget = OutboundBudget(global_burst=100, global_per_minute=6000, client_burst=2, client_per_minute=60,
                            clock=lambda: now[0])
    assert budget.take("a") is True
    now[0] += 3600.0  # an hour idle would be 3,600 tokens at this rate
    assert [budget.take("a") for _ in range(3)] == [True, True, False]


def test_past_max_clients_the_least_recently_used_bucket_is_the_one_forgotten():
    budget = OutboundBudget(global_burst=100, global_per_minute=0.001, client_burst=1, client_per_minute=0.001,
                            clock=lambda: 0.0, max_clients=2)
    assert [budget.take("a"), budget.take("b"), budget.take("c")] == [True, True, True]
    # "a" was used longest ago: forgotten, it starts over with a full bucket. "c", just used, is kept (empty).
    assert [budget.take("c"), budget.take("a")] == [False, True]


def test_get_record_pays_for_resolving_a_handle(app):
    http, dns = wire(app)
    client = app.test_client()
    answers = [client.get(f"/xrpc/com.example.post.getRecord?uri=at://spray{i}.attacker.net/app.bsky.feed.post/3k",
                          environ_base={"REMOTE_ADDR": "198.51.100.9"}) for i in range(30)]
    assert [a.status_code for a in answers] == [400] * 10 + [429] * 20
    assert "Retry-After" in answers[-1].headers
    assert dns.calls == [f"_atproto.spray{i}.attacker.net" for i in range(10)]
    assert len(http.calls) == 10


def test_get_record_of_a_did_uri_needs_no_lookup_and_is_never_refused(app):
    wire(app)
    app.extensions["feeds_outbound_budget"] = OutboundBudget(client_burst=1, client_per_minute=0.001)
    statuses = [app.test_client().get(f"/xrpc/com.example.post.getRecord?uri=at://did:plc:x{i}/app.bsky.feed.post/3k")
                .status_code for i in range(5)]
    assert statuses == [404] * 5


def test_addresses_in_one_ipv6_64_share_a_budget_and_another_64_has_its_own(app):
    http, _ = wire(app)
    app.extensions["feeds_outbound_budget"] = OutboundBudget(client_burst=3, client_per_minute=0.001)
    for i in range(6):  # six addresses of one /64, one new actor each
        read(app, f"did:plc:six{i}", client=f"2001:db8:1:2::{i + 1:x}")
    read(app, "did:plc:other", client="2001:db8:1:3::1")
    join_backfills(app)
    claimed = [r[0] for r in rows(app, "SELECT actor FROM feed_backfills ORDER BY actor")]
    assert claimed == ["did:plc:other", "did:plc:six0", "did:plc:six1", "did:plc:six2"]
