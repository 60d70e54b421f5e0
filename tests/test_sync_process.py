"""Graph sync as people use it, with the whole service running: the `make run` process (gunicorn, the
gevent worker and its background workers), Bluesky's reference PDS on loopback and its firehose
bridged into the fake Jetstream. Everything is driven over HTTP, the way a script or a person does.

World (all real records in the reference PDS):
  - two owners, each already following a few hundred accounts on Bluesky, Tangled and Grain, so the
    backfill takes several 100-record pages per app: Bluesky and Tangled more than one burst's three
    pages, Grain fewer (its listing finishes in the first burst, which is what "1 of 3 apps listed"
    shows over HTTP: the moment to kill);
  - 120 subject accounts with profiles on the apps; some lack a profile on one app and must end on
    the waiting list instead of being followed there;
  - 190 followed DIDs that exist on no PDS, followed by both owners on every app: they only make the
    listings long (nothing is ever written for them).

Steps:
  1. Both owners sign in with app passwords (POST /api/session, then X-CSRF-Token from GET
     /api/session) and turn sync on for bluesky, tangled and grain at the same moment.
  2. kill -9 of the whole service (gunicorn master + worker) mid-backfill, then a restart; then a
     second kill -9 while sync lanes are leased (writes underway, seen in sync_lanes): the restarted
     process must free the killed one's leases at its first tick (its log names each), not wait
     out LEASE_SECS. Wait until both backfills are done and both queues are drained (GET /api/sync).
     Repos checked.
  3. Unfollows made by the owners propagate to every app; a live follow propagates. Repos checked.
  4. The replay case of issue 13, point 2: owner 1 (paused, so the runner cannot race the replay)
     follows B on Bluesky, unfollows B, follows B on Tangled (record T2); once those events are
     applied, kill -9 + restart (the shard resumes from its saved cursor − 5 s and replays all
     three: asserted from the cursor it asks for), then the fake Jetstream drops every connection
     and the shard reconnects with the same overlap (within one process the consumer skips what it
     already queued, so it is the restart that re-applies). Resume: T2 must survive.
  5. Every repo, listed straight from the PDS, is exactly the expected follow set per app (the union
     of what the owner follows anywhere, minus unfollowed subjects, minus subjects waiting for a
     profile on that app), and no (collection, subject) has two records.

Timing and counts are printed (`-s` shows them); nothing asserts on time.
"""
from __future__ import annotations

import collections
import html
import json
import random
import re
import secrets
import string
import time

import gevent
import pytest
import requests
from gevent.pool import Pool

from tests.support.pds import tid_now, xrpc
from tests.support.process_world import (
    Acct,
    Person,
    apply_creates,
    assert_no_error_records,
    create_account,
    create_record,
    delete_record,
    follow_record,
    list_records,
    live_firehose,
    record_exists,
    stopped_after,
)
from tests.support.process_world import ok as _ok
from tests.support.process_world import wait_for as _wait
from tests.support.service_db import read_only
from tests.support.service_process import ServiceProcess, service_env

pytestmark = [pytest.mark.pds, pytest.mark.slow]

APPS = ("bluesky", "tangled", "grain")
FOLLOW = {"bluesky": "app.bsky.graph.follow", "tangled": "sh.tangled.graph.follow",
          "grain": "social.grain.graph.follow"}
PROFILE = {"bluesky": "app.bsky.actor.profile", "tangled": "sh.tangled.actor.profile",
           "grain": "social.grain.actor.profile"}
SHARD = "sync:0"

SUBJECTS = 120
PHANTOMS = 190  # + at most 10 real subjects on Grain = 200: pages of 100, 100, then the empty one
NO_PROFILE = {0: "tangled", 1: "tangled", 2: "tangled", 3: "grain", 4: "grain", 5: "bluesky"}
# Which subjects (by index) each owner follows with their own records before sync is turned on.
OWN_FOLLOWS = {
    0: {"bluesky": range(120), "tangled": range(6, 120), "grain": range(110, 120)},
    1: {"bluesky": range(10, 120), "tangled": range(115), "grain": range(6, 16)},
}
UNFOLLOWS = {0: ("tangled", 10), 1: ("grain", 12)}  # step 3: the owner deletes their own record

