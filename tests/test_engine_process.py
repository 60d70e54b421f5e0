"""The engine never dies silently, with the whole service running (issue 20): the `make run` process
(gunicorn -k gevent, its background workers, the access log, no control socket), Bluesky's reference
PDS for the operators' sign-in, and the fake Jetstream. Everything is driven over HTTP; the fake's
connection stats say which cursor each connection asked for.

Steps:
  1. Service A starts with FEATHERREADER_JETSTREAM_HOSTS = an unreachable host, then the fake. It
     fails over: /health ends `ok` with the stream connected to the fake and a last error, which
     /admin names as the unreachable host's connect error (whether the short `degraded` moment
     before is caught is only printed; step 6 shows that state for good). The idle sync shard is
     never named.
  2. A burst of ~3,500 post events (creates, then edits and deletes of earlier posts) goes into the
     fake in paced chunks while two operators (FEATHERREADER_ADMIN_DIDS, signed in with app passwords)
     load /admin and its htmx part over and over, and a signed-in non-operator gets 403 on both.
  3. kill -9 mid-burst. With the service down, the saved cursor is read from its database at rest;
     the restarted consumer must ask the fake for exactly that cursor − 5 s. The burst ends; /health's
     cursor reaches the last event; every post is exactly as the events left it (listRecords, all
     pages: no event lost, none twice).
  4. A tail of 1,000 events in one append: two full batches of 500, the second applied within a
     second of the first one's save, so the once-a-second rule does not save it: once the stream is
     quiet, the saved cursor (read from the database) and /health's are the last event's exactly.
  5. The fake drops every connection: the consumer reconnects asking for exactly last − 5 s (after
     the first backoff step, as its log says: the connection had delivered events), takes the
     overlap again, and the end state is still exact. The access log (stdout) has exactly one
     line per marked request, with its status.
  6. Service B, started at the same moment as A and running beside it all along (its own database;
     the same HOME and XDG_RUNTIME_DIR, where gunicorn's default control socket would collide), has
     only the unreachable host and a job whose peer is down: both answer; B's /health is degraded naming the stream that never connected and the
     failing job, and B's /admin shows both to its operator; A is still ok. No control socket file.

Timing and counts are printed (`-s` shows them); nothing asserts on time.
"""
from __future__ import annotations

import contextlib
import re
import secrets
import shlex
import socket
import threading
import time
from pathlib import Path

import pytest
import requests

from feather.process.supervisor import BACKOFF_MIN, JITTER
from tests.support import peer_job_feature
from tests.support.fake_jetstream import FakeJetstream, make_commit
from tests.support.jetstream_wire import iso_now
from tests.support.process_world import (
    Person,
    app_password,
    create_account,
    error_lines,
    print_service_log,
)
from tests.support.process_world import ok as _ok
from tests.support.process_world import wait_for as _wait
from tests.support.service_process import REPO_ROOT, ServiceProcess, service_env

pytestmark = [pytest.mark.pds, pytest.mark.slow]

STREAM = "global"  # the feeds' stream (the default feeds config: follows, posts, profiles)
POST = "app.bsky.feed.post"
LIST_RECORDS = "/xrpc/com.featherreader.post.listRecords"
OVERLAP_US = 5_000_000  # the replay rewind on time-cursor hosts
POSTS, AUTHORS, CHUNK = 3000, 6, 100
LATER = 300  # post j is edited (j % 10 == 0) or deleted (j % 15 == 7) when post j + LATER is created
KILL_AFTER_CHUNKS = 8
TAIL = 1000  # two full batches back to back: the second comes within a second of the first one's save
APPLY_TIMEOUT = 120.0


# ---------------------------------------------------------------------------------------------- the world

def post(text: str) -> dict:
    return {"$type": POST, "text": text, "createdAt": iso_now()}


def at_uri(did: str, rkey: str) -> str:
    return f"at://{did}/{POST}/{rkey}"


def burst(authors: list[str]) -> tuple[list[list[dict]], dict[str, str]]:
    """The burst's frames in chunks, and what must be stored after it: uri -> text."""
    frames, expected = [], {}
    for i in range(POSTS):
        did, rkey = authors[i % len(authors)], f"p{i:05d}"
        frames.append(make_commit(did, POST, rkey, "create", record=post(f"post {i}")))
        expected[at_uri(did, rkey)] = f"post {i}"
        j = i - LATER
        if j < 0:
            continue
        jdid, jrkey = authors[j % len(authors)], f"p{j:05d}"
        if j % 10 == 0:
            frames.append(make_commit(jdid, POST, jrkey, "update", record=post(f"post {j} edited")))
            expected[at_uri(jdid, jrkey)] = f"post {j} edited"
        elif j % 15 == 7:
            frames.append(make_commit(jdid, POST, jrkey, "delete"))
            del expected[at_uri(jdid, jrkey)]
    return [frames[k:k + CHUNK] for k in range(0, len(frames), CHUNK)], expected


