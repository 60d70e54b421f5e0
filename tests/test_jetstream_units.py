"""Pure parts of the ingest engine: decoding, hosts, registration limits, backoff, dev injection."""
import json
from types import SimpleNamespace

import pytest

from feather.jetstream import hosts, store
from feather.jetstream.tuning import Tuning
from feather.process.supervisor import backoff_delay
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
    assert hosts.subscribe_url("ws://127.0.0.1:6008/other") == "ws://127.0.0.1:6008/other"


@pytest.mark.parametrize("url, expected", [
    ("ws://127.0.0.1:6008", "ws://127.0.0.1:6008/subscribe"),
    ("wss://jetstream.example.com/", "wss://jetstream.example.com/subscribe"),
    ("wss://jetstream.example.com?requireHello=true", "wss://jetstream.example.com/subscribe?requireHello=true"),
])
def test_a_url_with_no_path_means_jetstreams_subscribe_endpoint(url, expected):
    assert hosts.subscribe_url(url) == expected
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
    assert Tuning().backoff is backoff_delay  # what every stream reconnects by unless told otherwise
    assert [backoff_delay(a, rand=lambda: 0.5) for a in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff_delay(0, rand=lambda: 0.0) == 0.75
    assert backoff_delay(10, rand=lambda: 1.0) == 75.0


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


def test_dev_injection_rejects_a_bad_body_with_400(make_app):
    from tests.test_dev_event import OPERATOR, dev_app, post, sign_in

    client, token = sign_in(dev_app(make_app), OPERATOR)
    response = post(client, token, {"did": "did:plc:a", "op": "explode"})
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
    # A v2 cursor is judged by its time exactly the same way; the window's start is sent as a time.
    (Cursor(NOW - 2 * HOUR, seq=77), None, HOUR, (NOW - HOUR, NOW - 2 * HOUR)),
    (Cursor(NOW - HOUR - 1, seq=77), None, HOUR, (NOW - HOUR, NOW - HOUR - 1)),
    (Cursor(NOW - HOUR, seq=77), None, HOUR, (77, None)),  # at the window's edge: its sequence
])
def test_resume_point_rewinds_the_overlap_and_reports_a_cursor_older_than_the_lookback(applied, first_seen, lookback, want):
    assert store.resume_point(applied, first_seen, lookback, NOW) == want


# --- boundaries and guards a planted bug slipped past

def test_a_time_us_of_zero_decodes_but_a_boolean_time_us_is_refused():
    assert decode('{"did":"did:plc:a","time_us":0,"kind":"identity","identity":{}}').time_us == 0
    with pytest.raises(DecodeError) as err:
        decode('{"did":"did:plc:a","time_us":true,"kind":"identity","identity":{}}')
    assert "missing or invalid time_us" in str(err.value)


def test_a_v2_cursor_of_zero_is_no_sequence():
    assert decode('{"did":"did:plc:a","time_us":1,"cursor":0,"kind":"identity","identity":{}}').seq is None
    assert decode('{"did":"did:plc:a","time_us":1,"cursor":1,"kind":"identity","identity":{}}').seq == 1


def test_a_frame_of_exactly_the_size_limit_still_decodes():
    from feather.jetstream.events import MAX_FRAME_BYTES

    head, tail = '{"did":"did:plc:a","time_us":1,"kind":"identity","identity":{},"pad":"', '"}'
    frame = head + "x" * (MAX_FRAME_BYTES - len(head) - len(tail)) + tail
    assert len(frame) == MAX_FRAME_BYTES
    assert decode(frame).did == "did:plc:a"
    with pytest.raises(DecodeError) as err:
        decode(frame[:-2] + "x" + tail)
    assert f"exceeds {MAX_FRAME_BYTES}" in str(err.value)


def test_params_are_appended_with_an_ampersand_to_a_host_url_that_has_a_query():
    url = hosts.with_params("wss://h/subscribe?requireHello=true", ["a.b.c"], None, 7)
    assert url == "wss://h/subscribe?requireHello=true&wantedCollections=a.b.c&cursor=7"