DRAIN_TIMEOUT = 180.0
STALL_SECS = 45.0  # no change in any owner's queue for this long: stuck (a retry waits 60 s)
APPLY_TIMEOUT = 30.0


# ------------------------------------------------------------------------------------------- the PDS side

def list_follows(pds, did: str, collection: str) -> list[tuple[str, str]]:
    """Every (rkey, subject) of one follow collection, straight from the PDS."""
    return [(rec["uri"].rsplit("/", 1)[-1], rec["value"].get("subject")) for rec in list_records(pds, did, collection)]


def phantom_did(rng: random.Random) -> str:
    return "did:plc:" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(24))


# ---------------------------------------------------------------------------------- what should be true

class Model:
    """The owners' own follow records and the subjects they unfollowed, and what sync must make of it."""

    def __init__(self, owners: list[Acct], profiles: dict[str, set[str]]):
        self.profiles = profiles  # subject DID -> apps it has a profile on (phantoms: none)
        self.own = {o.did: {app: {} for app in APPS} for o in owners}  # owner -> app -> subject -> rkey
        self.unfollowed = {o.did: set() for o in owners}

    def follow(self, owner: str, app: str, subject: str, rkey: str) -> None:
        self.own[owner][app][subject] = rkey
        self.unfollowed[owner].discard(subject)

    def unfollow(self, owner: str, app: str, subject: str) -> None:
        self.own[owner][app].pop(subject)
        self.unfollowed[owner].add(subject)
        for other in APPS:  # sync deletes the owner's own records of that subject too
            self.own[owner][other].pop(subject, None)

    def union(self, owner: str) -> set[str]:
        return set().union(*(self.own[owner][app] for app in APPS)) - self.unfollowed[owner]

    def expected(self, owner: str, app: str) -> set[str]:
        return {s for s in self.union(owner) if s in self.own[owner][app] or app in self.profiles.get(s, ())}

    def preview(self, owner: str) -> dict[str, tuple[int, int, int]]:
        """app -> (following, will_follow, will_wait) as turning sync on should promise them."""
        out = {}
        for app in APPS:
            missing = [s for s in self.union(owner) if s not in self.own[owner][app]]
            wait = sum(1 for s in missing if app not in self.profiles.get(s, ()))
            out[app] = (len(self.own[owner][app]), len(missing) - wait, wait)
        return out

    def waiting(self, owner: str) -> int:
        return sum(1 for app in APPS for s in self.union(owner)
                   if s not in self.own[owner][app] and app not in self.profiles.get(s, ()))


def repo_problems(pds, model: Model, owners: list[Acct]) -> tuple[list[str], dict]:
    problems, counts = [], {}
    for owner in owners:
        for app in APPS:
            records = list_follows(pds, owner.did, FOLLOW[app])
            per_subject = collections.Counter(subject for _, subject in records)
            counts[(owner.name, app)] = len(records)
            want = model.expected(owner.did, app)
            missing, extra = want - set(per_subject), set(per_subject) - want
            dupes = {s: n for s, n in per_subject.items() if n > 1}
            if missing:
                problems.append(f"{owner.name} {app}: {len(missing)} expected follows missing: {sorted(missing)[:6]}")
            if extra:
                problems.append(f"{owner.name} {app}: {len(extra)} unexpected follows: {sorted(extra)[:6]}")
            if dupes:
                problems.append(f"{owner.name} {app}: duplicate records for {len(dupes)} subjects: "
                                f"{sorted(dupes.items())[:6]}")
    return problems, counts


# ------------------------------------------------------------------------------------ the service side

