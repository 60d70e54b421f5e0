"""Labels where people see them: /timeline drops hidden posts and masks labelled ones behind a
"Show" control that needs no script; a labeler outage shows every post with a quiet note; getFeed
and listRecords return `labels` when asked with `labelers=` or atproto-accept-labelers. The
labeler is tests/support/fake_labeler.py over real HTTP."""
from __future__ import annotations

import html
import re

import pytest

from tests.fixtures.feeds.feedkit import (BASE_US, PROFILE, FakeSources, create, feeds_app, follow, ingest,
                                          join_backfills, post, toml)
from tests.support.fake_labeler import FakeLabeler
from tests.test_sync_views import sign_in
from tests.test_timeline_page import mark_backfilled

A, B, C = "did:plc:aaaa", "did:plc:bbbb", "did:plc:cccc"
SELF_PORN = {"$type": "com.atproto.label.defs#selfLabels", "values": [{"val": "porn"}]}
NOTE = "Labels for this post could not be checked right now."


def uri(did, rkey):
    return f"at://{did}/app.bsky.feed.post/{rkey}"


@pytest.fixture
def fake():
    labeler = FakeLabeler()
    yield labeler
    labeler.close()


def world_app(make_app, tmp_path, fake, **settings):
    """A follows B and C. B wrote b0..b4 (b1 self-labelled porn); C wrote c0 and c1."""
    settings = {"FEATHERREADER_PLC_URL": fake.url, "FEED_LABELERS": fake.did, **settings}
    app = feeds_app(make_app, tmp_path, toml(), sources=FakeSources(handles={"bob.test": B}), **settings)
    events = [follow(A, "f1", B), follow(A, "f2", C), create(B, PROFILE, "self", {"displayName": "Bee"}, time_us=BASE_US)]
    events += [post(B, f"b{i}", BASE_US + i * 1_000_000, text=f"bee {i}", **({"labels": SELF_PORN} if i == 1 else {}))
               for i in range(5)]
    events += [post(C, f"c{i}", BASE_US + 10_000_000 + i * 1_000_000, text=f"sea {i}") for i in range(2)]
    ingest(app, events)
    mark_backfilled(app, A)
    return app


@pytest.fixture
def world(make_app, tmp_path, fake):
    app = world_app(make_app, tmp_path, fake)
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    yield app, client
    join_backfills(app)


def posts(page: str) -> list[str]:
    return re.findall(r'<li class="post">.*?</li>', page, re.S)


def text_of(item: str) -> str:
    return html.unescape(re.search(r'<div class="text">(.*?)</div>', item, re.S).group(1))


def masks(page: str) -> dict[str, str]:
    """{post text: the label name its "Show" control names} for the masked posts."""
    out = {}
    for item in posts(page):
        m = re.search(r'<details class="masked"><summary><span class="label-name">([^<]*)</span> '
                      r'<span class="reveal">Show</span></summary>\s*<div class="text">(.*?)</div>', item, re.S)
        if m:
            out[html.unescape(m.group(2))] = html.unescape(m.group(1))
    return out


def test_hidden_posts_are_dropped_and_labelled_ones_masked_with_the_labels_name(world, fake):
    app, client = world
    fake.label(uri(B, "b2"), "!hide")
    fake.label(uri(B, "b3"), "graphic-media")
    fake.label(uri(B, "b4"), "!warn")
    fake.label(C, "!hide")  # C's account: all of C's posts
    fake.label(uri(B, "b0"), "spam")  # a label the timeline does not act on
    page = client.get("/timeline").text
    assert [text_of(p) for p in posts(page)] == ["bee 4", "bee 3", "bee 1", "bee 0"]
    assert masks(page) == {"bee 4": "Content warning", "bee 3": "Graphic media", "bee 1": "Adult content"}
    assert NOTE not in page and "sea " not in page and "bee 2" not in page
    main = page[page.index("<main"):page.index("</main>")]
    assert "<script" not in main and " onclick" not in main  # the control is <details>: no script


def test_an_account_level_warning_masks_every_post_of_the_account(world, fake):
    app, client = world
    fake.label(C, "sexual")
    page = client.get("/timeline").text
    assert masks(page) == {"sea 1": "Sexually suggestive", "sea 0": "Sexually suggestive", "bee 1": "Adult content"}


def test_a_negated_label_no_longer_masks_the_post(make_app, tmp_path, fake):
    app = world_app(make_app, tmp_path, fake, FEED_LABELS_TTL_SECS="1")
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    fake.label(uri(B, "b3"), "porn")
    assert masks(client.get("/timeline").text)["bee 3"] == "Adult content"
    fake.negate(uri(B, "b3"), "porn")
    from tests.support.waiting import wait_until

    wait_until(lambda: "bee 3" not in masks(client.get("/timeline").text), timeout=10,
               message="the page to show bee 3 unmasked once the TTL passed")
    join_backfills(app)


