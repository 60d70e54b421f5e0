"""Pure parts of the ingest engine: decoding, hosts, registration limits, backoff, dev injection."""
import json

import pytest

from feather.jetstream import consumer, hosts, store
from feather.jetstream.store import Cursor
from feather.jetstream.events import AccountEvent, CommitEvent, DecodeError, IdentityEvent, decode
from feather.jetstream.subscriptions import (Handler, Subscription, SubscriptionError, merge, validate,
                                             validate_dids)


def test_every_real_fixture_frame_decodes_to_its_kind(fixture_frames):
    kinds = [type(decode(line)).__name__ for line in fixture_frames]
    assert kinds == ["CommitEvent"] * 10 + ["IdentityEvent"] * 3 + ["AccountEvent"] * 5


def test_commit_create_fields(fixture_frames):
    event = decode(fixture_frames[2])
    raw = json.loads(fixture_frames[2])
    assert isinstance(event, CommitEvent)
    assert event.operation == "create"
    assert event.collection == "app.bsky.graph.follow"
    assert event.did == raw["did"] and event.time_us == raw["time_us"]
    assert event.cid == raw["commit"]["cid"]
    assert event.record["subject"] == raw["commit"]["record"]["subject"]
    assert event.uri == f"at://{raw['did']}/app.bsky.graph.follow/{raw['commit']['rkey']}"


def test_commit_delete_has_no_record_or_cid(fixture_frames):
    event = decode(fixture_frames[7])
    assert event.operation == "delete" and event.record is None and event.cid is None


def test_identity_without_handle_and_account_status(fixture_frames):
    identity = decode(fixture_frames[11])
    assert isinstance(identity, IdentityEvent) and identity.handle is None
    account = decode(fixture_frames[15])
    assert isinstance(account, AccountEvent)
    assert account.active is False and account.status == "deleted"


def test_unknown_kind_is_ignored_not_an_error():
    assert decode('{"did":"did:plc:a","time_us":1,"kind":"sync","sync":{}}') is None


def test_unknown_fields_are_ignored():
    event = decode('{"did":"did:plc:a","time_us":1,"kind":"commit","future":true,"commit":{"operation":"delete",'
                   '"collection":"app.bsky.feed.post","rkey":"x","extra":1}}')
    assert event.rkey == "x"


def test_v2_cursor_field_becomes_seq():
    event = decode('{"did":"did:plc:a","time_us":1,"cursor":42,"kind":"identity","identity":{}}')
    assert event.seq == 42


@pytest.mark.parametrize("frame, reason", [
    ("not json", "not JSON"),
    ("[1]", "not a JSON object"),
    ('{"time_us":1,"kind":"identity"}', "missing or invalid did"),
    ('{"did":"did:plc:a","time_us":"1","kind":"identity"}', "missing or invalid time_us"),
    ('{"did":"did:plc:a","time_us":1,"kind":"commit","commit":{"operation":"create",'
     '"collection":"a.b.c","rkey":"k"}}', "without a record object"),
    ('{"did":"did:plc:a","time_us":1,"kind":"commit","commit":{"operation":"zap","collection":"a.b.c","rkey":"k"}}',
     "unknown commit operation"),
    ('{"did":"did:plc:a","time_us":1,"kind":"account","account":{"active":"yes"}}', "not a boolean"),
    (b'{"did":"did:plc:a","time_us":1,"kind":"identity","identity":{"handle":"\xff"}}', "not JSON"),
])
def test_malformed_frames_raise_decode_error(frame, reason):
    with pytest.raises(DecodeError) as err:
        decode(frame)
    assert reason in str(err.value)


def test_oversize_frame_is_refused_before_parsing():
    with pytest.raises(DecodeError) as err:
        decode("x" * (3 * 1024 * 1024))
    assert "exceeds" in str(err.value)


def test_bare_host_means_wss_subscribe_and_full_urls_pass_through():
    assert hosts.subscribe_url("jetstream.example.com") == "wss://jetstream.example.com/subscribe"
    assert hosts.subscribe_url("ws://127.0.0.1:6008/subscribe") == "ws://127.0.0.1:6008/subscribe"
    with pytest.raises(hosts.HostRefused):
        hosts.subscribe_url("https://jetstream.example.com")