class Owner(Person):
    """One owner's session with the service and the sync JSON API."""

    def state(self) -> dict:
        return _ok(self.get("/api/sync"), f"{self.label}: GET /api/sync")

    def change(self, **body) -> dict:
        return _ok(self.post_json("/api/sync", body), f"{self.label}: POST /api/sync {body}")

    def preview(self) -> requests.Response:
        return self.get("/api/sync/preview", params={"apps": ",".join(APPS)}, timeout=60)

    def page(self) -> str:
        """The owner's sync page as a person without JavaScript reads it: its text, one line per block.
        No raw DID may appear on it (people are named by handle, or "someone ..." until looked up)."""
        r = self.get(f"/u/{self.acct.handle}/social-graph-sync")
        assert r.status_code == 200, f"{self.label}: the sync page -> {r.status_code}"
        main = re.search(r"<main[^>]*>(.*)</main>", r.text, re.DOTALL)
        body = re.sub(r"<(script|style)[^>]*>.*?</\1>", "", main.group(1) if main else r.text, flags=re.DOTALL)
        body = re.sub(r"</(p|li|h\d|dt|dd|legend|label|button|div|section|ul|ol)>|<br\s*/?>", "\n", body)
        body = re.sub(r"<[^>]+>", " ", body)  # over the whole text: a tag's attributes may span lines
        lines = [" ".join(html.unescape(line).split()) for line in body.splitlines()]
        text = "\n".join(line for line in lines if line)
        assert "did:" not in text, f"{self.label}: a raw DID on the page:\n{text}"
        return text

    def show_page(self, when: str, activity_lines: int = 4) -> None:
        """Print what the person sees at this step: the page down to a few Activity lines."""
        text = self.page()
        head, _, activity = text.partition("\nActivity\n")
        shown = activity.splitlines()[:activity_lines]
        print(f"  --- {self.label}'s page {when} ---\n    " + head.replace("\n", "\n    ")
              + "\n    Activity\n    " + "\n    ".join(shown), flush=True)

    def activity(self, limit: int = 8) -> list[dict]:
        return _ok(self.get("/api/sync/activity", params={"limit": limit}), f"{self.label}: GET /api/sync/activity")["activity"]


def brief(state: dict) -> str:
    """What a person sees on GET /api/sync, on one line."""
    b, q = state.get("backfill", {}), state.get("queue", {})
    return (f"enabled={state.get('enabled')} paused={state.get('paused')}"
            f"{' (' + str(state.get('pause_reason')) + ')' if state.get('paused') else ''} apps={state.get('apps')}"
            f" backfill={json.dumps(b, sort_keys=True)} queue={json.dumps(q, sort_keys=True)}"
            f" waiting={state.get('waiting')}")


# -------------------------------------------------------------------------------------------------- test

def test_two_owners_three_apps_kill9_mid_backfill_and_replay_whole_process(pds, database_url, tmp_path):
    t0 = time.monotonic()
    marks: list[tuple[str, float]] = []

    def mark(label: str) -> None:
        marks.append((label, time.monotonic() - t0))
        print(f"[{time.monotonic() - t0:6.1f} s] {label}", flush=True)

    with live_firehose(pds) as (js, tap):
        world = build_world(pds, mark)
        owners, model = world["owners"], world["model"]
        env = service_env(
            DATABASE_URL=database_url, FEATHERREADER_ENV="development", SECRET_KEY=secrets.token_hex(32),
            FEATHERREADER_DATA_DIR=tmp_path / "data", FEATHERREADER_ALLOW_APP_PASSWORDS=True,
            FEATHERREADER_ALLOW_PRIVATE_NETWORK=True, FEATHERREADER_JETSTREAM_HOSTS=js.url,
            FEATHERREADER_PLC_URL=pds.plc_url, FEATHERREADER_HANDLE_RESOLVER=pds.pds_url,
            FEATHERREADER_LOG_LEVEL="INFO")
        with stopped_after(ServiceProcess(env, tmp_path / "gunicorn.log")) as svc:
            scenario(pds, js, tap, svc, world, mark, database_url)
            assert_no_error_records(svc)
    print("\ntimeline:")
    for label, at in marks:
        print(f"  {at:6.1f} s  {label}")
    print(f"total {time.monotonic() - t0:.1f} s; owners {len(owners)}, apps {len(APPS)}; "
          f"model union sizes {[len(model.union(o.did)) for o in owners]}")


