"""wss:// through the guarded socket: TLS to the vetted address, with the host's name as SNI and
in the Host header, and the certificate checked against that name (the socket is opened by
address, so a wrong server_hostname would silently skip or break the check)."""
from __future__ import annotations

import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from feather.outbound.websocket import open_websocket
from tests.test_net_websocket import RawServer, text_frame, upgrade

pytestmark = pytest.mark.once  # the socket layer holds no database


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer_name, issuer_key, *, ca: bool, dns: str | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                              critical=False))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                        critical=True)
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture
def pki(tmp_path):
    """A test CA (its PEM is the client's bundle) and a server certificate from it for a name."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("feather test CA", ca_key, _name("feather test CA"), ca_key, ca=True)
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))

    def server_files(dns: str) -> tuple[str, str]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _cert(dns, key, ca.subject, ca_key, ca=False, dns=dns)
        (tmp_path / f"{dns}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (tmp_path / f"{dns}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                                serialization.PrivateFormat.PKCS8,
                                                                serialization.NoEncryption()))
        return str(tmp_path / f"{dns}.pem"), str(tmp_path / f"{dns}.key")
    return str(tmp_path / "ca.pem"), server_files


class TlsServer(RawServer):
    """RawServer behind TLS; remembers the SNI name each client sent."""

    def __init__(self, answer, certfile: str, keyfile: str):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(certfile, keyfile)
        self.sni: list[str | None] = []
        self.context.sni_callback = lambda sock, name, ctx: self.sni.append(name)
        super().__init__(answer)

    def _one(self, conn):
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            return  # the client refused our certificate: nothing was asked
        super()._one(tls)


@pytest.fixture
def tls_server(pki):
    servers = []

    def start(name: str):
        server = TlsServer(lambda h, c: (upgrade(h, c), c.sendall(text_frame(b"over tls"))), *pki[1](name))
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.close()


def test_wss_connects_to_the_vetted_address_with_the_name_as_sni_and_host(pki, tls_server):
    server = tls_server("jetstream.test")
    lookups = []

    def resolver(host, port):
        lookups.append(host)
        return ["127.0.0.1"]

    ws = open_websocket(f"wss://jetstream.test:{server.port}/subscribe", allow_private_network=True, timeout=5,
                        max_frame_bytes=1000, resolver=resolver, ca_bundle=pki[0])
    try:
        assert ws.recv() == "over tls"
    finally:
        ws.close()
    assert lookups == ["jetstream.test"]
    assert server.sni == ["jetstream.test"]
    assert (server.requests[0]["host"], server.requests[0][":path"]) == (f"jetstream.test:{server.port}", "/subscribe")


def test_wss_refuses_a_certificate_for_another_name_before_sending_anything(pki, tls_server):
    server = tls_server("other.test")  # a valid certificate from the trusted CA, for the wrong host
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch|doesn't match"):
        open_websocket(f"wss://jetstream.test:{server.port}/subscribe", allow_private_network=True, timeout=5,
                       max_frame_bytes=1000, resolver=lambda host, port: ["127.0.0.1"], ca_bundle=pki[0])
    assert server.requests == []


def test_wss_refuses_a_certificate_from_an_untrusted_issuer(pki, tls_server, tmp_path):
    server = tls_server("jetstream.test")
    stranger_key = ec.generate_private_key(ec.SECP256R1())
    stranger = _cert("another CA", stranger_key, _name("another CA"), stranger_key, ca=True)
    (tmp_path / "stranger.pem").write_bytes(stranger.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer certificate"):
        open_websocket(f"wss://jetstream.test:{server.port}/subscribe", allow_private_network=True, timeout=5,
                       max_frame_bytes=1000, resolver=lambda host, port: ["127.0.0.1"],
                       ca_bundle=str(tmp_path / "stranger.pem"))
    assert server.requests == []
