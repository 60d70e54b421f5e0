"""The Jetstream socket under the guard (feather/outbound/websocket.py): vetted and pinned, no redirects,
no connection after a failed vetting, and an oversized frame refused before it is buffered."""
import base64
import hashlib
import socket
import struct

import gevent
import pytest
import websocket

from feather.outbound import BlockedDestination, FetchFailed
from feather.outbound.websocket import FrameTooLarge, open_websocket

pytestmark = pytest.mark.once  # the socket layer holds no database

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class RawServer:
    """A loopback websocket server written by hand, so a test decides every byte it answers."""

    def __init__(self, answer):
        self.answer = answer  # (request_headers, conn) -> None
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.requests: list[dict] = []
        self.accepted = 0
        self._greenlet = gevent.spawn(self._serve)

    def _serve(self):
        while True:
            conn, _ = self.sock.accept()
            self.accepted += 1
            gevent.spawn(self._one, conn)

    def _one(self, conn):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        lines = data.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
        headers[":path"] = lines[0].split(" ")[1]
        self.requests.append(headers)
        self.answer(headers, conn)

    def close(self):
        self._greenlet.kill()
        self.sock.close()


def upgrade(headers, conn):
    accept = base64.b64encode(hashlib.sha1((headers["sec-websocket-key"] + GUID).encode()).digest()).decode()
    conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode())


def text_frame(payload: bytes) -> bytes:
    n = len(payload)
    head = bytes([0x81, n]) if n < 126 else (bytes([0x81, 126]) + struct.pack("!H", n) if n < 65536
                                             else bytes([0x81, 127]) + struct.pack("!Q", n))
    return head + payload


@pytest.fixture
def serve():
    servers = []

    def start(answer):
        server = RawServer(answer)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def test_connects_to_the_vetted_address_once_resolved_with_the_name_in_the_host_header(serve):
    server = serve(lambda h, c: (upgrade(h, c), c.sendall(text_frame(b"hello"))))
    lookups = []

    def resolver(host, port):
        lookups.append(host)
        return ["127.0.0.1"]

    ws = open_websocket(f"ws://jetstream.test:{server.port}/subscribe?cursor=1", allow_private_network=True,
                        timeout=5, max_frame_bytes=1000, resolver=resolver)
    try:
        assert ws.recv() == "hello"
    finally:
        ws.close()
    assert lookups == ["jetstream.test"]  # one lookup; the socket went to its answer, no second one
    assert server.requests[0]["host"] == f"jetstream.test:{server.port}"
    assert server.requests[0][":path"] == "/subscribe?cursor=1"


def test_a_redirect_is_refused_and_its_target_never_requested(serve):
    def redirect(headers, conn):
        if headers[":path"] == "/never-vetted":
            return upgrade(headers, conn)
        conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: ws://127.0.0.1:{server.port}/never-vetted\r\n"
                     "Content-Length: 0\r\n\r\n".encode())

    server = serve(redirect)
    with pytest.raises(websocket.WebSocketException):
        open_websocket(f"ws://127.0.0.1:{server.port}/subscribe", allow_private_network=True, timeout=5,
                       max_frame_bytes=1000)
    gevent.sleep(0.05)
    assert [r[":path"] for r in server.requests] == ["/subscribe"]
    assert server.accepted == 1


@pytest.mark.parametrize("answer, error", [
    (OSError("no such host"), FetchFailed),
    (["169.254.169.254"], BlockedDestination),
    (["127.0.0.1", "10.0.0.1", "8.8.8.8"], BlockedDestination),
], ids=["lookup-failed", "metadata-address", "one-private-answer"])
def test_a_failed_vetting_means_no_connection(serve, answer, error):
    server = serve(upgrade)

    def resolver(host, port):
        if isinstance(answer, Exception):
            raise answer
        return answer

    with pytest.raises(error):
        open_websocket(f"wss://jetstream.test:{server.port}/subscribe", allow_private_network=False, timeout=5,
                       max_frame_bytes=1000, resolver=resolver)
    gevent.sleep(0.05)
    assert server.accepted == 0


def test_a_frame_over_the_limit_is_discarded_unbuffered_and_the_next_one_arrives(serve):
    def send(headers, conn):
        upgrade(headers, conn)
        conn.sendall(text_frame(b"x" * 200_000) + text_frame(b"after"))

    server = serve(send)
    ws = open_websocket(f"ws://127.0.0.1:{server.port}/subscribe", allow_private_network=True, timeout=5,
                        max_frame_bytes=10_000)
    asked: list[int] = []
    real = ws.frame_buffer.recv_strict
    ws.frame_buffer.recv_strict = lambda n: (asked.append(n), real(n))[1]
    try:
        with pytest.raises(FrameTooLarge) as refused:
            ws.recv_data()
        assert (refused.value.length, refused.value.limit) == (200_000, 10_000)
        assert ws.recv_data() == (websocket.ABNF.OPCODE_TEXT, b"after")
    finally:
        ws.close()
    assert max(asked) == 64 * 1024  # read in chunks, never the whole 200 kB at once
