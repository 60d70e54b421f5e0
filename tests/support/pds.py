"""pytest plugin: Bluesky's reference PDS + PLC on loopback (tests/pds/start-pds.mjs).

Load with ``pytest_plugins = ["tests.support.pds"]`` in the root conftest (or import the fixtures).

Fixtures (session scope):
    pds               -> PdsInstance (accounts alice, bob, carol; rate limits off)
    pds_rate_limited  -> PdsInstance of a second, independent PDS with rate limiting on

    inst.plc_url, inst.pds_url          "http://localhost:<port>" (the URLs the PDS itself advertises:
                                        DID-doc #atproto_pds endpoint, OAuth issuer; see start-pds.mjs)
    inst.issuer, inst.service_did, inst.firehose_url, inst.rate_limits
    inst.accounts["alice"].did/.handle/.password/.email

Helpers:
    xrpc(pds_url, "GET"|"POST", nsid, params=None, json=None, token=None) -> requests.Response
    create_session(inst, "alice") -> accessJwt          (legacy password session)
    tid_now() -> a fresh 13-char TID (record keys for app.bsky.graph.follow must be TIDs)

No node on PATH -> the fixtures skip, unless FEATHER_REQUIRE_PDS=1 (CI), where they fail. A node that is
present but a launcher that does not come up is always a failure. tests/pds/node_modules is installed
with `npm ci` on first use when it is missing (never reinstalled when present).
"""
from __future__ import annotations

import collections
import hashlib
import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
PDS_DIR = REPO_ROOT / "tests" / "pds"
LAUNCHER = PDS_DIR / "start-pds.mjs"
READY_TIMEOUT = 120.0   # seconds to wait for the launcher's JSON line
NPM_CI_TIMEOUT = 900.0  # a cold `npm ci` takes 1.5-3 min here
STOP_TIMEOUT = 10.0     # after closing stdin; shutdown normally takes < 2.5 s

__all__ = ["Account", "PdsInstance", "PdsProcess", "pds", "pds_rate_limited", "xrpc", "create_session", "tid_now",
           "require_node"]


@dataclass(frozen=True)
class Account:
    name: str
    did: str
    handle: str
    password: str
    email: str


@dataclass
class PdsInstance:
    plc_url: str
    pds_url: str
    issuer: str
    service_did: str
    firehose_url: str
    rate_limits: bool
    accounts: dict[str, Account]
    raw: dict = field(repr=False, default_factory=dict)


def _unavailable(msg: str):
    """Skip locally; fail under FEATHER_REQUIRE_PDS=1 so CI can never silently skip the PDS tests."""
    if os.environ.get("FEATHER_REQUIRE_PDS") == "1":
        pytest.fail(f"{msg} (FEATHER_REQUIRE_PDS=1)", pytrace=False)
    pytest.skip(msg)


def require_node() -> str:
    node = shutil.which("node")
    if not node:
        _unavailable("node not installed")
    return node


def _ensure_node_modules() -> None:
    if (PDS_DIR / "node_modules" / "@atproto" / "dev-env" / "package.json").is_file():
        return
    npm = shutil.which("npm")
    if not npm:
        _unavailable("npm not installed (tests/pds/node_modules is missing)")
    from filelock import FileLock  # parallel sessions must not run `npm ci` into the same tree

    lock = Path(tempfile.gettempdir()) / f"feather-npm-ci-{hashlib.sha1(str(PDS_DIR).encode()).hexdigest()[:12]}.lock"
    with FileLock(str(lock), timeout=NPM_CI_TIMEOUT):
        if (PDS_DIR / "node_modules" / "@atproto" / "dev-env" / "package.json").is_file():
            return
        proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PDS_DIR, capture_output=True, text=True,
                              timeout=NPM_CI_TIMEOUT)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
            pytest.fail(f"`npm ci` in {PDS_DIR} failed (exit {proc.returncode}):\n{tail}", pytrace=False)