def test_a_cursor_of_zero_is_sent_not_dropped_for_live_tail():
    assert hosts.with_params("wss://h/subscribe", [], None, 0) == "wss://h/subscribe?cursor=0"
    assert hosts.with_params("wss://h/subscribe", [], None, None) == "wss://h/subscribe"


def test_a_subscription_name_of_64_characters_is_accepted_and_65_refused():
    validate(Subscription("s" * 64, ["app.bsky.feed.post"], [_handler()]))
    with pytest.raises(SubscriptionError) as err:
        validate(Subscription("s" * 65, ["app.bsky.feed.post"], [_handler()]))
    assert "must be 1-64 characters" in str(err.value)


def test_exactly_10000_dids_are_accepted():
    assert len(validate_dids("sync:0", [f"did:plc:{i}" for i in range(10_000)])) == 10_000


def test_a_collection_prefix_matches_only_whole_name_segments():
    h = Handler("t", lambda e: None, frozenset({"app.bsky.graph.*"}))
    assert h.wants(CommitEvent("did:plc:a", 1, "create", "app.bsky.graph.block", "k", {}, "c"))
    assert not h.wants(CommitEvent("did:plc:a", 1, "create", "app.bsky.graphy.thing", "k", {}, "c"))


def test_same_named_subscriptions_with_a_did_filter_cannot_be_merged():
    a = Subscription("sync:0", ["app.bsky.graph.follow"], [_handler()], dids=lambda: ["did:plc:a"])
    b = Subscription("sync:0", ["app.bsky.graph.follow"], [_handler()], dids=lambda: ["did:plc:b"])
    with pytest.raises(SubscriptionError) as err:
        merge([a, b])
    assert "only DID-unfiltered subscriptions can be shared" in str(err.value)


def test_a_cursor_saved_without_a_sequence_keeps_the_saved_sequence(app):
    from feather.db import db

    with app.app_context(), db.connection_context():
        store.save_cursor("global", Cursor(1_000, 77))
        store.save_cursor("global", Cursor(2_000, None))
        assert store.load_cursor("global") == Cursor(2_000, 77)
        store.save_cursor("global", Cursor(1_500, 70))  # an older save arriving late moves nothing back
        assert store.load_cursor("global") == Cursor(2_000, 77)


def test_a_batch_whose_second_handler_fails_commits_neither_the_first_handlers_writes_nor_the_cursor(app):
    from feather.db import db

    def writes(events):
        store.save_cursor("written-by-handler", Cursor(events[-1].time_us))

    def fails(events):
        raise RuntimeError("handler failed")

    sub = Subscription("global", ["app.bsky.feed.post"], [Handler("a", writes), Handler("b", fails)])
    event = CommitEvent("did:plc:a", 5_000, "create", "app.bsky.feed.post", "k", {}, "c")
    with app.app_context(), db.connection_context():
        with pytest.raises(RuntimeError):
            store.apply_batch(sub, [event], Cursor(5_000))
        assert store.load_cursor("written-by-handler") is None
        assert store.load_cursor("global") is None
        store.apply_batch(Subscription("global", ["app.bsky.feed.post"], [Handler("a", writes)]), [event],
                          Cursor(5_000))
        assert (store.load_cursor("written-by-handler"), store.load_cursor("global")) == (Cursor(5_000), Cursor(5_000))


def _stream(app, handlers=None, tuning=None):
    from feather.jetstream.consumer import Stream

    sub = Subscription("global", ["app.bsky.feed.post"], handlers or [_handler()])
    return Stream(sub, ["ws://127.0.0.1:9/subscribe"], app=app, allow_private=True, tuning=tuning)


def _post(time_us, seq=None, rkey="k"):
    return CommitEvent("did:plc:a", time_us, "create", "app.bsky.feed.post", rkey, {}, "c", None, seq)


def _drain_into_cursor(stream, events):
    """Queue events, then run the writer until it has applied them and stopped."""
    for event in events:
        stream.state.queue.put((stream.state.generation, event))
    stream.state.stopping.set()
    stream.writer.run()


def test_a_batch_takes_at_most_500_events_and_leaves_the_rest_queued(app):
    stream = _stream(app)
    for i in range(501):
        stream.state.queue.put((0, _post(i + 1, rkey=f"k{i}")))
    batch = stream.writer.next_batch()
    assert len(batch) == 500 and batch[-1].time_us == 500
    assert stream.state.queue.qsize() == 1


