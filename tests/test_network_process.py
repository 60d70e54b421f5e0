"""The network catalogue at its edges, with the whole service running: the `make run` process
(gunicorn, the gevent worker and its background workers), Bluesky's reference PDS on loopback and
its firehose bridged into the fake Jetstream. Everything is driven over HTTP, the way a browser
without JavaScript, a script or a person does.

World (real `community.lexicon.rss.subscription` records in the reference PDS; k = 3):
  - eight accounts with records before the service starts, listed by a fake relay
    (listReposByCollection). The fake also stands in front of the reference PLC, forwarding every
    DID document request unchanged, so the rebuild reads the real PDS and the test sees which DIDs
    it reached; for H1 it also stands in front of the PDS. Sorted by DID the eight play E, X, H1,
    H2, P4, P5, P6, Y: the rebuild takes DIDs in that order, two at a time;
  - three accounts (N1..N3) whose records only ever arrive through the stream (N1 is the operator),
    and U, an account with no records at all;
  - feeds above the floor, at it (exactly 3), below it (2 accounts, 3 records), and one
    secret-bearing URL held by four accounts that must never be indexed.

Steps:
  1. The service boots with an empty catalogue and starts a rebuild. With E and X done it parks:
     the fake has read H1's records off the PDS and holds the answer, and holds H2's DID document.
  2. H1 deletes a record its held listing still names, and Y (not reached yet) opts out through
     the form as a browser without JavaScript does (session cookie, CSRF token). The listing is
     let through: the catalogue, exactly, once the rebuild has done all but H2 (the delete won, Y
     skipped without a request for its DID document).
  3. More live writes mid-rebuild: subscriptions, a delete, a create+delete last. kill -9, restart:
     the stream resumes from its saved cursor minus the overlap (asserted from the cursor it asks
     for, so the create+delete is replayed), the rebuild resumes where it stopped: no new
     enumeration, no DID read again, H2 read.
  4. X opts out at the same moment as new records (X's among them) flow in, and so does U; after
     X's opt-out X writes again, to the feed that sits exactly on the floor; N2 moves a record to
     another feed (an update). The confirmations for X (indexed), U (never indexed) and a DID whose
     document is gone (opted out with nothing fetched) must be the same bytes; an unresolvable
     handle gets its own "could not be looked up" sentence.
  5. N1 (signed in before the kill; the session survives it): /network/me lists N1's records
     straight off the PDS, the secret one flagged; the operator page says the rebuild is done over
     the accounts the opt-outs left in its queue. N1 asks to be named (the form, with its token)
     and is named by handle; N1 then changes handle on the PDS, and once the #identity event is in, /network never shows
     the old handle again (the DID, or the new handle once re-verified).
  6. The fake Jetstream drops every connection; the stream reconnects with an overlap; a later
     record marks the replay as applied.
  7. Exact end state: /network's two lists, counts and names, the count API for every feed, the
     number of indexed rows, the secret absent everywhere; /network the same bytes signed in and
     out, and it and the count API the only public-cacheable responses.

Timing is printed (`-s` shows it); nothing asserts on time.
"""
from __future__ import annotations

import collections
import random
import re
import secrets
import sqlite3
import string
import time
from urllib.parse import urljoin

import gevent
import pytest
import requests
from gevent.pool import Pool

from tests.support.fake_jetstream import FakeJetstream
from tests.support.fake_relay import FakeNetwork
from tests.support.pds import tid_now, xrpc
from tests.support.process_world import (
    Acct,
    Person,
    Tap,
    app_password,
    apply_creates,
    create_account,
    create_record,
    delete_record,
    live_firehose,
    now_iso,
    stopped_after,
)
from tests.support.process_world import wait_for as _wait
from tests.support.service_process import ServiceProcess, service_env

pytestmark = [pytest.mark.pds, pytest.mark.slow]

