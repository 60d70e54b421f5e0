""""Everything" and its feed-reader links with the whole service running (issue 35).

The `make run` process (gunicorn, the gevent worker and its background workers), Bluesky's
reference PDS on loopback and its firehose bridged into the fake Jetstream; everything is driven
over HTTP, and real records are written to the PDS: Bluesky posts, replies and reposts, and the
records of two other apps, Grain galleries (`social.grain.gallery`) and Tangled repositories and
stars (`sh.tangled.repo`, `sh.tangled.feed.star`), lexicons the PDS does not know (it stores them
unvalidated: `validationStatus: "unknown"`, checked on each write). The feeds file is the built-in
one, whose third feed `everything` (mixed) shows them all in one timeline.

World: two readers who sign in here, four authors (one followed by both readers), a stranger
whom nobody follows (their post reaches a timeline only through a repost). One gallery is written
before the service first starts, so the sign-in's backfill (describeRepo, then the listings) or
the stream brings it.

Steps: sign-ins and a feed-reader link per reader; a live phase of posts, replies (to a followed
author and to the stranger), reposts (of a followed author's post: shown once, at the repost's
time; of the stranger's post; of a post whose author the reader does not follow), galleries,
repositories, stars of another followed author's repository (the card names it), a self-labelled
post and a deleted gallery; then a burst of posts, galleries, repositories and reposts with a
kill -9 in its middle, a delete and a star while the service is down, and a restart that replays
from the saved cursor; every Jetstream connection dropped and the reconnect's replay; last, a
rotated link and a revoked one.

After each phase, for each reader, against the model below (which shares no code with the
service): getFeed?feed=everything (paged by 4) lists the records with their collections and
repost reasons; the /timeline?feed=everything page's entries (link, card title, reposter) and
masks; the Atom link parsed by feedparser (no bozo flag, RFC 4287's required elements, the
page's links, the masked post's label name and never its text); the JSON Feed's item URLs; a
second fetch with If-None-Match (and one with If-Modified-Since) is a 304.
"""
from __future__ import annotations

import html
import random
import re
import secrets
import string
import time
import xml.etree.ElementTree as ET

import feedparser
import gevent
import pytest
import requests

from tests.support.pds import tid_now, xrpc
from tests.support.process_world import (
    Acct, Person, app_password, assert_no_error_records, create_account, delete_record, follow_record, live_firehose,
    iso_ms, put_record, stopped_after,
)
from tests.support.process_world import ok as _ok
from tests.support.process_world import wait_for as _wait
from tests.support.service_process import ServiceProcess, free_port, service_env

pytestmark = [pytest.mark.pds, pytest.mark.slow]

POST, REPOST, FOLLOW = "app.bsky.feed.post", "app.bsky.feed.repost", "app.bsky.graph.follow"
REPO, STAR, GALLERY = "sh.tangled.repo", "sh.tangled.feed.star", "social.grain.gallery"
GET_FEED = "/xrpc/com.featherreader.getFeed"
CONVERGE_TIMEOUT = 90.0
FOLLOWS = {0: (0, 1, 2), 1: (2, 3)}  # reader -> author indexes; author 2 is followed by both
ATOM = "{http://www.w3.org/2005/Atom}"
ADULT = "Adult content"  # the page's name of the `porn` self-label


