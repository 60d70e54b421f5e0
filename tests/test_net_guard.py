"""The guarded HTTP client against hostile URLs, hostile DNS and hostile servers.

Only loopback exists here, so tests that need a "public" server exempt exactly 127.0.0.1 from the
production rules (AddressPolicy(exempt=...)); everything else they meet is judged by those rules.
"""
from __future__ import annotations

import gzip
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import urllib3.util.connection

from feather.outbound import (
    DEVELOPMENT_POLICY,
    STRICT_POLICY,
    USER_AGENT,
    AddressPolicy,
    BlockedDestination,
    BodyTooLarge,
    FetchFailed,
    FetchTimeout,
    GuardedClient,
    TooManyRedirects,
    assert_public_target,
)
from tests.support.waiting import wait_until

MiB = 1024 * 1024
LOOPBACK_ONLY = AddressPolicy(exempt=["127.0.0.1"])


# --- helpers ------------------------------------------------------------------------------------


class FakeDNS:
    """Answers per host, one list per lookup; the last answer repeats. Records every call."""

    def __init__(self, **answers: list[list[str]]):
        self.answers = {host.replace("_", "."): list(seq) for host, seq in answers.items()}
        self.calls: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        seq = self.answers.get(host)
        if not seq:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return seq.pop(0) if len(seq) > 1 else seq[0]


def no_dns(host, port):
    raise AssertionError(f"the resolver must not be consulted for {host!r}")


@pytest.fixture
def connects(monkeypatch):
    """Every (address, port) a TCP connection was opened to."""
    seen: list[tuple[str, int]] = []
    real = urllib3.util.connection.create_connection

    def recording(address, *args, **kwargs):
        seen.append(address)
        return real(address, *args, **kwargs)

    monkeypatch.setattr(urllib3.util.connection, "create_connection", recording)
    return seen


def assert_blocked(client: GuardedClient, url: str, connects: list) -> BlockedDestination:
    with pytest.raises(BlockedDestination) as exc:
        client.get(url)
    assert type(exc.value) is BlockedDestination
    assert connects == [], "a refused destination must never be connected to"
    return exc.value


class Server:
    """A threaded HTTP(S) server on 127.0.0.1 whose routes are plain functions of the handler."""

    def __init__(self, tls: ssl.SSLContext | None = None):
        self.routes: dict = {}
        self.requests: list[dict] = []
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _dispatch(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.requests.append({
                    "method": self.command, "path": self.path, "headers": self.headers, "body": body,
                    "local": self.connection.getsockname()[:2],
                })
                route = outer.routes.get(self.path.split("?", 1)[0])
                if route is None:
                    self.send_error(404)
                else:
                    route(self)

            do_GET = do_POST = do_HEAD = _dispatch

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}{path}"

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def reply(status: int = 200, body: bytes = b"", headers: dict | None = None):
    def route(h):
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    return route


def redirect(location: str, status: int = 302):
    return reply(status, headers={"Location": location})


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def dev_client(**kwargs) -> GuardedClient:
    """http allowed and the production address rules, except the test server's own address."""
    kwargs.setdefault("address_policy", LOOPBACK_ONLY)
    return GuardedClient(allow_private_network=True, **kwargs)


# --- the production policy blocks, with no server involved --------------------------------------


def test_default_client_uses_the_production_policy_and_https_only():
    client = GuardedClient()
    assert client.policy is STRICT_POLICY
    assert client.schemes == {"https"}


def test_refuses_loopback(connects):
    assert "loopback" in str(assert_blocked(GuardedClient(resolver=no_dns), "https://127.0.0.1/", connects))


def test_refuses_loopback_anywhere_in_127_8(connects):
    assert_blocked(GuardedClient(resolver=no_dns), "https://127.8.9.10:8443/x", connects)


def test_refuses_cloud_metadata_address(connects):
    err = assert_blocked(GuardedClient(resolver=no_dns), "https://169.254.169.254/latest/meta-data/", connects)
    assert "link-local" in str(err)


def test_refuses_rfc1918_10_slash_8(connects):
    assert_blocked(GuardedClient(resolver=no_dns), "https://10.1.2.3/", connects)


def test_refuses_rfc1918_172_16_slash_12(connects):
    client = GuardedClient(resolver=no_dns)
    assert_blocked(client, "https://172.16.0.1/", connects)
    assert_blocked(client, "https://172.31.255.254/", connects)