COLLECTION = "community.lexicon.rss.subscription"
STREAM = "network"
K = 3
ROLES = ("E", "X", "H1", "H2", "P4", "P5", "P6", "Y")  # relay-listed, in DID order
LIVE = ("N1", "N2", "N3")
# Records each relay-listed account holds before the service starts (feed names; `secret` is the
# secret-bearing URL). H1 holds `below` twice: two accounts, three records, still under the floor.
BEFORE = {"E": ["top", "at", "secret"], "X": ["top"], "H1": ["top", "below", "below"], "H2": ["top", "secret"],
          "P4": ["top", "below", "gone"], "P5": ["at", "secret", "gone"], "P6": ["at", "gone"], "Y": ["at"]}
APPLY_TIMEOUT = 30.0
REPLAY_OVERLAP_US = 5_000_000  # the documented rewind (feather/jetstream/store.py)
SETTLE_TIMEOUT = 120.0


# ---------------------------------------------------------------------------------- what should be true

class Model:
    """Every subscription record in the world and who opted out; what the catalogue must show."""

    def __init__(self, feeds: dict[str, str], secret: str):
        self.feeds, self.secret = feeds, secret
        self.records: dict[tuple[str, str], str] = {}  # (did, rkey) -> url
        self.opted_out: set[str] = set()
        self.names: dict[str, set[str]] = {}  # an attributed DID -> the names the page may show for it

    def add(self, did: str, rkey: str, url: str) -> None:
        self.records[(did, rkey)] = url

    def remove(self, did: str, rkey: str) -> None:
        del self.records[(did, rkey)]

    def without(self, dids: set[str]) -> Model:
        """What the catalogue holds while the rebuild has not reached `dids` yet."""
        part = Model(self.feeds, self.secret)
        part.records = {key: url for key, url in self.records.items() if key[0] not in dids}
        part.opted_out, part.names = set(self.opted_out), dict(self.names)
        return part

    def rows(self) -> int:
        return sum(1 for (did, _), url in self.records.items() if did not in self.opted_out and url != self.secret)

    def counts(self) -> dict[str, int]:
        holders = collections.defaultdict(set)
        for (did, _), url in self.records.items():
            if did not in self.opted_out and url != self.secret:
                holders[url].add(did)
        return {url: len(dids) for url, dids in holders.items()}

    def shown(self) -> dict[str, int]:
        return {url: n for url, n in self.counts().items() if n >= K}

    def most_subscribed(self) -> list[tuple[str, int]]:
        return sorted(self.shown().items(), key=lambda kv: (-kv[1], kv[0]))

    def named(self) -> dict[str, set[str]]:
        """Shown feed -> the attributed DIDs holding it."""
        shown = self.shown()
        out: dict[str, set[str]] = {}
        for (did, _), url in self.records.items():
            if url in shown and did in self.names and did not in self.opted_out:
                out.setdefault(url, set()).add(did)
        return out


# ------------------------------------------------------------------------------------ the service side

MOST = re.compile(r"<li>(?:<a [^>]*>)?([^<]+)(?:</a>)?: (\d+) accounts(?: — including ([^<]+))?</li>")
RECENT = re.compile(r"<li>(?:<a [^>]*>)?([^<]+)(?:</a>)?, first seen")
ME_ITEM = re.compile(r"<li>(?:<a [^>]*>)?([^<]+)(?:</a>)?,\s*added <time[^>]*>[^<]*</time>( — looks secret-bearing)?")


def page_lists(html: str) -> tuple[set[str], list[tuple[str, int]], dict[str, list[str]]]:
    """(the feeds under "Recently added", [(feed, count)] under "Most subscribed", feed -> names shown)."""
    recent, _, most = html.partition("<h2>Most subscribed</h2>")
    rows = MOST.findall(most)
    return (set(RECENT.findall(recent)), [(url, int(n)) for url, n, _ in rows],
            {url: names.split(", ") for url, _, names in rows if names})


def names_problems(model: Model, shown_names: dict[str, list[str]]) -> list[str]:
    want = model.named()
    problems = []
    for url in sorted(set(want) | set(shown_names)):
        got, holders = shown_names.get(url, []), want.get(url, set())
        ok = len(got) == len(holders) and all(any(n in model.names[d] for d in holders) for n in got) \
            and all(any(n in model.names[d] for n in got) for d in holders)
        if not ok:
            problems.append(f"/network names {got} next to {url}; may name {[sorted(model.names[d]) for d in holders]}")
    return problems