def test_a_batch_takes_at_most_the_tunings_batch_events(app):
    stream = _stream(app, tuning=Tuning(batch_events=3))
    for i in range(5):
        stream.state.queue.put((0, _post(i + 1, rkey=f"k{i}")))
    assert [e.time_us for e in stream.writer.next_batch()] == [1, 2, 3]
    assert stream.state.queue.qsize() == 2


def test_the_writer_cursor_is_the_newest_event_of_the_batch_not_the_last_received(app):
    from feather.db import db

    stream = _stream(app)
    _drain_into_cursor(stream, [_post(300, rkey="a"), _post(100, rkey="b"), _post(200, rkey="c")])
    assert stream.cursor == Cursor(300, None)
    with app.app_context(), db.connection_context():
        assert store.load_cursor("global") == Cursor(300, None)


def test_a_batch_without_sequences_keeps_the_sequence_the_stream_resumes_from(app):
    stream = _stream(app)
    _drain_into_cursor(stream, [_post(100, seq=5)])
    stream.state.stopping.clear()
    _drain_into_cursor(stream, [_post(200)])
    assert stream.cursor == Cursor(200, 5)
    assert stream._connect_cursor() == 5  # resumes by sequence, as the saved cursor says


def test_a_failure_streak_ends_only_once_the_failed_sequence_itself_is_applied():
    from feather.jetstream.writer import _covers

    assert _covers(Cursor(10, 7), Cursor(10, 7))
    assert not _covers(Cursor(10, 6), Cursor(10, 7))
    assert _covers(Cursor(10), Cursor(10)) and not _covers(Cursor(9), Cursor(10))


def test_an_event_at_the_high_water_mark_counts_as_already_queued(app):
    stream = _stream(app)
    stream.state.high_water = (0, 100, 7)
    assert stream._already_queued(_post(100, seq=7))
    assert not stream._already_queued(_post(100, seq=8))
    stream.state.high_water = (0, 100, None)
    assert stream._already_queued(_post(100))
    assert not stream._already_queued(_post(101))


def test_events_applied_in_one_second_leave_the_rate_exactly_60_seconds_later(monkeypatch):
    from feather.jetstream import observe

    obs = observe.StreamObserver()
    monkeypatch.setattr(observe, "time", SimpleNamespace(time=lambda: 1_000.5))
    obs.applied(120, 1_000_000_000)
    assert obs.events_per_sec(now=1_059.9) == 2.0
    assert obs.events_per_sec(now=1_060.0) == 0.0


def test_the_rate_in_a_streams_first_minute_is_over_the_seconds_since_its_first_batch(monkeypatch):
    from feather.jetstream import observe

    obs = observe.StreamObserver()
    clock = SimpleNamespace(time=lambda: 1_000.5)
    monkeypatch.setattr(observe, "time", clock)
    obs.applied(4_000, 1_000_000_000)
    clock.time = lambda: 1_001.2
    obs.applied(5_000, 1_000_000_000)
    assert obs.events_per_sec(now=1_001.9) == 4_500.0  # seconds 1000 and 1001
    assert obs.events_per_sec(now=1_009.0) == 900.0  # ten seconds since the first batch
    assert obs.events_per_sec(now=1_059.0) == 150.0  # then the whole minute


def test_a_stream_whose_high_water_is_its_applied_sequence_has_no_backlog(app):
    stream = _stream(app)
    stream.cursor = Cursor(100, 7)
    stream.state.high_water = (0, 100, 7)
    assert stream.state.backlog() is False
    stream.state.high_water = (0, 100, 8)
    assert stream.state.backlog() is True
    stream.state.high_water = (0, 100, None)
    assert stream.state.backlog() is False
    stream.state.high_water = (0, 101, None)
    assert stream.state.backlog() is True


def test_a_batch_stamped_in_the_future_shows_no_negative_lag():
    import time

    from feather.jetstream import observe

    obs = observe.StreamObserver()
    obs.applied(1, int((time.time() + 3_600) * 1_000_000))
    assert obs.applied_lag_secs == 0.0
    assert obs.lag_secs(None, backlog=False) == 0.0