def build_world(pds, mark) -> dict:
    rng = random.Random()
    sfx = "".join(rng.choice(string.ascii_lowercase) for _ in range(4))  # the session PDS is shared
    pool = Pool(6)
    names = [f"own{n}{sfx}" for n in (1, 2)] + [f"s{i:03d}{sfx}" for i in range(SUBJECTS)] + [f"rb{sfx}", f"rm{sfx}"]
    accts = pool.map(lambda name: create_account(pds, name), names)
    owner_accts, subjects, (b, m) = accts[:2], accts[2:2 + SUBJECTS], accts[2 + SUBJECTS:]
    mark(f"created {len(accts)} accounts on the reference PDS")

    profiles: dict[str, set[str]] = {}

    def write_profiles(pair):
        i, acct = pair
        apps = [app for app in APPS if NO_PROFILE.get(i) != app]
        profiles[acct.did] = set(apps)
        apply_creates(pds, acct, [(PROFILE[app], "self", {"displayName": acct.name,
                                                          "description": f"{acct.name} on {app}"}) for app in apps])
    pool.map(write_profiles, list(enumerate(subjects)) + [(-1, b), (-1, m)])
    mark(f"profiles written ({sum(len(v) for v in profiles.values())} records; "
         f"{len(NO_PROFILE)} subjects lack one app's profile)")

    phantoms = [phantom_did(rng) for _ in range(PHANTOMS)]
    model = Model(owner_accts, profiles)
    listing = {}
    for n, owner in enumerate(owner_accts):
        items = []
        for app in APPS:
            wanted = phantoms + [subjects[i].did for i in OWN_FOLLOWS[n][app]]
            rng.shuffle(wanted)
            for subject in wanted:
                rkey = tid_now()
                items.append((FOLLOW[app], rkey, follow_record(subject)))
                model.follow(owner.did, app, subject, rkey)
            listing[(owner.name, app)] = len(wanted)
        apply_creates(pds, owner, items)
    mark(f"owners' own follows written: {listing}")
    for owner in owner_accts:
        for app in APPS:
            assert len(list_follows(pds, owner.did, FOLLOW[app])) == listing[(owner.name, app)]
    passwords = [_ok(xrpc(pds.pds_url, "POST", "com.atproto.server.createAppPassword", token=o.token,
                          json={"name": f"feather-e2e-{sfx}"}), "createAppPassword")["password"] for o in owner_accts]
    return {"owners": owner_accts, "subjects": subjects, "b": b, "m": m, "model": model,
            "app_passwords": passwords, "phantoms": phantoms}


