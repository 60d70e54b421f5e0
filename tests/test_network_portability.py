"""Portability: records written by one implementation, read back by a stranger and by a
clean instance. CI runs it against the local reference PDS; the live variant reads the real network
and is skipped unless FEATHER_LIVE_NETWORK=1 (nightly, never on a pull request)."""
import html
import os

import pytest

from feather.atproto.identity import IdentityResolver
from feather.atproto.pds import BearerAuth, PdsClient
from feather.atproto.syntax import next_tid
from feather.db import current_dialect, db
from feather.network import rebuild, tasks
from feather.network.httpclient import PacedClient
from feather.network.portability import read_subscriptions_with
from tests.support.fake_relay import FakeNetwork
from tests.support.oauth_fakes import loopback_client
from tests.support.pds import create_session

NSID = "community.lexicon.rss.subscription"
FEEDS = ["https://alice.example/feed.xml", "https://news.example/rss?section=tech&lang=en",
         "https://podcast.example/episodes.rss"]


def clean_instance_page(make_app, resolver, did, handle):
    """A fresh app with nothing cached, a stubbed sign-in session, and the reader's page rendered."""
    app = make_app()
    app.extensions["identity_resolver"] = resolver
    app.extensions["feather.current_user"] = lambda: {"did": did, "handle": handle}
    resp = app.test_client().get("/network/me")
    assert resp.status_code == 200
    return resp.get_data(as_text=True)


@pytest.fixture
def alice_feeds(pds):
    alice = pds.accounts["alice"]
    writer = PdsClient(loopback_client(), pds.pds_url, BearerAuth(create_session(pds, "alice")))
    rkeys = []
    for url in FEEDS:
        rkey = next_tid()
        writer.create_record(alice.did, NSID, {"$type": NSID, "url": url, "createdAt": "2026-02-03T04:05:06.000Z",
                                               "title": "a title", "fetchHint": "daily"}, rkey=rkey)
        rkeys.append(rkey)
    yield alice
    for rkey in rkeys:
        writer.delete_record(alice.did, NSID, rkey)


@pytest.mark.pds
def test_records_read_anonymously_off_the_pds_parse_and_a_clean_instance_shows_every_feed_url(
        pds, alice_feeds, make_app):
    http = loopback_client()
    resolver = IdentityResolver(http, handle_resolver=pds.pds_url, plc_url=pds.plc_url, txt_lookup=lambda n: [])
    assert resolver.pds_endpoint(alice_feeds.did) == pds.pds_url
    subs = read_subscriptions_with(resolver, http, alice_feeds.did)  # strict: every record must parse
    assert sorted(s.url for s in subs) == sorted(FEEDS)
    assert all(s.created_at.year == 2026 and s.public for s in subs)
    page = clean_instance_page(make_app, resolver, alice_feeds.did, alice_feeds.handle)
    for url in FEEDS:
        assert html.escape(url) in page


@pytest.mark.pds
def test_a_rebuild_indexes_the_reference_pds_records_without_authenticating(pds, alice_feeds, make_app):
    app = make_app(FEATHERREADER_NETWORK_INDEX=True)
    relay = FakeNetwork()
    try:
        relay.repos = [alice_feeds.did]
        http = loopback_client()
        resolver = IdentityResolver(http, handle_resolver="", plc_url=pds.plc_url, txt_lookup=lambda n: [])
        kit = rebuild.Kit(http, [relay.url], resolver, PacedClient(http, interval=0.0), relay_sleep=lambda s: None)
        with app.app_context(), db.connection_context():
            tasks.rebuild_tick(app.config["FEATHER"], kit)
            got = db.execute_sql(current_dialect().q("SELECT feed_url FROM net_subscription WHERE did = ?"),
                                 (alice_feeds.did,)).fetchall()
        assert sorted(u for (u,) in got) == sorted(["https://alice.example/feed.xml",
                                                   "https://news.example/rss?lang=en&section=tech",
                                                   "https://podcast.example/episodes.rss"])
    finally:
        relay.close()


@pytest.mark.live
@pytest.mark.skipif(os.environ.get("FEATHER_LIVE_NETWORK") != "1", reason="live network: set FEATHER_LIVE_NETWORK=1")
def test_live_the_portability_did_is_discoverable_readable_and_reconstructed(make_app):
    from feather.config import load_settings
    from feather.atproto.identity import resolver_from_settings
    from feather.network.relay import RelayClient
    from feather.outbound import GuardedClient

    settings = load_settings(overrides={"FEATHERREADER_ENV": "test"})
    did = settings.featherreader_portability_did
    http = GuardedClient()
    resolver = resolver_from_settings(settings, http=http)
    subs = read_subscriptions_with(resolver, http, did)
    assert subs, f"{did} holds no {NSID} records"
    found = False
    for host in settings.featherreader_relay_hosts:
        client = RelayClient(http, host)
        if any(did in page for page in client.iter_pages(NSID)):
            found = True
            break
    assert found, "no relay lists the portability DID"
    page = clean_instance_page(make_app, resolver, did, None)
    for s in subs:
        assert html.escape(s.url) in page


@pytest.mark.parametrize("created", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"])
def test_a_created_at_that_is_well_formed_but_no_real_instant_is_an_invalid_record(created):
    from feather.network.portability import InvalidSubscription, parse_subscription

    with pytest.raises(InvalidSubscription) as refused:
        parse_subscription("at://did:plc:x/community.lexicon.rss.subscription/r1",
                           {"url": "https://example.com/feed", "createdAt": created})
    assert str(refused.value) == f"at://did:plc:x/community.lexicon.rss.subscription/r1: createdAt {created!r} is not a time"
