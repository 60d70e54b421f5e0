"""Behaviour of the fake legacy Jetstream (tests/support/fake_jetstream.py) against the fact sheet
(Jetstream's documented wire format: event shapes, query parameters, options_update), driven by websocket-client like Feather's consumer."""
from __future__ import annotations

import json
import socket
import struct
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import websocket

from tests.support.fake_jetstream import FakeJetstream, make_account, make_commit, make_identity
from tests.support.jetstream_wire import encode_frame

FIXTURES = Path(__file__).parent / "fixtures" / "jetstream-events.jsonl"
A, B = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
POST, LIKE, FOLLOW, BLOCK = "app.bsky.feed.post", "app.bsky.feed.like", "app.bsky.graph.follow", "app.bsky.graph.block"
QUIET = 0.3  # seconds of silence that count as "nothing more was sent"
# The stream ends without a close frame: EOF, or RST when our own late writes hit the closed socket.
ABRUPT = (websocket.WebSocketConnectionClosedException, ConnectionResetError)


@pytest.fixture
def js():
    with FakeJetstream() as server:
        yield server


@pytest.fixture(scope="module")
def shared():
    """One server for tests that neither depend on nor assert global state."""
    with FakeJetstream() as server:
        yield server


def connect(url, **kw):
    return websocket.create_connection(url, timeout=5, skip_utf8_validation=True, **kw)


def recv_n(ws, n):
    return [json.loads(ws.recv()) for _ in range(n)]


def assert_silent(ws):
    ws.settimeout(QUIET)
    with pytest.raises(websocket.WebSocketTimeoutException):
        ws.recv()
    ws.settimeout(5)


def keys(frames):
    return [(f["did"], f["kind"], f.get("commit", {}).get("collection"), f.get("commit", {}).get("rkey"))
            for f in frames]


def wait_for(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.02)


def options_update(ws, js, n_expected, **payload):
    ws.send(json.dumps({"type": "options_update", "payload": payload}))
    wait_for(lambda: js.stats()["options_updates_total"] == n_expected)


def handshake_error(url):
    with pytest.raises(websocket.WebSocketBadStatusException) as ei:
        connect(url)
    return ei.value.status_code, ei.value.resp_body.decode()


def now_us():
    return time.time_ns() // 1000


def test_root_says_welcome_and_cli_exits_cleanly_on_stdin_close():
    server = FakeJetstream()
    with server:
        assert server.url == f"ws://127.0.0.1:{server.port}/subscribe"
        assert server.control == f"http://127.0.0.1:{server.port}/control"
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=5) as r:
            assert (r.status, r.read()) == (200, b"Welcome to Jetstream")
    assert server.proc.returncode == 0


def test_preloaded_fixture_log_replays_byte_exact_in_time_order():
    lines = FIXTURES.read_text().splitlines()
    with FakeJetstream(log=FIXTURES, ttl_secs=0) as server:
        ws = connect(server.subscribe_url(cursor=0))
        got = [ws.recv() for _ in lines]
        assert_silent(ws)
    assert got == sorted(lines, key=lambda ln: json.loads(ln)["time_us"])


def test_make_helpers_produce_the_fixture_wire_shape():
    lines = FIXTURES.read_text().splitlines()
    like, img = json.loads(lines[0])["commit"], json.loads(lines[3])["commit"]
    made = {
        0: make_commit("did:plc:eygmaihciaxprqvxpfvl6flk", "app.bsky.feed.like", like["rkey"], "create",
                       record={"subject": like["record"]["subject"], "createdAt": like["record"]["createdAt"],
                               "$type": "app.bsky.feed.like"},
                       cid=like["cid"], time_us=1725911162329308, rev=like["rev"]),
        3: make_commit("did:plc:mzcxuv5dabzbgtnoqvkiqmvn", POST, img["rkey"], "create",
                       record=json.loads(json.dumps(img["record"], sort_keys=True)),  # any key order in
                       cid=img["cid"], time_us=1732685674377456, rev=img["rev"]),
        7: make_commit("did:plc:rfov6bpyztcnedeyyzgfq42k", FOLLOW, "3l3dn7tku762u", "delete",
                       time_us=1725516666833633, rev="3l3f6nzl3cv2s"),
        10: make_identity("did:plc:ufbl4k27gp6kzas5glhz7fim", handle="yohenrique.bsky.social", seq=1409752997,
                          time="2024-09-05T06:11:04.870Z", time_us=1725516665234703),
        11: make_identity("did:plc:g4ut2w5755qxi3fe7mfs72p4", seq=30340180350, time="2026-05-25T14:23:29.950Z",
                          time_us=1779719010267528),
        15: make_account("did:plc:zsgqovouzm2gyksjkqrdodsw", active=False, status="deleted", seq=3040934738,
                         time="2025-01-09T19:42:18.972Z", time_us=1736451739215876),
    }
    for i, frame in made.items():
        assert encode_frame(frame, frame["time_us"]).decode() == lines[i]
    created = make_commit(A, POST, "3kabc", "create")
    assert list(created) == ["did", "kind", "commit"]
    assert list(created["commit"]) == ["rev", "operation", "collection", "rkey", "record", "cid"]
    assert created["commit"]["cid"].startswith("bafyrei") and len(created["commit"]["cid"]) == 59
    assert len(created["commit"]["rev"]) == 13