def peek(database_url: str, *dids_and_rkey: str) -> list[str]:
    """Read-only: the catalogue rows and tombstones of some DIDs, and the rebuild's state."""
    *dids, rkey = dids_and_rkey
    marks = ", ".join("?" * len(dids))
    queries = [(f"SELECT did, rkey, feed_url, rev_us, indexed_at FROM net_subscription WHERE did IN ({marks})", dids),
               (f"SELECT did, rkey, time_us FROM net_tombstone WHERE did IN ({marks})", dids),
               ("SELECT key, value FROM network_state WHERE key LIKE 'backfill.%'", []),
               ("SELECT did, state, updated_at FROM net_backfill_queue ORDER BY did", [])]
    out = [f"deleted rkey: {rkey}"]
    if database_url.startswith("sqlite:///"):
        conn = sqlite3.connect(f"file:{database_url[len('sqlite:///'):]}?mode=ro", uri=True)
    else:
        import psycopg2

        conn = psycopg2.connect(database_url)
        queries = [(q.replace("?", "%s"), a) for q, a in queries]
    try:
        for sql, args in queries:
            try:
                cur = conn.cursor()
                cur.execute(sql, args)
                out.append(f"{sql.split(' WHERE')[0]}: {cur.fetchall()}")
            except Exception as exc:  # noqa: BLE001 (a diagnostic must not hide the failure)
                out.append(f"{sql}: {exc}")
    finally:
        conn.close()
    return out


def catalogue_problems(svc: ServiceProcess, model: Model) -> list[str]:
    r = requests.get(svc.url + "/network", timeout=30)
    if r.status_code != 200:
        return [f"GET /network -> {r.status_code}"]
    recent, most, shown_names = page_lists(r.text)
    problems = names_problems(model, shown_names)
    want = model.most_subscribed()
    if most != want:
        problems.append(f"/network 'Most subscribed' shows {most}, the model says {want}")
    if recent != set(model.shown()):
        problems.append(f"/network 'Recently added' shows {sorted(recent)}, the model says {sorted(model.shown())}")
    secret_token = model.secret.rsplit("=", 1)[-1]
    if secret_token in r.text or model.secret in r.text:
        problems.append("/network shows the secret-bearing URL")
    counts = model.counts()
    for name, url in sorted(model.feeds.items()):
        c = requests.get(svc.url + "/api/network/count", params={"url": url}, timeout=30)
        if url == model.secret:
            if c.status_code != 400 or secret_token in c.text:
                problems.append(f"count API for the secret URL -> {c.status_code} {c.text[:200]}")
            continue
        body = c.json() if c.status_code == 200 else {"status": c.status_code}
        want_body = {"url": url, **({"subscribers": counts[url]} if counts.get(url, 0) >= K else {})}
        if body != want_body:
            problems.append(f"count API for {name}: {body}, the model says {want_body} "
                            f"({counts.get(url, 0)} accounts, k = {K})")
    return problems


def opt_out(svc: ServiceProcess, handle: str) -> dict:
    """The opt-out form as a browser without JavaScript submits it: GET the form (session cookie and
    CSRF token), POST it, follow the redirect. Returns what the visitor saw."""
    http = requests.Session()
    form = http.get(svc.url + "/network/opt-out", timeout=30)
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert form.status_code == 200 and token, f"GET /network/opt-out -> {form.status_code} {form.text[:300]}"
    r = http.post(svc.url + "/network/opt-out", data={"handle": handle, "csrf_token": token.group(1)},
                  headers={"Origin": svc.url, "Referer": svc.url + "/network/opt-out"},
                  allow_redirects=False, timeout=60)
    seen = {"status": r.status_code, "location": r.headers.get("Location"), "body": r.text,
            "cache": [r.headers.get("Cache-Control", "")]}
    if r.status_code in (302, 303):
        done = http.get(urljoin(svc.url + "/", r.headers["Location"]), timeout=30)
        seen.update(final_status=done.status_code, body=done.text)
        seen["cache"].append(done.headers.get("Cache-Control", ""))
    return seen


