"""Test support: bridge a real PDS firehose (com.atproto.sync.subscribeRepos) into the fake Jetstream.

    bridge = FirehoseBridge(pds.firehose_url, fake_jetstream.append, cursor=0).start()
    ...
    bridge.stop()

A background thread (a greenlet once gevent has patched the process) reads the PDS's websocket and turns each
event into legacy Jetstream v1 frames, the way the legacy Jetstream consumer does:

    #commit   -> one frame per op: {"did", "kind": "commit",
                                    "commit": {"rev", "operation", "collection", "rkey", "record", "cid"}}
                 (no record/cid on delete; ops whose record block is missing or does not hash to its CID,
                 and tooBig commits, are dropped like Jetstream drops them)
    #identity -> {"did", "kind": "identity", "identity": {did, handle?, seq, time}}
    #account  -> {"did", "kind": "account", "account": {active, did, seq, status?, time}}
    #sync, #info and anything else -> skipped

Frames carry no time_us: the fake Jetstream stamps them when appended. Records are converted from DAG-CBOR to the
atproto JSON data model (CID links -> {"$link": "b..."}, bytes -> {"$bytes": base64 without padding}).

Fixture (session scope; import it next to the pds fixtures):
    pds_jetstream -> (PdsInstance, FakeJetstream), with a bridge from the first to the second running; the
                     bridge starts at cursor 0, so the fake holds the PDS's whole history (account creation
                     included). The bridge object is on fake_jetstream.bridge.

Frame format facts: a firehose message is two concatenated DAG-CBOR objects, header {"op": 1, "t": "#commit"}
(op -1 = error frame {"error", "message"}) then the body; a commit's "blocks" is a CARv1 file.
"""
from __future__ import annotations

import base64
import hashlib
import io
import sys
import threading
import time
import urllib.parse
from typing import Any, Callable

import cbor2
import pytest

__all__ = ["FirehoseBridge", "decode_frame", "read_car", "cid_to_str", "cid_from_str", "to_json_model",
           "commit_to_frames", "pds_jetstream"]

# --------------------------------------------------------------------------------------------------- CIDs and CAR

