"""Timelines as people use them, with the whole service running: the `make run` process (gunicorn,
the gevent worker and its background workers), Bluesky's reference PDS on loopback and its
firehose bridged into the fake Jetstream. Everything is driven over HTTP.

World (real records in the reference PDS): 3 readers who sign in here, a dozen authors with a few
posts each (one of them hostile: `<script>` in the text and a link facet), 3 unrelated authors
whom no reader ever follows (one author follows one of them: a follow by someone not served must
not admit anybody). Some readers follow some authors before the service starts, so their
timelines need the sign-in backfill (follows listed from the PDS, the followees' posts fetched
from it). The service runs with the default FEED_SERVE (signed-in) and FEATHERREADER_PUBLIC_URL
set to its own URL, so it is also a Bluesky feed generator (did:web:127.0.0.1%3A<port>).

Steps:
  1. The 3 readers sign in at the same moment (app passwords); the first, an operator, publishes
     the feed generator record to their repo from POST /feeds/publish.
  2. Live: authors keep posting (followed and unrelated), a reader follows a new author (whose old
     posts only their PDS has), another unfollows one, an author deletes a post; meanwhile every
     reader reads getFeed in a loop (no duplicates, newest first, nothing by an unrelated author).
     Then each timeline is exactly the model via getFeed, the /timeline page (entries in order,
     each author's handle, the hostile text escaped and its link facet a link) and
     getFeedSkeleton with a PDS-minted service-auth token, paged 4 at a time with the cursor.
  3. A burst of posts; a reader follows an author during it; kill -9 in its middle; while the
     service is down a never-followed author posts, a reader then follows them, and an author
     deletes a post; restart (the global stream must resume from its saved cursor, rewound by the
     overlap).
  4. The fake Jetstream drops every connection: the consumer reconnects asking for its overlap;
     a few posts follow.
  5. End state, exact, for every reader: getFeed (all pages), getFeedSkeleton (all pages) and the
     page list exactly the model's post URIs (posts of who they follow now, minus deleted ones,
     newest first, no duplicates); the "N new posts" URL each page gave after step 2 counts exactly
     what came since; a stranger's skeleton is empty with the reason and their getFeed is refused.
     Then the service is stopped and its database is opened read-only (sqlite3 `mode=ro` / a
     PostgreSQL read-only transaction) to count what was stored of the unrelated authors: no post, follow, profile, feed row or fetch request at all — the
     HTTP side only ever shows timelines, and /admin's timeline figures are aggregates with no
     author in them, so the database is the honest place to see "never stored". The same look
     checks each reader's feed_items rows exactly (reads join them to the records, so a row left
     behind by a deleted post or an unfollow is invisible over HTTP).

Timing is printed (`-s` shows it); nothing asserts on time.
"""
from __future__ import annotations

import html
import random
import re
import secrets
import string
import time

import gevent
import gevent.event
import pytest
from gevent.pool import Pool

from tests.support.pds import tid_now, xrpc
from tests.support.process_world import (
    Acct,
    Person,
    app_password,
    assert_no_error_records,
    apply_creates,
    create_account,
    create_record,
    delete_record,
    follow_record,
    live_firehose,
    stopped_after,
)
from tests.support.process_world import ok as _ok
from tests.support.process_world import wait_for as _wait
from tests.support.service_db import read_only
from tests.support.service_process import ServiceProcess, free_port, service_env

pytestmark = [pytest.mark.pds, pytest.mark.slow]

POST, FOLLOW, PROFILE = "app.bsky.feed.post", "app.bsky.graph.follow", "app.bsky.actor.profile"
GET_FEED = "/xrpc/com.featherreader.getFeed"
SKELETON = "app.bsky.feed.getFeedSkeleton"
OVERLAP_US = 5_000_000  # the consumer's replay overlap (feather/jetstream/consumer.py)

AUTHORS, UNRELATED, OLD_POSTS = 12, 3, 2
FOLLOWS_BEFORE = {0: (0, 1, 2, 3, 4), 1: (3, 4, 5, 6, 7), 2: (8, 9)}  # reader -> author indexes
CONVERGE_TIMEOUT = 90.0
HOSTILE_URL = "https://example.com/feather?a=1&b=2"
HOSTILE_HEAD, HOSTILE_TAIL = '<script>alert("feather")</script> read', ' <img src=x onerror=alert(2)>'
HOSTILE_TEXT = f"{HOSTILE_HEAD} {HOSTILE_URL}{HOSTILE_TAIL}"