def opted_out_ok(seen: dict, who: str) -> None:
    assert seen["status"] == 303 and seen.get("final_status") == 200, f"opt-out of {who}: {seen}"


def stream_connection(js: FakeJetstream, old: set[str]) -> dict:
    for conn_id, f in js.stats()["last_filter"].items():
        if conn_id not in old and COLLECTION in (f.get("wantedCollections") or ()):
            return f
    return {}


def wait_stream_connection(js: FakeJetstream, old: set[str], timeout: float = 60.0) -> dict:
    found = {}

    def connected() -> bool:
        found.update(stream_connection(js, old))
        return bool(found)
    _wait(connected, timeout, lambda: f"the catalogue's stream to (re)connect: {js.stats()}")
    return found


def wait_applied(svc: ServiceProcess, time_us: int, what: str) -> None:
    _wait(lambda: svc.cursor(STREAM) >= time_us, APPLY_TIMEOUT,
          lambda: f"the service to apply {what} (event {time_us}, {STREAM} cursor {svc.cursor(STREAM)})")


def admin_figures(person: Person) -> dict:
    r = person.get("/admin/status")
    assert r.status_code == 200, f"GET /admin/status -> {r.status_code} {r.text[:300]}"
    rows = re.search(r"<dt>Subscription rows</dt><dd>(\d+)</dd>", r.text)
    rebuild = re.search(r"<dt>Rebuild</dt><dd>([^<]*)</dd>", r.text)
    return {"rows": int(rows.group(1)) if rows else None, "rebuild": rebuild.group(1) if rebuild else None}


# -------------------------------------------------------------------------------------------------- test

def test_network_catalogue_kill9_mid_rebuild_optouts_and_replay_whole_process(pds, database_url, tmp_path):
    t0 = time.monotonic()
    marks: list[tuple[str, float]] = []

    def mark(label: str) -> None:
        marks.append((label, time.monotonic() - t0))
        print(f"[{time.monotonic() - t0:6.1f} s] {label}", flush=True)

    net = FakeNetwork()
    net.plc_upstream, net.pds_upstream = pds.plc_url, pds.pds_url
    world = build_world(pds, net, mark)
    world["database_url"] = database_url
    try:
        # Started after the world is written: what the accounts held before boot reaches the
        # catalogue only through the rebuild, so a rebuild that does not resume cannot hide.
        with live_firehose(pds) as (js, tap):
            env = service_env(
                DATABASE_URL=database_url, FEATHERREADER_ENV="development", SECRET_KEY=secrets.token_hex(32),
                FEATHERREADER_DATA_DIR=tmp_path / "data", FEATHERREADER_ALLOW_APP_PASSWORDS=True,
                FEATHERREADER_ALLOW_PRIVATE_NETWORK=True, FEATHERREADER_JETSTREAM_HOSTS=js.url,
                FEATHERREADER_PLC_URL=net.url, FEATHERREADER_HANDLE_RESOLVER=pds.pds_url,
                FEATHERREADER_LOG_LEVEL="INFO", FEATHERREADER_NETWORK_INDEX=True, FEATHERREADER_NETWORK_PAGE=True,
                FEATHERREADER_NET_K=K, FEATHERREADER_RELAY_HOSTS=net.url, FEATHERREADER_ADOPTION_INTERVAL_SECS=0,
                FEATHERREADER_ADMIN_DIDS=world["acct"]["N1"].did, FEATHERREADER_LOGIN_RATE_LIMIT=100)
            with stopped_after(ServiceProcess(env, tmp_path / "gunicorn.log")) as svc:
                scenario(pds, net, js, tap, svc, world, mark)
    finally:
        net.close()
    print("\ntimeline:")
    for label, at in marks:
        print(f"  {at:6.1f} s  {label}")
    print(f"total {time.monotonic() - t0:.1f} s")