def test_append_assigns_strictly_increasing_time_us(js):
    ws = connect(js.url)
    last = js.append([make_commit(A, POST, f"r{i}", "create") for i in range(50)])
    times = [f["time_us"] for f in recv_n(ws, 50)]
    assert times == sorted(set(times)) and times[-1] == last
    assert list(json.loads(encode_frame(make_identity(A), 5))) == ["did", "time_us", "kind", "identity"]
    assert js.stats()["events"] == 50 and js.stats()["sent_total"] == 50


def test_collection_filter_exact_and_prefix_and_identity_account_pass(js):
    ws = connect(js.subscribe_url(wantedCollections=[POST, "app.bsky.graph.*"]))
    js.append([make_commit(A, POST, "p1", "create"), make_commit(A, LIKE, "l1", "create"),
               make_commit(A, FOLLOW, "f1", "create"), make_commit(A, BLOCK, "b1", "delete"),
               make_identity(A), make_account(A), make_commit(A, "com.example.graph.thing", "x1", "create"),
               make_commit(A, POST, "p2", "delete")])
    got = recv_n(ws, 6)
    assert keys(got) == [(A, "commit", POST, "p1"), (A, "commit", FOLLOW, "f1"), (A, "commit", BLOCK, "b1"),
                         (A, "identity", None, None), (A, "account", None, None), (A, "commit", POST, "p2")]
    assert_silent(ws)


def test_unvalidated_prefix_like_app_bsky_star_works(js):
    ws = connect(js.subscribe_url(wantedCollections="app.bsky.*"))
    js.append([make_commit(A, "chat.bsky.actor.declaration", "self", "create"), make_commit(A, LIKE, "l1", "create")])
    assert keys(recv_n(ws, 1)) == [(A, "commit", LIKE, "l1")]
    assert_silent(ws)


def test_did_filter_applies_to_all_kinds(js):
    ws = connect(js.subscribe_url(wantedDids=[A]))
    js.append([make_commit(B, POST, "b1", "create"), make_commit(A, POST, "a1", "create"), make_identity(B),
               make_identity(A), make_account(B), make_account(A)])
    assert keys(recv_n(ws, 3)) == [(A, "commit", POST, "a1"), (A, "identity", None, None), (A, "account", None, None)]
    assert_silent(ws)


def test_cursor_replay_is_inclusive_then_live_tail_without_gap_or_duplicate(js):
    t0 = now_us() - 10_000_000
    js.append([make_commit(A, POST, f"old{i}", "create", time_us=t0 + i * 1000) for i in range(5)])
    ws = connect(js.subscribe_url(cursor=t0 + 2000))
    assert [f["commit"]["rkey"] for f in recv_n(ws, 3)] == ["old2", "old3", "old4"]
    js.append([make_commit(A, POST, f"new{i}", "create") for i in range(3)])
    assert [f["commit"]["rkey"] for f in recv_n(ws, 3)] == ["new0", "new1", "new2"]
    assert_silent(ws)


