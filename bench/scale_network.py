"""The scale bench's synthetic network (bench/scale.py): accounts, a heavy-tailed follow graph,
a history of posts and reposts before the timed log, and the log itself. Standard library only,
deterministic for a seed, so every database and every S replays the same network.

- **Popularity** (who is followed): account of rank r (a seeded shuffle) is drawn as a followee
  with weight (r + 1) ** -POPULARITY_ALPHA. With 1,000,000 accounts and a mean of about 50
  follows each, that gives the most followed accounts 100k+ followers and the median account a
  few tens (`expected_followers`; bench/scale.py counts them among the served readers, and
  tests/test_bench_scale.py on a small network where every account's follows are drawn).
- **Follows** of an account are drawn once and for all from a generator seeded by the account:
  a log-normal count (median FOLLOWS_MEDIAN, sigma FOLLOWS_SIGMA, at most FOLLOWS_MAX), then that
  many followees by popularity, without repeats or self-follows. The loader stores them for the
  served readers; the log's follows and unfollows start from them.
- **Activity** (who writes): Zipf-Mandelbrot weights (r + ACTIVITY_OFFSET) ** -1 over another
  shuffle, independent of popularity; POPULAR_AUTHORS of posts and reposts are written by an
  account drawn by popularity instead, so the most followed post a few times an hour.
- **The live mix** (LIVE_RATE): events per second of the collections Feather's global stream
  reads, from the sources named in docs/performance.md; the history and the log are spaced at that
  rate, so their length is network time.
"""
from __future__ import annotations

import bisect
import hashlib
import itertools
import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timezone


FOLLOW, POST, REPOST, PROFILE = ("app.bsky.graph.follow", "app.bsky.feed.post", "app.bsky.feed.repost",
                                 "app.bsky.actor.profile")

# Events per second on the live network (docs/performance.md, "Scale", says where each comes from).
# Growth of bsky-stats.lut.li's network totals over 30 days (2025-10-24 06:17 UTC to 2025-11-23
# 06:17 UTC, the daily snapshots archived by github.com/j4ckxyz/bsky-stats-archive), in 2,592,000 s:
# 111,806,890 posts, 71,010,846 follows, 620,382,418 likes. Taken as records created less records
# deleted, so a collection whose events are a share d of deletes runs at growth / (1 - 2d): more
# than the growth, the side that makes the goal harder. No published figure for reposts or profile
# writes was found: a tenth of the likes' rate and one a second are assumptions.
DELETE_SHARE = {POST: 0.04, REPOST: 0.08, FOLLOW: 0.12, PROFILE: 0.0}  # assumptions too
MONTH = 2_592_000
LIVE_RATE = {POST: 111_806_890 / MONTH / (1 - 2 * DELETE_SHARE[POST]),
             FOLLOW: 71_010_846 / MONTH / (1 - 2 * DELETE_SHARE[FOLLOW]),
             REPOST: 0.1 * 620_382_418 / MONTH, PROFILE: 1.0}
LIVE_TOTAL = sum(LIVE_RATE.values())

POPULARITY_ALPHA = 0.76
FOLLOWS_MEDIAN, FOLLOWS_SIGMA, FOLLOWS_MAX = 25, 1.18, 10_000
ACTIVITY_OFFSET = 100
POPULAR_AUTHORS = 0.02
PROFILE_TEXT = ("reading and writing on the open web; art, science, music and the news of the day, "
                "mostly in English, sometimes not; posts are my own and so are the typos, say hello") * 2
# Post text: slices of one seeded run of the words bench/getfeed.py's realistic posts use.
WORDS = ("the", "a", "feed", "reader", "today", "new", "post", "about", "this", "that", "with", "from", "what",
         "network", "people", "timeline", "week", "really", "think", "good", "open", "source", "small", "server")
_rng = random.Random(5)
TEXT = " ".join(_rng.choice(WORDS) for _ in range(40_000))
RECENT = 20_000  # reposts and deletes pick among this many latest posts
GRAPH_AGE_US = 30 * 86_400_000_000  # the follows were made this long before the log starts


def did_of(seed: int, i: int) -> str:
    """A did:plc-shaped DID (24 characters), random-looking so keys spread like real ones."""
    return "did:plc:" + hashlib.blake2b(b"%d:%d" % (seed, i), digest_size=12).hexdigest()


