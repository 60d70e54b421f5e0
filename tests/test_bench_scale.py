"""bench/scale.py: its network has the degrees it claims, its log the live mix, and what the
service holds after setup and the log is what a model computed from the network says.

The model (Model below) shares no code with the setup (bench/scale_store.py) or the service: it
replays the history and the log in plain Python with admission's rules and the timeline rules,
and the timelines the service ends with, and every served reader's first getFeed page, must equal
it. Admission's in-memory sets are rebuilt on a timer, so an author nobody served follows any more
may still have records admitted for a while; the model tracks which stored records that leaves
unknown and checks that no timeline it compares depends on one (for these seeds none does).
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from collections import Counter

import pytest

from bench.scale_network import (DELETE_SHARE, FOLLOW, LIVE_RATE, LIVE_TOTAL, POST, PROFILE, REPOST, Network,
                                 step_us)
from bench.scale_store import CAP, Setup

BACKFILL = 100  # the built-in feeds' followBackfill


def start_us(events: int) -> int:
    return int(time.time() * 1_000_000) - 3_600_000_000 - step_us(LIVE_TOTAL) * events


def test_the_follow_graph_is_heavy_tailed_and_the_same_for_a_seed():
    net = Network(20_000, 1_760_000_000_000_000)
    followers = Counter(a for i in range(net.accounts) for a in net.follows(i))
    for i in range(net.accounts):
        mine = net.follows(i)
        assert i not in mine and len(set(mine)) == len(mine) >= 1
    counts = sorted((followers[i] for i in range(net.accounts)), reverse=True)
    # Exact for seed 36: a few accounts followed by a third of everyone, the median by a few tens.
    assert counts[:3] == [9895, 7640, 6258]
    assert statistics.median(counts) == 24
    assert sum(c >= 1000 for c in counts) == 62 and min(counts) == 3
    assert statistics.median(len(net.follows(i)) for i in range(net.accounts)) == 25
    # The most popular by rank are the most followed, and the expectation is what was drawn.
    assert [followers[a] for a in net.by_popularity[:3]] == counts[:3]
    assert abs(net.expected_followers(0) - counts[0]) < 0.05 * counts[0]
    # The same network again, and readers nested across S.
    again = Network(20_000, 1_760_000_000_000_000)
    assert [again.follows(i) for i in range(50)] == [net.follows(i) for i in range(50)]
    assert net.readers(100)[:10] == net.readers(10)


def test_a_million_accounts_give_a_few_accounts_100k_followers_and_the_median_tens():
    net = Network(1_000_000, 1_760_000_000_000_000)
    top = [net.expected_followers(rank) for rank in range(6)]
    assert all(f > 100_000 for f in top[:5]) and top[5] < 100_000
    assert 10 <= net.expected_followers(500_000) < 100


def test_the_log_has_the_live_mix_and_deletes_only_what_exists():
    net = Network(5_000, start_us(20_000))
    history = net.history(5_000)
    frames = net.log(20_000, history)
    kinds = Counter((f["commit"]["collection"], f["commit"]["operation"]) for f in frames)
    assert kinds == {(POST, "create"): 8423, (POST, "delete"): 337, (REPOST, "create"): 4026,
                     (REPOST, "delete"): 359, (FOLLOW, "create"): 5919, (FOLLOW, "delete"): 764,
                     (PROFILE, "update"): 172}
    for nsid, rate in LIVE_RATE.items():
        share = sum(n for (c, _), n in kinds.items() if c == nsid) / len(frames)
        assert abs(share - rate / LIVE_TOTAL) < 0.01, nsid
        deletes = kinds.get((nsid, "delete"), 0) / max(1, sum(n for (c, _), n in kinds.items() if c == nsid))
        assert abs(deletes - DELETE_SHARE[nsid]) < 0.02, nsid
    times = [f["time_us"] for f in frames]
    assert times == sorted(set(times)) and history[-1].time_us < times[0]
    live: set[str] = {f"at://{net.did(h.author)}/{h.kind}/{h.rkey}" for h in history}
    follows: dict[tuple[str, str], str] = {}  # (follower, subject) -> uri of the live follow
    seen: set[str] = set()
    index = {did: i for i, did in enumerate(net.dids)}
    for f in frames:
        c = f["commit"]
        uri = f"at://{f['did']}/{c['collection']}/{c['rkey']}"
        if c["collection"] == FOLLOW and f["did"] not in seen:  # its follows from before the log
            seen.add(f["did"])
            for j, a in enumerate(net.follows(index[f["did"]])):
                follows[(f["did"], net.did(a))] = f"at://{f['did']}/{FOLLOW}/{net.follow_rkey(j)}"
                live.add(follows[(f["did"], net.did(a))])
        if c["operation"] == "delete":
            assert uri in live, uri
            live.discard(uri)
            if c["collection"] == FOLLOW:
                (pair,) = [k for k, v in follows.items() if v == uri and k[0] == f["did"]]
                del follows[pair]
        elif c["operation"] == "create":
            assert uri not in live
            live.add(uri)
            if c["collection"] == FOLLOW:
                pair = (f["did"], c["record"]["subject"])
                assert pair not in follows and pair[0] != pair[1]  # apps write no duplicate follows
                follows[pair] = uri


class Model:
    """The served readers' timelines after the history and the log, by the rules alone."""

    def __init__(self, net: Network, readers: list[int], history):
        self.net = net
        self.served = {net.did(r) for r in readers}
        self.follows = {net.did(r): {net.did(a) for a in net.follows(r)} for r in readers}
        self.ever = set().union(*self.follows.values())  # every author admission may still let through
        self.stored: dict[str, tuple[str, str, int, str | None]] = {}  # uri -> (nsid, author, time, subject)
        self.unsure: set[str] = set()  # uris whose being stored depends on admission's timing
        self.ambiguous: set[str] = set()  # readers whose timeline depends on one
        uri = {h.n: f"at://{net.did(h.author)}/{h.kind}/{h.rkey}" for h in history}
        for h in history:
            if net.did(h.author) in self.served | self.ever:
                self.stored[uri[h.n]] = (h.kind, net.did(h.author), h.time_us,
                                         None if h.subject is None else uri[h.subject])
                if h.subject is not None:  # the post a kept repost shows is kept too
                    s = history[h.subject]
                    self.stored[uri[s.n]] = (POST, net.did(s.author), s.time_us, None)
        for r in readers:
            for j, a in enumerate(net.follows(r)):
                self.stored[f"at://{net.did(r)}/{FOLLOW}/{net.follow_rkey(j)}"] = (FOLLOW, net.did(r),
                                                                                   net.follow_time(j), net.did(a))
        self.rows: dict[str, dict[str, tuple[str, int, str | None]]] = {}  # reader -> uri -> (nsid, time, subject)
        for reader, followees in self.follows.items():
            mine = sorted(((u, v) for u, v in self.stored.items() if v[1] in followees), key=lambda x: -x[1][2])
            self.rows[reader] = {}
            for nsid in (POST, REPOST):
                for u, (_, _, t, subject) in [x for x in mine if x[1][0] == nsid][:CAP]:
                    self.rows[reader][u] = (nsid, t, subject)
        # Admission lets through edits and deletes of records reposted into a timeline (its set is
        # rebuilt from feed_items on a timer, and grows with every repost it admits).
        self.ever_subjects = self.subjects()

    def subjects(self) -> set[str]:
        return {s for rows in self.rows.values() for (_, _, s) in rows.values() if s}

    def followed(self) -> set[str]:
        return set().union(*self.follows.values())

    def apply(self, frames) -> None:
        for f in frames:
            did, c, t = f["did"], f["commit"], f["time_us"]
            nsid, op = c["collection"], c["operation"]
            uri = f"at://{did}/{nsid}/{c['rkey']}"
            if nsid == FOLLOW:
                if did not in self.served:
                    continue
                if op == "create":
                    subject = c["record"]["subject"]
                    self.follows[did].add(subject)
                    self.ever.add(subject)
                    self.stored[uri] = (FOLLOW, did, t, subject)
                    theirs = sorted(((u, v) for u, v in self.stored.items() if v[1] == subject and v[0] != FOLLOW),
                                    key=lambda x: (-x[1][2], x[0]))
                    for kind in (POST, REPOST):
                        for u, (_, _, tu, s) in [x for x in theirs if x[1][0] == kind][:BACKFILL]:
                            self.rows[did].setdefault(u, (kind, tu, s))
                    if any(u.startswith(f"at://{subject}/") for u in self.unsure):
                        self.ambiguous.add(did)  # what the backfill copied depends on admission's timing
                else:
                    subject = self.stored.pop(uri)[3]
                    self.follows[did].discard(subject)
                    self.rows[did] = {u: v for u, v in self.rows[did].items() if not u.startswith(f"at://{subject}/")}
                continue
            if nsid == PROFILE:
                continue
            surely = did in self.served or did in self.followed() or (op == "delete" and uri in self.subjects())
            maybe = did in self.ever or (op == "delete" and uri in self.ever_subjects)
            if not surely and not maybe:
                continue
            if not surely:
                self.unsure.add(uri)
            if op == "delete":
                self.stored.pop(uri, None)
                for rows in self.rows.values():
                    rows.pop(uri, None)
                continue
            subject = c["record"]["subject"]["uri"] if nsid == REPOST else None
            if subject:
                self.ever_subjects.add(subject)
            self.stored[uri] = (nsid, did, t, subject)
            for reader, followees in self.follows.items():
                if did in followees:
                    self.rows[reader][uri] = (nsid, t, subject)

    def items(self, reader: str) -> list[tuple]:
        return sorted((reader, u, nsid, t, s) for u, (nsid, t, s) in self.rows[reader].items())

    def page(self, reader: str, limit: int = 50) -> list[str] | None:
        """The record URIs of the reader's first getFeed page, or None when it depends on admission's timing."""
        newest: dict[str, tuple[int, str]] = {}  # shown record -> its newest row (time, row uri)
        for u, (_, t, s) in self.rows[reader].items():
            shown = s or u
            if shown in self.unsure:
                return None
            if shown not in self.stored:
                continue  # a repost of a post the store lacks shows nothing (offline: never fetched)
            best = newest.get(shown)
            if best is None or t > best[0] or (t == best[0] and u < best[1]):  # reposts.NEWER
                newest[shown] = (t, u)
        rows = sorted(newest.items(), key=lambda x: (-x[1][0], x[1][1]))
        return [shown for shown, _ in rows[:limit]]