def test_refuses_rfc1918_192_168_slash_16(connects):
    assert_blocked(GuardedClient(resolver=no_dns), "https://192.168.1.1/", connects)


def test_refuses_cgnat_100_64_slash_10(connects):
    err = assert_blocked(GuardedClient(resolver=no_dns), "https://100.100.100.100/", connects)
    assert "carrier-grade NAT" in str(err)


def test_refuses_ula_fd00_slash_8(connects):
    err = assert_blocked(GuardedClient(resolver=no_dns), "https://[fd00::1]/", connects)
    assert "unique local" in str(err)


def test_refuses_ipv6_loopback(connects):
    assert_blocked(GuardedClient(resolver=no_dns), "https://[::1]/", connects)


def test_refuses_ipv4_mapped_ipv6_loopback(connects):
    err = assert_blocked(GuardedClient(resolver=no_dns), "https://[::ffff:127.0.0.1]/", connects)
    assert "loopback" in str(err)
    assert_blocked(GuardedClient(resolver=no_dns), "https://[::ffff:7f00:1]/", connects)


def test_refuses_decimal_ipv4_spelling_without_asking_dns(connects):
    err = assert_blocked(GuardedClient(resolver=no_dns), "https://2130706433/", connects)
    assert "127.0.0.1" in str(err)


def test_refuses_octal_ipv4_spelling_without_asking_dns(connects):
    err = assert_blocked(GuardedClient(resolver=no_dns), "https://0177.0.0.1/", connects)
    assert "127.0.0.1" in str(err)


@pytest.mark.parametrize("host", ["0x7f.1", "127.1", "0x7f000001", "127.000.000.001", "0177.0.0.1."])
def test_refuses_other_numeric_ipv4_spellings(host, connects):
    assert_blocked(GuardedClient(resolver=no_dns), f"https://{host}/", connects)


@pytest.mark.parametrize("url", [
    "https://0.0.0.0/", "https://[::]/", "https://224.0.0.251/", "https://240.0.0.1/",
    "https://255.255.255.255/", "https://[fe80::1]/", "https://[ff02::1]/", "https://192.0.2.10/",
    "https://[64:ff9b::7f00:1]/", "https://[::127.0.0.1]/", "https://[2002:7f00:1::]/",
    "https://[fec0::1]/", "https://198.18.0.1/",
])
def test_refuses_unspecified_multicast_reserved_and_tunnelled_forms(url, connects):
    assert_blocked(GuardedClient(resolver=no_dns), url, connects)


def test_refuses_http_unless_private_network_is_allowed(connects):
    dns = FakeDNS(example_com=[["93.184.216.34"]])
    err = assert_blocked(GuardedClient(resolver=dns), "http://example.com/", connects)
    assert "scheme" in str(err)
    assert dns.calls == []


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/", "gopher://example.com/"])
def test_refuses_non_http_schemes(url, connects):
    assert_blocked(GuardedClient(allow_private_network=True, resolver=no_dns), url, connects)


def test_refuses_urls_with_credentials(connects):
    assert_blocked(GuardedClient(resolver=no_dns), "https://user:pw@example.com/", connects)


def test_refuses_a_public_name_that_resolves_to_a_private_address(connects):
    dns = FakeDNS(pds_example_com=[["10.0.0.7"]])
    err = assert_blocked(GuardedClient(resolver=dns), "https://pds.example.com/xrpc/x", connects)
    assert "pds.example.com resolves to 10.0.0.7" in str(err)
    assert dns.calls == [("pds.example.com", 443)]


def test_refuses_a_name_if_any_of_its_addresses_is_private(connects):
    dns = FakeDNS(pds_example_com=[["93.184.216.34", "2606:4700::1", "fd12::9"]])
    assert_blocked(GuardedClient(resolver=dns), "https://pds.example.com/", connects)


def test_refuses_localhost_through_the_real_system_resolver(connects):
    assert_blocked(GuardedClient(), "https://localhost/", connects)


def test_dns_failure_is_fetch_failed():
    with pytest.raises(FetchFailed):
        GuardedClient(resolver=FakeDNS()).get("https://nowhere.example.com/")


def test_production_policy_admits_public_addresses():
    for ip in ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]:
        assert STRICT_POLICY.blocked_reason(ip) is None, ip


def test_development_policy_opens_private_ranges_but_not_metadata_or_multicast():
    for ip in ["127.0.0.1", "10.0.0.1", "192.168.1.1", "100.64.0.1", "fd00::1", "::1"]:
        assert DEVELOPMENT_POLICY.blocked_reason(ip) is None, ip
    for ip in ["169.254.169.254", "224.0.0.1", "0.0.0.0", "fe80::1"]:
        assert DEVELOPMENT_POLICY.blocked_reason(ip) is not None, ip


