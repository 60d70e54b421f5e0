"""The timeline's depth with the whole service running: reposts, replies, quotes and the variants.

The `make run` process (gunicorn, the gevent worker and its background workers), Bluesky's
reference PDS on loopback and its firehose bridged into the fake Jetstream; everything is driven
over HTTP, and real records are written to the PDS in the app's own collections.

World: three readers who sign in here, six authors, two strangers whom no reader follows (their
posts reach a timeline only through a repost, so the service must fetch them from their PDS).
The feeds file is the built-in shape with the app's replies rule on "Following":
- `timeline` ("Following"): posts and reposts; a reply only when the reader follows the person
  it replies to;
- `posts` ("Following, posts only"): posts, every reply.

Labels come from a small labeler on loopback (tests/support/fake_labeler.py, a real queryLabels
endpoint): a self-labelled post and a labelled one are masked on the page, a `!hide` one left out,
and a label added then negated unmasks its post.

Steps: sign-ins; a live phase of posts, reposts (of followed authors and of strangers), replies
(to followed and to unfollowed people), a quote, an unrepost and a deleted reposted post; then a
burst of posts and reposts with a kill -9 in its middle and an unrepost while the service is
down; a restart that replays from the saved cursor; every connection dropped and the replay of
the reconnect. After each phase every reader's getFeed
(both feeds, paged), getFeedSkeleton (with its repost reasons) and /timeline page ("Reposted by"
on the right entries) equal the model below, which shares no code with the service.
"""
from __future__ import annotations

import html
import random
import re
import secrets
import string
import time

import gevent
import pytest

from tests.support.pds import tid_now, xrpc
from tests.support.process_world import (
    Acct, Person, app_password, assert_no_error_records, create_account, delete_record, follow_record, live_firehose,
    iso_ms, put_record, stopped_after,
)
from tests.support.process_world import ok as _ok
from tests.support.process_world import wait_for as _wait
from tests.support.fake_labeler import FakeLabeler
from tests.support.service_process import ServiceProcess, free_port, service_env

pytestmark = [pytest.mark.pds, pytest.mark.slow]

POST, REPOST, FOLLOW = "app.bsky.feed.post", "app.bsky.feed.repost", "app.bsky.graph.follow"
GET_FEED = "/xrpc/com.featherreader.getFeed"
SKELETON = "app.bsky.feed.getFeedSkeleton"
CONVERGE_TIMEOUT = 90.0
LABEL_NAMES = {"porn": "Adult content", "sexual": "Sexually suggestive", "graphic-media": "Graphic media"}
FOLLOWS = {0: (0, 1, 2), 1: (2, 3, 4), 2: (0, 5)}  # reader -> author indexes

FEEDS_TOML = """
namespace = "com.featherreader"
[collections.follow]
collection = "app.bsky.graph.follow"
[collections.post]
collection = "app.bsky.feed.post"
searchable = ["text"]
[collections.repost]
collection = "app.bsky.feed.repost"
reposts = "post"
[collections.profile]
collection = "app.bsky.actor.profile"
[feeds.timeline]
title = "Following"
targets = ["post", "repost"]
replies = "followed"
[feeds.posts]
title = "Following, posts only"
targets = ["post"]
"""


class Model:
    """Every post, repost and follow as the PDS holds them, and what each feed must show."""

    def __init__(self):
        self.posts: dict[str, tuple[str, int, str | None]] = {}  # uri -> (author, ms, replied-to author)
        self.reposts: dict[str, tuple[str, str, int]] = {}  # repost uri -> (reposter, post uri, ms)
        self.follows: dict[str, dict[str, str]] = {}  # reader -> author -> follow rkey
        self.cids: dict[str, str] = {}
        self.texts: dict[str, str] = {}
        self.masked: dict[str, str] = {}  # post uri -> the label name the page shows
        self.hidden: set[str] = set()  # posts the page leaves out (!hide)
        self._last_ms = 0

    def ms(self) -> int:
        self._last_ms = max(int(time.time() * 1000), self._last_ms + 1)
        return self._last_ms

    def expected(self, reader: str, feed: str) -> list[tuple[str, str | None]]:
        """(post uri, the repost that brought it or None), in the feed's order."""
        followed = set(self.follows[reader])
        rows: dict[str, tuple[int, str, str | None]] = {}  # post -> its newest (ms, row uri, repost)

        def offer(post: str, ms: int, row: str, repost: str | None) -> None:
            if post not in rows or (-ms, row) < (-rows[post][0], rows[post][1]):
                rows[post] = (ms, row, repost)
        for uri, (author, ms, replied) in self.posts.items():
            if author not in followed:
                continue
            if feed == "timeline" and replied is not None and replied not in followed:
                continue
            offer(uri, ms, uri, None)
        if feed == "timeline":
            for repost, (reposter, post, ms) in self.reposts.items():
                if reposter in followed and post in self.posts:
                    replied = self.posts[post][2]
                    if replied is not None and replied not in followed:
                        continue
                    offer(post, ms, repost, repost)
        ordered = sorted(rows.items(), key=lambda kv: (-kv[1][0], kv[1][1]))
        return [(post, repost) for post, (_ms, _row, repost) in ordered]