def fake_did(n: int) -> str:
    return "did:plc:" + "".join("abcdefghijklmnopqrstuvwxyz234567"[(n * 7 + k * 13) % 32] for k in range(24))


class Appender(threading.Thread):
    """Appends the burst in paced chunks, remembering the last time_us the fake gave each chunk."""

    def __init__(self, js: FakeJetstream, chunks: list[list[dict]]):
        super().__init__(daemon=True)
        self.js, self.chunks = js, chunks
        self.times: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for chunk in self.chunks:
                self.times.append(self.js.append(chunk))
                time.sleep(0.1)
        except Exception as exc:  # noqa: BLE001 (reported by the main thread)
            self.error = exc


class Outage:
    """Which requests may fail: those in flight while the service is down (kill -9 → restarted)."""

    def __init__(self):
        self.epoch = 0  # bumped when the service goes down and when it is back
        self.down = False

    def begin(self) -> None:
        self.down, self.epoch = True, self.epoch + 1

    def end(self) -> None:
        self.down, self.epoch = False, self.epoch + 1


class Loader(threading.Thread):
    """One person loading /admin and its htmx part over and over until told to stop."""

    def __init__(self, person: Person, operator: bool, outage: Outage, stop: threading.Event, hosts: list[str]):
        super().__init__(daemon=True)
        self.person, self.operator, self.outage, self.stop, self.hosts = person, operator, outage, stop, hosts
        self.loads = {"/admin": 0, "/admin/status": 0}
        self.excused = 0
        self.problems: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            for path in self.loads:
                epoch, down = self.outage.epoch, self.outage.down
                try:
                    r = self.person.get(path, timeout=30)
                except requests.RequestException as exc:
                    if down or self.outage.down or epoch != self.outage.epoch:
                        self.excused += 1
                        time.sleep(0.2)
                    else:
                        self.problems.append(f"{self.person.label} GET {path}: {type(exc).__name__}: {exc}")
                    continue
                problem = self.check(path, r)
                if problem:
                    self.problems.append(f"{self.person.label} GET {path}: {problem}")
                else:
                    self.loads[path] += 1
            time.sleep(0.05)

    def check(self, path: str, r: requests.Response) -> str | None:
        if not self.operator:
            return None if r.status_code == 403 else f"a non-operator got {r.status_code}, not 403"
        if r.status_code != 200:
            return f"{r.status_code} {r.text[:200]}"
        text = r.text
        wanted = ['id="admin-status"', f'<th scope="row">{STREAM}</th>']
        if path == "/admin":
            wanted.append(f"Signed in as @{self.person.acct.handle}")
        missing = [w for w in wanted if w not in text]
        if not any(f'<td data-label="Host">{host}</td>' in text for host in self.hosts):
            # The host being tried: right after the restart the unreachable one comes first again.
            missing.append(f"a host cell naming one of {self.hosts}")
        return f"the page lacks {missing}" if missing else None


# ------------------------------------------------------------------------------------------- observation

def saved_cursor(database_url: str, name: str) -> int | None:
    """The cursor the service saved, read from its database (the service is down, or only read)."""
    if database_url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(database_url[len("sqlite:///"):], timeout=30)
        sql = "SELECT time_us FROM jetstream_cursor WHERE name = ?"
    else:
        import psycopg2

        conn = psycopg2.connect(database_url)
        sql = "SELECT time_us FROM jetstream_cursor WHERE name = %s"
    try:
        cur = conn.cursor()
        cur.execute(sql, (name,))
        found = cur.fetchone()
        return int(found[0]) if found else None
    finally:
        conn.close()


@contextlib.contextmanager
def second_database(database_url: str, where: Path):
    if database_url.startswith("sqlite"):
        yield f"sqlite:///{where / 'feather-b.db'}"
        return
    from tests.support.postgres import scratch_database

    with scratch_database(database_url, "feather_t") as url:
        yield url


