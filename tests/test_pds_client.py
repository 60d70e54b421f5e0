"""The PDS client against a scripted local server: paging, error mapping, auth retries."""
from __future__ import annotations

import pytest

from feather.atproto.pds import (
    AuthExpired,
    AuthInvalid,
    BadRequest,
    BearerAuth,
    NetworkError,
    PdsClient,
    RateLimited,
    RecordNotFound,
    ScopeMissing,
    ServerError,
    create_op,
    delete_op,
)
from tests.support.oauth_fakes import FakeServer, loopback_client

DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
FOLLOW = "app.bsky.graph.follow"
LIST = "GET /xrpc/com.atproto.repo.listRecords"


@pytest.fixture
def srv():
    s = FakeServer()
    yield s
    s.close()


def client(srv, auth=None) -> PdsClient:
    return PdsClient(loopback_client(), srv.url, auth)


def rec(n: int) -> dict:
    return {"uri": f"at://{DID}/{FOLLOW}/{n}", "cid": f"c{n}", "value": {"n": n}}


def test_iter_records_follows_cursors_until_none(srv):
    srv.route(LIST, (200, {}, {"records": [rec(1), rec(2)], "cursor": "a"}),
              (200, {}, {"records": [rec(3)], "cursor": "b"}), (200, {}, {"records": [rec(4)]}))
    assert [r["value"]["n"] for r in client(srv).iter_records(DID, FOLLOW, limit=2)] == [1, 2, 3, 4]
    assert [r.query.get("cursor") for r in srv.calls(LIST)] == [None, "a", "b"]
    assert srv.calls(LIST)[0].query == {"repo": DID, "collection": FOLLOW, "limit": "2"}


def test_iter_records_stops_on_an_empty_page_even_with_a_cursor(srv):
    srv.route(LIST, (200, {}, {"records": [rec(1)], "cursor": "a"}), (200, {}, {"records": [], "cursor": "b"}))
    assert [r["value"]["n"] for r in client(srv).iter_records(DID, FOLLOW)] == [1]
    assert len(srv.calls(LIST)) == 2


def test_iter_records_stops_when_the_cursor_repeats(srv):
    srv.route(LIST, (200, {}, {"records": [rec(1)], "cursor": "same"}))
    assert len(list(client(srv).iter_records(DID, FOLLOW))) == 2
    assert len(srv.calls(LIST)) == 2


def test_iter_records_past_its_deadline_raises_network_error(srv):
    srv.route(LIST, (200, {}, {"records": [rec(1)], "cursor": "a"}))
    with pytest.raises(NetworkError, match="took too long"):
        list(client(srv).iter_records(DID, FOLLOW, deadline=0.0))


def test_rate_limited_carries_the_ratelimit_reset_epoch(srv):
    srv.route(LIST, (429, {"RateLimit-Reset": "1796003240"}, {"error": "RateLimitExceeded",
                                                              "message": "Rate Limit Exceeded"}))
    with pytest.raises(RateLimited) as err:
        client(srv).list_records(DID, FOLLOW)
    assert (err.value.reset_at, err.value.error, str(err.value)) == (1796003240.0, "RateLimitExceeded",
                                                                    "Rate Limit Exceeded")


def test_rate_limited_falls_back_to_retry_after_seconds(srv, monkeypatch):
    monkeypatch.setattr("feather.atproto.pds.time.time", lambda: 1000.0)
    srv.route(LIST, (429, {"Retry-After": "30"}, {"error": "RateLimitExceeded"}))
    with pytest.raises(RateLimited) as err:
        client(srv).list_records(DID, FOLLOW)
    assert err.value.reset_at == 1030.0