def test_events_appended_during_a_blocked_replay_arrive_once_in_order():
    with FakeJetstream(sndbuf=4096) as server:
        pad = "x" * 400
        server.append([make_commit(A, POST, f"r{i:04d}", "create", record={"$type": POST, "text": pad})
                       for i in range(1500)])
        ws = connect(server.subscribe_url(cursor=0), sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096),))
        first = recv_n(ws, 10)
        assert server.stats()["last_filter"]["1"]["mode"] == "replay"  # replay is blocked on a full socket
        server.append([make_commit(A, POST, f"r{i:04d}", "create") for i in range(1500, 1700)])
        rest = recv_n(ws, 1690)
        assert_silent(ws)
        assert server.stats()["last_filter"]["1"]["mode"] == "live"
        server.append([make_commit(A, POST, "r1700", "create")])
        rest += recv_n(ws, 1)
    got = first + rest
    assert [f["commit"]["rkey"] for f in got] == [f"r{i:04d}" for i in range(1701)]
    assert all(a["time_us"] < b["time_us"] for a, b in zip(got, got[1:]))


def test_future_cursor_means_live_tail(js):
    js.append([make_commit(A, POST, "old", "create", time_us=now_us() - 1_000_000)])
    ws = connect(js.subscribe_url(cursor=now_us() + 3_600_000_000))
    assert js.stats()["last_filter"]["1"]["cursor"] is None
    js.append([make_commit(A, POST, "live", "create")])
    assert keys(recv_n(ws, 1)) == [(A, "commit", POST, "live")]
    assert_silent(ws)


@pytest.mark.parametrize("query, body", [
    ("wantedCollections=app.bsky.graph.fo*", "invalid subscriber options: invalid collection: app.bsky.graph.fo*"),
    ("wantedCollections=app.bsky.feed.post,app.bsky.feed.like",
     "invalid subscriber options: invalid collection: app.bsky.feed.post,app.bsky.feed.like"),
    ("&".join(f"wantedCollections=app.bsky.c{i}.x" for i in range(101)),
     "invalid subscriber options: too many wanted collections"),
    ("wantedDids=alice.bsky.social", "invalid subscriber options"),
    ("&".join(f"wantedDids=did:plc:{i:024d}" for i in range(10_001)), "invalid subscriber options: too many wanted DIDs"),
    ("cursor=abc", "invalid cursor: abc"),
    ("cursor=1.5&wantedCollections=bad", "invalid cursor: 1.5"),
])
def test_bad_subscribe_params_get_http_400_with_exact_text(shared, query, body):
    assert handshake_error(f"{shared.url}?{query}") == (400, body)


def test_limits_are_inclusive_and_duplicate_dids_are_counted_once(shared):
    before = shared.stats()["connects_total"]
    cols = "&".join(f"wantedCollections=app.bsky.c{i}.x" for i in range(99)) + "&wantedCollections=app.*"
    connect(f"{shared.url}?{cols}").close()
    dids = "&".join(f"wantedDids=did:plc:{i:024d}" for i in range(10_000)) + "&wantedDids=did:plc:" + "0" * 24
    connect(f"{shared.url}?{dids}").close()
    assert shared.stats()["connects_total"] == before + 2


def test_options_update_replaces_the_whole_filter_in_place(js):
    ws = connect(js.subscribe_url(wantedCollections=POST, wantedDids=A))
    batch = [make_commit(A, POST, "p", "create"), make_commit(A, LIKE, "l", "create"),
             make_commit(B, LIKE, "bl", "create"), make_identity(B)]
    js.append(batch)
    assert keys(recv_n(ws, 1)) == [(A, "commit", POST, "p")]
    options_update(ws, js, 1, wantedCollections=[LIKE])  # wantedDids omitted -> DID filter off
    assert js.stats()["last_filter"]["1"]["wantedDids"] == []
    js.append(batch)
    assert keys(recv_n(ws, 3)) == [(A, "commit", LIKE, "l"), (B, "commit", LIKE, "bl"), (B, "identity", None, None)]
    options_update(ws, js, 2, wantedCollections=[], wantedDids=[B])
    js.append(batch)
    assert keys(recv_n(ws, 2)) == [(B, "commit", LIKE, "bl"), (B, "identity", None, None)]
    ws.send(json.dumps({"type": "something_else", "payload": {"wantedDids": [A]}}))  # unknown type: ignored
    ws.send_binary(b"\x00binary frames are ignored")
    options_update(ws, js, 3)
    js.append(batch)
    assert len(recv_n(ws, 4)) == 4
    assert_silent(ws)