def listed_posts(svc: ServiceProcess) -> list[tuple[str, str]]:
    """(uri, text) of every stored post, all pages of listRecords."""
    out, cursor = [], None
    while True:
        params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        body = _ok(requests.get(svc.url + LIST_RECORDS, params=params, timeout=60), "listRecords")
        out += [(rec["uri"], rec["value"].get("text")) for rec in body["records"]]
        cursor = body.get("cursor")
        if not body["records"] or not cursor:
            return out


def check_posts(svc: ServiceProcess, expected: dict[str, str], when: str) -> None:
    listed = listed_posts(svc)
    got = dict(listed)
    twice = len(listed) - len(got)
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    stale = sorted(u for u in set(got) & set(expected) if got[u] != expected[u])
    problems = [f"{len(missing)} posts missing: {missing[:5]}"] if missing else []
    problems += [f"{len(extra)} posts that should not be there (deleted or never sent): {extra[:5]}"] if extra else []
    problems += [f"{len(stale)} posts with the wrong text: {[(u, got[u], expected[u]) for u in stale[:3]]}"] \
        if stale else []
    problems += [f"{twice} posts listed twice"] if twice else []
    assert not problems, f"stored posts {when}:\n" + "\n".join(problems)


def stream_of(health: dict) -> dict:
    return health.get("consumers", {}).get(STREAM) or {}


def new_connection(js: FakeJetstream, after: int, timeout: float = 60.0) -> dict:
    """The feeds stream's first socket opened after connection number `after` (gone or live: a
    queue-full drop right after a replay must not hide the cursor it asked for)."""
    found: dict = {}

    def connected() -> bool:
        for conn in js.stats()["opened"]:
            if conn["id"] > after and POST in conn["wantedCollections"]:
                found.update(conn)
                return True
        return False
    _wait(connected, timeout, lambda: f"the feeds stream to connect to the fake: {js.stats()}")
    return found


def wait_cursor(svc: ServiceProcess, time_us: int, what: str) -> None:
    _wait(lambda: svc.cursor(STREAM) >= time_us, APPLY_TIMEOUT,
          lambda: f"/health's cursor to reach {what} ({time_us}; it is {svc.cursor(STREAM)})", interval=0.25)


def gunicorn_flags(line: str) -> list[str]:
    """The flags of a gunicorn command line, the bind address left out."""
    words = shlex.split(line[line.index("gunicorn") + len("gunicorn"):])
    i = words.index("--bind")
    return words[:i] + words[i + 2:]