@pytest.mark.parametrize("status, headers, body, kind", [
    (400, {}, {"error": "RecordNotFound", "message": "Could not locate record"}, RecordNotFound),
    (400, {}, {"error": "ExpiredToken", "message": "Token has expired"}, AuthExpired),
    (401, {"WWW-Authenticate": 'DPoP error="invalid_token"'}, {"error": "invalid_token"}, AuthExpired),
    (400, {}, {"error": "InvalidToken", "message": "Malformed token"}, AuthInvalid),
    (401, {}, {"error": "AuthMissing"}, AuthInvalid),
    (403, {}, {"error": "ScopeMissingError", "message": "Missing required scope"}, ScopeMissing),
    (400, {}, {"error": "InvalidRequest", "message": "bad rkey"}, BadRequest),
    (500, {}, {"error": "InternalServerError"}, ServerError),
    (502, {}, b"<html>bad gateway</html>", ServerError),
])
def test_errors_map_to_the_types_callers_act_on(srv, status, headers, body, kind):
    srv.route("GET /xrpc/com.atproto.repo.getRecord", (status, headers, body))
    with pytest.raises(kind) as err:
        client(srv).get_record(DID, FOLLOW, "3kabc")
    assert type(err.value) is kind and err.value.status == status


def test_a_2xx_reply_that_is_not_json_is_a_server_error(srv):
    srv.route(LIST, (200, {}, b"hello"))
    with pytest.raises(ServerError, match="other than JSON"):
        client(srv).list_records(DID, FOLLOW)


def test_unreachable_pds_is_a_network_error():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(NetworkError, match="Could not reach"):
        PdsClient(loopback_client(), f"http://127.0.0.1:{port}").list_records(DID, FOLLOW)


def test_bearer_auth_refreshes_once_on_expired_token_and_retries(srv):
    srv.route("POST /xrpc/com.atproto.repo.createRecord",
              (400, {}, {"error": "ExpiredToken"}), (200, {}, {"uri": "at://x", "cid": "c"}))
    rejected = []
    auth = BearerAuth("old", refresher=lambda tok: rejected.append(tok) or "new")
    assert client(srv, auth).create_record(DID, FOLLOW, {"subject": DID}, rkey="3kabc") == {"uri": "at://x",
                                                                                           "cid": "c"}
    calls = srv.calls("POST /xrpc/com.atproto.repo.createRecord")
    assert [c.headers["Authorization"] for c in calls] == ["Bearer old", "Bearer new"]
    assert rejected == ["old"]
    assert calls[1].json == {"repo": DID, "collection": FOLLOW, "rkey": "3kabc", "record": {"subject": DID}}


def test_bearer_auth_gives_up_after_one_refresh(srv):
    srv.route("POST /xrpc/com.atproto.repo.deleteRecord", (400, {}, {"error": "ExpiredToken"}))
    auth = BearerAuth("old", refresher=lambda tok: "new")
    with pytest.raises(AuthExpired):
        client(srv, auth).delete_record(DID, FOLLOW, "3kabc")
    assert len(srv.calls("POST /xrpc/com.atproto.repo.deleteRecord")) == 2


def test_anonymous_client_sends_no_authorization_header(srv):
    srv.route(LIST, (200, {}, {"records": []}))
    client(srv).list_records(DID, FOLLOW)
    assert "Authorization" not in srv.calls(LIST)[0].headers


def test_apply_writes_sends_typed_operations(srv):
    srv.route("POST /xrpc/com.atproto.repo.applyWrites", (200, {}, {"results": []}))
    client(srv, BearerAuth("t")).apply_writes(DID, [create_op(FOLLOW, {"subject": DID}, rkey="3k1"),
                                                   delete_op(FOLLOW, "3k2")])
    assert srv.calls("POST /xrpc/com.atproto.repo.applyWrites")[0].json == {"repo": DID, "writes": [
        {"$type": "com.atproto.repo.applyWrites#create", "collection": FOLLOW, "rkey": "3k1",
         "value": {"subject": DID}},
        {"$type": "com.atproto.repo.applyWrites#delete", "collection": FOLLOW, "rkey": "3k2"}]}