class Model:
    """Every record as the PDS holds it, and what each reader's "Everything" must show."""

    def __init__(self):
        self.posts: dict[str, tuple[str, int]] = {}  # uri -> (author, ms)
        self.reposts: dict[str, tuple[str, str, int]] = {}  # repost uri -> (reposter, post uri, ms)
        self.apps: dict[str, tuple[str, str, int, dict]] = {}  # uri -> (author, nsid, ms, record)
        self.follows: dict[str, set[str]] = {}  # reader -> authors
        self.cids: dict[str, str] = {}
        self.texts: dict[str, str] = {}
        self.masked: dict[str, str] = {}  # post uri -> the label name the page shows
        self._last_ms = 0

    def ms(self) -> int:
        self._last_ms = max(int(time.time() * 1000), self._last_ms + 1)
        return self._last_ms

    def expected(self, reader: str) -> list[tuple[str, str, str | None]]:
        """(record uri, its collection, the repost that brought it or None), newest row first: a
        post once, at its newest row (its own or a followed person's repost of it)."""
        followed = self.follows[reader]
        rows: dict[str, tuple[int, str, str, str | None]] = {}  # shown uri -> (ms, row uri, nsid, repost)

        def offer(uri: str, nsid: str, ms: int, row: str, repost: str | None) -> None:
            if uri not in rows or ms > rows[uri][0]:
                rows[uri] = (ms, row, nsid, repost)
        for uri, (author, ms) in self.posts.items():
            if author in followed:
                offer(uri, POST, ms, uri, None)
        for repost, (reposter, post, ms) in self.reposts.items():
            if reposter in followed and post in self.posts:
                offer(post, POST, ms, repost, repost)
        for uri, (author, nsid, ms, _record) in self.apps.items():
            if author in followed:
                offer(uri, nsid, ms, uri, None)
        ordered = sorted(rows.items(), key=lambda kv: (-kv[1][0], kv[1][1]))
        return [(uri, nsid, repost) for uri, (_ms, _row, nsid, repost) in ordered]

    def entry(self, uri: str, nsid: str, repost: str | None) -> tuple[str, str | None, str | None]:
        """What the page shows of one row: (the link on its app, "{App} {kind}: {title}" for a card,
        the reposter's DID)."""
        did, rkey = uri.split("/")[2], uri.rsplit("/", 1)[-1]
        reposter = self.reposts[repost][0] if repost else None
        if nsid == POST:
            return f"https://bsky.app/profile/{did}/post/{rkey}", None, reposter
        record = self.apps[uri][3]
        if nsid == GALLERY:
            return f"https://grain.social/profile/{did}/gallery/{rkey}", f"Grain gallery: {record['title']}", None
        if nsid == REPO:
            return f"https://tangled.org/{did}/{record['name']}", f"Tangled repository: {record['name']}", None
        assert nsid == STAR
        subject = record["subject"]
        owner = subject.split("/")[2]
        stored = subject in self.apps and any(owner in f for f in self.follows.values())
        if stored:  # Feather holds the starred repository's record: the card names it
            name = self.apps[subject][3]["name"]
            return f"https://tangled.org/{owner}/{name}", f"Tangled star: starred {name}", None
        return f"https://tangled.org/{owner}", "Tangled star: starred a repository", None

    def page(self, reader: str) -> list[tuple[str, str | None, str | None]]:
        return [self.entry(*row) for row in self.expected(reader)]

    def masks(self, reader: str) -> dict[str, str]:
        """{the link of a masked entry: its label name} for the reader's page."""
        shown = {uri for uri, _nsid, _r in self.expected(reader)}
        return {self.entry(u, POST, None)[0]: name for u, name in self.masked.items() if u in shown}


def put(pds, acct: Acct, collection: str, record: dict) -> tuple[str, str]:
    body = put_record(pds, acct, collection, record)
    if collection not in (POST, REPOST):  # a lexicon the PDS does not know: stored, not validated
        assert body.get("validationStatus") == "unknown", body
    return body["uri"], body["cid"]


def write_post(pds, model: Model, acct: Acct, text: str, reply_to: str | None = None,
               self_label: str | None = None) -> str:
    ms = model.ms()
    record: dict = {"text": text, "createdAt": iso_ms(ms)}
    if self_label:
        record["labels"] = {"$type": "com.atproto.label.defs#selfLabels", "values": [{"val": self_label}]}
    if reply_to:
        ref = {"uri": reply_to, "cid": model.cids[reply_to]}
        record["reply"] = {"root": ref, "parent": ref}
    uri, cid = put(pds, acct, POST, record)
    model.posts[uri] = (acct.did, ms)
    model.cids[uri] = cid
    model.texts[uri] = text
    if self_label:
        model.masked[uri] = ADULT
    return uri


def write_repost(pds, model: Model, acct: Acct, post: str) -> str:
    ms = model.ms()
    uri, _cid = put(pds, acct, REPOST, {"subject": {"uri": post, "cid": model.cids[post]}, "createdAt": iso_ms(ms)})
    model.reposts[uri] = (acct.did, post, ms)
    return uri


def write_app(pds, model: Model, acct: Acct, nsid: str, **fields) -> str:
    ms = model.ms()
    record = {**fields, "createdAt": iso_ms(ms)}
    uri, _cid = put(pds, acct, nsid, record)
    model.apps[uri] = (acct.did, nsid, ms, record)
    return uri


def gallery(pds, model, acct, title: str) -> str:
    return write_app(pds, model, acct, GALLERY, title=title, description=f"photographs: {title.lower()}")


def repo(pds, model, acct, name: str) -> str:
    return write_app(pds, model, acct, REPO, name=name, description=f"the {name} project", owner=acct.did,
                     knot="knot.example.com")