@pytest.mark.parametrize("message, reason", [
    ({"type": "options_update", "payload": {"wantedCollections": ["not a nsid"]}},
     "failed to parse subscriber options: invalid subscriber options: invalid collection: not a nsid"),
    ({"type": "options_update", "payload": {"wantedDids": [f"did:plc:{i:024d}" for i in range(10_001)]}},
     "failed to parse subscriber options: invalid subscriber options: too many wanted DIDs"),
    ({"type": "options_update", "payload": {"wantedDids": ["nope"]}},
     "failed to parse subscriber options: invalid subscriber options"),
])
def test_invalid_options_update_closes_with_1000_and_reason(shared, message, reason):
    ws = connect(shared.url)
    ws.send(json.dumps(message))
    opcode, frame = ws.recv_data_frame(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE
    assert struct.unpack("!H", frame.data[:2])[0] == 1000
    assert frame.data[2:].decode() == reason
    with pytest.raises(ABRUPT):  # then the server closes the socket
        ws.recv_data_frame(control_frame=True)


def test_unparseable_client_message_closes_with_1000(shared):
    ws = connect(shared.url)
    ws.send("{not json")
    opcode, frame = ws.recv_data_frame(control_frame=True)
    assert (opcode, struct.unpack("!H", frame.data[:2])[0]) == (websocket.ABNF.OPCODE_CLOSE, 1000)
    assert frame.data[2:].decode().startswith("failed to unmarshal subscriber sourced message: ")


def test_require_hello_holds_replay_and_live_until_first_valid_update(js):
    t0 = now_us() - 5_000_000
    js.append([make_commit(A, POST, "a-old", "create", time_us=t0), make_commit(B, POST, "b-old", "create",
                                                                                time_us=t0 + 1)])
    ws = connect(js.subscribe_url(cursor=0, requireHello="true"))
    js.append([make_commit(A, POST, "a-early", "create")])
    assert_silent(ws)
    ws.send(json.dumps({"type": "hello?", "payload": {}}))
    assert_silent(ws)
    assert js.stats()["last_filter"]["1"]["mode"] == "hello"
    options_update(ws, js, 1, wantedDids=[A])
    assert [f["commit"]["rkey"] for f in recv_n(ws, 2)] == ["a-old", "a-early"]
    js.append([make_commit(B, POST, "b-live", "create"), make_commit(A, POST, "a-live", "create")])
    assert [f["commit"]["rkey"] for f in recv_n(ws, 1)] == ["a-live"]
    not_hello = connect(js.subscribe_url(requireHello="True"))  # only the exact string "true" counts
    js.append([make_commit(A, POST, "x", "create")])
    assert keys(recv_n(not_hello, 1)) == [(A, "commit", POST, "x")]


def test_forced_drop_ends_connections_without_close_frame(js):
    ws1, ws2 = connect(js.url), connect(js.url)
    assert js.drop(conn_id=1) == 1
    with pytest.raises(ABRUPT):
        ws1.recv()
    js.append([make_commit(A, POST, "still-here", "create")])
    assert keys(recv_n(ws2, 1)) == [(A, "commit", POST, "still-here")]
    assert js.drop() == 1
    with pytest.raises(ABRUPT):
        ws2.recv_data_frame(control_frame=True)  # no close frame: the stream just ends
    stats = js.stats()
    assert (stats["connections"], stats["connects_total"], stats["forced_drops_total"]) == (0, 2, 2)


def test_outbox_overflow_drops_only_the_slow_consumer():
    with FakeJetstream(outbox=60, sndbuf=4096) as server:
        slow = connect(server.url, sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096),))  # never reads
        fast = connect(server.url)
        record = {"$type": POST, "text": "y" * 1000}
        got = []
        for batch in range(15):  # bursts of 40 (< outbox): the reading consumer always catches up
            server.append([make_commit(A, POST, f"r{batch * 40 + i}", "create", record=record) for i in range(40)])
            got += recv_n(fast, 40)
        stats = server.stats()
        assert (stats["slow_drops_total"], stats["connections"]) == (1, 1)
        assert [f["commit"]["rkey"] for f in got] == [f"r{i}" for i in range(600)]
        n = 0
        with pytest.raises(ABRUPT):  # buffered frames, then no close frame
            while True:
                slow.recv_data_frame(control_frame=True)
                n += 1
        assert 0 < n < 600  # whatever sat in kernel buffers; the outbox and asyncio buffer are discarded