def test_query_carries_collections_dids_and_cursor():
    url = hosts.with_params("wss://h/subscribe", ["a.b.c", "d.e.*"], ["did:plc:x"], 123)
    assert url == "wss://h/subscribe?wantedCollections=a.b.c&wantedCollections=d.e.%2A&wantedDids=did%3Aplc%3Ax&cursor=123"


@pytest.mark.parametrize("url", ["ws://127.0.0.1:6008/subscribe", "wss://10.0.0.1/subscribe",
                                 "wss://[::1]/subscribe"])
def test_private_jetstream_host_is_refused_unless_allowed(url):
    with pytest.raises(hosts.HostRefused):
        hosts.vet(url, allow_private=False)
    hosts.vet(url, allow_private=True)


def test_cloud_metadata_host_is_refused_even_in_development():
    with pytest.raises(hosts.HostRefused):
        hosts.vet("wss://169.254.169.254/subscribe", allow_private=True)


def test_engine_refuses_a_private_host_at_start(make_app):
    from feather.jetstream.engine import Engine

    app = make_app(FEATHERREADER_ALLOW_PRIVATE_NETWORK=False, FEATHERREADER_JETSTREAM_HOSTS="ws://127.0.0.1:1/x")
    engine = Engine(app, [Subscription("t", ["app.bsky.feed.post"], [Handler("t", lambda evs: None)])])
    with pytest.raises(hosts.HostRefused):
        engine.start()
    assert engine.streams == {}


def _handler():
    return Handler("t", lambda events: None)


def test_more_than_100_collections_is_refused_at_registration():
    sub = Subscription("big", [f"app.example.c{i}" for i in range(101)], [_handler()])
    with pytest.raises(SubscriptionError) as err:
        validate(sub)
    assert "101 collections exceed Jetstream's limit of 100" in str(err.value)


def test_more_than_10000_dids_is_refused():
    with pytest.raises(SubscriptionError) as err:
        validate_dids("sync:0", [f"did:plc:{i}" for i in range(10_001)])
    assert "10001 DIDs exceed Jetstream's limit of 10000" in str(err.value)
    assert len(validate_dids("sync:0", ["did:plc:a", "did:plc:a"])) == 1


def test_invalid_nsid_is_refused_at_registration():
    with pytest.raises(SubscriptionError):
        validate(Subscription("s", ["not an nsid"], [_handler()]))


def test_same_named_subscriptions_merge_collections_and_handlers():
    a = Subscription("global", ["app.bsky.feed.post"], [_handler()])
    b = Subscription("global", ["app.bsky.feed.post", "app.bsky.graph.follow"], [_handler()])
    (merged,) = merge([a, b])
    assert merged.collections == ["app.bsky.feed.post", "app.bsky.graph.follow"]
    assert len(merged.handlers) == 2


def test_handler_filters_by_collection_prefix():
    h = Handler("t", lambda e: None, frozenset({"app.bsky.graph.*"}))
    follow = CommitEvent("did:plc:a", 1, "create", "app.bsky.graph.follow", "k", {}, "c")
    post = CommitEvent("did:plc:a", 1, "create", "app.bsky.feed.post", "k", {}, "c")
    assert h.wants(follow) and not h.wants(post)
    assert not h.wants(IdentityEvent("did:plc:a", 1))