def test_exemption_covers_exactly_the_named_address():
    assert LOOPBACK_ONLY.blocked_reason("127.0.0.1") is None
    assert LOOPBACK_ONLY.blocked_reason("127.0.0.2") == "a loopback address"
    assert LOOPBACK_ONLY.blocked_reason("10.0.0.1") is not None


def test_assert_public_target_vets_websocket_hosts():
    dns = FakeDNS(jetstream_example_net=[["93.184.216.34"]], internal_example_net=[["10.0.0.3"]])
    dest = assert_public_target("wss://jetstream.example.net/subscribe", resolver=dns)
    assert [str(a) for a in dest.addresses] == ["93.184.216.34"] and dest.port == 443
    with pytest.raises(BlockedDestination):
        assert_public_target("wss://internal.example.net/subscribe", resolver=dns)
    with pytest.raises(BlockedDestination):
        assert_public_target("ws://jetstream.example.net/subscribe", resolver=dns)


# --- against a real server on loopback -----------------------------------------------------------


def test_sends_the_project_user_agent_and_returns_a_full_response(server):
    server.routes["/echo"] = reply(201, b'{"ok": true}', {"Content-Type": "application/json"})
    resp = dev_client().post(server.url("/echo"), params={"q": "a b"}, json={"n": 1})
    assert resp.status_code == 201 and resp.ok
    assert resp.json() == {"ok": True}
    assert resp.headers["content-type"] == "application/json"
    assert resp.url == server.url("/echo?q=a+b") and resp.history == ()
    seen = server.requests[0]
    assert seen["headers"]["User-Agent"] == USER_AGENT
    assert seen["body"] == b'{"n": 1}'
    assert USER_AGENT.startswith("Feather/")


def test_connects_to_the_vetted_address_and_never_looks_the_name_up_again(server, connects):
    # Rebinding: the first answer is the (exempted) server, every later one a private address.
    dns = FakeDNS(rebind_feather_test=[["127.0.0.1"], ["10.9.8.7"]])
    server.routes["/hello"] = reply(200, b"hi")
    resp = dev_client(resolver=dns).get(server.url("/hello", host="rebind.feather.test"))
    assert resp.content == b"hi"
    assert dns.calls == [("rebind.feather.test", server.port)]
    assert connects == [("127.0.0.1", server.port)]  # the TCP connect went to the IP, not the name
    assert server.requests[0]["headers"]["Host"] == f"rebind.feather.test:{server.port}"


def test_resolves_once_per_hop_and_revets_every_hop(server, connects):
    dns = FakeDNS(a_feather_test=[["127.0.0.1"]])
    server.routes["/1"] = redirect("/2")
    server.routes["/2"] = redirect(server.url("/3", host="a.feather.test"))
    server.routes["/3"] = reply(200, b"done")
    resp = dev_client(resolver=dns).get(server.url("/1", host="a.feather.test"))
    assert resp.content == b"done" and resp.url.endswith("/3") and len(resp.history) == 2
    assert dns.calls == [("a.feather.test", server.port)] * 3
    assert len(connects) == 3


def test_dns_rebinding_between_hops_is_refused_at_the_hop(server, connects):
    dns = FakeDNS(a_feather_test=[["127.0.0.1"], ["192.168.7.7"]])
    server.routes["/start"] = redirect("/next")
    with pytest.raises(BlockedDestination) as exc:
        dev_client(resolver=dns).get(server.url("/start", host="a.feather.test"))
    assert type(exc.value) is BlockedDestination
    assert len(server.requests) == 1 and len(connects) == 1


@pytest.mark.parametrize("target", [
    "http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/", "http://[::ffff:10.0.0.1]/",
    "http://internal.feather.test/secret", "http://2130706433/", "file:///etc/passwd",
])
def test_redirect_to_a_private_address_is_refused_at_the_hop(server, connects, target):
    dns = FakeDNS(internal_feather_test=[["192.168.1.10"]])
    server.routes["/go"] = redirect(target)
    with pytest.raises(BlockedDestination) as exc:
        dev_client(resolver=dns).get(server.url("/go"))
    assert type(exc.value) is BlockedDestination
    assert len(server.requests) == 1 and connects == [("127.0.0.1", server.port)]