def test_a_labeler_outage_shows_every_post_with_a_quiet_note(world, fake):
    app, client = world
    fake.label(uri(B, "b2"), "!hide")
    fake.status = 500
    r = client.get("/timeline")
    assert r.status_code == 200
    items = posts(r.text)
    assert [text_of(p) for p in items] == ["sea 1", "sea 0", "bee 4", "bee 3", "bee 2", "bee 1", "bee 0"]
    assert all(NOTE in p for p in items)
    assert masks(r.text) == {"bee 1": "Adult content"}  # self-labels need no labeler


def test_a_slow_labeler_does_not_hold_the_page(make_app, tmp_path, fake):
    app = world_app(make_app, tmp_path, fake, FEED_LABELS_WAIT_MS="300")
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    fake.label(uri(B, "b2"), "!hide")
    fake.delay_s = 3.0
    page = client.get("/timeline").text
    assert "bee 2" in page and page.count(NOTE) == 7
    join_backfills(app)


def test_without_labelers_only_self_labels_apply(make_app, tmp_path, fake):
    app = world_app(make_app, tmp_path, fake, FEED_LABELERS="")
    client = app.test_client()
    sign_in(app, client, did=A, handle="alice.test")
    fake.label(uri(B, "b2"), "!hide")
    page = client.get("/timeline").text
    assert masks(page) == {"bee 1": "Adult content"} and "bee 2" in page and NOTE not in page
    assert fake.query_count() == 0
    join_backfills(app)


# --- getFeed and listRecords

def get_feed(client, **kw):
    headers = kw.pop("headers", {})
    return client.get("/xrpc/com.example.getFeed", query_string={"feed": "timeline", "actor": A, **kw},
                      headers=headers)


def test_get_feed_without_labelers_is_unchanged(world, fake):
    app, client = world
    fake.label(uri(B, "b2"), "!hide")
    body = get_feed(client).json
    assert all("labels" not in r for r in body["records"]) and len(body["records"]) == 7
    assert fake.query_count() == 0


def test_get_feed_with_labelers_returns_the_labels_in_effect_on_each_record(world, fake):
    app, client = world
    hide = fake.label(uri(B, "b2"), "!hide")
    account = fake.label(C, "!warn")
    gone = fake.label(uri(B, "b3"), "porn")
    fake.negate(uri(B, "b3"), "porn")
    r = get_feed(client, labelers=fake.did)
    assert r.status_code == 200 and r.headers["atproto-content-labelers"] == fake.did
    by_uri = {rec["uri"]: rec["labels"] for rec in r.json["records"]}
    cid_b1 = next(rec["cid"] for rec in r.json["records"] if rec["uri"] == uri(B, "b1"))
    assert by_uri == {
        uri(C, "c1"): [account], uri(C, "c0"): [account],
        uri(B, "b4"): [], uri(B, "b3"): [], uri(B, "b2"): [hide],
        uri(B, "b1"): [{"src": B, "uri": uri(B, "b1"), "cid": cid_b1, "val": "porn", "cts": "2025-10-09T08:53:21.000000Z"}],
        uri(B, "b0"): []}
    assert gone not in by_uri[uri(B, "b3")]


def test_the_accept_labelers_header_asks_too_and_redact_drops_what_that_labeler_hides(world, fake):
    app, client = world
    hide = fake.label(uri(B, "b2"), "!hide")
    plain = get_feed(client, headers={"atproto-accept-labelers": fake.did}).json["records"]
    assert [rec["labels"] for rec in plain if rec["uri"] == uri(B, "b2")] == [[hide]]
    r = get_feed(client, headers={"atproto-accept-labelers": f"{fake.did};redact"})
    assert uri(B, "b2") not in [rec["uri"] for rec in r.json["records"]] and len(r.json["records"]) == 6
    assert r.headers["atproto-content-labelers"] == f"{fake.did};redact"
    assert fake.query_count() == 1  # the second read came from the cache


def test_labelers_must_be_dids(world, fake):
    app, client = world
    r = get_feed(client, labelers="mod.example.com")
    assert r.status_code == 400 and r.json["error"] == "InvalidRequest"
    assert r.json["message"].startswith("labelers must be DIDs")


def test_list_records_takes_labelers_too(world, fake):
    app, client = world
    fake.label(B, "porn")
    r = client.get("/xrpc/com.example.post.listRecords", query_string={"actor": B, "labelers": fake.did})
    records = r.json["records"]
    assert len(records) == 5 and all(any(label["val"] == "porn" and label["src"] == fake.did for label in rec["labels"])
                                     for rec in records)
    assert "labels" not in client.get("/xrpc/com.example.post.listRecords", query_string={"actor": B}).json["records"][0]
