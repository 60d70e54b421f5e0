"""Issue 14 on the outbound edge: hostile numbers in replies, redirects that would resend a body,
and did:web spellings that smuggle a path into the fetch."""
from __future__ import annotations

import pytest

from feather.outbound import BlockedDestination, FetchFailed, NetError, parse_host
from tests.test_net_guard import FakeDNS, Server, dev_client, redirect, reply


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.mark.parametrize("declared", ["²", "1²", "³"])  # a header line is latin-1
def test_a_non_ascii_content_length_is_a_net_error_not_a_value_error(server, declared):
    def odd_length(h):
        h.send_response(200)
        h.send_header("Content-Length", declared)
        h.end_headers()
        h.wfile.write(b"abc")

    server.routes["/odd"] = odd_length
    with pytest.raises(NetError) as exc:
        dev_client().get(server.url("/odd"))
    assert type(exc.value) is FetchFailed
    assert "malformed Content-Length" in str(exc.value)


def test_an_ascii_content_length_still_reads_the_body(server):
    server.routes["/ok"] = reply(200, b"hello")
    assert dev_client().get(server.url("/ok")).content == b"hello"


@pytest.mark.parametrize("status", [307, 308])
def test_a_cross_origin_307_or_308_never_resends_the_body(server, status):
    dns = FakeDNS(pds_feather_test=[["127.0.0.1"]], evil_feather_test=[["127.0.0.1"]])
    server.routes["/xrpc/com.atproto.server.createSession"] = redirect(
        server.url("/steal", host="evil.feather.test"), status)
    server.routes["/steal"] = reply(200, b"{}")
    with pytest.raises(BlockedDestination) as exc:
        dev_client(resolver=dns).post(server.url("/xrpc/com.atproto.server.createSession", host="pds.feather.test"),
                                      json={"identifier": "alice", "password": "abcd-efgh-ijkl-mnop"})
    assert "redirected a request body to another origin" in str(exc.value)
    assert [r["path"] for r in server.requests] == ["/xrpc/com.atproto.server.createSession"]


def test_a_same_origin_307_still_keeps_the_body(server):
    server.routes["/a"] = redirect("/b", 307)
    server.routes["/b"] = reply(200, b"ok")
    dev_client().post(server.url("/a"), data={"k": "v"})
    assert [(r["path"], r["body"]) for r in server.requests] == [("/a", b"k=v"), ("/b", b"k=v")]


def test_a_cross_origin_303_turns_into_a_bodiless_get(server):
    dns = FakeDNS(a_feather_test=[["127.0.0.1"]], b_feather_test=[["127.0.0.1"]])
    server.routes["/a"] = redirect(server.url("/b", host="b.feather.test"), 303)
    server.routes["/b"] = reply(200, b"ok")
    dev_client(resolver=dns).post(server.url("/a", host="a.feather.test"), data={"k": "v"})
    assert [(r["method"], r["body"]) for r in server.requests] == [("POST", b"k=v"), ("GET", b"")]


@pytest.mark.parametrize("host", ["².1", "①.0.0.1", "127.٠.0.1", "0xzz.1"])
def test_unicode_digits_in_a_numeric_host_are_refused_cleanly(host):
    with pytest.raises(BlockedDestination):
        parse_host(host)


def test_pds_rate_limit_headers_with_unicode_digits_are_ignored():
    from feather.atproto.pds import _reset_at

    assert _reset_at({"ratelimit-reset": "²"}, 100.0) is None
    assert _reset_at({"retry-after": "①"}, 100.0) is None
    assert _reset_at({"retry-after": "30"}, 100.0) == 130.0
    assert _reset_at({"ratelimit-reset": "1700000000"}, 100.0) == 1700000000.0


def test_a_deeply_nested_reply_is_a_value_error_not_a_recursion_error(server):
    server.routes["/deep"] = reply(200, b"[" * 100_000 + b"]" * 100_000)
    resp = dev_client().get(server.url("/deep"))
    with pytest.raises(ValueError) as exc:
        resp.json()
    assert str(exc.value) == "JSON nested deeper than 64 levels is refused."


@pytest.mark.parametrize("did", [
    "did:web:host.example%2Fattacker%2Fx%23",  # the report: https://host.example/attacker/x#/.well-known/…
    "did:web:host.example%2fattacker",
    "did:web:host.example%23frag",
    "did:web:host.example%3Fq%3D1",
    "did:web:host.example%5Cattacker",
    "did:web:host.example%40evil.example",
    "did:web:host.example%2E%2E",
    "did:web:%6Cocalhost",  # an escaped ordinary letter is still an escape
    "did:web:host.example%3A443",  # a port: only for localhost
    "did:web:host.example:path",  # path-based did:web
    "did:web:localhost:8080:x",
    "did:web:localhost%3A99999",
    "did:web:-bad.example",
    "did:web:",
])
def test_did_web_refuses_every_spelling_that_changes_the_url(did):
    from feather.atproto.identity import IdentityResolver, UnresolvableDid
    from tests.test_identity import FakeHttp

    http = FakeHttp({})
    resolver = IdentityResolver(http, txt_lookup=lambda name: [])
    with pytest.raises(UnresolvableDid) as exc:
        resolver.resolve_did(did)
    assert http.calls == []  # refused before any fetch
    assert "bare host names only" in str(exc.value) or "not a valid DID" in str(exc.value)


@pytest.mark.parametrize("did, url", [
    ("did:web:alice.example.com", "https://alice.example.com/.well-known/did.json"),
    ("did:web:Alice.Example.COM", "https://alice.example.com/.well-known/did.json"),
    ("did:web:localhost%3A2583", "http://localhost:2583/.well-known/did.json"),
    ("did:web:localhost%3a2583", "http://localhost:2583/.well-known/did.json"),
])
def test_did_web_fetches_exactly_the_hosts_document(did, url):
    from feather.atproto.identity import IdentityResolver, UnresolvableDid
    from tests.test_identity import FakeHttp

    http = FakeHttp({})
    http.allow_private_network = True
    with pytest.raises(UnresolvableDid):  # nothing answers; only the URL asked for matters
        IdentityResolver(http, txt_lookup=lambda name: []).resolve_did(did)
    assert http.calls == [url]
