"""`make demo`: Feather against a local Jetstream that replays demo/events.jsonl. Offline; Ctrl-C stops it.

    .venv/bin/python demo/run.py [--port 8000] [--jetstream-port 6008] [--db instance/demo.db] [--keep]

1. A fresh SQLite file (instance/demo.db unless --keep), migrated.
2. Seeds what a real deployment would have learnt by itself: the Jetstream cursors ("global", "network",
   "sync:0") set just before the log's events, so the whole log replays; the demo actors' first-read
   timeline backfill marked done (their follows arrive through the stream; there is no PDS to list them
   from offline); graph sync turned on for ada (Bluesky, Tangled, Sifa); the catalogue's relay rebuild
   marked done (no relays offline).
3. Starts the fake Jetstream (tests/support/fake_jetstream.py) on the log, then gunicorn in development
   mode with the workers on, and prints what to open.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from demo.feature import accounts, load_frames  # noqa: E402
from feather import create_app  # noqa: E402
from feather.db import db  # noqa: E402
from feather.jetstream import store as jstore  # noqa: E402
from feather.network import store as netstore  # noqa: E402
from feather.sync import service  # noqa: E402

EVENTS = REPO / "demo" / "events.jsonl"
OWNER = "ada.demo.feather.test"
SYNC_APPS = ["bluesky", "tangled", "sifa"]


def demo_env(args) -> dict[str, str]:
    db = Path(args.db).absolute()
    return {
        "FEATHERREADER_ENV": "development",
        "DATABASE_URL": f"sqlite:///{db}",
        "FEATHERREADER_DATA_DIR": str(db.parent / "demo-data"),
        "PORT": str(args.port),
        "FEATHERREADER_JETSTREAM_HOSTS": f"ws://127.0.0.1:{args.jetstream_port}/subscribe",
        "FEATHERREADER_ALLOW_PRIVATE_NETWORK": "1",
        "FEATHERREADER_NETWORK_INDEX": "1",
        "FEATHERREADER_NETWORK_PAGE": "1",
        "FEATHERREADER_EXTRA_FEATURES": "demo.feature",
        "FEATHERREADER_RUN_WORKERS": "1",
        "FEATHERREADER_DISABLE_SCHEDULER": "0",
        # Offline: nothing to ask about identities or adoption; fail fast on loopback instead of timing out.
        "FEATHERREADER_ADOPTION_INTERVAL_SECS": "0",
        "FEATHERREADER_PLC_URL": "http://127.0.0.1:9",
        "FEATHERREADER_HANDLE_RESOLVER": "",
        "FEATHERREADER_RELAY_HOSTS": "http://127.0.0.1:9",
        "FEATHERREADER_HTTP_TIMEOUT_SECS": "2",
        "FEED_LABELERS": "",  # offline: only the posts' own self-labels
        # The demo's made-up accounts never sign in, and anyone may open any of their timelines.
        "FEED_SERVE": "all",
    }


def seed(start_us: int) -> dict:
    """Run in this process, on the demo database (os.environ already holds the demo settings)."""
    app = create_app()
    settings = app.config["FEATHER"]
    dids = accounts(load_frames())
    with app.app_context(), db.connection_context():
        with db.atomic():
            for name in ("global", "network", "sync:0"):
                jstore.save_cursor(name, jstore.Cursor(start_us))
            for did in dids.values():
                db.execute_sql("INSERT INTO feed_backfills (actor, feed, completed, retries) VALUES (?, ?, 1, 0)"
                               " ON CONFLICT DO NOTHING", (did, "timeline"))
            netstore.set_state("backfill.status", "done")
        service.configure(dids[OWNER], settings, int(time.time()), apps=SYNC_APPS, enabled=True)
    db.close()
    return dids


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"demo: {proc.args[0]} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except Exception:
            time.sleep(0.3)
    raise SystemExit(f"demo: {url} did not answer within {timeout:.0f} s")


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when demo/run.py dies, even by kill -9, so the fake
    Jetstream and gunicorn never outlive it holding their ports (Linux; elsewhere Ctrl-C only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != _PARENT:  # the parent died before prctl: no signal will come
        os._exit(1)


_PARENT = os.getpid()


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.terminate()
    for proc in reversed(procs):
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
    p.add_argument("--jetstream-port", type=int, default=6008)
    p.add_argument("--db", default=str(REPO / "instance" / "demo.db"))
    p.add_argument("--keep", action="store_true", help="keep the database of the last run (default: start fresh)")
    args = p.parse_args(argv)
    bindir = Path(sys.executable).parent
    env = {**os.environ, **demo_env(args), "PYTHONUNBUFFERED": "1"}
    db = Path(args.db)
    db.parent.mkdir(parents=True, exist_ok=True)
    fresh = not args.keep or not db.exists()
    if fresh:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    subprocess.run([str(bindir / "flask"), "--app", "app", "db", "upgrade"], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    os.environ.update(demo_env(args))
    if fresh:
        seed(int(time.time() * 1_000_000) - 1_000_000)  # just before the Jetstream stamps the log

    procs: list[subprocess.Popen] = []
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        js = subprocess.Popen([sys.executable, "-m", "tests.support.fake_jetstream", "--host", "127.0.0.1",
                               "--port", str(args.jetstream_port), "--log", str(EVENTS), "--ttl-secs", "0"],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              preexec_fn=_die_with_parent)
        procs.append(js)
        line = js.stdout.readline()
        if not line:
            raise SystemExit(f"demo: the fake Jetstream did not start (port {args.jetstream_port} busy?)")
        print(f"demo: Jetstream replaying {EVENTS.relative_to(REPO)} at {json.loads(line)['url']}", flush=True)
        web = subprocess.Popen([str(bindir / "gunicorn"), "-k", "gevent", "-w", "1", "--bind",
                                f"127.0.0.1:{args.port}", "app:app"], cwd=REPO, env=env,
                               preexec_fn=_die_with_parent)
        procs.append(web)
        base = f"http://127.0.0.1:{args.port}"
        wait_http(base + "/health", web)
        ada = accounts(load_frames())[OWNER]
        print(f"""
Feather demo is up (events arrive within seconds; Ctrl-C stops everything):
  {base}/xrpc/com.featherreader.getFeed?feed=timeline&actor={ada}   ada's timeline (JSON)
  {base}/network                                 the network catalogue (feeds with >= 5 subscribers)
  {base}/demo/sign-in?as=ada                     sign in as ada -> her social graph sync page
  {base}/health                                  the Jetstream cursors moving
""", flush=True)
        while all(proc.poll() is None for proc in procs):
            time.sleep(0.5)
        print("demo: a process exited; stopping", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop(procs)


if __name__ == "__main__":
    sys.exit(main())