class PdsProcess:
    """One launcher subprocess. start() returns the PdsInstance; stop() is idempotent."""

    def __init__(self, *, accounts=("alice", "bob", "carol"), rate_limits=False, plc_port=0, pds_port=0,
                 extra_args=(), node: str | None = None):
        self.node = node or "node"
        self.args = ["--exit-on-stdin-close", "--plc-port", str(plc_port), "--pds-port", str(pds_port),
                     "--accounts", ",".join(accounts), *(["--rate-limits"] if rate_limits else []), *extra_args]
        self.proc: subprocess.Popen | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=80)
        self.instance: PdsInstance | None = None
        self.startup_seconds: float | None = None
        self._line: list[bytes] = []
        self._got_line = threading.Event()

    def _pump_stderr(self) -> None:
        for raw in iter(self.proc.stderr.readline, b""):
            self.stderr_tail.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def _read_first_line(self) -> None:
        try:
            self._line.append(self.proc.stdout.readline())
        finally:
            self._got_line.set()
        # keep draining stdout so a chatty child can never block on a full pipe
        for _ in iter(self.proc.stdout.readline, b""):
            pass

    def _tail(self) -> str:
        return "\n".join(self.stderr_tail) or "(no stderr output)"

    def start(self) -> PdsInstance:
        t0 = time.monotonic()
        self.proc = subprocess.Popen([self.node, str(LAUNCHER), *self.args], cwd=PDS_DIR, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        threading.Thread(target=self._pump_stderr, name="pds-stderr", daemon=True).start()
        threading.Thread(target=self._read_first_line, name="pds-stdout", daemon=True).start()
        deadline = t0 + READY_TIMEOUT
        while not self._got_line.wait(0.2):
            if self.proc.poll() is not None:
                self._got_line.wait(2)
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"reference PDS did not come up within {READY_TIMEOUT:.0f} s; stderr tail:\n"
                                   f"{self._tail()}")
        line = self._line[0] if self._line else b""
        if not line.strip():
            code = self.proc.wait(5) if self.proc.poll() is None else self.proc.returncode
            time.sleep(0.2)  # let the stderr pump catch the last lines
            self.stop()
            raise RuntimeError(f"reference PDS launcher exited (code {code}) before it was ready; stderr tail:\n"
                               f"{self._tail()}")
        try:
            info = json.loads(line)
        except ValueError:
            self.stop()
            raise RuntimeError(f"launcher printed a non-JSON first line: {line[:500]!r}\n{self._tail()}") from None
        self.startup_seconds = time.monotonic() - t0
        self.instance = PdsInstance(
            plc_url=info["plc"], pds_url=info["pds"], issuer=info["issuer"], service_did=info["serviceDid"],
            firehose_url=info["firehose"], rate_limits=info["rateLimits"],
            accounts={name: Account(name=name, **acct) for name, acct in info["accounts"].items()}, raw=info)
        return self.instance

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.stdin.close()  # --exit-on-stdin-close: the clean path
            except OSError:
                pass
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except (OSError, ValueError):
                pass


def _start(request, **kwargs) -> PdsInstance:
    node = require_node()
    _ensure_node_modules()
    launcher = PdsProcess(node=node, **kwargs)
    request.addfinalizer(launcher.stop)
    try:
        return launcher.start()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def pds(request) -> PdsInstance:
    """A reference PDS + PLC on loopback with accounts alice, bob and carol (rate limits off)."""
    return _start(request)


@pytest.fixture(scope="session")
def pds_rate_limited(request) -> PdsInstance:
    """A second, independent PDS + PLC (own ports, own accounts alice, bob, carol) with rate limiting on."""
    return _start(request, rate_limits=True)


# ---------------------------------------------------------------------------------------------------------- helpers

def xrpc(pds_url: str, method: str, nsid: str, params: dict | None = None, json: dict | None = None,
         token: str | None = None, headers: dict | None = None, timeout: float = 15.0) -> requests.Response:
    """One XRPC call; returns the raw Response (callers assert on status, JSON body and headers)."""
    hdrs = dict(headers or {})
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    return requests.request(method.upper(), f"{pds_url.rstrip('/')}/xrpc/{nsid}", params=params, json=json,
                            headers=hdrs, timeout=timeout)


def create_session(inst: PdsInstance, name: str) -> str:
    """Legacy password login for one of the instance's accounts; returns the accessJwt."""
    acct = inst.accounts[name]
    r = xrpc(inst.pds_url, "POST", "com.atproto.server.createSession",
             json={"identifier": acct.handle, "password": acct.password})
    if r.status_code != 200:
        raise AssertionError(f"createSession({acct.handle}) -> {r.status_code} {r.text}")
    return r.json()["accessJwt"]


_B32_SORT = "234567abcdefghijklmnopqrstuvwxyz"
_tid_lock = threading.Lock()
_last_tid_us = 0
_clock_id = random.getrandbits(10)


def tid_now() -> str:
    """A TID (specs/tid): 53 bits of microseconds + 10-bit clock id, base32-sortable, 13 chars, monotonic."""
    global _last_tid_us
    with _tid_lock:
        us = max(time.time_ns() // 1000, _last_tid_us + 1)
        _last_tid_us = us
    v = (us << 10) | _clock_id
    return "".join(_B32_SORT[(v >> (5 * i)) & 31] for i in reversed(range(13)))