def test_max_message_size_skips_larger_events_silently(js):
    small = make_commit(A, POST, "s1", "create", record={"$type": POST, "text": "hi"}, rev="3l3qo2vutsw2b")
    size = len(encode_frame(small, now_us()))  # time_us has the same width for any current timestamp
    ws = connect(js.subscribe_url(maxMessageSizeBytes=size))
    big = make_commit(A, POST, "b1", "create", record={"$type": POST, "text": "hi!"}, rev="3l3qo2vutsw2b")
    js.append([small, big, dict(small, commit=dict(small["commit"], rkey="s2"))])
    assert [f["commit"]["rkey"] for f in recv_n(ws, 2)] == ["s1", "s2"]
    options_update(ws, js, 1, maxMessageSizeBytes=0)  # V2 semantics: the update may lift the limit
    js.append([big])
    assert [f["commit"]["rkey"] for f in recv_n(ws, 1)] == ["b1"]
    junk = connect(js.subscribe_url(maxMessageSizeBytes="-5"))  # negative/non-int query value -> no limit
    js.append([big])
    assert keys(recv_n(junk, 1)) == [(A, "commit", POST, "b1")]


def test_v2_cursor_flag_adds_cursor_after_time_us():
    with FakeJetstream(v2_cursor=True) as server:
        ws = connect(server.url)
        server.append([make_commit(A, POST, "p", "create"), make_identity(A)])
        raw = [ws.recv() for _ in range(2)]
    assert [list(json.loads(m)) for m in raw] == [["did", "time_us", "cursor", "kind", "commit"],
                                                  ["did", "time_us", "cursor", "kind", "identity"]]
    assert [json.loads(m)["cursor"] for m in raw] == [1, 2]


def test_ttl_trims_events_older_than_the_window():
    with FakeJetstream(ttl_secs=60) as server:
        server.append([make_commit(A, POST, "stale", "create", time_us=now_us() - 120_000_000),
                       make_commit(A, POST, "fresh", "create", time_us=now_us() - 1_000_000)])
        assert server.stats()["events"] == 1
        ws = connect(server.subscribe_url(cursor=0))  # too-old cursor silently starts at the oldest kept event
        assert [f["commit"]["rkey"] for f in recv_n(ws, 1)] == ["fresh"]
        assert_silent(ws)


def test_pause_holds_appended_events_until_resume(js):
    ws = connect(js.url)
    js.pause()
    last = js.append([make_commit(A, POST, "p1", "create"), make_commit(A, POST, "p2", "create")])
    assert_silent(ws)
    assert (js.stats()["events"], js.stats()["pending"]) == (0, 2)
    js.resume()
    got = recv_n(ws, 2)
    assert [f["commit"]["rkey"] for f in got] == ["p1", "p2"] and got[-1]["time_us"] == last


def test_pings_start_only_after_hello():
    with FakeJetstream(ping_secs=0.2) as server:
        ws = connect(server.url)
        opcode, _ = ws.recv_data_frame(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_PING
        waiting = connect(server.subscribe_url(requireHello="true"))
        waiting.settimeout(0.6)
        with pytest.raises(websocket.WebSocketTimeoutException):
            waiting.recv_data_frame(control_frame=True)
        waiting.settimeout(5)
        waiting.send(json.dumps({"type": "options_update", "payload": {}}))
        opcode, _ = waiting.recv_data_frame(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_PING


def test_control_append_rejects_malformed_frames_atomically(shared):
    before = shared.stats()["events"]
    body = (json.dumps(make_identity(A)) + '\n{"did": "did:plc:x", "kind": "commit"}\n').encode()
    req = urllib.request.Request(f"{shared.control}/append", data=body, method="POST")
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen(req, timeout=5)
    assert (ei.value.code, json.loads(ei.value.read())) == (
        400, {"error": "frame needs kind in ('commit', 'account', 'identity') and a matching object"})
    ei.value.close()
    assert shared.stats()["events"] == before
