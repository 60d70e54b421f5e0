"""Server half of the fake legacy Jetstream (asyncio + websockets). CLI, docs and client: fake_jetstream.py.

Runs in its own process (no gevent). One event loop, so replay->live cutover is exact: the replay loop reads the
store until it reaches the end and switches the subscriber to live without yielding in between.
"""
from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import os
import re
import socket
import struct
import time
import urllib.parse
from collections import deque

# Go's net/http accepts ~1 MB of request line + headers; 10,000 wantedDids need ~450 KB of URL.
os.environ.setdefault("WEBSOCKETS_MAX_LINE_LENGTH", str(1 << 20))
from websockets.asyncio.server import ServerConnection  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

from tests.support.jetstream_wire import (OptionsError, check_frame, encode_frame,  # noqa: E402
                                          max_size_from_query, parse_go_int, parse_options,
                                          parse_options_update)

_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)[ \t]*(?=\r\n)", re.I)


def _now_us() -> int:
    return time.time_ns() // 1000


class _Event:
    __slots__ = ("time_us", "did", "collection", "data")

    def __init__(self, time_us, did, collection, data):
        self.time_us, self.did, self.collection, self.data = time_us, did, collection, data


class _Sub:
    def __init__(self, sid, ws, filt, cursor, require_hello):
        self.id, self.ws, self.filter, self.cursor = sid, ws, filt, cursor
        self.mode = "hello" if require_hello else ("replay" if cursor is not None else "live")
        self.outbox: deque = deque()
        self.wake, self.hello = asyncio.Event(), asyncio.Event()
        self.last = self.pos = 0  # last time_us queued/sent; replay position in the store
        self.dead = False


class _Bucket:  # legacy per-IP token bucket (rate/s, burst = rate)
    def __init__(self, rate):
        self.rate, self.tokens, self.t = rate, float(rate), time.monotonic()

    async def take(self):
        while True:
            now = time.monotonic()
            self.tokens, self.t = min(self.rate, self.tokens + (now - self.t) * self.rate), now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.rate)


class BodyConnection(ServerConnection):
    """websockets rejects request bodies; strip one off (for POST /control/*) before it parses."""
    sndbuf = 0  # --sndbuf: SO_SNDBUF for accepted sockets (0 = kernel autotuning)

    def connection_made(self, transport):
        if self.sndbuf:
            transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
        super().connection_made(transport)

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._buf, self._need, self._done, self.body = bytearray(), None, False, b""

    def _flush(self, data):
        self._done, self._buf = True, None
        super().data_received(data)

    def data_received(self, data):
        if self._done:
            return super().data_received(data)
        self._buf += data
        if self._need is None:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return None if len(self._buf) < 65536 else self._flush(bytes(self._buf))
            head = bytes(self._buf[:end + 4])
            m = _CONTENT_LENGTH.search(head)
            if not m:
                return self._flush(bytes(self._buf))
            self._hlen, self._need, self._head = end + 4, end + 4 + int(m[1]), head[:m.start()] + head[m.end():]
        if len(self._buf) >= self._need:
            self.body = bytes(self._buf[self._hlen:self._need])
            self._flush(self._head + bytes(self._buf[self._need:]))

    def eof_received(self):
        if not self._done and self._buf:
            self._flush(bytes(self._buf))
        return super().eof_received()


