"""Labels from a labeler over real HTTP (tests/support/fake_labeler.py on loopback, found through its
DID document): the fetch, the cache and its TTL, negations, expiry, account-level labels, and an
outage or a slow labeler (the page's deadline), through read/labels.py's labels_for."""
from __future__ import annotations

import time

import pytest

from feather import sql
from feather.atproto.identity import http_client_from_settings
from feather.atproto.labels import datetime_us, query_labels
from feather.feeds.read import labels
from tests.support.fake_labeler import FakeLabeler, iso
from tests.test_sync_views import in_db

A, B = "did:plc:aaaa", "did:plc:bbbb"
P1, P2, P3 = (f"at://{A}/app.bsky.feed.post/p{i}" for i in (1, 2, 3))
Q1 = f"at://{B}/app.bsky.feed.post/q1"
TTL = 900
TTL_US = TTL * 1_000_000


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def fake():
    labeler = FakeLabeler()
    yield labeler
    labeler.close()


@pytest.fixture
def app(make_app, fake):
    made = make_app(FEATHERREADER_PLC_URL=fake.url, FEED_LABELERS=fake.did, FEED_LABELS_TTL_SECS=str(TTL))
    made.clock = Clock()
    made.extensions["feed_labelers_health"] = labels.Health(backoff_s=30, clock=made.clock)
    return made


def fetch(app, fake, subjects, now_us, deadline=5.0, labelers=None):
    return in_db(app, lambda: labels.labels_for(app, subjects, labelers or [fake.did], deadline, now_us=now_us))


def vals(found, uri, did):
    return sorted(label["val"] for label in found.labels_on(uri, did))


def test_labels_on_posts_and_accounts_come_from_the_labeler_as_it_sent_them(app, fake):
    sent = fake.label(P1, "porn")
    fake.label(B, "!hide")  # account-level: every post of B
    fake.label(P3, "nudity")  # not asked about
    now = sql.now_us()
    found = fetch(app, fake, [(P1, A), (P2, A), (Q1, B)], now)
    assert found.labels_on(P1, A) == [sent] and vals(found, P2, A) == [] and vals(found, Q1, B) == ["!hide"]
    assert not any(found.unchecked(u, d) for u, d in [(P1, A), (P2, A), (Q1, B)])
    assert fake.query_count() == 1 and fake.doc_requests == 1
    asked = fake.queries[0]
    assert sorted(asked["uriPatterns"]) == sorted([P1, A, P2, Q1, B]) and asked["sources"] == [fake.did]
    v = labels.verdict({}, B, Q1, found.labels_on(Q1, B))
    assert v.hide is True


def test_a_second_read_within_the_ttl_is_answered_from_the_cache_and_after_it_asks_again(app, fake):
    fake.label(P1, "porn")
    now = sql.now_us()
    first = fetch(app, fake, [(P1, A), (P2, A)], now)
    assert fake.query_count() == 1
    fake.label(P2, "sexual")  # the labeler changes its mind; the cache does not know yet
    again = fetch(app, fake, [(P1, A), (P2, A)], now + TTL_US - 1)
    assert fake.query_count() == 1 and vals(again, P1, A) == vals(first, P1, A) == ["porn"]
    assert vals(again, P2, A) == [] and not again.unchecked(P2, A)  # "no labels" was cached too
    later = fetch(app, fake, [(P1, A), (P2, A)], now + TTL_US)
    assert fake.query_count() == 2 and vals(later, P2, A) == ["sexual"]
    assert sorted(fake.queries[1]["uriPatterns"]) == sorted([P1, P2, A])


def test_only_what_is_stale_or_new_is_asked_about(app, fake):
    now = sql.now_us()
    fetch(app, fake, [(P1, A)], now)
    fetch(app, fake, [(P1, A), (Q1, B)], now + 1)
    assert sorted(fake.queries[1]["uriPatterns"]) == sorted([Q1, B])


@pytest.mark.parametrize("history", [False, True], ids=["current-state", "full-history"])
def test_a_negation_removes_the_label(app, fake, history):
    fake.history = history  # full history: the reader folds the negation itself
    fake.label(P1, "porn")
    fake.label(P1, "!warn")
    now = sql.now_us()
    assert vals(fetch(app, fake, [(P1, A)], now), P1, A) == ["!warn", "porn"]
    fake.negate(P1, "porn")
    found = fetch(app, fake, [(P1, A)], now + TTL_US)
    assert vals(found, P1, A) == ["!warn"]
    fake.label(P1, "porn")  # put back after the negation
    assert vals(fetch(app, fake, [(P1, A)], now + 2 * TTL_US), P1, A) == ["!warn", "porn"]