def put(pds, acct: Acct, collection: str, record: dict) -> tuple[str, str]:
    body = put_record(pds, acct, collection, record)
    return body["uri"], body["cid"]


def write_post(pds, model: Model, acct: Acct, text: str, reply_to: str | None = None, quote: str | None = None,
               self_label: str | None = None) -> str:
    ms = model.ms()
    record: dict = {"text": text, "createdAt": iso_ms(ms)}
    if self_label:
        record["labels"] = {"$type": "com.atproto.label.defs#selfLabels", "values": [{"val": self_label}]}
    if reply_to:
        ref = {"uri": reply_to, "cid": model.cids[reply_to]}
        record["reply"] = {"root": ref, "parent": ref}
    if quote:
        record["embed"] = {"$type": "app.bsky.embed.record", "record": {"uri": quote, "cid": model.cids[quote]}}
    uri, cid = put(pds, acct, POST, record)
    model.posts[uri] = (acct.did, ms, reply_to.split("/")[2] if reply_to else None)
    model.cids[uri] = cid
    model.texts[uri] = text
    if self_label:
        model.masked[uri] = LABEL_NAMES[self_label]
    return uri


def write_repost(pds, model: Model, acct: Acct, post: str) -> str:
    ms = model.ms()
    uri, _cid = put(pds, acct, REPOST, {"subject": {"uri": post, "cid": model.cids[post]}, "createdAt": iso_ms(ms)})
    model.reposts[uri] = (acct.did, post, ms)
    return uri


def unrepost(pds, model: Model, acct: Acct, uri: str) -> None:
    delete_record(pds, acct, REPOST, uri.rsplit("/", 1)[-1])
    del model.reposts[uri]


def delete_post(pds, model: Model, acct: Acct, uri: str) -> None:
    delete_record(pds, acct, POST, uri.rsplit("/", 1)[-1])
    del model.posts[uri]


class Reader(Person):
    def feed(self, name: str, limit: int = 7) -> list[tuple[str, str | None]]:
        out, cursor = [], None
        while True:
            params = {"feed": name, "actor": self.acct.did, "limit": limit, **({"cursor": cursor} if cursor else {})}
            body = _ok(self.get(GET_FEED, params=params), f"{self.label}: getFeed {name}")
            out += [(r["uri"], (r.get("reason") or {}).get("repost")) for r in body["records"]]
            cursor = body.get("cursor")
            if not body["records"] or not cursor:
                return out

    def skeleton(self, pds, feed_uri: str, aud: str) -> list[tuple[str, str | None]]:
        out, cursor = [], None
        while True:
            token = _ok(xrpc(pds.pds_url, "GET", "com.atproto.server.getServiceAuth", token=self.acct.token,
                             params={"aud": aud, "lxm": SKELETON}), "getServiceAuth")["token"]
            r = self.http.get(f"{self.svc.url}/xrpc/{SKELETON}", timeout=30, headers={"Authorization": f"Bearer {token}"},
                              params={"feed": feed_uri, "limit": 4, **({"cursor": cursor} if cursor else {})})
            body = _ok(r, f"{self.label}: getFeedSkeleton")
            out += [(i["post"], (i.get("reason") or {}).get("repost")) for i in body["feed"]]
            cursor = body.get("cursor")
            if not body["feed"] or not cursor:
                return out

    def search(self, name: str, query: str) -> list[str]:
        out, cursor = [], None
        while True:
            params = {"feed": name, "actor": self.acct.did, "limit": 3, "search": query,
                      **({"cursor": cursor} if cursor else {})}
            body = _ok(self.get(GET_FEED, params=params), f"{self.label}: getFeed search {query!r}")
            out += [r["uri"] for r in body["records"]]
            cursor = body.get("cursor")
            if not body["records"] or not cursor:
                return out

    def page(self, feed: str) -> str:
        r = self.get("/timeline", params={"feed": feed, "limit": 100})
        assert r.status_code == 200, f"{self.label}: /timeline -> {r.status_code}"
        return r.text