def test_backoff_doubles_from_one_to_sixty_seconds_with_quarter_jitter():
    assert [consumer.backoff_delay(a, rand=lambda: 0.5) for a in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert consumer.backoff_delay(0, rand=lambda: 0.0) == 0.75
    assert consumer.backoff_delay(10, rand=lambda: 1.0) == 75.0


def test_dev_injection_is_forbidden_outside_development(make_app):
    client = make_app().test_client()  # FEATHERREADER_ENV=test
    response = client.post("/admin/dev/jetstream-event", json={"did": "did:plc:a", "op": "create",
                                                                 "collection": "app.bsky.feed.post"})
    assert response.status_code == 403
    assert response.get_json()["error"] == "Forbidden"


def test_dev_injection_is_forbidden_from_a_non_loopback_address(make_app):
    client = make_app(FEATHERREADER_ENV="development").test_client()
    response = client.post("/admin/dev/jetstream-event", json={"did": "did:plc:a", "op": "create",
                                                                 "collection": "app.bsky.feed.post"},
                           environ_base={"REMOTE_ADDR": "203.0.113.9"})
    assert response.status_code == 403


def test_dev_injection_runs_through_the_feature_handlers(make_app):
    from feather.db import db
    from tests.support import mirror_feature

    mirror_feature._ready = False
    app = make_app(FEATHERREADER_ENV="development", FEATHERREADER_EXTRA_FEATURES="tests.support.mirror_feature")
    client = app.test_client()
    response = client.post("/admin/dev/jetstream-event",
                           json={"did": "did:plc:alice", "op": "create", "collection": "app.bsky.feed.post",
                                 "rkey": "3kabc"}, environ_base={"REMOTE_ADDR": "127.0.0.1"})
    assert response.status_code == 200
    assert "global" in response.get_json()["subscriptions"]
    with db.connection_context():
        assert list(mirror_feature.mirror_rows()) == ["at://did:plc:alice/app.bsky.feed.post/3kabc"]
        assert db.execute_sql("SELECT count(*) FROM jetstream_cursor").fetchone()[0] == 0


def test_dev_injection_rejects_a_bad_body_with_400(make_app):
    client = make_app(FEATHERREADER_ENV="development").test_client()
    response = client.post("/admin/dev/jetstream-event", json={"did": "did:plc:a", "op": "explode"},
                           environ_base={"REMOTE_ADDR": "127.0.0.1"})
    assert response.status_code == 400
    assert "did and op" in response.get_json()["message"]


def test_dev_event_cli_runs_through_the_feature_handlers(make_app):
    from feather.db import db
    from tests.support import mirror_feature

    mirror_feature._ready = False
    app = make_app(FEATHERREADER_ENV="development", FEATHERREADER_EXTRA_FEATURES="tests.support.mirror_feature")
    result = app.test_cli_runner().invoke(args=["dev-event", "--did", "did:plc:bob", "--collection",
                                                "app.bsky.graph.follow", "--op", "create", "--rkey", "f1",
                                                "--subject", "did:plc:alice"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["frame"]["commit"]["record"]["subject"] == "did:plc:alice"
    with db.connection_context():
        assert list(mirror_feature.mirror_rows()) == ["at://did:plc:bob/app.bsky.graph.follow/f1"]


# The resume point after a (re)connect, from what was applied and what was first received.
NOW = 1_800_000_000_000_000
HOUR = 3_600_000_000


@pytest.mark.parametrize("applied, first_seen, lookback, want", [
    (None, None, None, (None, None)),  # nothing ever seen: live tail
    (Cursor(0), None, None, (None, None)),
    (Cursor(NOW - HOUR), None, None, (NOW - HOUR - 5_000_000, None)),  # legacy: rewind the overlap
    (Cursor(NOW - HOUR, seq=77), None, None, (77, None)),  # v2: the sequence, exact
    (None, Cursor(NOW - 1_000), None, (NOW - 5_001_000, None)),  # received, none applied yet
    (None, Cursor(3_000_000), None, (0, None)),  # never below zero
    (Cursor(0), Cursor(NOW, seq=9), None, (9, None)),
    # Older than the host keeps: resume at its window and report the saved time as a gap.
    (Cursor(NOW - 2 * HOUR), None, HOUR, (NOW - HOUR, NOW - 2 * HOUR)),
    (Cursor(NOW - HOUR - 1), None, HOUR, (NOW - HOUR, NOW - HOUR - 1)),
    (Cursor(NOW - HOUR), None, HOUR, (NOW - HOUR - 5_000_000, None)),  # at the window's edge: no gap
])
def test_resume_point_rewinds_the_overlap_and_reports_a_cursor_older_than_the_lookback(applied, first_seen, lookback, want):
    assert store.resume_point(applied, first_seen, lookback, NOW) == want