@contextlib.contextmanager
def refusing_port():
    """A loopback port bound and not listening: every connect is refused, and nobody else can take it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


# -------------------------------------------------------------------------------------------------- test

def test_engine_fails_over_survives_kill9_mid_burst_and_tells_operators_the_truth(pds, database_url, tmp_path):
    t0 = time.monotonic()
    marks: list[tuple[str, float]] = []

    def mark(label: str) -> None:
        marks.append((label, time.monotonic() - t0))
        print(f"[{time.monotonic() - t0:6.1f} s] {label}", flush=True)

    sfx = secrets.token_hex(2)  # the session PDS is shared
    accts = [create_account(pds, f"{name}{sfx}") for name in ("opa", "opb", "viewer")]
    passwords = [app_password(pds, a, f"feather-engine-{sfx}") for a in accts]
    mark("three accounts and their app passwords on the reference PDS")
    home, run_dir = tmp_path / "home", tmp_path / "run"
    home.mkdir()
    run_dir.mkdir()
    services: list[ServiceProcess] = []
    with FakeJetstream() as js, refusing_port() as dead_port, refusing_port() as dead_peer, \
            second_database(database_url, tmp_path) as database_b:
        dead = f"ws://127.0.0.1:{dead_port}/subscribe"
        # HOME and XDG_RUNTIME_DIR shared by both services: where gunicorn's default control socket lives.
        common = {"FEATHERREADER_ENV": "development", "SECRET_KEY": secrets.token_hex(32),
                  "FEATHERREADER_ALLOW_APP_PASSWORDS": True, "FEATHERREADER_ALLOW_PRIVATE_NETWORK": True,
                  "FEATHERREADER_PLC_URL": pds.plc_url, "FEATHERREADER_HANDLE_RESOLVER": pds.pds_url,
                  "FEED_SERVE": "all", "FEATHERREADER_LOG_LEVEL": "INFO", "HOME": home, "XDG_RUNTIME_DIR": run_dir}
        svc = ServiceProcess(service_env(
            DATABASE_URL=database_url, FEATHERREADER_DATA_DIR=tmp_path / "data-a",
            FEATHERREADER_JETSTREAM_HOSTS=f"{dead},{js.url}",
            FEATHERREADER_ADMIN_DIDS=f"{accts[0].did},{accts[1].did}", **common), tmp_path / "service-a.log")
        svc_b = ServiceProcess(service_env(
            DATABASE_URL=database_b, FEATHERREADER_DATA_DIR=tmp_path / "data-b", FEATHERREADER_JETSTREAM_HOSTS=dead,
            FEATHERREADER_ADMIN_DIDS=accts[0].did, FEATHERREADER_EXTRA_FEATURES="tests.support.peer_job_feature",
            PEER_JOB_URL=f"http://127.0.0.1:{dead_peer}/", **common), tmp_path / "service-b.log")
        services += [svc, svc_b]
        try:
            scenario(svc, svc_b, js, dead, accts, passwords, database_url, database_b, home, run_dir, mark)
        except BaseException:
            for s in services:
                print_service_log(s, 100)
            raise
        finally:
            for s in services:
                s.stop()
    print("\ntimeline:")
    for label, at in marks:
        print(f"  {at:6.1f} s  {label}")
    print(f"total {time.monotonic() - t0:.1f} s")


def scenario(svc, svc_b, js, dead, accts, passwords, database_url, database_b, home, run_dir, mark) -> None:
    # 0. The harness runs what `make run` and the Procfile run.
    makefile = next(ln for ln in (REPO_ROOT / "Makefile").read_text().splitlines() if "gunicorn -k" in ln)
    procfile = next(ln for ln in (REPO_ROOT / "Procfile").read_text().splitlines() if ln.startswith("web:"))
    assert gunicorn_flags(makefile) == gunicorn_flags(procfile) == gunicorn_flags("gunicorn " + " ".join(
        svc.gunicorn_args())), (makefile, procfile, svc.gunicorn_args())

    # 1. Start with the unreachable host first: /health until ok, remembering what it said on the way.
    # B (step 6) boots at the same moment, beside A on the same machine, and runs to the end.
    b_started: list[BaseException | None] = []
    boot_b = threading.Thread(target=lambda: b_started.append(start_quietly(svc_b)), daemon=True)
    boot_b.start()
    svc.start()
    seen: list[str] = []

    def healthy() -> bool:
        h = svc.health()
        said = f"{h['status']}: {h['reasons']}"
        if not seen or seen[-1] != said:
            seen.append(said)
        return h["status"] == "ok"
    _wait(healthy, 60, lambda: f"/health ok after failing over to the fake: {seen}", interval=0.1)
    h = svc.health()
    stream = stream_of(h)
    mark(f"service A up and ok after failing over; /health said on the way: {seen}")
    print(f"  degraded before connecting caught: {any('has not connected' in s for s in seen)}")
    assert (stream["connected"], stream["host"], stream["restarts"], stream["lag_secs"]) == (True, js.url, 0, None), \
        stream
    assert stream["had_error"] is True and stream["last_error_at"], stream  # what it said: on /admin, step 2
    assert h["reasons"] == [] and h["database"]["ok"], h
    # The sync shard has no account to follow: idle by design, never "not connected" (a publish
    # before its first membership query once said so on PostgreSQL).
    assert not any("sync:0" in said for said in seen), seen

    # 2. The burst, with operators on /admin and a non-operator refused.
    people = [Person(svc, acct, label) for acct, label in zip(accts, ("operator A", "operator B", "viewer"))]
    for person, password in zip(people, passwords):
        person.sign_in(password)
    assert f"connect to {dead} failed" in people[0].get("/admin").text  # the last error /health leaves out
    chunks, expected = burst([fake_did(n) for n in range(AUTHORS)])
    outage, stop = Outage(), threading.Event()
    loaders = [Loader(p, operator, outage, stop, [dead, js.url]) for p, operator in zip(people, (True, True, False))]
    appender = Appender(js, chunks)
    appender.start()
    for loader in loaders:
        loader.start()
    mark(f"burst started: {sum(map(len, chunks))} events in {len(chunks)} chunks; 2 operators and a viewer on /admin")

    # 3. kill -9 mid-burst, restart, resume from exactly saved − 5 s.
    _wait(lambda: len(appender.times) >= KILL_AFTER_CHUNKS and svc.cursor(STREAM) >= appender.times[KILL_AFTER_CHUNKS - 1],
          APPLY_TIMEOUT, lambda: f"the first {KILL_AFTER_CHUNKS} chunks to be applied ({svc.cursor(STREAM)})",
          interval=0.1)
    outage.begin()
    svc.kill9()
    before = js.stats()["connects_total"]  # the dead process opens no more
    saved = saved_cursor(database_url, STREAM)
    mark(f"kill -9 after {len(appender.times)} chunks appended; saved cursor {saved}")
    assert saved is not None, "nothing was saved before the kill"
    svc.start()
    outage.end()
    mark("restarted: /health answers")
    conn = new_connection(js, before)
    mark(f"restarted; the stream reconnected with cursor {conn['cursor']}")
    assert conn["cursor"] == saved - OVERLAP_US, \
        f"the restart must resume from the saved cursor − 5 s: asked {conn['cursor']}, saved {saved}"
    appender.join(120)
    assert appender.error is None and not appender.is_alive(), appender.error
    last = appender.times[-1]
    assert saved < last, f"the kill came after the whole burst was saved ({saved} >= {last}): not mid-burst"
    wait_cursor(svc, last, "the burst's last event")
    mark(f"the whole burst applied: /health's cursor is the last event's ({last})")
    stop.set()
    for loader in loaders:
        loader.join(60)
    problems = [p for loader in loaders for p in loader.problems]
    assert not problems, "during the burst:\n" + "\n".join(problems[:20])
    for loader in loaders:
        print(f"  {loader.person.label}: {loader.loads} ({loader.excused} requests excused by the outage)")
        assert min(loader.loads.values()) >= 1, (loader.person.label, loader.loads)
    check_posts(svc, expected, "after the kill -9 and the replay")
    mark(f"every post exactly as the events left it: {len(expected)} stored")

    # 4. A tail, then quiet: the saved cursor catches up with the last event.
    tail_author = fake_did(AUTHORS)
    tail = [make_commit(tail_author, POST, f"t{i:04d}", "create", record=post(f"tail {i}")) for i in range(TAIL)]
    tail_last = js.append(tail)
    expected.update({at_uri(tail_author, f"t{i:04d}"): f"tail {i}" for i in range(TAIL)})
    wait_cursor(svc, tail_last, "the tail's last event")
    _wait(lambda: saved_cursor(database_url, STREAM) == tail_last, 30,
          lambda: f"the saved cursor to catch up when quiet ({saved_cursor(database_url, STREAM)} != {tail_last})")
    quiet: dict = {}

    def steady() -> bool:  # the published row trails by up to one publish (2 s)
        quiet.update(svc.health())
        stream = stream_of(quiet)
        return (quiet["status"], stream.get("cursor_time_us"), stream.get("connected"), stream.get("host")) == (
            "ok", tail_last, True, js.url)
    _wait(steady, 30, lambda: f"/health ok, connected, at the tail's last event: {quiet}")
    stream = stream_of(quiet)
    mark(f"quiet: saved cursor = /health cursor = the last event ({tail_last}); lag {stream.get('lag_secs')} s")
    assert stream["lag_secs"] is not None and stream["events_per_sec"] > 0, stream

    # 5. Every connection dropped: reconnect from exactly last − 5 s, the overlap again, still exact.
    before, log_at = js.stats()["connects_total"], len(svc.log_text())
    dropped = js.drop()
    conn = new_connection(js, before)
    delay = reconnect_delay(svc, log_at)
    mark(f"the fake dropped {dropped} connection(s); the stream reconnected with cursor {conn['cursor']} "
         f"(the service said it would wait {delay} s)")
    assert dropped == 1, f"one connection (the feeds stream) was expected, {dropped} dropped"
    assert conn["cursor"] == tail_last - OVERLAP_US, (conn["cursor"], tail_last)
    # The dropped connection delivered events, so the backoff started over: the first step (1 s
    # ± 25 %), not the second (2 s ± 25 %) that this process's failed first connect had reached.
    assert delay <= round(BACKOFF_MIN * (1 + JITTER), 1), f"the backoff was not reset: {delay} s"
    marker = make_commit(tail_author, POST, "marker", "create", record=post("after the replay"))
    marker_at = js.append([marker])
    expected[at_uri(tail_author, "marker")] = "after the replay"
    wait_cursor(svc, marker_at, "an event after the replayed overlap")
    check_posts(svc, expected, "after the reconnect's replay")
    mark(f"after the reconnect: every post exactly once ({len(expected)} stored)")

    token = secrets.token_hex(4)
    statuses = {}
    for person, code in zip(people, (200, 200, 403)):
        for n in range(3):
            path = f"/admin?probe={token}-{person.label.replace(' ', '')}-{n}"
            statuses[path] = person.get(path).status_code
            assert statuses[path] == code, (person.label, path, statuses[path])
    _wait(lambda: all(access_lines(svc, p, c) == 1 for p, c in statuses.items()), 15,
          lambda: f"one access-log line per request: {[(p, c, access_lines(svc, p, c)) for p, c in statuses.items()]}")
    mark(f"access log: one line per request ({len(statuses)} marked requests)")

    # 6. A second instance beside the first: an unreachable Jetstream and a job whose peer is down.
    boot_b.join(120)
    assert b_started == [None], f"service B did not start beside A: {b_started}"
    mark(f"service B has been up beside A since the start ({svc_b.url} and {svc.url})")
    job = peer_job_feature.JOB_ID
    reasons_b: list[str] = []

    def b_degraded() -> bool:
        reasons_b[:] = svc_b.health()["reasons"]
        stream_reason = f"stream {STREAM} has not connected to Jetstream"
        job_reason = re.compile(rf"job {job} failed its last \d+ runs$")
        return (len(reasons_b) == 2 and any(r.startswith(stream_reason) for r in reasons_b)
                and any(job_reason.match(r) for r in reasons_b))
    _wait(b_degraded, 60, lambda: f"B's /health to name the stream and the job: {reasons_b}", interval=0.25)
    hb = svc_b.health()
    mark(f"B degraded: {hb['reasons']}")
    assert hb["status"] == "degraded" and len(hb["reasons"]) == 2, hb["reasons"]
    stream_b = stream_of(hb)
    assert (stream_b["connected"], stream_b["host"]) == (False, dead), stream_b
    assert hb["jobs"][job]["streak"] >= 3 and hb["jobs"][job]["had_error"] is True, hb["jobs"]

    def a_steady() -> bool:  # the published row trails the reconnect by up to one publish (2 s)
        h = svc.health()
        return (h["status"], stream_of(h).get("cursor_time_us"), stream_of(h).get("connected"),
                stream_of(h).get("host")) == ("ok", marker_at, True, js.url)
    _wait(a_steady, 30, lambda: f"A to stay ok, connected, at the last event: {svc.health()}")
    operator_b, stranger_b = Person(svc_b, accts[0], "operator A on B"), Person(svc_b, accts[1], "operator B on B")
    operator_b.sign_in(passwords[0])
    stranger_b.sign_in(passwords[1])
    page = operator_b.get("/admin")
    assert page.status_code == 200, page.text[:300]
    for wanted in ("Overall: degraded", f'<th scope="row">{job}</th>', "<strong>not connected</strong>",
                   f"stream {STREAM} has not connected to Jetstream (last error: connect to {dead}",
                   f"job {job} failed its last", "runs (last error: ConnectionError"):
        assert wanted in page.text, f"B's /admin lacks {wanted!r}"
    assert stranger_b.get("/admin").status_code == 403  # an operator of A only
    for ctl in (home / ".gunicorn" / "gunicorn.ctl", run_dir / "gunicorn.ctl"):
        assert not ctl.exists(), f"a gunicorn control socket at the shared default path {ctl}"
    for s in (svc, svc_b):
        assert "control socket" not in s.log_text().lower(), error_lines(s)
    mark("B's /health and /admin name the stream and the job; A still ok; no control socket")


def reconnect_delay(svc: ServiceProcess, log_at: int) -> float:
    """The delay the service chose after its stream was disconnected, from its log past log_at."""
    said = re.compile(rf"jetstream {re.escape(STREAM)}: disconnected \(.*\); reconnecting in ([0-9.]+)s")
    found: list[str] = []

    def logged() -> bool:
        found[:] = said.findall(svc.log_text()[log_at:])
        return bool(found)
    _wait(logged, 30, "the service to log its reconnect")
    return float(found[0])


def start_quietly(svc: ServiceProcess) -> BaseException | None:
    try:
        svc.start()
    except Exception as exc:  # noqa: BLE001 (reported by the main thread)
        return exc
    return None


def access_lines(svc: ServiceProcess, path: str, status: int) -> int:
    """Lines of gunicorn's access log (stdout) for one request line with this status."""
    line = re.compile(r'^127\.0\.0\.1 - \S+ \[[^]]+\] "GET ' + re.escape(path) + rf' HTTP/1\.1" {status} ', re.MULTILINE)
    return len(line.findall(svc.log_text()))