_CID_TAG = 42


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint at buf[pos:] -> (value, new position)."""
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _cid_len(buf: bytes, pos: int) -> int:
    """Length in bytes of the binary CID starting at buf[pos]."""
    if buf[pos:pos + 2] == b"\x12\x20":  # CIDv0: a bare sha2-256 multihash
        return 34
    start = pos
    version, pos = _varint(buf, pos)
    if version != 1:
        raise ValueError(f"unsupported CID version {version}")
    _codec, pos = _varint(buf, pos)
    _mh_code, pos = _varint(buf, pos)
    mh_len, pos = _varint(buf, pos)
    return pos + mh_len - start


def cid_to_str(cid: bytes) -> str:
    """Binary CIDv1 -> multibase base32 (lower case, no padding) string: 'bafyrei...'."""
    return "b" + base64.b32encode(cid).decode("ascii").lower().rstrip("=")


def cid_from_str(s: str) -> bytes:
    if not s.startswith("b"):
        raise ValueError(f"only base32 ('b') CIDs are supported: {s!r}")
    body = s[1:].upper()
    return base64.b32decode(body + "=" * (-len(body) % 8))


def _tag_cid(tag: cbor2.CBORTag) -> bytes:
    """The binary CID inside a DAG-CBOR tag 42 (its bytes start with the 0x00 identity-multibase prefix)."""
    raw = tag.value
    if not isinstance(raw, bytes) or not raw or raw[0] != 0:
        raise ValueError(f"malformed CID link: {raw!r}")
    return raw[1:]


def _cid_matches(cid: bytes, block: bytes) -> bool:
    """True when the CID's sha2-256 digest is the block's hash (other hash functions are not checked)."""
    if cid[:2] == b"\x12\x20":
        return cid[2:] == hashlib.sha256(block).digest()
    pos = _varint(cid, 0)[1]
    pos = _varint(cid, pos)[1]
    code, pos = _varint(cid, pos)
    length, pos = _varint(cid, pos)
    if code != 0x12:
        return True
    return cid[pos:pos + length] == hashlib.sha256(block).digest()


def read_car(car: bytes) -> tuple[list[bytes], dict[bytes, bytes]]:
    """Parse a CARv1 file -> (root CIDs, {binary CID: block bytes})."""
    hlen, pos = _varint(car, 0)
    header = cbor2.loads(car[pos:pos + hlen])
    pos += hlen
    if header.get("version") != 1:
        raise ValueError(f"unsupported CAR version {header.get('version')}")
    roots = [_tag_cid(r) for r in header.get("roots", [])]
    blocks: dict[bytes, bytes] = {}
    while pos < len(car):
        slen, pos = _varint(car, pos)
        end = pos + slen
        clen = _cid_len(car, pos)
        blocks[car[pos:pos + clen]] = car[pos + clen:end]
        pos = end
    return roots, blocks


def to_json_model(value: Any) -> Any:
    """DAG-CBOR data model -> atproto JSON data model (maps keep DAG-CBOR key order)."""
    if isinstance(value, cbor2.CBORTag):
        if value.tag == _CID_TAG:
            return {"$link": cid_to_str(_tag_cid(value))}
        raise ValueError(f"unexpected CBOR tag {value.tag} in DAG-CBOR data")
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii").rstrip("=")}
    if isinstance(value, dict):
        return {k: to_json_model(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_model(v) for v in value]
    return value


def decode_frame(data: bytes) -> tuple[dict, dict]:
    """One subscribeRepos websocket message -> (header, body), both still in the DAG-CBOR data model."""
    dec = cbor2.CBORDecoder(io.BytesIO(data))
    header = dec.decode()
    body = dec.decode()
    return header, body


# -------------------------------------------------------------------------------------------- firehose -> Jetstream

def commit_to_frames(body: dict, log: Callable[[str], None] = lambda msg: None) -> list[dict]:
    """A #commit body -> Jetstream v1 commit frames, one per op (what legacy Jetstream's consumer emits)."""
    if body.get("tooBig"):
        log(f"dropping tooBig commit seq={body.get('seq')}")
        return []
    _roots, blocks = read_car(body.get("blocks") or b"")
    did, rev = body["repo"], body["rev"]
    frames = []
    for op in body.get("ops", []):
        collection, _, rkey = op["path"].partition("/")
        action = op["action"]
        commit: dict[str, Any] = {"rev": rev, "operation": action, "collection": collection, "rkey": rkey}
        if action in ("create", "update"):
            cid_link = op.get("cid")
            cid = _tag_cid(cid_link) if isinstance(cid_link, cbor2.CBORTag) else None
            block = blocks.get(cid) if cid else None
            if block is None or not _cid_matches(cid, block):
                log(f"dropping {action} {did}/{op['path']}: record block missing or CID mismatch")
                continue
            commit["record"] = to_json_model(cbor2.loads(block))
            commit["cid"] = cid_to_str(cid)
        elif action != "delete":
            log(f"dropping op with unknown action {action!r}")
            continue
        frames.append({"did": did, "kind": "commit", "commit": commit})
    return frames


def event_to_frames(header: dict, body: dict, log: Callable[[str], None] = lambda msg: None) -> list[dict]:
    t = header.get("t")
    if t == "#commit":
        return commit_to_frames(body, log)
    if t == "#identity":
        ident = {"did": body["did"]}
        if body.get("handle"):
            ident["handle"] = body["handle"]
        ident.update(seq=body["seq"], time=body["time"])
        return [{"did": body["did"], "kind": "identity", "identity": ident}]
    if t == "#account":
        acct = {"active": body["active"], "did": body["did"], "seq": body["seq"]}
        if body.get("status"):
            acct["status"] = body["status"]
        acct["time"] = body["time"]
        return [{"did": body["did"], "kind": "account", "account": acct}]
    return []  # #sync, #info, #handle/#migrate/#tombstone (deprecated): Jetstream emits nothing