def test_more_than_five_redirects_is_too_many(server):
    for i in range(10):
        server.routes[f"/r{i}"] = redirect(f"/r{i + 1}")
    with pytest.raises(TooManyRedirects) as exc:
        dev_client().get(server.url("/r0"))
    assert type(exc.value) is TooManyRedirects
    assert [r["path"] for r in server.requests] == [f"/r{i}" for i in range(6)]


def test_exactly_five_redirects_are_followed(server):
    for i in range(5):
        server.routes[f"/r{i}"] = redirect(f"/r{i + 1}", status=(301, 302, 303, 307, 308)[i])
    server.routes["/r5"] = reply(200, b"end")
    resp = dev_client().get(server.url("/r0"))
    assert resp.content == b"end" and len(resp.history) == 5


def test_redirect_303_turns_post_into_get_and_307_keeps_the_body(server):
    server.routes["/see-other"] = redirect("/landing", 303)
    server.routes["/temporary"] = redirect("/landing", 307)
    server.routes["/landing"] = reply(200, b"ok")
    client = dev_client()
    client.post(server.url("/see-other"), data={"a": "1"})
    client.post(server.url("/temporary"), data={"a": "1"})
    landed = [(r["method"], r["body"]) for r in server.requests if r["path"] == "/landing"]
    assert landed == [("GET", b""), ("POST", b"a=1")]


def test_credentials_do_not_follow_a_redirect_to_another_host(server):
    dns = FakeDNS(a_feather_test=[["127.0.0.1"]], b_feather_test=[["127.0.0.1"]])
    server.routes["/a"] = redirect(server.url("/b", host="b.feather.test"))
    server.routes["/b"] = reply(200)
    dev_client(resolver=dns).get(
        server.url("/a", host="a.feather.test"), headers={"Authorization": "DPoP t", "DPoP": "proof"}
    )
    first, second = server.requests
    assert first["headers"]["Authorization"] == "DPoP t"
    assert second["headers"]["Authorization"] is None and second["headers"]["DPoP"] is None
    assert second["headers"]["Host"] == f"b.feather.test:{server.port}"


def test_cookies_and_proxy_credentials_stay_on_their_origin_across_redirects(server):
    dns = FakeDNS(a_feather_test=[["127.0.0.1"]], b_feather_test=[["127.0.0.1"]])
    server.routes["/a"] = redirect(server.url("/a2", host="a.feather.test"))
    server.routes["/a2"] = redirect(server.url("/b", host="b.feather.test"))
    server.routes["/b"] = reply(200)
    dev_client(resolver=dns).get(
        server.url("/a", host="a.feather.test"), headers={"Cookie": "session=s", "Proxy-Authorization": "Basic x"}
    )
    assert [(r["path"], r["headers"]["Cookie"], r["headers"]["Proxy-Authorization"]) for r in server.requests] == [
        ("/a", "session=s", "Basic x"), ("/a2", "session=s", "Basic x"), ("/b", None, None)]


def test_body_cap_stops_reading_a_long_stream_early(server):
    sent = []
    done = threading.Event()

    def stream_10_mib_slowly(h):
        h.send_response(200)
        h.end_headers()  # no Content-Length: the size is only known by reading
        total = 0
        try:
            while total < 10 * MiB and not server.stop.is_set():
                h.wfile.write(b"x" * 16384)
                h.wfile.flush()
                total += 16384
                time.sleep(0.005)
        except OSError:
            pass
        sent.append(total)
        done.set()

    server.routes["/stream"] = stream_10_mib_slowly
    with pytest.raises(BodyTooLarge) as exc:
        dev_client().get(server.url("/stream"), max_body_bytes=1024)
    assert type(exc.value) is BodyTooLarge and exc.value.limit == 1024
    assert done.wait(5)
    assert sent[0] < 2 * MiB  # the server found the connection gone long before 10 MiB


def test_body_cap_rejects_an_oversized_content_length_before_reading(server):
    def huge(h):
        h.send_response(200)
        h.send_header("Content-Length", str(10 * MiB))
        h.end_headers()
        h.wfile.write(b"x" * 100)
        server.stop.wait(30)  # a client that waited for the body would time out instead (FetchTimeout)

    server.routes["/huge"] = huge
    with pytest.raises(BodyTooLarge):
        dev_client(read_timeout=5).get(server.url("/huge"), max_body_bytes=MiB)