ENTRY = re.compile(r'<li class="post">(.*?)</li>', re.DOTALL)
WHEN = re.compile(r'class="when" href="https://bsky\.app/profile/([^/"]+)/post/([^"]+)"')
REPOSTED = re.compile(r'Reposted by <a href="https://bsky\.app/profile/([^"]+)"')
MASK = re.compile(r'<details class="masked"><summary><span class="label-name">([^<]+)</span>')


def page_masks(text: str) -> dict[str, str]:
    """{post uri: the label name its mask shows} of the page's masked entries."""
    out = {}
    for body in ENTRY.findall(text):
        when, mask = WHEN.search(body), MASK.search(body)
        if mask:
            out[f"at://{html.unescape(when.group(1))}/{POST}/{html.unescape(when.group(2))}"] = html.unescape(mask.group(1))
    return out


def page_entries(text: str) -> list[tuple[str, str | None]]:
    """(post uri, the reposter's DID or None) per entry of the page."""
    out = []
    for body in ENTRY.findall(text):
        when = WHEN.search(body)
        by = REPOSTED.search(body)
        out.append((f"at://{html.unescape(when.group(1))}/{POST}/{html.unescape(when.group(2))}",
                    html.unescape(by.group(1)) if by else None))
    return out


def by(expected: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    return [(post, repost.split("/")[2] if repost else None) for post, repost in expected]


def test_reposts_replies_quotes_and_variants_through_kill9_and_replay_whole_process(pds, database_url, tmp_path):
    t0 = time.monotonic()

    def mark(label: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {label}", flush=True)

    sfx = "".join(random.choice(string.ascii_lowercase) for _ in range(4))
    labeler = FakeLabeler(web=True)  # a real queryLabels endpoint on loopback, a did:web
    with live_firehose(pds) as (js, tap):
        accts = [create_account(pds, f"d{n}{sfx}") for n in
                 ["r0", "r1", "r2", "a0", "a1", "a2", "a3", "a4", "a5", "s0", "s1"]]
        readers_accts, authors, strangers = accts[:3], accts[3:9], accts[9:]
        model = Model()
        model.follows = {r.did: {} for r in readers_accts}
        for n, indexes in FOLLOWS.items():
            for i in indexes:
                rkey = tid_now()
                _ok(xrpc(pds.pds_url, "POST", "com.atproto.repo.createRecord", token=readers_accts[n].token,
                         json={"repo": readers_accts[n].did, "collection": FOLLOW, "rkey": rkey,
                               "record": {"$type": FOLLOW, **follow_record(authors[i].did)}}), "follow")
                model.follows[readers_accts[n].did][authors[i].did] = rkey
        passwords = [app_password(pds, r, f"feather-depth-{sfx}") for r in readers_accts]
        feeds_file = tmp_path / "feeds.toml"
        feeds_file.write_text(FEEDS_TOML)
        port = free_port()
        env = service_env(
            DATABASE_URL=database_url, FEATHERREADER_ENV="development", SECRET_KEY=secrets.token_hex(32),
            FEATHERREADER_DATA_DIR=tmp_path / "data", FEATHERREADER_ALLOW_APP_PASSWORDS=True,
            FEATHERREADER_ALLOW_PRIVATE_NETWORK=True, FEATHERREADER_JETSTREAM_HOSTS=js.url,
            FEATHERREADER_PLC_URL=pds.plc_url, FEATHERREADER_HANDLE_RESOLVER=pds.pds_url,
            FEATHERREADER_PUBLIC_URL=f"http://127.0.0.1:{port}", FEATHERREADER_ADMIN_DIDS=readers_accts[0].did,
            FEATHERREADER_CONFIG=feeds_file, FEATHERREADER_LOG_LEVEL="INFO",
            FEED_LABELERS=labeler.did, FEED_LABELS_TTL_SECS=1)
        with stopped_after(ServiceProcess(env, tmp_path / "gunicorn.log", port=port), 120) as svc:
            svc.start()
            aud = "did:web:127.0.0.1%3A" + str(port)
            readers = [Reader(svc, a, f"reader{n}") for n, a in enumerate(readers_accts)]
            gevent.joinall([gevent.spawn(r.sign_in, pw) for r, pw in zip(readers, passwords)], raise_error=True)
            r = readers[0].http.post(svc.url + "/feeds/publish", timeout=60, allow_redirects=False,
                                     headers={"X-CSRF-Token": readers[0].csrf()},
                                     data={"action": "publish", "feed": "timeline", "display_name": "Following"})
            assert r.status_code == 303, r.text[:300]
            feed_uri = f"at://{readers_accts[0].did}/app.bsky.feed.generator/timeline"
            mark("3 readers signed in; Following published")

            # Live: posts, replies to followed and unfollowed people, a quote, reposts of followed
            # authors and of strangers (whose posts only their PDS has), an unrepost, a deleted
            # reposted post.
            a = authors
            p0 = write_post(pds, model, a[0], "a0 says hello")
            p1 = write_post(pds, model, a[1], "a1 says hello")
            s0 = write_post(pds, model, strangers[0], "a stranger's post, reposted later")
            s1 = write_post(pds, model, strangers[1], "another stranger's post")
            write_post(pds, model, a[2], "a2 replies to a0", reply_to=p0)  # reader0 and reader2 follow a0
            write_post(pds, model, a[2], "a2 replies to a stranger", reply_to=s0)
            quoting = write_post(pds, model, a[1], "a1 quotes a0", quote=p0)
            write_repost(pds, model, a[1], p0)  # reader0 follows both: p0 shows once, at the repost
            write_repost(pds, model, a[3], s0)  # reader1: a stranger's post through a repost
            gone = write_repost(pds, model, a[4], s1)
            write_repost(pds, model, a[5], p1)  # reader2 does not follow a1: only through the repost
            write_repost(pds, model, a[2], p0)  # newer: reader0 sees p0 reposted by a2 now
            unrepost(pds, model, a[4], gone)
            late = write_post(pds, model, strangers[1], "reposted, then deleted")
            write_repost(pds, model, a[0], late)
            converge(readers, model, "the live phase")
            delete_post(pds, model, strangers[1], late)  # its author is followed by nobody served
            converge(readers, model, "the reposted post's delete")
            # Labels: a self-labelled post, one the labeler marks graphic, one it hides, and one
            # labelled and then negated.
            write_post(pds, model, a[0], "self-labelled by its author", self_label="porn")
            graphic = write_post(pds, model, a[1], "graphic by the labeler")
            hidden = write_post(pds, model, a[2], "hidden by the labeler")
            labeler.label(graphic, "graphic-media")
            labeler.label(hidden, "!hide")
            labeler.label(p1, "sexual")
            model.masked.update({graphic: "Graphic media", p1: "Sexually suggestive"})
            model.hidden.add(hidden)
            converge(readers, model, "the labelled posts")
            check_all(pds, readers, model, feed_uri, aud, mark, "after the live phase")
            body = _ok(readers[0].get(GET_FEED, params={"feed": "posts", "actor": readers_accts[0].did,
                                                         "limit": 100, "labelers": labeler.did}), "getFeed labels")
            vals = {r["uri"]: sorted((lab["src"] == labeler.did, lab["val"]) for lab in r.get("labels", []))
                    for r in body["records"]}
            assert (vals[graphic], vals[p1]) == ([(True, "graphic-media")], [(True, "sexual")]), vals
            # The quote: its quoted post's author and text on the page, the record under `quote`.
            entry = next(e for e in ENTRY.findall(readers[0].page("posts"))
                         if quoting.rsplit("/", 1)[-1] in e)
            assert "Quoted post by" in entry and "a0 says hello" in entry, entry
            body = _ok(readers[0].get(GET_FEED, params={"feed": "posts", "actor": readers_accts[0].did,
                                                         "limit": 100, "hydrateQuote": "true"}), "getFeed quote")
            quoted = {r["uri"]: r.get("quote", {}).get("uri") for r in body["records"]}
            assert quoted[quoting] == p0 and sum(1 for q in quoted.values() if q) == 1, quoted
            labeler.negate(p1, "sexual")
            del model.masked[p1]
            _wait(lambda: p1 not in page_masks(readers[0].page("posts")), 30, "the negation to unmask the post")
            check_all(pds, readers, model, feed_uri, aud, mark, "after the label was negated")

            # A burst of posts and reposts; kill -9 in its middle; an unrepost while down.
            posted: list[str] = []
            burst_posts: list[str] = []

            def burst() -> None:
                for n in range(16):
                    author = a[n % 6]
                    if n % 3 == 2 and burst_posts:
                        posted.append(write_repost(pds, model, author, burst_posts[-1] if n % 2 else s0))
                    else:
                        burst_posts.append(write_post(pds, model, author, f"burst {n}"))
                        posted.append(burst_posts[-1])
                    gevent.sleep(0.2)
            poster = gevent.spawn(burst)
            _wait(lambda: len(posted) >= 6 or poster.dead, 60, "six records of the burst", interval=0.05)
            svc.kill9()
            killed_after = len(posted)
            poster.get()
            assert killed_after < 16, "the burst ended before the kill"
            a0_reposts = [u for u, (who, _p, _ms) in model.reposts.items() if who == a[1].did]
            unrepost(pds, model, a[1], a0_reposts[0])
            mark(f"kill -9 after {killed_after} of 16 burst records; an unrepost while down")
            svc.start()
            converge(readers, model, "the restart and its replay")
            check_all(pds, readers, model, feed_uri, aud, mark, "after the restart")

            # Every connection dropped: the consumer reconnects asking for its overlap, and the
            # replayed reposts and posts change nothing twice.
            dropped = js.drop()
            write_repost(pds, model, a[3], p1)
            write_post(pds, model, a[4], "after the drop")
            converge(readers, model, "the reconnect and its replay")
            check_all(pds, readers, model, feed_uri, aud, mark, f"after {dropped} dropped connections")
            assert_no_error_records(svc)
    labeler.close()
    mark(f"total {time.monotonic() - t0:.1f} s")


def converge(readers, model: Model, what: str) -> None:
    got: dict = {}

    def done() -> bool:
        for r in readers:
            for feed in ("timeline", "posts"):
                got[(r.label, feed)] = r.feed(feed, limit=100)
        return all(got[(r.label, f)] == model.expected(r.acct.did, f) for r in readers for f in ("timeline", "posts"))
    _wait(done, CONVERGE_TIMEOUT, lambda: f"getFeed to equal the model after {what}:\n" + "\n".join(
        f"  {label} {feed}: got {g[:4]}…, want {model.expected(next(r.acct.did for r in readers if r.label == label), feed)[:4]}…"
        for (label, feed), g in got.items()), interval=0.5)


def check_all(pds, readers, model: Model, feed_uri: str, aud: str, mark, when: str) -> None:
    for reader in readers:
        for feed in ("timeline", "posts"):
            want = model.expected(reader.acct.did, feed)
            assert reader.feed(feed, limit=3) == want, f"{reader.label} getFeed {feed} paged by 3 {when}"
            text = reader.page(feed)
            assert page_entries(text) == [e for e in by(want) if e[0] not in model.hidden], \
                f"{reader.label} /timeline?feed={feed} {when}"
            shown = {p for p, _ in want}
            assert page_masks(text) == {u: n for u, n in model.masked.items() if u in shown and u not in model.hidden}, \
                f"{reader.label} /timeline?feed={feed} masks {when}"
            assert "could not be checked" not in text, f"{reader.label}: the labeler was up, yet a post is unchecked"
        assert reader.skeleton(pds, feed_uri, aud) == model.expected(reader.acct.did, "timeline"), \
            f"{reader.label} getFeedSkeleton {when}"
        # Search: within the reader's own feed (its replies rule and reposts included), every
        # post holding the word, each once; a phrase; a prefix; OR.
        for feed in ("timeline", "posts"):
            shown = [p for p, _ in model.expected(reader.acct.did, feed)]
            for query, test in (("burst", lambda t: "burst" in t.split()),
                                ('"replies to a0"', lambda t: "replies to a0" in t),
                                ("strang*", lambda t: "stranger" in t),
                                ("hello OR quotes", lambda t: "hello" in t.split() or "quotes" in t.split())):
                got = reader.search(feed, query)
                want = {p for p in shown if test(model.texts[p])}
                assert len(got) == len(set(got)) and set(got) == want, \
                    f"{reader.label} {feed} search {query!r} {when}: got {len(got)}, want {len(want)}"
        reposted = sum(1 for _p, rp in model.expected(reader.acct.did, "timeline") if rp)
        print(f"  {reader.label} {when}: {len(model.expected(reader.acct.did, 'timeline'))} in Following "
              f"({reposted} by repost), {len(model.expected(reader.acct.did, 'posts'))} in posts only")
    mark(f"getFeed (both feeds), the skeleton and the page equal the model {when}")