# ------------------------------------------------------------------------------------------ the model

class Model:
    """Every post and follow as the PDS holds them, and what each reader's timeline must be."""

    def __init__(self):
        self.posts: dict[str, tuple[str, int]] = {}  # uri -> (author did, createdAt ms)
        self.deleted: set[str] = set()
        self.follows: dict[str, dict[str, str]] = {}  # reader did -> author did -> follow rkey
        self._last_ms = 0

    def created_ms(self) -> int:
        """Distinct, increasing createdAt milliseconds: the timeline order is then exactly known."""
        self._last_ms = max(int(time.time() * 1000), self._last_ms + 1)
        return self._last_ms

    def expected(self, reader: str) -> list[str]:
        followed = set(self.follows[reader])
        live = [(ms, uri) for uri, (did, ms) in self.posts.items() if did in followed and uri not in self.deleted]
        return [uri for ms, uri in sorted(live, key=lambda p: (-p[0], p[1]))]


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def post_record(model: Model, text: str, facets: list | None = None) -> tuple[dict, int]:
    """(the record, its createdAt in ms)."""
    ms = model.created_ms()
    record = {"text": text, "createdAt": iso(ms)}
    if facets:
        record["facets"] = facets
    return record, ms


def write_post(pds, model: Model, acct: Acct, text: str, facets: list | None = None) -> str:
    record, ms = post_record(model, text, facets)
    rkey = create_record(pds, acct, POST, record)
    uri = f"at://{acct.did}/{POST}/{rkey}"
    model.posts[uri] = (acct.did, ms)
    return uri


def follow(pds, model: Model, reader: Acct, author: Acct) -> str:
    rkey = create_record(pds, reader, FOLLOW, follow_record(author.did))
    model.follows[reader.did][author.did] = rkey
    return rkey


def unfollow(pds, model: Model, reader: Acct, author: Acct) -> None:
    delete_record(pds, reader, FOLLOW, model.follows[reader.did].pop(author.did))


def delete_post(pds, model: Model, acct: Acct, uri: str) -> None:
    delete_record(pds, acct, POST, uri.rsplit("/", 1)[-1])
    model.deleted.add(uri)


# ------------------------------------------------------------------------------------ the service side

class Reader(Person):
    def feed_uris(self, limit: int = 100) -> list[str]:
        """Every page of getFeed, in order."""
        out, cursor = [], None
        while True:
            params = {"feed": "timeline", "actor": self.acct.did, "limit": limit, **({"cursor": cursor} if cursor else {})}
            body = _ok(self.get(GET_FEED, params=params), f"{self.label}: getFeed")
            out += [r["uri"] for r in body["records"]]
            cursor = body.get("cursor")
            if not body["records"] or not cursor:
                return out

    def skeleton_uris(self, pds, feed_uri: str, aud: str, limit: int = 4) -> tuple[list[str], int]:
        """Every page of getFeedSkeleton as the Bluesky app view would ask: the viewer's PDS-minted
        service-auth token, `limit` posts a page, the cursor. (uris, pages)."""
        out, cursor, pages = [], None, 0
        while True:
            token = _ok(xrpc(pds.pds_url, "GET", "com.atproto.server.getServiceAuth", token=self.acct.token,
                             params={"aud": aud, "lxm": SKELETON}), "getServiceAuth")["token"]
            params = {"feed": feed_uri, "limit": limit, **({"cursor": cursor} if cursor else {})}
            r = self.http.get(f"{self.svc.url}/xrpc/{SKELETON}", params=params, timeout=30,
                              headers={"Authorization": f"Bearer {token}"})
            body = _ok(r, f"{self.label}: getFeedSkeleton")
            pages += 1
            assert "message" not in body, f"{self.label} is served, yet the skeleton says: {body['message']}"
            out += [item["post"] for item in body["feed"]]
            cursor = body.get("cursor")
            if not body["feed"] or not cursor:
                return out, pages

    def page(self) -> str:
        r = self.get("/timeline", params={"limit": 100})
        assert r.status_code == 200, f"{self.label}: GET /timeline -> {r.status_code} {r.text[:300]}"
        return r.text


