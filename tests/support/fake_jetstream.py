"""A small, faithful fake of the legacy Jetstream v1 `/subscribe` server.

CLI (a separate process; asyncio + websockets, no gevent):
    python -m tests.support.fake_jetstream --host 127.0.0.1 --port 0 [--log F.jsonl] [--ttl-secs N]
        [--outbox N] [--v2-cursor] [--ping-secs S] [--write-timeout S] [--rate-limit N] [--sndbuf B] [--verbose]
prints {"port": N, "url": "ws://H:N/subscribe", "control": "http://H:N/control"} as one JSON line once
listening, then serves until SIGTERM/SIGINT or stdin EOF (stdin is watched only when it is a pipe).

Control API (plain HTTP on the same port):
    POST /control/append          body: JSONL frames (time_us optional) -> {"appended": n, "last_time_us": t}
    POST /control/drop[?id=N]     abort every (or one) live connection, no close frame -> {"dropped": n}
    GET  /control/stats           {"connections", "connects_total", "options_updates_total", "events",
                                   "sent_total", ..., "last_filter": {conn_id: {...}} (live ones),
                                   "opened": the latest 200 connections, gone ones too, oldest first:
                                   [{"id", "cursor", "wantedCollections", "wantedDids": count}]}
    POST /control/outbox?limit=N  per-connection outbox limit (live overflow -> drop without close frame)
    POST /control/pause|resume    hold appended events (stamped, not stored/emitted) / release them

In-process API for tests and scripts: FakeJetstream (subprocess + urllib), make_commit/make_identity/make_account.
The server (Hub) lives in tests/support/fake_jetstream_server.py; frame shaping and option parsing in
tests/support/jetstream_wire.py. Importing this module does not import websockets.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from pathlib import Path

from tests.support.jetstream_wire import make_account, make_commit, make_identity, tid  # noqa: F401 (re-export)

REPO_ROOT = Path(__file__).resolve().parents[2]
__all__ = ["FakeJetstream", "make_commit", "make_identity", "make_account", "tid", "REPO_ROOT"]


class FakeJetstream:
    """Runs the fake in a subprocess. `with FakeJetstream(outbox=10) as js: websocket.create_connection(js.url)`."""

    def __init__(self, *, log=None, ttl_secs=None, outbox=None, v2_cursor=False, ping_secs=None,
                 write_timeout=None, rate_limit=None, sndbuf=None, host="127.0.0.1", port=0):
        self.args = ["--host", host, "--port", str(port)]
        for flag, v in (("--log", log), ("--ttl-secs", ttl_secs), ("--outbox", outbox), ("--ping-secs", ping_secs),
                        ("--write-timeout", write_timeout), ("--rate-limit", rate_limit),
                        ("--sndbuf", sndbuf)):
            if v is not None:
                self.args += [flag, str(v)]
        if v2_cursor:
            self.args.append("--v2-cursor")
        self.proc = None
        self.port: int = 0
        self.url = self.control = ""

    def start(self) -> "FakeJetstream":
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.fake_jetstream", *self.args],
                                     cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"fake jetstream failed to start (exit code {self.proc.wait()})")
        info = json.loads(line)
        self.port, self.url, self.control = info["port"], info["url"], info["control"]
        return self

    def subscribe_url(self, **params) -> str:
        """subscribe_url(wantedCollections=["a.b.c", "x.y.*"], cursor=0) -> ws://.../subscribe?..."""
        return self.url + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")

    def _call(self, method, op, body=None, **params) -> dict:
        url = f"{self.control}/{op}" + ("?" + urllib.parse.urlencode(params) if params else "")
        req = urllib.request.Request(url, data=body if body is not None or method == "GET" else b"", method=method)
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    def append(self, frames: list[dict]) -> int:
        """Append frames (time_us optional); returns the last assigned time_us."""
        body = "".join(json.dumps(f) + "\n" for f in frames).encode()
        return self._call("POST", "append", body)["last_time_us"]

    def drop(self, conn_id: int | None = None) -> int:
        """Drop every live connection (or one, by stats id) without a close frame; returns the count."""
        return self._call("POST", "drop", **({} if conn_id is None else {"id": conn_id}))["dropped"]

    def stats(self) -> dict:
        return self._call("GET", "stats")

    def set_outbox(self, n: int) -> None:
        self._call("POST", "outbox", limit=n)

    def pause(self) -> None:
        self._call("POST", "pause")

    def resume(self) -> None:
        self._call("POST", "resume")

    def close(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.proc.stdout.close()

    def __enter__(self) -> "FakeJetstream":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _load_jsonl(path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(ln) for ln in fh if ln.strip()]


async def _amain(args) -> None:
    from tests.support.fake_jetstream_server import BodyConnection, Hub  # first: it sets websockets' limits
    from websockets.asyncio.server import serve

    hub = Hub(args.ttl_secs, args.outbox, args.v2_cursor, args.ping_secs, args.write_timeout, args.rate_limit)
    if args.log:
        frames = _load_jsonl(args.log)
        await hub.append(frames)
        if len(hub.events) < len(frames):
            print(f"fake_jetstream: {len(frames) - len(hub.events)} of {len(frames)} preloaded events are older "
                  f"than --ttl-secs {args.ttl_secs} and were trimmed (use --ttl-secs 0 to keep all)", file=sys.stderr)
    BodyConnection.sndbuf = args.sndbuf
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        stdin_mode = os.fstat(0).st_mode
    except OSError:
        stdin_mode = 0
    if stat.S_ISFIFO(stdin_mode) or stat.S_ISSOCK(stdin_mode):  # stdin EOF = our parent went away
        def watch():
            while os.read(0, 65536):
                pass
            loop.call_soon_threadsafe(stop.set)
        threading.Thread(target=watch, daemon=True).start()
    server = await serve(hub.handler, args.host, args.port, process_request=hub.process_request,
                         create_connection=BodyConnection, compression=None, ping_interval=None,
                         max_size=None, server_header=None, close_timeout=2,
                         # A control call is answered inside the opening handshake (process_request);
                         # appending 20,000 events to a live subscriber can outlast websockets' 10 s
                         # handshake timeout on a busy machine, which cut the call (RemoteDisconnected).
                         open_timeout=None)
    port = server.sockets[0].getsockname()[1]
    base = f"{args.host}:{port}"
    print(json.dumps({"port": port, "url": f"ws://{base}/subscribe", "control": f"http://{base}/control"}),
          flush=True)

    async def liveness_tick():  # legacy trims on every 15 s liveness tick
        while True:
            await asyncio.sleep(15)
            hub.trim()
    ticker = asyncio.ensure_future(liveness_tick())
    await stop.wait()
    ticker.cancel()
    server.close(close_connections=False)  # no graceful close: the process is going away
    for s in list(hub.subs.values()):
        hub.kill(s)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.support.fake_jetstream",
                                description="Fake legacy Jetstream v1 /subscribe server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--log", help="JSONL of frames to preload (same format as /control/append)")
    p.add_argument("--ttl-secs", type=float, default=86400, help="retention; 0 = keep everything (default 24h)")
    p.add_argument("--outbox", type=int, default=50_000, help="per-connection outbox limit (legacy 50,000)")
    p.add_argument("--v2-cursor", action="store_true", help='add V2 "cursor": seq; no time_us dedupe')
    p.add_argument("--ping-secs", type=float, default=30.0)
    p.add_argument("--write-timeout", type=float, default=10.0, help="per-frame write deadline (legacy 10 s)")
    p.add_argument("--rate-limit", type=float, default=0, help="per-IP events/s (legacy 5000); 0 = off")
    p.add_argument("--sndbuf", type=int, default=0, help="SO_SNDBUF bytes for accepted sockets; 0 = autotune")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL, stream=sys.stderr)
    asyncio.run(_amain(args))


if __name__ == "__main__":
    main()