def build_world(pds, net: FakeNetwork, mark) -> dict:
    rng = random.Random()
    sfx = "".join(rng.choice(string.ascii_lowercase) for _ in range(4))  # the session PDS is shared
    accts: list[Acct] = Pool(6).map(lambda name: create_account(pds, name),
                                    [f"nc{i}{sfx}" for i in range(len(ROLES))] + [f"{r.lower()}{sfx}" for r in LIVE]
                                    + [f"nu{sfx}"])
    listed = sorted(accts[:len(ROLES)], key=lambda a: a.did)
    acct = dict(zip(ROLES, listed)) | dict(zip(LIVE, accts[len(ROLES):len(ROLES) + len(LIVE)]))
    acct["U"] = accts[-1]
    host = f"{sfx}.feeds.example.org"
    feeds = {name: f"https://{host}/{name}.xml" for name in ("top", "at", "below", "gone", "new", "blink", "late",
                                                           "marker")}
    feeds["secret"] = f"https://{host}/members.xml?token={secrets.token_hex(8)}"
    model = Model(feeds, feeds["secret"])
    rkeys: dict[tuple[str, str], str] = {}

    def write(role: str) -> None:
        items = []
        for name in BEFORE[role]:
            rkey = tid_now()
            items.append((COLLECTION, rkey, {"url": feeds[name], "createdAt": now_iso()}))
            model.add(acct[role].did, rkey, feeds[name])
            rkeys[(role, name)] = rkey
        apply_creates(pds, acct[role], items)
    Pool(6).map(write, ROLES)
    for role in ROLES:
        net.add_account(acct[role].did)
    password = app_password(pds, acct["N1"], f"feather-net-{sfx}")
    mark(f"world: {len(accts)} accounts, {len(model.records)} records before boot; relay lists "
         f"{' '.join(f'{r}={acct[r].did[-6:]}' for r in ROLES)}")
    return {"acct": acct, "model": model, "feeds": feeds, "rkeys": rkeys, "password": password}