ENTRY = re.compile(r'<li class="post">(.*?)</li>', re.DOTALL)
WHEN = re.compile(r'class="when" href="https://bsky\.app/profile/([^/"]+)/post/([^"]+)"')
HANDLE = re.compile(r'<span class="handle">([^<]*)</span>')


def page_entries(text: str) -> list[tuple[str, str]]:
    """(post uri, shown handle) of each entry of the /timeline page, in page order."""
    out = []
    for body in ENTRY.findall(text):
        when, handle = WHEN.search(body), HANDLE.search(body)
        assert when and handle, f"an entry without its post link or handle: {body[:400]}"
        out.append((f"at://{html.unescape(when.group(1))}/{POST}/{html.unescape(when.group(2))}",
                    html.unescape(handle.group(1))))
    return out


def feed_problems(uris: list[str], model: Model, reader: Acct, unrelated: set[str], what: str) -> list[str]:
    """What must hold at any moment, even mid-stream: no duplicates, newest first, no stranger."""
    problems = []
    if len(uris) != len(set(uris)):
        problems.append(f"{what}: duplicates {sorted(u for u in set(uris) if uris.count(u) > 1)[:4]}")
    strangers = [u for u in uris if u.split("/")[2] in unrelated]
    if strangers:
        problems.append(f"{what}: posts of unrelated authors {strangers[:4]}")
    known = [model.posts[u][1] for u in uris if u in model.posts]
    if known != sorted(known, reverse=True):
        problems.append(f"{what}: not newest first")
    return problems


def diff(got: list[str], want: list[str]) -> str:
    missing, extra = [u for u in want if u not in got], [u for u in got if u not in want]
    return (f"{len(got)} got, {len(want)} expected; missing {missing[:5]}, unexpected {extra[:5]}"
            + ("; same set, other order" if not missing and not extra else ""))


# -------------------------------------------------------------------------------------------------- test