def scenario(pds, js, tap, svc: ServiceProcess, world: dict, mark, database_url: str) -> None:
    owner_accts, subjects, model = world["owners"], world["subjects"], world["model"]
    b, m = world["b"], world["m"]
    svc.start()
    mark(f"service up (gunicorn -k gevent -w 1 on {svc.url}); /health: {svc.health().get('status')}")
    owners = [Owner(svc, acct, f"owner{n + 1}") for n, acct in enumerate(owner_accts)]
    for owner, password in zip(owners, world["app_passwords"]):
        owner.sign_in(password)
    mark("both owners signed in with app passwords")
    notes: list[str] = []  # problems that do not stop the run; asserted with the final check
    for owner in owners:
        r = owner.preview()  # what the page shows before the owner confirms: it must be what happens
        if r.status_code != 200:
            notes.append(f"{owner.label}: GET /api/sync/preview -> {r.status_code} {r.text[:300]}")
            continue
        shown = {row["app"]: (row["following"], row["will_follow"], row["will_wait"]) for row in r.json()["apps"]}
        want = model.preview(owner.acct.did)
        print(f"  {owner.label} preview: {shown} (estimated={r.json().get('estimated')})")
        if shown != want:
            notes.append(f"{owner.label}: the preview promised {shown} (following, will_follow, will_wait), "
                         f"the model says {want}")

    # 1. Both turn sync on for three apps at the same moment.
    jobs = [gevent.spawn(owner.change, enabled=True, apps=list(APPS)) for owner in owners]
    gevent.joinall(jobs, raise_error=True)
    for owner, job in zip(owners, jobs):
        assert (job.value["enabled"], job.value["apps"]) == (True, list(APPS)), job.value
        print(f"  {owner.label} after turning sync on: {brief(job.value)}")
    mark("sync turned on for both owners (bluesky, tangled, grain)")
    owners[0].show_page("right after turning sync on")

    # 2. kill -9 mid-backfill: some app listed (Grain's short listing is done), not all.
    seen = {}

    def mid_backfill() -> bool:
        seen.update({o.label: o.state() for o in owners})
        return any(s["backfill"].get("listed", 0) >= 1 for s in seen.values())
    _wait(mid_backfill, 60, lambda: f"a first listing to finish: {seen}", interval=0.1)
    assert not all(s["backfill"].get("done") for s in seen.values()), \
        f"the backfill finished before the kill; the listings are too short for a kill mid-backfill: {seen}"
    owners[0].show_page("mid-backfill, just before the kill")
    svc.kill9()
    mark("kill -9 mid-backfill: " + "; ".join(f"{k}: {brief(v)}" for k, v in seen.items()))
    svc.start()
    mark("service restarted")
    for owner in owners:
        print(f"  {owner.label} after the restart: {brief(owner.state())}")
    owners[1].show_page("after the restart")
    kill9_mid_write(svc, database_url, mark)
    states = wait_drained(owners, svc, "backfill + union + writes after the restart")
    mark("backfill done and queues drained: " + "; ".join(f"{o.label}: {brief(s)}" for o, s in zip(owners, states)))
    check_repos(pds, model, owner_accts, "after the backfill", mark)
    owners[0].show_page("once the backfill is written")
    for owner, state in zip(owners, states):
        assert state["waiting"] == model.waiting(owner.acct.did), (owner.label, brief(state))
        assert state["queue"]["failed"] == 0, (owner.label, brief(state), owner.activity(20))
        print(f"  {owner.label} activity (newest first): {owner.activity(6)}")

    # 3. Unfollows the owners make propagate everywhere; a new follow propagates.
    waits = []
    for n, owner in enumerate(owner_accts):
        app, index = UNFOLLOWS[n]
        subject = subjects[index].did
        rkey = model.own[owner.did][app][subject]
        delete_record(pds, owner, FOLLOW[app], rkey)
        model.unfollow(owner.did, app, subject)
        waits.append(tap.time_of(owner.did, FOLLOW[app], rkey, "delete"))
    rkey = create_record(pds, owner_accts[1], FOLLOW["tangled"], follow_record(m.did))
    model.follow(owner_accts[1].did, "tangled", m.did, rkey)
    waits.append(tap.time_of(owner_accts[1].did, FOLLOW["tangled"], rkey, "create"))
    wait_applied(svc, max(waits), "the unfollows and the follow")
    states = wait_drained(owners, svc, "unfollows and a live follow")
    mark("unfollows + a live follow applied and drained: "
         + "; ".join(f"{o.label}: {brief(s)}" for o, s in zip(owners, states)))
    check_repos(pds, model, owner_accts, "after the unfollows", mark)
    owners[1].show_page("after their unfollow and a new follow")

    # 4. The replay case (issue 13, point 2), for owner 1.
    one, acct = owners[0], owner_accts[0]
    print(f"  owner1 pauses: {brief(one.change(paused=True))}")
    f1 = create_record(pds, acct, FOLLOW["bluesky"], follow_record(b.did))
    delete_record(pds, acct, FOLLOW["bluesky"], f1)
    t2 = create_record(pds, acct, FOLLOW["tangled"], follow_record(b.did))
    model.follow(acct.did, "bluesky", b.did, f1)
    model.unfollow(acct.did, "bluesky", b.did)
    model.follow(acct.did, "tangled", b.did, t2)
    f1_at = tap.time_of(acct.did, FOLLOW["bluesky"], f1, "create")
    t2_at = tap.time_of(acct.did, FOLLOW["tangled"], t2, "create")
    wait_applied(svc, t2_at, "follow B on Bluesky, unfollow, follow B on Tangled (T2)")
    mark(f"replay case applied once (T2 = {FOLLOW['tangled']}/{t2}, {(t2_at - f1_at) / 1e3:.0f} ms after F1): "
         f"{brief(one.state())}")
    before = set(js.stats()["last_filter"])
    svc.kill9()
    restarted = int(time.time())
    svc.start()
    conn = wait_sync_connection(js, acct.did, old=before)
    mark(f"kill -9 + restart: the shard reconnected with cursor {conn['cursor']} "
         f"({(t2_at - int(conn['cursor'] or 0)) / 1e6:.1f} s before T2's event)")
    assert conn["cursor"] is not None and int(conn["cursor"]) <= f1_at, \
        f"the restart must replay the three events (cursor {conn['cursor']}, F1 at {f1_at})"
    # Let the restarted process take the whole replay (the fake has sent it once the socket is live;
    # the writer applies within a batch period) before the reconnect.
    _wait(lambda: sync_connection(js, acct.did, old=set()).get("mode") == "live", 30, "the replay to be sent")
    _wait(lambda: int((svc.health()["consumers"].get(SHARD) or {}).get("last_applied_at") or 0) >= restarted,
          APPLY_TIMEOUT, "the restarted process to apply the replay (a batch saved with its cursor)")
    before = set(js.stats()["last_filter"])
    dropped = js.drop()
    conn = wait_sync_connection(js, acct.did, old=before)
    mark(f"fake Jetstream dropped {dropped} connections; the shard reconnected with cursor {conn['cursor']}")
    marker = create_record(pds, acct, FOLLOW["grain"], follow_record(m.did))  # applied after every replay
    model.follow(acct.did, "grain", m.did, marker)
    wait_applied(svc, tap.time_of(acct.did, FOLLOW["grain"], marker, "create"), "a later event (the replays are done)")
    print(f"  owner1 after the replays, still paused: {brief(one.state())}")
    one.show_page("paused, after the replays")
    print(f"  owner1 resumes: {brief(one.change(paused=False))}")
    states = wait_drained(owners, svc, "the replay case after resuming")
    mark("queues drained after the replay: " + "; ".join(f"{o.label}: {brief(s)}" for o, s in zip(owners, states)))

    # 5. Every repo exactly as expected, no duplicates, T2 alive.
    problems, counts = repo_problems(pds, model, owner_accts)
    problems += notes
    if not record_exists(pds, acct.did, FOLLOW["tangled"], t2):
        problems.insert(0, f"T2 ({FOLLOW['tangled']}/{t2}, owner1's own follow of B made after the unfollow) "
                           f"was deleted: a replayed unfollow propagated")
    for owner, state in zip(owners, states):
        if state["waiting"] != model.waiting(owner.acct.did):
            problems.append(f"{owner.label}: waiting {state['waiting']} != expected {model.waiting(owner.acct.did)}")
        if state["queue"].get("failed"):
            problems.append(f"{owner.label}: {state['queue']['failed']} failed writes: {owner.activity(20)}")
        print(f"  {owner.label} activity (newest first): {owner.activity(8)}")
    assert not problems, "final repos:\n" + "\n".join(problems)
    done = sum(s["queue"].get("done", 0) for s in states)
    mark(f"every repo exactly as expected, no duplicates: records per (owner, app) {counts}; "
         f"queue rows done {done}")
    one.show_page("at the end", activity_lines=8)