class Hub:
    def __init__(self, ttl_secs=86400, outbox=50_000, v2_cursor=False, ping_secs=30.0, write_timeout=10.0,
                 rate_limit=0):
        self.ttl, self.outbox_limit, self.v2 = ttl_secs, outbox, v2_cursor
        self.ping_secs, self.write_timeout, self.rate_limit = ping_secs, write_timeout, rate_limit
        self.times: list[int] = []
        self.events: list[_Event] = []
        self.last_us = self.seq = 0
        self.subs: dict[int, _Sub] = {}
        self.buckets: dict[str, _Bucket] = {}
        self.paused, self.pending = False, []
        self.n = dict.fromkeys(("connects_total", "options_updates_total", "sent_total", "slow_drops_total",
                                "forced_drops_total", "write_timeouts_total"), 0)
        self.next_id = 1
        # The latest connections' opening requests, live or gone: a socket that lived only a moment
        # (a queue-full drop right after a replay) still tells which cursor it asked for. Counts,
        # not the wantedDids themselves: a filter may name 10,000.
        self.opened: deque = deque(maxlen=200)
        self.lock = asyncio.Lock()

    # ---- store and emit ----
    async def append(self, frames) -> tuple[int, int]:
        colls = [check_frame(f) for f in frames]  # validate all before storing any
        async with self.lock:  # one append at a time, so concurrent appends never interleave out of order
            items = []
            for f, c in zip(frames, colls):
                t = f["time_us"] if "time_us" in f else max(_now_us(), self.last_us + 1)
                self.last_us = max(self.last_us, t)
                items.append((f, t, c))
            if self.paused:
                self.pending.extend(items)
            else:
                await self._ingest(items)
            return len(frames), self.last_us

    async def set_paused(self, paused: bool) -> None:
        async with self.lock:
            self.paused = paused
            if not paused:
                items, self.pending = self.pending, []
                await self._ingest(items)

    async def _ingest(self, items):
        for f, t, c in items:
            self.seq += 1
            ev = _Event(t, f["did"], c, encode_frame(f, t, self.seq if self.v2 else 0))
            if not self.times or t >= self.times[-1]:
                self.times.append(t)
                self.events.append(ev)
            else:  # keep the store time-ordered (like legacy's Pebble keys); shift replay positions
                p = bisect.bisect_right(self.times, t)
                self.times.insert(p, t)
                self.events.insert(p, ev)
                for s in self.subs.values():
                    s.pos += s.mode == "replay" and p < s.pos
            if self._emit(ev):
                await asyncio.sleep(0)  # let senders drain, as concurrent goroutines would
        self.trim()

    def _wants(self, s, ev) -> bool:
        return (s.filter.wants(ev.did, ev.collection) and (self.v2 or ev.time_us > s.last)
                and not (s.filter.max_size and len(ev.data) > s.filter.max_size))

    def _emit(self, ev) -> bool:
        live = False
        for s in list(self.subs.values()):
            if s.mode != "live" or s.dead:
                continue
            live = True
            if not self._wants(s, ev):
                continue
            if len(s.outbox) >= self.outbox_limit:  # non-blocking live emit: drop, no close frame
                self.n["slow_drops_total"] += 1
                self.kill(s)
                continue
            s.outbox.append(ev)
            s.last = ev.time_us
            s.wake.set()
        return live

    def trim(self) -> int:
        if not self.ttl or not self.times:
            return 0
        cut = bisect.bisect_left(self.times, _now_us() - int(self.ttl * 1_000_000))
        if cut:
            del self.times[:cut], self.events[:cut]
            for s in self.subs.values():
                s.pos = max(0, s.pos - cut)
        return cut

    def kill(self, s):
        s.dead = True
        s.ws.transport.abort()

    # ---- HTTP ----
    async def process_request(self, conn, req):
        u = urllib.parse.urlsplit(req.path)
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        if u.path == "/subscribe":
            cursor_s = q.get("cursor", [""])[0]
            cursor = None
            if cursor_s:
                cursor = parse_go_int(cursor_s)
                if cursor is None:
                    return conn.respond(400, f"invalid cursor: {cursor_s}")
                if cursor > _now_us():
                    cursor = None  # future cursor = live tail
            try:
                filt = parse_options(q.get("wantedCollections", []), q.get("wantedDids", []),
                                     max_size_from_query(q.get("maxMessageSizeBytes", [""])[0]))
            except OptionsError as e:
                return conn.respond(400, str(e))
            conn.js_opts = (filt, cursor, q.get("requireHello", [""])[0] == "true")
            return None
        if u.path == "/":
            return conn.respond(200, "Welcome to Jetstream")
        if not u.path.startswith("/control/"):
            return conn.respond(404, "Not Found")
        try:
            status, obj = await self._control(req.method, u.path[len("/control/"):], q, conn.body)
        except KeyError as e:
            status, obj = 400, {"error": f"missing query parameter: {e.args[0]}"}
        except ValueError as e:
            status, obj = 400, {"error": str(e)}
        r = conn.respond(status, json.dumps(obj) + "\n")
        del r.headers["Content-Type"]
        r.headers["Content-Type"] = "application/json"
        return r

    async def _control(self, method, op, q, body):
        if (method, op) == ("POST", "append"):
            n, last = await self.append([json.loads(ln) for ln in body.decode().splitlines() if ln.strip()])
            return 200, {"appended": n, "last_time_us": last}
        if (method, op) in (("POST", "pause"), ("POST", "resume")):
            await self.set_paused(op == "pause")
            return 200, {"paused": self.paused, "pending": len(self.pending)}
        # Every other call waits for an append in progress to finish: a stats or drop issued while
        # 20,000 events are being emitted sees (and acts on) the state after them, never half of it.
        async with self.lock:
            return self._control_now(method, op, q)

    def _control_now(self, method, op, q):
        if (method, op) == ("GET", "stats"):
            return 200, self.stats()
        if (method, op) == ("POST", "drop"):  # abort the socket(s): the client sees no close frame (1006)
            ids = [int(q["id"][0])] if "id" in q else list(self.subs)
            victims = [self.subs[i] for i in ids if i in self.subs and not self.subs[i].dead]
            for s in victims:
                self.kill(s)
            self.n["forced_drops_total"] += len(victims)
            return 200, {"dropped": len(victims)}
        if (method, op) == ("POST", "outbox"):
            self.outbox_limit = int(q["limit"][0])
            return 200, {"outbox": self.outbox_limit}
        return 404, {"error": f"no such control call: {method} /control/{op}"}

    def stats(self) -> dict:
        return {"connections": len(self.subs), **self.n, "events": len(self.events),
                "paused": self.paused, "pending": len(self.pending),
                "outbox_limit": self.outbox_limit, "last_time_us": self.last_us,
                "last_filter": {str(s.id): {**s.filter.describe(), "cursor": s.cursor, "mode": s.mode,
                                            "outbox": len(s.outbox)} for s in self.subs.values()},
                "opened": list(self.opened)}

    # ---- websocket ----
    async def handler(self, ws):
        filt, cursor, hello = ws.js_opts
        s = _Sub(self.next_id, ws, filt, cursor, hello)
        self.next_id += 1
        self.opened.append({"id": s.id, "cursor": cursor, "wantedCollections": filt.describe()["wantedCollections"],
                            "wantedDids": len(filt.dids)})
        self.subs[s.id] = s
        self.n["connects_total"] += 1
        tasks = [asyncio.ensure_future(self._reader(s)), asyncio.ensure_future(self._sender(s))]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t.exception() and not isinstance(t.exception(), (ConnectionClosed, TimeoutError)):
                    logging.getLogger("fake_jetstream").error("handler failed", exc_info=t.exception())
        finally:
            for t in tasks:
                t.cancel()
            self.subs.pop(s.id, None)
            if s.dead:
                ws.transport.abort()

    async def _reader(self, s):
        async for msg in s.ws:
            if isinstance(msg, bytes):
                continue  # binary frames from clients are ignored
            try:
                f = parse_options_update(msg)
            except OptionsError as e:  # legacy Terminate(reason): close frame 1000, then the TCP socket closes
                payload = struct.pack("!H", 1000) + str(e).encode()[:123]
                s.ws.transport.write(bytes([0x88, len(payload)]) + payload)
                s.ws.transport.close()
                return
            if f is not None:  # replaces the whole filter in place
                s.filter = f
                self.n["options_updates_total"] += 1
                s.hello.set()

    async def _send(self, s, ev):
        if self.rate_limit:
            ip = s.ws.remote_address[0] if s.ws.remote_address else ""
            await self.buckets.setdefault(ip, _Bucket(self.rate_limit)).take()
        try:
            async with asyncio.timeout(self.write_timeout):
                await s.ws.send(ev.data, text=True)
        except TimeoutError:
            self.n["write_timeouts_total"] += 1
            self.kill(s)
            raise
        self.n["sent_total"] += 1

    async def _pinger(self, s):
        with contextlib.suppress(ConnectionClosed):
            while not s.dead:
                await asyncio.sleep(self.ping_secs)
                await s.ws.ping()

    async def _sender(self, s):
        if s.mode == "hello":  # no replay, live tail or pings before the first valid options_update (V2)
            await s.hello.wait()
            s.mode = "replay" if s.cursor is not None else "live"
        pinger = asyncio.ensure_future(self._pinger(s))
        try:
            if s.mode == "replay":  # inclusive replay, then live with no gap/duplicate (single-threaded cutover)
                s.pos = bisect.bisect_left(self.times, s.cursor)
                while s.pos < len(self.events):
                    ev = self.events[s.pos]
                    s.pos += 1
                    if self._wants(s, ev):
                        s.last = ev.time_us
                        await self._send(s, ev)
                s.mode = "live"
            while True:
                while s.outbox:
                    await self._send(s, s.outbox.popleft())
                s.wake.clear()
                await s.wake.wait()
        finally:
            pinger.cancel()