def test_three_readers_timelines_and_feed_generator_through_kill9_and_replay_whole_process(pds, database_url, tmp_path):
    t0 = time.monotonic()

    def mark(label: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {label}", flush=True)

    with live_firehose(pds) as (js, tap):
        world = build_world(pds, mark)
        port = free_port()
        public = f"http://127.0.0.1:{port}"
        env = service_env(
            DATABASE_URL=database_url, FEATHERREADER_ENV="development", SECRET_KEY=secrets.token_hex(32),
            FEATHERREADER_DATA_DIR=tmp_path / "data", FEATHERREADER_ALLOW_APP_PASSWORDS=True,
            FEATHERREADER_ALLOW_PRIVATE_NETWORK=True, FEATHERREADER_JETSTREAM_HOSTS=js.url,
            FEATHERREADER_PLC_URL=pds.plc_url, FEATHERREADER_HANDLE_RESOLVER=pds.pds_url,
            FEATHERREADER_PUBLIC_URL=public, FEATHERREADER_ADMIN_DIDS=world["readers"][0].did,
            FEATHERREADER_LOG_LEVEL="INFO")
        with stopped_after(ServiceProcess(env, tmp_path / "gunicorn.log", port=port), 120) as svc:
            scenario(pds, js, tap, svc, world, mark)
            assert_no_error_records(svc)
    model = world["model"]
    stored = stored_of(database_url, world["unrelated"], [a.did for a in world["authors"]], world["readers"],
                       sorted(model.deleted))
    mark(f"database opened read-only after the stop: unrelated {stored['unrelated']}, "
         f"posts of the authors {stored['followed_posts']}, feed rows of deleted posts {stored['deleted_rows']}")
    assert stored["unrelated"] == {"posts": 0, "follows": 0, "profiles": 0, "feed_items": 0, "fetches": 0}, \
        f"an unrelated author's records were stored: {stored['unrelated']}"
    assert stored["followed_posts"] > 0, "the read-only count sees nothing at all: it would prove nothing"
    assert stored["deleted_rows"] == 0, "deleted posts left rows in feed_items (reads hide them by the join)"
    assert stored["twice"] == [], "a record sits twice in one feed (getFeed would show it twice)"
    for reader in world["readers"]:  # the rows themselves, not only what the join lets through
        rows = stored["feed_items"][reader.did]
        assert sorted(rows) == sorted(model.expected(reader.did)), \
            f"{reader.name}'s feed_items rows: {diff(rows, model.expected(reader.did))}"
    mark(f"total {time.monotonic() - t0:.1f} s")


def build_world(pds, mark) -> dict:
    rng = random.Random()
    sfx = "".join(rng.choice(string.ascii_lowercase) for _ in range(4))  # the session PDS is shared
    names = ([f"tr{i}{sfx}" for i in range(3)] + [f"ta{i:02d}{sfx}" for i in range(AUTHORS)]
             + [f"tu{i}{sfx}" for i in range(UNRELATED)])
    accts = Pool(6).map(lambda name: create_account(pds, name), names)
    readers, authors, unrelated = accts[:3], accts[3:3 + AUTHORS], accts[3 + AUTHORS:]
    mark(f"created {len(accts)} accounts on the reference PDS")
    model = Model()
    model.follows = {r.did: {} for r in readers}

    def old_posts(acct: Acct) -> None:
        items = [(PROFILE, "self", {"displayName": f"Author {acct.name}"})]
        for n in range(OLD_POSTS):
            record, ms = post_record(model, f"{acct.name} old post {n}")
            rkey = tid_now()
            items.append((POST, rkey, record))
            model.posts[f"at://{acct.did}/{POST}/{rkey}"] = (acct.did, ms)
        apply_creates(pds, acct, items)
    for acct in authors + unrelated:  # in turn: the createdAt clock is the model's
        old_posts(acct)
    hostile_uri = write_post(pds, model, authors[0], HOSTILE_TEXT, facets=[{
        "index": {"byteStart": HOSTILE_TEXT.index("https"), "byteEnd": HOSTILE_TEXT.index(HOSTILE_TAIL)},
        "features": [{"$type": "app.bsky.richtext.facet#link", "uri": HOSTILE_URL}]}])
    create_record(pds, authors[0], FOLLOW, follow_record(unrelated[0].did))  # not served: admits nobody
    for n, indexes in FOLLOWS_BEFORE.items():
        for i in indexes:
            follow(pds, model, readers[n], authors[i])
    passwords = [app_password(pds, r, f"feather-tl-{sfx}") for r in readers]
    mark(f"{len(model.posts)} posts, follows before the service: "
         f"{ {n: len(ix) for n, ix in FOLLOWS_BEFORE.items()} }")
    return {"readers": readers, "authors": authors, "unrelated": unrelated, "model": model,
            "passwords": passwords, "hostile": hostile_uri}


def scenario(pds, js, tap, svc: ServiceProcess, world: dict, mark) -> None:
    model, authors, unrelated_accts = world["model"], world["authors"], world["unrelated"]
    unrelated = {u.did for u in unrelated_accts}
    svc.start()
    aud = "did:web:127.0.0.1%3A" + str(svc.port)
    assert _ok(svc_get(svc, "/.well-known/did.json"), "did.json")["id"] == aud
    mark(f"service up on {svc.url}, feed generator {aud}")
    readers = [Reader(svc, acct, f"reader{n}") for n, acct in enumerate(world["readers"])]

    # 1. Three sign-ins at the same moment; the operator publishes the generator record.
    jobs = [gevent.spawn(r.sign_in, pw) for r, pw in zip(readers, world["passwords"])]
    gevent.joinall(jobs, raise_error=True)
    mark("3 readers signed in at once")
    r = readers[0].http.post(svc.url + "/feeds/publish", timeout=60, allow_redirects=False,
                             headers={"X-CSRF-Token": readers[0].csrf()},
                             data={"action": "publish", "feed": "timeline", "display_name": "Following",
                                   "description": "Everyone you follow, newest first"})
    assert r.status_code == 303, f"POST /feeds/publish -> {r.status_code} {r.text[:300]}"
    feeds = _ok(svc_get(svc, "/xrpc/app.bsky.feed.describeFeedGenerator"), "describeFeedGenerator")
    feed_uri = f"at://{readers[0].acct.did}/app.bsky.feed.generator/timeline"
    assert feeds == {"did": aud, "feeds": [{"uri": feed_uri}]}, feeds
    wait_converged(readers, model, "the sign-in backfills")
    mark("every timeline filled in from the PDS: " + sizes(readers, model))

    # 2. Live: posting goes on while everyone reads; follows, an unfollow and a delete.
    notes: list[str] = []
    stop_reading = gevent.event.Event()

    def keep_reading(reader: Reader) -> int:
        reads = 0
        while not stop_reading.is_set():
            notes.extend(feed_problems(reader.feed_uris(), model, reader.acct, unrelated, f"{reader.label} mid-stream"))
            reads += 1
            gevent.sleep(0.1)
        return reads
    watchers = [gevent.spawn(keep_reading, reader) for reader in readers]
    r0, r1, r2 = world["readers"]
    for i in range(6):
        write_post(pds, model, authors[i * 2 % 10], f"live post {i} by {authors[i * 2 % 10].name}")
        write_post(pds, model, unrelated_accts[i % UNRELATED], f"unrelated live post {i}")
        if i == 1:
            follow(pds, model, r0, authors[10])  # only their PDS has authors[10]'s old posts
        if i == 3:
            unfollow(pds, model, r1, authors[3])  # reader0 still follows authors[3]
        if i == 4:
            delete_post(pds, model, authors[1], next(u for u, (d, _) in model.posts.items() if d == authors[1].did))
    wait_converged(readers, model, "the live follows, unfollow and delete")
    stop_reading.set()
    gevent.joinall(watchers, raise_error=True)
    assert not notes, "while posting went on:\n" + "\n".join(notes[:20])
    mark(f"live phase converged ({sum(w.value for w in watchers)} getFeed reads meanwhile): " + sizes(readers, model))
    narrowed(js, world["readers"], model, "after the live follows and unfollow")
    mark("the feeds' connections ask, by DID, for the readers and whom they follow, nobody else")
    tops = check_reads(pds, readers, model, world, feed_uri, aud, mark, "after the live phase")

    # 3. A burst; a follow during it; kill -9 in its middle; a follow and a delete while down.
    followed = [a for a in authors if any(a.did in model.follows[r.did] for r in world["readers"])]
    burst = [(followed + unrelated_accts)[i % (len(followed) + UNRELATED)] for i in range(24)]
    posted = []

    def post_burst() -> None:
        for n, acct in enumerate(burst):
            posted.append(write_post(pds, model, acct, f"burst {n} by {acct.name}"))
            if n == 5:
                follow(pds, model, r1, authors[9])  # stored already (reader2 follows them): in-batch backfill
            gevent.sleep(0.2)
    poster = gevent.spawn(post_burst)
    _wait(lambda: len(posted) >= 8 or poster.dead, 60, "eight posts of the burst", interval=0.05)
    svc.kill9()
    killed_after = len(posted)
    assert killed_after < len(burst), "the burst ended before the kill: it must land in its middle"
    # Never followed before: this post comes back in the replay ahead of the follow (and is dropped
    # then, as nobody served follows them yet), so only the fetch from their PDS can bring it.
    write_post(pds, model, authors[11], "posted while the service is down, before anyone follows")
    follow(pds, model, r2, authors[11])
    delete_post(pds, model, burst[0], posted[0])
    poster.get()  # re-raises what the poster met
    down_first = tap.time_of(r2.did, FOLLOW, model.follows[r2.did][authors[11].did], "create")
    mark(f"kill -9 after {killed_after} of {len(burst)} burst posts; "
         f"while down: a follow, a delete and {len(burst) - killed_after} more posts")
    seen = set(js.stats()["last_filter"])
    svc.start()
    conn = wait_global_connection(js, seen)
    mark(f"restarted; the global stream resumed with cursor {conn.get('cursor')}")
    assert conn.get("cursor") is not None and int(conn["cursor"]) <= down_first - OVERLAP_US, \
        f"the restart must resume from its saved cursor rewound by the overlap: {conn}, first event while down {down_first}"
    wait_converged(readers, model, "the restart (replay, the follow made while down, the burst)")
    mark("converged after the restart: " + sizes(readers, model))
    narrowed(js, world["readers"], model, "after the restart")

    # 4. Every connection dropped: the consumer reconnects asking for its overlap.
    newest = max(tap.times.values())
    _wait(lambda: feeds_cursor(svc) >= newest, 30,
          lambda: f"the global cursor to reach {newest}: {feeds_cursor(svc)}")
    last = feeds_cursor(svc)
    seen = set(js.stats()["last_filter"])
    dropped = js.drop()
    for n in range(3):
        write_post(pds, model, followed[n], f"after the drop {n}")
    write_post(pds, model, unrelated_accts[1], "unrelated after the drop")
    conn = wait_global_connection(js, seen)
    mark(f"fake Jetstream dropped {dropped} connections; the global stream reconnected with cursor "
         f"{conn.get('cursor')} (last applied {last})")
    assert conn.get("cursor") is not None and int(conn["cursor"]) <= last - OVERLAP_US, \
        f"a reconnect must ask for the overlap before the last applied event ({last}): {conn}"
    wait_converged(readers, model, "the reconnect")

    # 5. Exact end state through every way of reading; a stranger is served nothing (and stays a stranger).
    check_reads(pds, readers, model, world, feed_uri, aud, mark, "at the end")
    for reader in readers:  # the htmx notice polls the URL the page gave it after the live phase
        new_url, top = tops[reader.label]
        newer = sum(1 for uri in model.expected(reader.acct.did) if model.posts[uri][1] > model.posts[top][1])
        r = reader.get(html.unescape(new_url))
        shown = f"{newer} new post{'s' if newer != 1 else ''}" if newer else ""
        assert (r.status_code, re.sub(r"<[^>]+>", "", r.text).strip()) == (200, shown), r.text
    stranger = Reader(svc, unrelated_accts[2], "unrelated2")
    token = _ok(xrpc(pds.pds_url, "GET", "com.atproto.server.getServiceAuth", token=stranger.acct.token,
                     params={"aud": aud, "lxm": SKELETON}), "getServiceAuth")["token"]
    body = _ok(stranger.http.get(f"{svc.url}/xrpc/{SKELETON}", params={"feed": feed_uri}, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"}), "a stranger's getFeedSkeleton")
    assert body["feed"] == [] and "Sign in at" in body.get("message", ""), body
    r = stranger.get(GET_FEED, params={"feed": "timeline", "actor": stranger.acct.did})
    assert (r.status_code, r.json().get("error")) == (403, "NotServed"), r.text


def svc_get(svc: ServiceProcess, path: str):
    import requests

    return requests.get(svc.url + path, timeout=30)


def sizes(readers: list[Reader], model: Model) -> str:
    return ", ".join(f"{r.label}: {len(model.expected(r.acct.did))}" for r in readers)


def wait_converged(readers: list[Reader], model: Model, what: str) -> None:
    got: dict[str, list[str]] = {}

    def done() -> bool:
        for r in readers:
            got[r.label] = r.feed_uris()
        return all(got[r.label] == model.expected(r.acct.did) for r in readers)
    _wait(done, CONVERGE_TIMEOUT, lambda: f"getFeed to match the model after {what}:\n" + "\n".join(
        f"  {r.label}: {diff(got.get(r.label, []), model.expected(r.acct.did))}" for r in readers), interval=0.5)


NEW_POSTS = re.compile(r'id="new-posts" hx-get="([^"]+)"')


def check_reads(pds, readers: list[Reader], model: Model, world: dict, feed_uri: str, aud: str, mark,
                when: str) -> dict[str, tuple[str, str]]:
    """Every way of reading each timeline, exactly the model. Returns each reader's "N new posts"
    URL from the page and the newest post it was shown with."""
    handles = {a.did: a.handle for a in world["authors"]}
    tops = {}
    for reader in readers:
        want = model.expected(reader.acct.did)
        assert reader.feed_uris(limit=7) == want, f"{reader.label} getFeed paged by 7 {when}: " \
                                                  f"{diff(reader.feed_uris(limit=7), want)}"
        skeleton, pages = reader.skeleton_uris(pds, feed_uri, aud)
        assert skeleton == want, f"{reader.label} getFeedSkeleton {when}: {diff(skeleton, want)}"
        text = reader.page()
        entries = page_entries(text)
        assert [uri for uri, _ in entries] == want, f"{reader.label} /timeline {when}: " \
                                                    f"{diff([u for u, _ in entries], want)}"
        assert [h for _, h in entries] == ["@" + handles[uri.split("/")[2]] for uri in want], \
            f"{reader.label} /timeline handles {when}: {[h for _, h in entries][:6]}"
        if world["hostile"] in want:
            link = f'<a href="{html.escape(HOSTILE_URL)}" rel="nofollow noopener ugc">{html.escape(HOSTILE_URL)}</a>'
            shown = f"{html.escape(HOSTILE_HEAD)} {link}{html.escape(HOSTILE_TAIL)}"
            assert "<script>alert" not in text and "<img src=x" not in text, f"{reader.label}: hostile text unescaped"
            assert shown in text.replace("&#34;", "&quot;").replace("&#39;", "&#x27;"), \
                f"{reader.label}: the hostile post is not shown escaped with its link facet: " \
                f"{[e for e in ENTRY.findall(text) if 'alert' in e]}"
        tops[reader.label] = (NEW_POSTS.search(text).group(1), want[0])
        print(f"  {reader.label} {when}: {len(want)} posts via getFeed, skeleton ({pages} pages of 4), page")
    mark(f"every reader's getFeed, skeleton and page exactly the model {when}")
    return tops


def narrowed(js, readers, model: Model, when: str) -> None:
    """The default FEED_NARROW_MAX_DIDS (feather/feeds/ingest/narrow.py): every connection carrying
    posts asks for DIDs, and together for exactly the readers and whom they follow now."""
    want = {r.did for r in readers} | {a for r in readers for a in model.follows[r.did]}

    def filtered():
        conns = [f for f in js.stats()["last_filter"].values() if POST in (f.get("wantedCollections") or ())]
        if not conns or any(not f.get("wantedDids") for f in conns):
            return None  # none, or one asking for every DID
        return {d for f in conns for d in f["wantedDids"]}
    _wait(lambda: filtered() == want, 30,
          lambda: f"the feeds' filter {when} to be the readers and whom they follow: {filtered()} != {want}")


def feeds_cursor(svc) -> int:
    """The newest saved cursor of the streams carrying posts: under the default FEED_NARROW_MAX_DIDS
    the DID-filtered shards `feeds:0` … (feather/feeds/ingest/narrow.py), else `feeds`."""
    consumers = svc.health().get("consumers", {})
    return max([int(c.get("cursor_time_us") or 0) for name, c in consumers.items()
                if name == "feeds" or name.startswith("feeds:")] or [0])


def global_connection(js, old: set[str]) -> dict:
    for conn_id, f in js.stats()["last_filter"].items():
        if conn_id not in old and POST in (f.get("wantedCollections") or ()):
            return f
    return {}


def wait_global_connection(js, old: set[str], timeout: float = 45.0) -> dict:
    found: dict = {}

    def connected() -> bool:
        found.update(global_connection(js, old))
        return bool(found)
    _wait(connected, timeout, lambda: f"the global stream to reconnect: {js.stats()}")
    return found


# ------------------------------------------------------------------------- the database, read-only

def stored_of(database_url: str, unrelated: list[Acct], authors: list[str], readers: list[Acct],
              deleted: list[str]) -> dict:
    """Rows of the unrelated authors (and, as a control, posts of the authors), feed rows of deleted
    posts and each reader's feed rows, with the service stopped: a read-only connection."""
    dids = [u.did for u in unrelated]
    marks = ", ".join("?" * len(dids))
    likes = " OR ".join(["uri LIKE ?"] * len(dids))
    queries = {
        "posts": (f"SELECT count(*) FROM feed_records_post WHERE did IN ({marks})", dids),
        "follows": (f"SELECT count(*) FROM feed_records_follow WHERE did IN ({marks})", dids),
        "profiles": (f"SELECT count(*) FROM feed_records_profile WHERE did IN ({marks})", dids),
        "feed_items": (f"SELECT count(*) FROM feed_items WHERE {likes}", [f"at://{d}/%" for d in dids]),
        "fetches": (f"SELECT count(*) FROM feed_fetches WHERE did IN ({marks})", dids),
    }
    control = (f"SELECT count(*) FROM feed_records_post WHERE did IN ({', '.join('?' * len(authors))})", authors)
    with read_only(database_url) as run_all:
        def run(sql, params):
            return run_all(sql, params)[0][0]
        return {"unrelated": {k: run(*q) for k, q in queries.items()}, "followed_posts": run(*control),
                "deleted_rows": run(f"SELECT count(*) FROM feed_items WHERE uri IN ({', '.join('?' * len(deleted))})",
                                    deleted),
                "feed_items": {r.did: [row[0] for row in run_all("SELECT uri FROM feed_items WHERE actor = ?", [r.did])]
                               for r in readers},
                "twice": run_all("SELECT actor, uri, count(*) FROM feed_items GROUP BY actor, uri HAVING count(*) > 1")}