def test_an_expired_label_stops_applying_without_asking_again(app, fake):
    now = sql.now_us()
    fake.label(P1, "porn", exp=iso(now + 60_000_000))
    fake.label(P1, "nudity", exp=iso(now - 1))  # already expired when sent
    assert vals(fetch(app, fake, [(P1, A)], now), P1, A) == ["porn"]
    found = fetch(app, fake, [(P1, A)], now + 60_000_000)  # still within the TTL: from the cache
    assert vals(found, P1, A) == [] and fake.query_count() == 1 and not found.unchecked(P1, A)


def test_every_page_of_the_answer_is_read(app, fake):
    fake.page_size = 2
    for val in ("porn", "sexual", "nudity", "graphic-media", "!warn"):
        fake.label(P1, val)
    found = fetch(app, fake, [(P1, A)], sql.now_us())
    assert vals(found, P1, A) == sorted(["porn", "sexual", "nudity", "graphic-media", "!warn"])
    assert fake.query_count() == 3 and [q.get("cursor") for q in fake.queries] == [None, ["2"], ["4"]]


def test_an_outage_keeps_what_is_known_marks_the_rest_unchecked_and_backs_off(app, fake):
    fake.label(P1, "porn")
    now = sql.now_us()
    fetch(app, fake, [(P1, A)], now)
    fake.status = 500
    found = fetch(app, fake, [(P1, A), (P2, A)], now + TTL_US)  # P1 stale, P2 never asked
    assert vals(found, P1, A) == ["porn"] and not found.unchecked(P1, A)  # the stale answer still holds
    assert found.unchecked(P2, A) and vals(found, P2, A) == []
    asked = fake.query_count()
    fetch(app, fake, [(P2, A)], now + TTL_US + 1)
    assert fake.query_count() == asked  # backing off: not asked again at once
    fake.status = 200
    app.clock.t += 31  # the backoff is over
    found = fetch(app, fake, [(P2, A)], now + TTL_US + 2)
    assert fake.query_count() == asked + 1 and not found.unchecked(P2, A)


def test_a_slow_labeler_is_given_up_at_the_deadline(app, fake):
    fake.label(P1, "porn")
    fake.delay_s = 3.0
    started = time.monotonic()
    found = fetch(app, fake, [(P1, A)], sql.now_us(), deadline=0.3)
    took = time.monotonic() - started
    print(f"labels_for with a 3 s labeler and a 0.3 s deadline answered in {took:.2f} s")  # reported, not asserted
    assert found.unchecked(P1, A) and vals(found, P1, A) == []
    assert in_db(app, lambda: sql.scalar("SELECT count(*) FROM feed_label_checks")) == 0


def test_a_did_that_is_no_labeler_leaves_its_posts_unchecked(app, fake):
    found = fetch(app, fake, [(P1, A)], sql.now_us(), labelers=["did:plc:nobody"])
    assert found.unchecked(P1, A) and fake.query_count() == 0


def test_no_labelers_ask_nothing_and_check_nothing(app, fake):
    found = in_db(app, lambda: labels.labels_for(app, [(P1, A)], [], 1.0))
    assert not found.unchecked(P1, A) and found.labels_on(P1, A) == [] and fake.query_count() == 0


def test_query_labels_sends_the_patterns_and_keeps_only_the_labelers_own_valid_labels(app, fake):
    mine = fake.label(P1, "porn")
    fake.label(P2, "sexual")
    fake.label(P1, "nudity", src="did:plc:someoneelse")
    fake.issued.append({"src": fake.did, "uri": P1, "val": "bad", "cts": "not a time"})
    http = http_client_from_settings(app.config["FEATHER"])
    assert query_labels(http, fake.url, [P1], fake.did) == [mine]
    # The fake honours prefix patterns and sources as a labeler does.
    got = query_labels(http, fake.url, [f"at://{A}/*"], fake.did)
    assert [label["uri"] for label in got] == [P1, P2]
    assert datetime_us(mine["cts"]) is not None