def scenario(pds, net: FakeNetwork, js: FakeJetstream, tap: Tap, svc: ServiceProcess, world: dict, mark) -> None:
    acct, model, feeds, rkeys = world["acct"], world["model"], world["feeds"], world["rkeys"]
    did = {role: a.did for role, a in acct.items()}

    def subscribe(role: str, name: str) -> tuple[str, str, int]:
        rkey = create_record(pds, acct[role], COLLECTION, {"url": feeds[name], "createdAt": now_iso()})
        model.add(did[role], rkey, feeds[name])
        return role, rkey, tap.time_of(did[role], COLLECTION, rkey, "create")

    def resubscribe(role: str, rkey: str, name: str) -> int:
        """The same record now names another feed (an update on the stream)."""
        r = xrpc(pds.pds_url, "POST", "com.atproto.repo.putRecord", token=acct[role].token,
                 json={"repo": did[role], "collection": COLLECTION, "rkey": rkey,
                       "record": {"$type": COLLECTION, "url": feeds[name], "createdAt": now_iso()}})
        assert r.status_code == 200, f"putRecord -> {r.status_code} {r.text[:300]}"
        model.add(did[role], rkey, feeds[name])
        return tap.time_of(did[role], COLLECTION, rkey, "update")

    def unsubscribe(role: str, rkey: str) -> int:
        delete_record(pds, acct[role], COLLECTION, rkey)
        model.remove(did[role], rkey)
        return tap.time_of(did[role], COLLECTION, rkey, "delete")

    # 1. Boot; the first rebuild parks with E and X done: the fake has H1's records in hand (read
    # from the PDS when asked) and holds the answer; it holds H2's DID document.
    net.proxied.add(did["H1"])
    net.hold("records", did["H1"])
    net.hold("doc", did["H2"])
    svc.start()
    mark(f"service up on {svc.url}; /health: {svc.health().get('status')}")
    _wait(lambda: net.record_calls_since(did["H1"]) and net.did_doc_calls(did["H2"]), 60,
          lambda: f"the rebuild to reach H1 and H2 (DID documents asked for: {net.did_doc_calls()})")
    asked = net.did_doc_calls()
    assert len(net.relay_calls()) == 1, f"one enumeration: {net.relay_calls()}"
    assert asked in ([did[r] for r in ("E", "X", "H1", "H2")], [did[r] for r in ("E", "X", "H2", "H1")]), \
        f"the rebuild's first DIDs, in order: {asked}"
    n1 = Person(svc, acct["N1"], "N1")  # the operator, who also reads their own records later
    n1.sign_in(world["password"])
    mark("the rebuild is mid-way: E and X read, H1's listing held, H2's DID document held; N1 signed in")

    # 2. While H1's listing is in flight, H1 deletes a record it lists and Y (not reached yet) opts
    # out anonymously. Then H1's stale listing is let through: the delete must win.
    jobs = [gevent.spawn(unsubscribe, "H1", rkeys[("H1", "top")]), gevent.spawn(opt_out, svc, acct["Y"].handle)]
    gevent.joinall(jobs, raise_error=True)
    opted_out_ok(jobs[1].value, "Y")
    model.opted_out.add(did["Y"])
    wait_applied(svc, jobs[0].value, "H1's delete")
    net.release("records", did["H1"])
    figures = {}

    def only_h2_left() -> bool:
        figures.update(admin_figures(n1))
        # Y's opt-out took it out of the rebuild's queue too: seven accounts, all read but H2.
        return figures["rebuild"] == f"running: {len(ROLES) - 2} of {len(ROLES) - 1} accounts, 0 failed"
    _wait(only_h2_left, SETTLE_TIMEOUT, lambda: f"the rebuild to read all but H2: {figures}")
    part = model.without({did["H2"]})
    problems = catalogue_problems(svc, part)
    if figures["rows"] != part.rows():
        problems.append(f"the catalogue holds {figures['rows']} rows, the model {part.rows()}")
    if problems:  # what the database holds for the two DIDs in play, for whoever reads the failure
        problems += peek(world["database_url"], did["H1"], did["H2"], rkeys[("H1", "top")])
    assert not problems, "mid-rebuild, after H1's stale listing:\n" + "\n".join(problems)
    mark(f"mid-rebuild state exact ({figures}): H1's deleted record stayed deleted, Y skipped")

    # 3. More live writes mid-rebuild: subscriptions, a delete, a create+delete last.
    jobs = [gevent.spawn(subscribe, r, "new") for r in ("N1", "N2", "E")]
    gevent.joinall(jobs, raise_error=True)
    waits = [j.value[2] for j in jobs]
    waits.append(subscribe("N1", "secret")[2])
    waits.append(unsubscribe("P6", rkeys[("P6", "gone")]))
    waits += [subscribe(r, "blink")[2] for r in ("E", "P5")]
    # Back to back, last: both inside the overlap the restart replays (REPLAY_OVERLAP_US, 5 s).
    blink_rkey = create_record(pds, acct["P4"], COLLECTION, {"url": feeds["blink"], "createdAt": now_iso()})
    delete_record(pds, acct["P4"], COLLECTION, blink_rkey)
    blink_at = tap.time_of(did["P4"], COLLECTION, blink_rkey, "create")
    unblink_at = tap.time_of(did["P4"], COLLECTION, blink_rkey, "delete")
    wait_applied(svc, max(waits + [unblink_at]), "the live writes before the kill")
    mark(f"live writes applied mid-rebuild (P4's blink created and deleted {(unblink_at - blink_at) / 1e3:.0f} ms "
         f"apart)")

    # kill -9 with H2 still held; restart. The stream replays (its cursor at or before P4's blink
    # create); the rebuild resumes where it stopped.
    before = set(js.stats()["last_filter"])
    svc.kill9()
    net.release_holds()
    restarted = time.monotonic()
    svc.start()
    conn = wait_stream_connection(js, before)
    mark(f"kill -9 + restart: the stream reconnected with cursor {conn['cursor']} "
         f"({(blink_at - int(conn['cursor'] or 0)) / 1e6:.1f} s before P4's blink create)")
    assert conn["cursor"] is not None and int(conn["cursor"]) < unblink_at, \
        f"the restart must rewind before the last applied event (cursor {conn['cursor']}, last {unblink_at})"
    if unblink_at - blink_at < REPLAY_OVERLAP_US:  # else the machine stalled between two requests
        assert int(conn["cursor"]) <= blink_at, \
            f"the restart must replay the create+delete (cursor {conn['cursor']}, create at {blink_at})"

    # 4. X and U opt out at the same moment as new subscriptions (X's own among them) flow in.
    stranger = f"nobody-{secrets.token_hex(3)}.test"
    # A DID the PLC directory has no document for (404 through the fake): opted out as typed.
    gone = "did:plc:" + "".join(random.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(24))
    jobs = [gevent.spawn(opt_out, svc, acct["X"].handle), gevent.spawn(opt_out, svc, acct["U"].handle),
            gevent.spawn(subscribe, "X", "new"), gevent.spawn(subscribe, "N3", "new"),
            gevent.spawn(opt_out, svc, stranger), gevent.spawn(opt_out, svc, gone)]
    gevent.joinall(jobs, raise_error=True)
    seen_x, seen_u, seen_stranger, seen_gone = jobs[0].value, jobs[1].value, jobs[4].value, jobs[5].value
    opted_out_ok(seen_x, "X")
    opted_out_ok(seen_u, "U")
    model.opted_out |= {did["X"], did["U"]}
    for seen, who in ((seen_u, "one that never was"), (seen_gone, "a DID whose document is gone")):
        assert (seen_x["status"], seen_x["location"], seen_x["body"]) == \
            (seen["status"], seen["location"], seen["body"]), \
            f"the opt-out confirmation differs between an indexed account and {who}"
    assert net.did_doc_calls(gone) == [], "the opt-out by DID fetched its DID document"
    assert seen_stranger["status"] == 400 and "could not be looked up" in seen_stranger["body"], seen_stranger
    waits = [jobs[2].value[2], jobs[3].value[2]]
    # X's after its opt-out committed: `at` sits exactly on the floor, so one more would show.
    waits += [subscribe("X", "at")[2], subscribe("N1", "late")[2]]
    n2_late = subscribe("N2", "late")[1]
    waits.append(resubscribe("N2", n2_late, "top"))
    wait_applied(svc, max(waits), "the writes around the opt-outs")
    mark("X and U opted out while subscriptions flowed in; X wrote again afterwards; N2 moved a record")

    # 5. N1 (still signed in: the session outlives the restart): their records off the PDS, and
    # the operator's view of the rebuild.
    me = n1.get("/network/me")
    assert me.status_code == 200, (me.status_code, me.text[:300])
    mine = {(url, bool(flag)) for url, flag in ME_ITEM.findall(me.text)}
    want_mine = {(url, url == model.secret) for (d, _), url in model.records.items() if d == did["N1"]}
    assert mine == want_mine, f"/network/me lists {mine}, N1's repo holds {want_mine}"
    figures = {}

    def rebuilt() -> bool:
        figures.update(admin_figures(n1))
        # Y left the queue at its opt-out; X leaves it too when its opt-out beats the last DID.
        return figures["rebuild"] in (f"done: {n} of {n} accounts, 0 failed" for n in (len(ROLES) - 2, len(ROLES) - 1))
    _wait(rebuilt, SETTLE_TIMEOUT, lambda: f"the rebuild to finish: {figures}")
    mark(f"/network/me lists N1's {len(mine)} records; operator page: {figures}")

    # N1 asks to be named, then changes handle: the old handle must never be shown again.
    form = n1.get("/network/attribution")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert form.status_code == 200 and token, (form.status_code, form.text[:300])
    r = n1.http.post(svc.url + "/network/attribution", data={"attribution": "on", "csrf_token": token.group(1)},
                     headers={"Origin": svc.url}, allow_redirects=False, timeout=30)
    assert r.status_code == 303, (r.status_code, r.text[:300])
    model.names[did["N1"]] = {acct["N1"].handle}
    named = page_lists(requests.get(svc.url + "/network", timeout=30).text)[2]
    assert not names_problems(model, named), names_problems(model, named)
    old_handle, new_handle = acct["N1"].handle, f"n1b{secrets.token_hex(3)}.test"
    r = xrpc(pds.pds_url, "POST", "com.atproto.identity.updateHandle", token=acct["N1"].token,
             json={"handle": new_handle})
    assert r.status_code == 200, f"updateHandle -> {r.status_code} {r.text[:300]}"
    model.names[did["N1"]] = {did["N1"], new_handle}  # the DID until the handle is verified again
    _wait(lambda: old_handle not in requests.get(svc.url + "/network", timeout=30).text, APPLY_TIMEOUT,
          f"/network to stop naming N1 by its old handle {old_handle}")
    mark(f"N1 named as {old_handle} once attributed; after the handle change no longer: "
         f"{page_lists(requests.get(svc.url + '/network', timeout=30).text)[2]}")
    since = net.did_doc_calls(since=restarted)
    assert did["H2"] in since, f"the resumed rebuild never read H2: {since}"
    for role in ("E", "H1", "P4"):
        assert did[role] not in since, f"the rebuild started over after the restart: it read {role} again ({since})"
    assert net.did_doc_calls(did["Y"]) == [], \
        "Y's DID document was asked for: the opt-out needs only the DID its handle names, and the rebuild skips Y"
    assert len(net.relay_calls()) == 1, f"the relay was enumerated again after the restart: {net.relay_calls()}"

    # 6. The fake Jetstream drops every connection: reconnect with an overlap, then a later record.
    saved = svc.cursor(STREAM)
    before = set(js.stats()["last_filter"])
    dropped = js.drop()
    conn = wait_stream_connection(js, before)
    mark(f"fake Jetstream dropped {dropped} connections; the stream reconnected with cursor {conn['cursor']} "
         f"(saved {saved})")
    assert conn["cursor"] is not None and int(conn["cursor"]) < saved, \
        f"the reconnect must ask for an overlap before the applied position (cursor {conn['cursor']}, saved {saved})"
    wait_applied(svc, subscribe("N3", "marker")[2], "a record written after the reconnect")

    # 7. Exact end state.
    problems = catalogue_problems(svc, model)
    figures = admin_figures(n1)
    if figures["rows"] != model.rows():
        problems.append(f"the catalogue holds {figures['rows']} rows, the model {model.rows()}")
    assert not problems, "end state:\n" + "\n".join(problems)
    mark(f"end state exact: most subscribed {[(u.rsplit('/', 1)[-1], n) for u, n in model.most_subscribed()]}, "
         f"{model.rows()} rows, counts {sorted((u.rsplit('/', 1)[-1][:12], n) for u, n in model.counts().items())}")
    same_bytes_and_caching(svc, n1, seen_x)
    mark("/network identical signed in and out; only it and the count API are public")