def wait_applied(svc: ServiceProcess, time_us: int, what: str) -> None:
    _wait(lambda: svc.cursor(SHARD) >= time_us, APPLY_TIMEOUT,
          lambda: f"the service to apply {what} (event {time_us}, {SHARD} cursor {svc.cursor(SHARD)})")


def sync_connection(js, did: str, old: set[str]) -> dict:
    """The fake's view of the shard's socket (its wantedDids name the owner) if its id is not in `old`."""
    for conn_id, f in js.stats()["last_filter"].items():
        if conn_id not in old and did in f.get("wantedDids", ()):
            return f
    return {}


def wait_sync_connection(js, did: str, old: set[str], timeout: float = 30.0) -> dict:
    """The shard's new socket: a connection whose wantedDids name the owner and whose id is not in `old`."""
    found = {}

    def connected() -> bool:
        found.update(sync_connection(js, did, old))
        return bool(found)
    _wait(connected, timeout, lambda: f"the sync shard to reconnect: {js.stats()}")
    return found


def live_leases(database_url: str) -> dict[str, int]:
    """Live sync lane leases per holder, read from the service's database."""
    with read_only(database_url) as run_all:
        return dict(run_all("SELECT leased_by, COUNT(*) FROM sync_lanes WHERE leased_by IS NOT NULL"
                            " AND lease_until >= ? GROUP BY leased_by", [int(time.time())]))