def test_body_cap_counts_decompressed_bytes(server):
    bomb = gzip.compress(b"\0" * (10 * MiB))
    assert len(bomb) < 64 * 1024
    server.routes["/bomb"] = reply(200, bomb, {"Content-Encoding": "gzip"})
    with pytest.raises(BodyTooLarge):
        dev_client().get(server.url("/bomb"), max_body_bytes=MiB)


def test_a_body_under_the_cap_is_returned_whole_and_decoded(server):
    server.routes["/gz"] = reply(200, gzip.compress(b"a" * 5000), {"Content-Encoding": "gzip"})
    assert dev_client().get(server.url("/gz"), max_body_bytes=5000).content == b"a" * 5000


def test_read_timeout(server):
    def silent(h):
        server.stop.wait(30)  # then it hangs up: without the read timeout that is a FetchFailed

    server.routes["/silent"] = silent
    with pytest.raises(FetchTimeout) as exc:
        dev_client(read_timeout=0.3).get(server.url("/silent"))
    assert type(exc.value) is FetchTimeout


def test_total_timeout_stops_a_slow_drip(server):
    dripped = []

    def drip(h):
        # A byte every 50 ms, each well inside the read timeout, for 10 s and then a complete body:
        # only the total timeout can stop it, and the server sees the client hang up long before.
        h.send_response(200)
        h.send_header("Content-Length", "200")
        h.end_headers()
        sent = 0
        try:
            while sent < 200 and not server.stop.wait(0.05):
                h.wfile.write(b".")
                h.wfile.flush()
                sent += 1
        except OSError:
            pass
        dripped.append(sent)

    server.routes["/drip"] = drip
    with pytest.raises(FetchTimeout):
        dev_client(read_timeout=1, total_timeout=0.5).get(server.url("/drip"))
    wait_until(lambda: dripped, timeout=30, message="the drip to end")
    assert dripped[0] < 200


def test_refused_connection_is_fetch_failed():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the fetch: nothing listens there
    with pytest.raises(FetchFailed):
        dev_client().get(f"http://127.0.0.1:{port}/")


# --- https: SNI and certificate checked against the name, socket pinned to the IP ----------------


@pytest.fixture(scope="module")
def tls_cert(tmp_path_factory):
    """A throwaway self-signed P-256 certificate for feather.test and *.feather.test."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "feather.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("feather.test"), x509.DNSName("*.feather.test")]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    d = tmp_path_factory.mktemp("tls")
    (d / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return d / "cert.pem", d / "key.pem"


@pytest.fixture
def tls_server(tls_cert):
    cert, key = tls_cert
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    sni: list[str] = []
    ctx.sni_callback = lambda sock, name, c: sni.append(name)
    s = Server(tls=ctx)
    s.sni = sni
    yield s
    s.close()


def https_client(tls_cert, dns) -> GuardedClient:
    # Production scheme rule (https only) and production address rules bar the one exemption.
    return GuardedClient(resolver=dns, address_policy=LOOPBACK_ONLY, ca_bundle=str(tls_cert[0]))


def test_https_pins_the_ip_and_verifies_the_certificate_against_the_name(tls_server, tls_cert, connects):
    dns = FakeDNS(pds_feather_test=[["127.0.0.1"], ["10.0.0.1"]])
    tls_server.routes["/xrpc/_health"] = reply(200, b'{"version":"1"}')
    resp = https_client(tls_cert, dns).get(tls_server.url("/xrpc/_health", "pds.feather.test", "https"))
    assert resp.json() == {"version": "1"}
    assert tls_server.sni == ["pds.feather.test"]
    assert connects == [("127.0.0.1", tls_server.port)]
    assert tls_server.requests[0]["headers"]["Host"] == f"pds.feather.test:{tls_server.port}"
    assert dns.calls == [("pds.feather.test", tls_server.port)]


def test_https_refuses_a_certificate_for_another_name(tls_server, tls_cert):
    dns = FakeDNS(pds_example_org=[["127.0.0.1"]])
    tls_server.routes["/"] = reply(200)
    with pytest.raises(FetchFailed):
        https_client(tls_cert, dns).get(tls_server.url("/", "pds.example.org", "https"))
    assert tls_server.requests == []


def test_https_redirect_down_to_http_is_refused(tls_server, tls_cert):
    dns = FakeDNS(pds_feather_test=[["127.0.0.1"]])
    tls_server.routes["/old"] = redirect(tls_server.url("/new", "pds.feather.test", "http"))
    with pytest.raises(BlockedDestination):
        https_client(tls_cert, dns).get(tls_server.url("/old", "pds.feather.test", "https"))