class FirehoseBridge:
    """Reads a subscribeRepos firehose in a background thread and hands Jetstream frames to `sink`.

    Reconnects (resuming from the last seq) if the socket drops. Counters: .seq (last firehose seq handled),
    .events (firehose messages), .frames (frames handed to the sink), .errors (list of str).
    """

    def __init__(self, firehose_url: str, sink: Callable[[list[dict]], Any], *, cursor: int | None = 0,
                 verbose: bool = False):
        self.firehose_url = firehose_url
        self.sink = sink
        self.seq: int | None = cursor
        self.events = 0
        self.frames = 0
        self.errors: list[str] = []
        self.verbose = verbose
        self._stop = threading.Event()
        self._connected = threading.Event()
        self._progress = threading.Condition()
        self._ws = None
        self._thread: threading.Thread | None = None

    def _log(self, msg: str) -> None:
        if self.verbose:
            print(f"[firehose-bridge] {msg}", file=sys.stderr)

    def _url(self) -> str:
        if self.seq is None:
            return self.firehose_url
        return f"{self.firehose_url}?{urllib.parse.urlencode({'cursor': self.seq})}"

    def start(self, connect_timeout: float = 10.0) -> "FirehoseBridge":
        self._thread = threading.Thread(target=self._run, name="firehose-bridge", daemon=True)
        self._thread.start()
        if not self._connected.wait(connect_timeout):
            self.stop()
            raise RuntimeError(f"firehose bridge could not connect to {self.firehose_url}: {self.errors[-3:]}")
        return self

    def _run(self) -> None:
        import websocket  # websocket-client: plain sockets, cooperative under gevent

        backoff = 0.1
        while not self._stop.is_set():
            try:
                self._ws = websocket.create_connection(self._url(), timeout=10, enable_multithread=True)
                self._ws.settimeout(None)  # block in recv; stop() aborts the socket
                self._connected.set()
                backoff = 0.1
                while not self._stop.is_set():
                    opcode, data = self._ws.recv_data()
                    if opcode == websocket.ABNF.OPCODE_CLOSE:
                        raise ConnectionError("firehose closed the connection")
                    if opcode != websocket.ABNF.OPCODE_BINARY:
                        continue
                    self._handle(data)
            except Exception as exc:  # noqa: BLE001 -- keep bridging; record what happened
                if self._stop.is_set():
                    break
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self._log(f"reconnecting after {self.errors[-1]}")
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
            finally:
                ws, self._ws = self._ws, None
                if ws is not None:
                    try:
                        ws.close(timeout=0.5)
                    except Exception:  # noqa: BLE001
                        pass

    def _handle(self, data: bytes) -> None:
        header, body = decode_frame(data)
        if header.get("op") == -1:
            raise ConnectionError(f"firehose error frame: {body.get('error')}: {body.get('message')}")
        frames = event_to_frames(header, body, self._log)
        if frames:
            self.sink(frames)
        with self._progress:
            self.events += 1
            self.frames += len(frames)
            if isinstance(body.get("seq"), int):
                self.seq = body["seq"]
            self._progress.notify_all()

    def wait_for_seq(self, seq: int, timeout: float = 10.0) -> bool:
        """Block until the firehose event with this seq (or a later one) has been handed to the sink."""
        deadline = time.monotonic() + timeout
        with self._progress:
            while self.seq is None or self.seq < seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._progress.wait(left)
        return True

    def stop(self) -> None:
        self._stop.set()
        ws = self._ws
        if ws is not None:
            try:
                ws.abort()  # wakes the blocked recv
            except Exception:  # noqa: BLE001
                pass
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> "FirehoseBridge":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ----------------------------------------------------------------------------------------------------------- fixture

@pytest.fixture(scope="session")
def pds_jetstream(pds):
    """(pds, fake_jetstream): the session PDS's firehose bridged into a fake Jetstream from cursor 0."""
    from tests.support.fake_jetstream import FakeJetstream

    with FakeJetstream() as js:
        bridge = FirehoseBridge(pds.firehose_url, js.append, cursor=0)
        try:
            js.bridge = bridge
            bridge.start()
            yield pds, js
        finally:
            bridge.stop()