def star(pds, model, acct, subject: str) -> str:
    return write_app(pds, model, acct, STAR, subject=subject)


def delete_app(pds, model: Model, acct: Acct, uri: str) -> None:
    nsid = model.apps[uri][1]
    delete_record(pds, acct, nsid, uri.rsplit("/", 1)[-1])
    del model.apps[uri]


class Reader(Person):
    def feed(self, limit: int = 4) -> list[tuple[str, str, str | None]]:
        out, cursor = [], None
        while True:
            params = {"feed": "everything", "actor": self.acct.did, "limit": limit,
                      **({"cursor": cursor} if cursor else {})}
            body = _ok(self.get(GET_FEED, params=params), f"{self.label}: getFeed everything")
            out += [(r["uri"], r["collection"], (r.get("reason") or {}).get("repost")) for r in body["records"]]
            cursor = body.get("cursor")
            if not body["records"] or not cursor:
                return out

    def page(self) -> str:
        r = self.get("/timeline", params={"feed": "everything", "limit": 100})
        assert r.status_code == 200, f"{self.label}: /timeline?feed=everything -> {r.status_code}"
        return r.text

    def make_link(self) -> str:
        """A new feed-reader link for Everything (rotating any earlier one): its path, less `.atom`."""
        token = self.csrf()
        r = self.http.post(self.svc.url + "/timeline/reader", timeout=60, headers={"X-CSRF-Token": token},
                           data={"csrf_token": token, "feed": "everything"})
        assert r.status_code == 200, f"{self.label}: POST /timeline/reader -> {r.status_code} {r.text[:300]}"
        found = LINK.search(r.text)
        assert found, r.text[:2000]
        json_url = found.group(1).replace(".atom", ".json")
        assert f'value="{json_url}"' in r.text, "the page shows the JSON Feed URL beside the Atom one"
        return re.sub(r"^https?://[^/]+", "", found.group(1)).removesuffix(".atom")

    def revoke(self) -> None:
        token = self.csrf()
        r = self.http.post(self.svc.url + "/timeline/reader/revoke", timeout=60, headers={"X-CSRF-Token": token},
                           data={"csrf_token": token, "feed": "everything"})
        assert r.status_code == 200 and "is revoked" in r.text, f"{self.label}: revoke -> {r.status_code}"


LINK = re.compile(r'value="(https?://[^"]+/r/[A-Za-z0-9_-]+\.atom)"')
ENTRY = re.compile(r'<li class="post(?: card)?">(.*?)</li>', re.DOTALL)
WHEN = re.compile(r'class="when" href="([^"]+)"')
CARD = re.compile(r'<p class="card-title"><span class="app muted">([^<]*):</span>\s*'
                  r'<a href="([^"]+)" rel="nofollow noopener ugc">([^<]*)</a></p>')
REPOSTED = re.compile(r'Reposted by <a href="https://bsky\.app/profile/([^"]+)"')
MASK = re.compile(r'<details class="masked"><summary><span class="label-name">([^<]+)</span>')


def page_entries(text: str) -> list[tuple[str, str | None, str | None]]:
    """(the when link, "{App} {kind}: {title}" of a card or None, the reposter's DID or None) per entry."""
    out = []
    for body in ENTRY.findall(text):
        link = html.unescape(WHEN.search(body).group(1))
        card, by = CARD.search(body), REPOSTED.search(body)
        if card:
            assert html.unescape(card.group(2)) == link, f"a card's title links elsewhere than its byline: {body}"
        is_card = '<p class="card-title">' in body
        assert bool(card) == is_card, f"a card title of an unexpected shape: {body}"
        out.append((link, f"{html.unescape(card.group(1))}: {html.unescape(card.group(3))}" if card else None,
                    html.unescape(by.group(1)) if by else None))
    return out


def page_masks(text: str) -> dict[str, str]:
    out = {}
    for body in ENTRY.findall(text):
        mask = MASK.search(body)
        if mask:
            out[html.unescape(WHEN.search(body).group(1))] = html.unescape(mask.group(1))
    return out


def assert_rfc4287(body: bytes, what: str) -> None:
    """RFC 4287 §4.1.1/§4.1.2: the feed's id, title, updated (and an author, on the feed); each
    entry's id, title and updated exactly once, and one alternate link."""
    root = ET.fromstring(body)
    assert root.tag == ATOM + "feed", what
    assert [root.find(ATOM + tag) is not None for tag in ("id", "title", "updated", "author")] == [True] * 4, what
    for entry in root.findall(ATOM + "entry"):
        assert [len(entry.findall(ATOM + tag)) for tag in ("id", "title", "updated")] == [1, 1, 1], what
        assert len([x for x in entry.findall(ATOM + "link") if x.get("rel") == "alternate"]) == 1, what