def tid(micros: int, clock_id: int = 0) -> str:
    """An atproto TID (13 characters, sorts by time)."""
    n = (micros << 10) | (clock_id & 0x3FF)
    return "".join("234567abcdefghijklmnopqrstuvwxyz"[(n >> (5 * i)) & 31] for i in range(12, -1, -1))


def iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1_000_000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def cid(kind: str, n: int) -> str:
    return "bafyrei" + hashlib.blake2b(f"{kind}{n}".encode(), digest_size=20).hexdigest()[:52]


@dataclass
class Item:
    """One history record: a post (subject None) or a repost of the post `subject` (an index)."""
    kind: str
    n: int  # its index among the history's items
    author: int
    time_us: int
    subject: int | None = None
    rkey: str = ""

    def __post_init__(self) -> None:
        self.rkey = tid(self.time_us)

    def uri(self, net: "Network") -> str:
        return f"at://{net.did(self.author)}/{self.kind}/{self.rkey}"


@dataclass
class Network:
    accounts: int
    start_us: int  # when the log starts; the history ends just before, the follows are older
    seed: int = 36
    dids: list[str] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.start_us -= self.start_us % 1000  # every time a whole millisecond: createdAt says it exactly
        rng = random.Random(self.seed)
        n = self.accounts
        self.by_popularity = list(range(n))
        rng.shuffle(self.by_popularity)  # rank -> account
        self.by_activity = list(range(n))
        rng.shuffle(self.by_activity)
        self.pop_cum = list(itertools.accumulate((r + 1) ** -POPULARITY_ALPHA for r in range(n)))
        self.act_cum = list(itertools.accumulate(1.0 / (r + ACTIVITY_OFFSET) for r in range(n)))
        self._follows: dict[int, list[int]] = {}
        self._follow_rkeys: list[str] = []
        self._follow_isos: list[str] = []

    # --- accounts -----------------------------------------------------------------------------

    def did(self, i: int) -> str:
        if not self.dids:
            self.dids = [did_of(self.seed, k) for k in range(self.accounts)]
        return self.dids[i]

    def popular(self, rng: random.Random) -> int:
        return self.by_popularity[bisect.bisect_left(self.pop_cum, rng.random() * self.pop_cum[-1])]

    def active(self, rng: random.Random) -> int:
        return self.by_activity[bisect.bisect_left(self.act_cum, rng.random() * self.act_cum[-1])]

    def author(self, rng: random.Random) -> int:
        return self.popular(rng) if rng.random() < POPULAR_AUTHORS else self.active(rng)

    def expected_followers(self, rank: int) -> float:
        """The expected follower count of the account of popularity rank `rank` (0 = most followed):
        each account follows it with probability 1 - (1 - p) ** k, k its follow count (`follows`
        draws without repeats), averaged over a seeded sample of follow counts."""
        p = (rank + 1) ** -POPULARITY_ALPHA / self.pop_cum[-1]
        rng = random.Random(self.seed * 3)
        ks = [min(FOLLOWS_MAX, self.accounts - 1, max(1, round(rng.lognormvariate(math.log(FOLLOWS_MEDIAN),
                                                                                   FOLLOWS_SIGMA))))
              for _ in range(4000)]
        return (self.accounts - 1) * sum(1 - (1 - p) ** k for k in ks) / len(ks)

    def readers(self, s: int) -> list[int]:
        """The first s of one seeded draw of accounts: the served readers (nested across S)."""
        order = list(range(self.accounts))
        random.Random(self.seed * 7 + 1).shuffle(order)
        return order[:s]

    def follows(self, i: int) -> list[int]:
        """Whom account i follows before the history starts, in the order it followed them."""
        got = self._follows.get(i)
        if got is None:
            rng = random.Random(self.seed * 1_000_003 + i)
            k = min(FOLLOWS_MAX, self.accounts - 1, max(1, round(rng.lognormvariate(math.log(FOLLOWS_MEDIAN),
                                                                                    FOLLOWS_SIGMA))))
            ranks = rng.choices(range(self.accounts), cum_weights=self.pop_cum, k=k + k // 8 + 2)
            seen: dict[int, None] = {}
            for r in ranks:
                a = self.by_popularity[r]
                if a != i:
                    seen[a] = None
                if len(seen) == k:
                    break
            got = self._follows[i] = list(seen)
        return got

    def forget_follows(self) -> None:
        self._follows.clear()

    # --- records ------------------------------------------------------------------------------

    def follow_time(self, j: int) -> int:
        """When every account made its j-th follow (of `follows`): a month before the log."""
        return self.start_us - GRAPH_AGE_US - (FOLLOWS_MAX - j) * 1000

    def follow_rkey(self, j: int) -> str:
        if not self._follow_rkeys:
            self._follow_rkeys = [tid(self.follow_time(k)) for k in range(FOLLOWS_MAX)]
        return self._follow_rkeys[j]

    def follow_iso(self, j: int) -> str:
        if not self._follow_isos:
            self._follow_isos = [iso(self.follow_time(k)) for k in range(FOLLOWS_MAX)]
        return self._follow_isos[j]

    def follow_record(self, subject: int, j: int) -> dict:
        """The record of an account's j-th follow (of `follows`), of subject."""
        return {"$type": FOLLOW, "createdAt": self.follow_iso(j), "subject": self.did(subject)}

    def post_record(self, n: int, time_us: int) -> dict:
        """Post n (history or log), seeded by n, shaped as bench/getfeed.py's realistic posts are:
        10-300 characters of text, langs, and by chance a link facet (25 %), a reply (30 %), and
        images with alt text (20 %), a link card (10 %) or a quote (5 %); about 0.5 KiB of JSON."""
        rng = random.Random(self.seed * 31 + n)
        length = (rng.randint(10, 80), rng.randint(80, 200), rng.randint(200, 300))[rng.randrange(3)]
        at = rng.randrange(len(TEXT) - 400)
        text = f"{n} {TEXT[at:at + length].strip()}"[:300]
        record: dict = {"$type": POST, "createdAt": iso(time_us), "langs": ["en"], "text": text}
        blob = {"$type": "blob", "ref": {"$link": f"bafkreig{n:052d}"}, "mimeType": "image/jpeg", "size": 100_000 + n}
        other = (f"at://{self.did((n * 7919) % self.accounts)}/{POST}/{tid(time_us - 7_000_000)}", cid("p", n - 7))
        if rng.random() < 0.25:
            link = f"https://example.com/articles/{n}"
            record["text"] = f"{text} {link}"
            start = len(text.encode()) + 1
            record["facets"] = [{"features": [{"$type": "app.bsky.richtext.facet#link", "uri": link}],
                                 "index": {"byteEnd": start + len(link), "byteStart": start}}]
        if rng.random() < 0.3:
            parent = {"cid": other[1], "uri": other[0]}
            record["reply"] = {"parent": parent, "root": parent}
        roll = rng.random()
        if roll < 0.2:
            images = []
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(len(TEXT) - 200)
                images.append({"alt": TEXT[at:at + rng.randint(10, 150)].strip(),
                               "aspectRatio": {"height": 800, "width": 1200}, "image": blob})
            record["embed"] = {"$type": "app.bsky.embed.images", "images": images}
        elif roll < 0.3:
            at = rng.randrange(len(TEXT) - 200)
            record["embed"] = {"$type": "app.bsky.embed.external", "external": {
                "description": TEXT[at:at + 120].strip(), "thumb": blob, "title": f"An article {n}",
                "uri": f"https://example.com/{n}"}}
        elif roll < 0.35:
            record["embed"] = {"$type": "app.bsky.embed.record", "record": {"cid": other[1], "uri": other[0]}}
        return record

    def repost_record(self, subject_uri: str, subject_cid: str, time_us: int) -> dict:
        return {"$type": REPOST, "createdAt": iso(time_us), "subject": {"cid": subject_cid, "uri": subject_uri}}

    def profile_record(self, i: int, n: int) -> dict:
        """A profile of 0-160 characters of description (an avatar and banner as blobs are not kept)."""
        return {"$type": PROFILE, "description": PROFILE_TEXT[:(i * 37 + n * 11) % 161], "displayName": f"Account {i}"}

    # --- the history and the log --------------------------------------------------------------

    def history(self, posts: int) -> list[Item]:
        """posts posts and their share of reposts, spaced at the live rate, ending before the log."""
        rng = random.Random(self.seed * 101)
        share = LIVE_RATE[REPOST] / LIVE_RATE[POST]
        total = posts + round(posts * share)
        step = step_us(LIVE_RATE[POST] + LIVE_RATE[REPOST])
        items: list[Item] = []
        post_ix: list[int] = []
        t0 = self.start_us - step * (total + 1)
        for n in range(total):
            t = t0 + step * n
            if post_ix and rng.random() < share / (1 + share):
                subject = post_ix[max(0, len(post_ix) - RECENT) + rng.randrange(min(RECENT, len(post_ix)))]
                items.append(Item(REPOST, n, self.author(rng), t, subject))
            else:
                items.append(Item(POST, n, self.author(rng), t))
                post_ix.append(n)
        return items

    def log(self, events: int, history: list[Item]) -> list[dict]:
        """The timed part: Jetstream frames in the live mix, spaced at the live rate from start_us."""
        rng = random.Random(self.seed * 211)
        kinds, weights = [], []
        for nsid, rate in LIVE_RATE.items():
            kinds += [(nsid, "create"), (nsid, "delete")]
            weights += [rate * (1 - DELETE_SHARE[nsid]), rate * DELETE_SHARE[nsid]]
        cum = list(itertools.accumulate(weights))
        step = step_us(LIVE_TOTAL)
        recent = [(h.author, h.rkey, cid("p", h.n)) for h in history if h.kind == POST][-RECENT:]
        reposts: list[tuple[int, str]] = []
        following: dict[int, dict[int, str]] = {}  # account -> {subject: rkey}, as the log leaves them
        frames = []
        for k in range(events):
            t = self.start_us + step * k
            nsid, op = kinds[bisect.bisect_left(cum, rng.random() * cum[-1])]
            n = len(history) + k
            if nsid == POST and op == "create":
                author = self.author(rng)
                frames.append(commit(self.did(author), POST, tid(t), "create", self.post_record(n, t), cid("p", n), t))
                recent.append((author, tid(t), cid("p", n)))
                if len(recent) > 2 * RECENT:
                    del recent[:RECENT]
            elif nsid == POST and recent:
                author, rkey, _ = recent.pop(rng.randrange(len(recent)))
                frames.append(commit(self.did(author), POST, rkey, "delete", None, None, t))
            elif nsid == REPOST and (op == "create" or not reposts):
                author, rkey, post_cid = recent[rng.randrange(len(recent))]
                reposter = self.author(rng)
                subject = f"at://{self.did(author)}/{POST}/{rkey}"
                frames.append(commit(self.did(reposter), REPOST, tid(t), "create",
                                     self.repost_record(subject, post_cid, t), cid("r", n), t))
                reposts.append((reposter, tid(t)))
            elif nsid == REPOST:
                reposter, rkey = reposts.pop(rng.randrange(len(reposts)))
                frames.append(commit(self.did(reposter), REPOST, rkey, "delete", None, None, t))
            elif nsid == FOLLOW:
                follower = self.active(rng)
                mine = following.get(follower)
                if mine is None:
                    mine = following[follower] = {s: self.follow_rkey(j) for j, s in enumerate(self.follows(follower))}
                if op == "create" or not mine:
                    subject = self.popular(rng)
                    for _ in range(8):
                        if subject != follower and subject not in mine:
                            break
                        subject = self.popular(rng)
                    else:
                        continue  # follows everyone it draws: nothing this tick
                    mine[subject] = tid(t)
                    record = {"$type": FOLLOW, "createdAt": iso(t), "subject": self.did(subject)}
                    frames.append(commit(self.did(follower), FOLLOW, tid(t), "create", record, cid("f", -n), t))
                else:
                    subject = list(mine)[rng.randrange(len(mine))]
                    frames.append(commit(self.did(follower), FOLLOW, mine.pop(subject), "delete", None, None, t))
            else:
                author = self.active(rng)
                frames.append(commit(self.did(author), PROFILE, "self", "update", self.profile_record(author, n),
                                     cid("a", n), t))
        return frames


def step_us(rate: float) -> int:
    """Microseconds between events at rate events/s, a whole millisecond so createdAt (ms) is exact."""
    return max(1000, round(1_000_000 / rate / 1000) * 1000)


def commit(did: str, collection: str, rkey: str, op: str, record: dict | None, record_cid: str | None,
           time_us: int) -> dict:
    body: dict = {"rev": tid(time_us), "operation": op, "collection": collection, "rkey": rkey}
    if op != "delete":
        body["record"], body["cid"] = record, record_cid
    return {"did": did, "time_us": time_us, "kind": "commit", "commit": body}