def kill9_mid_write(svc: ServiceProcess, database_url: str, mark) -> None:
    """kill -9 while lanes are leased (writing), then restart. The killed process's leases would
    block its lanes until they expire (LEASE_SECS, 60 s); the new process frees them at its first
    runner tick instead, and its log names each one. A kill that lands just as the lanes were
    released is retried (a restart, the next lease)."""
    for attempt in range(1, 6):
        _wait(lambda: live_leases(database_url), 300, "a sync lane to be leased (a write underway)", interval=0.05)
        svc.kill9()
        held = live_leases(database_url)  # nothing can change them any more
        if held:
            break
        mark(f"kill -9 #{attempt} landed just after the lanes were released; restarting to try again")
        svc.start()
    else:
        raise AssertionError("five kills in a row landed between two leases")
    log_before = len(svc.log_text())
    svc.start()
    restarted = time.monotonic()
    want = [f"sync: freed {n} lane lease(s) of {holder} at once: that process is gone" for holder, n in held.items()]
    _wait(lambda: all(line in svc.log_text()[log_before:] for line in want), 45,
          lambda: f"the restarted service to free the killed one's leases {held}; log tail:\n{svc.log_tail(30)}")
    mark(f"kill -9 mid-write with {sum(held.values())} lane(s) leased; the restart freed them "
         f"{time.monotonic() - restarted:.1f} s after it answered /health (LEASE_SECS is 60)")


def wait_drained(owners: list[Owner], svc: ServiceProcess, what: str) -> list[dict]:
    """Until every owner's backfill is done and queue has nothing pending; fails on a stall."""
    start = last_change = time.monotonic()
    last = None
    while True:
        states = [o.state() for o in owners]
        if all(s["backfill"].get("done") and s["queue"]["pending"] == 0 and not s.get("paused") for s in states):
            return states
        key = json.dumps([[s["backfill"], s["queue"], s["waiting"]] for s in states], sort_keys=True)
        now = time.monotonic()
        if key != last:
            last, last_change = key, now
        if now - last_change > STALL_SECS or now - start > DRAIN_TIMEOUT:
            why = f"no progress for {now - last_change:.0f} s" if now - last_change > STALL_SECS else "too long"
            raise AssertionError(f"{what}: the queues did not drain ({why}, {now - start:.0f} s):\n"
                                 + "\n".join(f"  {o.label}: {brief(s)}\n    activity: {o.activity(10)}"
                                             for o, s in zip(owners, states))
                                 + f"\n  /health: {svc.health().get('consumers')}")
        time.sleep(0.5)


def check_repos(pds, model: Model, owner_accts: list[Acct], when: str, mark) -> None:
    # The last writes' echoes and PDS commits are already in when the queue is empty; a short grace
    # only covers the listing racing the final commit.
    problems, counts = repo_problems(pds, model, owner_accts)
    if problems:
        time.sleep(2)
        problems, counts = repo_problems(pds, model, owner_accts)
    assert not problems, f"repos {when}:\n" + "\n".join(problems)
    mark(f"repos exactly as expected {when}: {counts}")