def test_everything_and_its_feed_reader_links_through_kill9_and_replay_whole_process(pds, database_url, tmp_path):
    t0 = time.monotonic()

    def mark(label: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {label}", flush=True)

    sfx = "".join(random.choice(string.ascii_lowercase) for _ in range(4))
    with live_firehose(pds) as (js, tap):
        accts = [create_account(pds, f"e{n}{sfx}") for n in ["r0", "r1", "a0", "a1", "a2", "a3", "s0"]]
        readers_accts, a, stranger = accts[:2], accts[2:6], accts[6]
        model = Model()
        model.follows = {r.did: set() for r in readers_accts}
        for n, indexes in FOLLOWS.items():
            for i in indexes:
                rkey = tid_now()
                _ok(xrpc(pds.pds_url, "POST", "com.atproto.repo.createRecord", token=readers_accts[n].token,
                         json={"repo": readers_accts[n].did, "collection": FOLLOW, "rkey": rkey,
                               "record": {"$type": FOLLOW, **follow_record(a[i].did)}}), "follow")
                model.follows[readers_accts[n].did].add(a[i].did)
        passwords = [app_password(pds, r, f"feather-everything-{sfx}") for r in readers_accts]
        before = gallery(pds, model, a[1], "Before the sign-in")  # listed by the backfill or streamed
        port = free_port()
        env = service_env(
            DATABASE_URL=database_url, FEATHERREADER_ENV="development", SECRET_KEY=secrets.token_hex(32),
            FEATHERREADER_DATA_DIR=tmp_path / "data", FEATHERREADER_ALLOW_APP_PASSWORDS=True,
            FEATHERREADER_ALLOW_PRIVATE_NETWORK=True, FEATHERREADER_JETSTREAM_HOSTS=js.url,
            FEATHERREADER_PLC_URL=pds.plc_url, FEATHERREADER_HANDLE_RESOLVER=pds.pds_url,
            FEATHERREADER_PUBLIC_URL=f"http://127.0.0.1:{port}", FEATHERREADER_ADMIN_DIDS=readers_accts[0].did,
            FEATHERREADER_LOG_LEVEL="INFO")  # the built-in feeds file: no FEATHERREADER_CONFIG
        with stopped_after(ServiceProcess(env, tmp_path / "gunicorn.log", port=port), 120) as svc:
            svc.start()
            readers = [Reader(svc, acct, f"reader{n}") for n, acct in enumerate(readers_accts)]
            gevent.joinall([gevent.spawn(r.sign_in, pw) for r, pw in zip(readers, passwords)], raise_error=True)
            links = {r.label: r.make_link() for r in readers}
            converge(readers, model, "the sign-in's backfill")
            assert (before, GALLERY, None) in readers[0].feed(), "the gallery written before the sign-in"
            mark("2 readers signed in, a feed-reader link each")

            # Live: posts, replies, reposts, the other apps' records, a self-label, a delete.
            p0 = write_post(pds, model, a[0], "a0 says hello")
            p3 = write_post(pds, model, a[3], "a3 says hello")
            s0 = write_post(pds, model, stranger, "a stranger's post, reposted later")
            kite = repo(pds, model, a[2], "kite")  # a[2] is followed by both readers
            loom = repo(pds, model, a[3], "loom")  # followed by reader1 only
            herons = gallery(pds, model, a[1], "Herons at dawn")
            harbour = gallery(pds, model, a[3], "Harbour")
            write_post(pds, model, a[1], "a1 replies to a0", reply_to=p0)
            write_post(pds, model, a[2], "a2 replies to a stranger", reply_to=s0)
            star(pds, model, a[0], kite)  # reader0: "starred kite"
            star(pds, model, a[3], kite)  # reader1: "starred kite"
            star(pds, model, a[2], loom)  # both: loom is stored (reader1 follows a3), so named for reader0 too
            write_repost(pds, model, a[1], p0)  # reader0 follows both: p0 once, at the repost's time
            write_repost(pds, model, a[3], s0)  # reader1: the stranger's post, through the repost
            write_repost(pds, model, a[2], p3)  # reader0 only through it; reader1 at the repost's time
            labelled = write_post(pds, model, a[2], "explicit words behind a label", self_label="porn")
            converge(readers, model, "the live phase")
            delete_app(pds, model, a[3], harbour)
            write_post(pds, model, a[0], "after the gallery's delete")
            converge(readers, model, "the gallery's delete")
            check_all(svc, readers, links, model, mark, "after the live phase", labelled)
            # (What that proved, read off the model: every star names its repository, loom for
            # reader0 too, who does not follow its owner; the one gallery left is reader0's.)
            assert [sorted(c for _u, c, _b in model.page(r.acct.did) if c and c.startswith("Tangled star"))
                    for r in readers] == [["Tangled star: starred kite", "Tangled star: starred loom"]] * 2
            assert [[u for u, _n, _r in model.expected(r.acct.did) if u in (herons, harbour)]
                    for r in readers] == [[herons], []]

            # A burst of posts, galleries, repositories and reposts; kill -9 in its middle; a delete
            # and a star while the service is down.
            posted: list[str] = []
            burst_posts: list[str] = []

            def burst() -> None:
                for n in range(16):
                    author = a[n % 4]
                    kind = n % 4
                    if kind == 0 or not burst_posts:
                        burst_posts.append(write_post(pds, model, author, f"burst {n}"))
                        posted.append(burst_posts[-1])
                    elif kind == 1:
                        posted.append(gallery(pds, model, author, f"Burst gallery {n}"))
                    elif kind == 2:
                        posted.append(repo(pds, model, author, f"burst-{n}"))
                    else:
                        posted.append(write_repost(pds, model, author, burst_posts[-1]))
                    gevent.sleep(0.2)
            poster = gevent.spawn(burst)
            _wait(lambda: len(posted) >= 6 or poster.dead, 60, "six records of the burst", interval=0.05)
            svc.kill9()
            killed_after = len(posted)
            poster.get()
            assert killed_after < 16, "the burst ended before the kill"
            first_gallery = next(u for u in posted if u in model.apps and model.apps[u][1] == GALLERY)
            delete_app(pds, model, next(x for x in a if x.did == model.apps[first_gallery][0]), first_gallery)
            burst_repo = next(u for u in reversed(posted) if u in model.apps and model.apps[u][1] == REPO)
            star(pds, model, a[0], burst_repo)
            mark(f"kill -9 after {killed_after} of 16 burst records; a delete and a star while down")
            opened_before = len(js.stats()["opened"])
            svc.start()
            converge(readers, model, "the restart and its replay")
            resumed = [c for c in js.stats()["opened"][opened_before:] if GALLERY in (c["wantedCollections"] or [])]
            assert resumed and all(c["cursor"] for c in resumed), f"the restart resumed from a saved cursor: {resumed}"
            check_all(svc, readers, links, model, mark, "after the restart", labelled)

            # Every connection dropped: the consumer reconnects asking for its overlap, and the
            # replayed records change nothing twice.
            dropped = js.drop()
            write_post(pds, model, a[2], "after the drop")
            repo(pds, model, a[3], "after-the-drop")
            gallery(pds, model, a[0], "After the drop")
            converge(readers, model, "the reconnect and its replay")
            check_all(svc, readers, links, model, mark, f"after {dropped} dropped connections", labelled)

            # A new link ends the old one; a revoked one answers 404 as an unknown one does.
            old = links["reader0"]
            links["reader0"] = readers[0].make_link()
            assert [anon(svc, old + ".atom").status_code, anon(svc, old + ".json").status_code] == [404, 404]
            check_reader_feeds(svc, readers[0], links["reader0"], model, labelled, "after the rotation")
            readers[1].revoke()
            gone = [anon(svc, links["reader1"] + ext) for ext in (".atom", ".json")]
            made_up = "/r/" + secrets.token_urlsafe(32)
            unknown = anon(svc, made_up + ".atom")
            assert [g.status_code for g in gone] + [unknown.status_code] == [404, 404, 404]
            # The same page but for the path it links back to (its sign-in link's `next`).
            assert gone[0].text.replace(links["reader1"], made_up) == unknown.text, \
                "a revoked link tells nothing an unknown one does not"
            assert anon(svc, links["reader0"] + ".atom").status_code == 200, "revoking one reader's ends no other's"
            mark("a rotated link and a revoked one answer 404")
            assert_no_error_records(svc)
    mark(f"total {time.monotonic() - t0:.1f} s")


def anon(svc: ServiceProcess, path: str, **headers) -> requests.Response:
    """A feed reader's fetch: no cookie, only the private URL."""
    return requests.get(svc.url + path, timeout=30, headers=headers)


def converge(readers, model: Model, what: str) -> None:
    got: dict = {}

    def done() -> bool:
        for r in readers:
            got[r.label] = r.feed(limit=100)
        return all(got[r.label] == model.expected(r.acct.did) for r in readers)
    def message() -> str:
        return f"getFeed everything to equal the model after {what}:\n" + "\n".join(
            f"  {r.label}: got {len(got.get(r.label, []))} {got.get(r.label, [])[:4]}…,\n"
            f"   want {len(model.expected(r.acct.did))} {model.expected(r.acct.did)[:4]}…" for r in readers)
    _wait(done, CONVERGE_TIMEOUT, message, interval=0.5)


def check_all(svc, readers, links: dict, model: Model, mark, when: str, labelled: str) -> None:
    for reader in readers:
        want = model.expected(reader.acct.did)
        assert reader.feed(limit=4) == want, f"{reader.label} getFeed everything paged by 4 {when}"
        text = reader.page()
        assert page_entries(text) == model.page(reader.acct.did), f"{reader.label} /timeline?feed=everything {when}"
        assert page_masks(text) == model.masks(reader.acct.did), f"{reader.label} masks {when}"
        check_reader_feeds(svc, reader, links[reader.label], model, labelled, when)
        cards = sum(1 for _u, nsid, _r in want if nsid != POST)
        print(f"  {reader.label} {when}: {len(want)} in Everything ({cards} cards, "
              f"{sum(1 for *_x, r in want if r)} by repost)")
    mark(f"getFeed, the page, the Atom and the JSON Feed equal the model {when}")


ETAGS: dict[str, str] = {}  # link -> the Atom's ETag when last checked (every phase changes every feed)


def check_reader_feeds(svc, reader: Reader, link: str, model: Model, labelled: str, when: str) -> None:
    page = model.page(reader.acct.did)
    links = [u for u, _card, _by in page]
    what = f"{reader.label} {link[:7]}….atom {when}"
    # With the previous phase's validator: the feed changed since, so a full answer, a new ETag.
    previous = ETAGS.get(link)
    r = anon(svc, link + ".atom", **({"If-None-Match": previous} if previous else {}))
    assert (r.status_code, r.headers["Content-Type"]) == (200, "application/atom+xml; charset=utf-8"), what
    assert r.headers["ETag"] != previous, what
    ETAGS[link] = r.headers["ETag"]
    parsed = feedparser.parse(r.content)
    assert parsed.bozo == 0, f"{what}: {parsed.get('bozo_exception')}"
    assert_rfc4287(r.content, what)
    assert [e.link for e in parsed.entries] == links, what
    assert parsed.feed.title == "Everything · Feather", what
    for e, (_u, card, by) in zip(parsed.entries, page):
        if card:
            assert e.title.endswith(f": {card}"), f"{what}: {e.title!r} for the card {card!r}"
        assert ("reposted" in e.title) == bool(by), f"{what}: {e.title!r}"
    masked = model.masks(reader.acct.did)
    for e in parsed.entries:
        if e.link in masked:  # the label's name only, never the text
            assert e.title.endswith(f": [{masked[e.link]}]"), f"{what}: {e.title!r}"
            assert masked[e.link] in html.unescape(e.content[0].value), what
    if labelled in {u for u, _n, _r in model.expected(reader.acct.did)}:
        assert masked, what
        assert model.texts[labelled] not in r.text and "explicit" not in r.text, f"{what}: the masked text leaked"
    again = anon(svc, link + ".atom", **{"If-None-Match": r.headers["ETag"]})
    since = anon(svc, link + ".atom", **{"If-Modified-Since": r.headers["Last-Modified"]})
    assert (again.status_code, again.content, since.status_code) == (304, b"", 304), what
    j = anon(svc, link + ".json")
    assert (j.status_code, j.headers["Content-Type"]) == (200, "application/feed+json; charset=utf-8"), what
    body = j.json()
    assert body["version"] == "https://jsonfeed.org/version/1.1", what
    assert [i.get("url") for i in body["items"]] == links, f"{what} (JSON Feed)"
    if labelled in {u for u, _n, _r in model.expected(reader.acct.did)}:
        assert "explicit" not in j.text, f"{what}: the masked text leaked into the JSON Feed"
    again = anon(svc, link + ".json", **{"If-None-Match": j.headers["ETag"]})
    assert again.status_code == 304, what