@pytest.mark.slow
def test_every_served_reader_ends_with_the_timeline_the_model_computes(tmp_path):
    from bench import scale  # noqa: PLC0415  imports the fake Jetstream's client (urllib, ssl): only here
    from bench.scale_children import offline_sources, overrides  # noqa: PLC0415
    from feather.feeds.store import records  # noqa: PLC0415
    from tests.support.fake_jetstream import FakeJetstream  # noqa: PLC0415
    from tests.support.postgres import scratch_database  # noqa: PLC0415

    events = 3000
    net = Network(3000, start_us(events))
    readers = net.readers(40)
    history = net.history(12_000)
    frames = net.log(events, history)
    model = Model(net, readers, history)
    setup = Setup(net, readers, history)
    # The setup's follows are the JSON the store writes for the record the network describes.
    first = next(setup.follow_rows())
    assert first[4] == records.dumps(net.follow_record(net.follows(readers[0])[0], 0))
    before = {reader: model.page(reader) for reader in model.served}
    model.apply(frames)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(f) + "\n" for f in frames))
    postgres = os.environ.get("DATABASE_URL", "")
    where = scratch_database(postgres, "feather_scale_test") if postgres.startswith("postgres") else \
        contextlib.nullcontext(f"sqlite:///{tmp_path}/scale.db")
    with FakeJetstream(log=str(log), ttl_secs=0) as js, where as database:
        result = scale.run_one(net, readers, history, frames, js.url, database, tmp_path, read_rate=200,
                               idle_reads=60)
        # The baseline reads, before the log, returned the timelines the setup made, page for page.
        idle = result["idle"]
        assert idle["statuses"] == {"200": 60} and len(idle["pages"]) == 60
        assert [uris for _, uris in idle["pages"]] == [before[actor] for actor, _ in idle["pages"]]
        assert sum(len(uris) for _, uris in idle["pages"]) > 60 * 10
        # Every read under ingest answered.
        assert set(result["loaded"]["statuses"]) <= {"200"}
        from feather import create_app  # noqa: PLC0415
        from feather.db import db  # noqa: PLC0415
        from feather.process.runtime import migrate  # noqa: PLC0415

        app = create_app(overrides(database, str(tmp_path), len(readers)))
        migrate(app)
        app.extensions["feeds_sources"] = offline_sources(app)
        client = app.test_client()
        with app.app_context(), db.connection_context():
            got = db.execute_sql("SELECT actor, uri, collection, time_us, subject FROM feed_items").fetchall()
        by_reader: dict[str, list[tuple]] = {}
        for row in got:
            by_reader.setdefault(row[0], []).append(tuple(row))
        compared = pages = 0
        for reader in sorted(model.served):
            if reader in model.ambiguous:
                continue
            assert sorted(by_reader.get(reader, [])) == model.items(reader), reader
            compared += 1
            want = model.page(reader)
            if want is not None:
                body = client.get(f"/xrpc/com.featherreader.getFeed?feed=timeline&actor={reader}&limit=50").get_json()
                assert [r["uri"] for r in body["records"]] == want, reader
                pages += 1
        db.close()
        with contextlib.suppress(AttributeError):
            db.obj.close_all()
    # Every reader was compared (no timeline depended on admission's timing), and they hold
    # something: history rows at the cap for some, the log's rows, backfills and unfollows.
    assert model.ambiguous == set() and compared == len(readers) and pages >= len(readers) - 2, (compared, pages)
    assert max(len(r) for r in model.rows.values()) > CAP
    assert sum(len(r) for r in model.rows.values()) == result["size"]["items"]