def same_bytes_and_caching(svc: ServiceProcess, n1: Person, optout_seen: dict) -> None:
    anon = requests.Session()
    for _ in range(3):  # a write landing between the fetches changes "Last updated": fetch again
        a, b, c = anon.get(svc.url + "/network", timeout=30), n1.get("/network"), anon.get(svc.url + "/network")
        if a.content == c.content:
            break
    assert a.content == c.content, "/network kept changing while nothing was written"
    assert b.content == a.content, "/network differs for a signed-in viewer"
    for r in (a, b):
        assert r.headers.get("Cache-Control") == "public, max-age=300", r.headers
        assert "Set-Cookie" not in r.headers and "Cookie" not in r.headers.get("Vary", ""), r.headers
    count = anon.get(svc.url + "/api/network/count", params={"url": "https://example.org/feed.xml"}, timeout=30)
    assert count.headers.get("Cache-Control") == "public, max-age=300", count.headers
    others = {path: n1.get(path) for path in ("/", "/about", "/network/me", "/network/opt-out", "/network/attribution",
                                              "/network/opt-out/done", "/api/session", "/admin/status", "/health")}
    others |= {f"anonymous {path}": anon.get(svc.url + path, timeout=30)
               for path in ("/", "/about", "/network/opt-out", "/network/opt-out/done", "/network/attribution")}
    public = {path: r.headers.get("Cache-Control") for path, r in others.items()
              if "public" in (r.headers.get("Cache-Control") or "")}
    public |= {f"opt-out POST/redirect: {c}": c for c in optout_seen["cache"] if "public" in c}
    assert not public, f"responses other than /network and the count API are public-cacheable: {public}"
