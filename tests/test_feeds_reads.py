"""Reads a client can use: handles and fetched profiles, the listRecords?actor= backfill, getRecord
profiles, private follow/profile collections, and the edges (cursor range, empty filters, long URLs)."""
from __future__ import annotations

import base64
import json

import pytest

from feather.db import db
from tests.fixtures.feeds.feedkit import (
    BASE_US, POST, PROFILE, FakeSources, feeds_app, follow, ingest, iso, join_backfills, post, rows, toml,
)
from feather.feeds.read.sources import SourceError
from feather.jetstream.events import IdentityEvent

A, C, D = "did:plc:aaaa", "did:plc:cccc", "did:plc:dddd"
NS = "/xrpc/com.example"


@pytest.fixture
def sources():
    return FakeSources(handles={"cy.test": C}, repos={
        (C, PROFILE): [("self", "bafyprof", {"$type": PROFILE, "displayName": "Cy"})],
        (D, POST): [(f"d{i}", f"bafyd{i}", {"$type": POST, "text": f"d{i}", "createdAt": iso(BASE_US - i)})
                    for i in range(3)]})


@pytest.fixture
def app(make_app, tmp_path, sources):
    app = feeds_app(make_app, tmp_path, toml(), sources=sources)
    yield app
    join_backfills(app)


def test_profiles_carry_the_verified_handle_and_a_profile_fetched_from_the_pds(app, sources):
    ingest(app, [follow(A, "f1", C), post(C, "c1", BASE_US + 1)])
    body = app.test_client().get(f"{NS}.getFeed?feed=timeline&actor={A}&profiles=true").json
    assert body["profiles"] == [{"did": C, "handle": "cy.test", "uri": f"at://{C}/{PROFILE}/self", "cid": "bafyprof",
                                 "collection": PROFILE, "rkey": "self",
                                 "value": {"$type": PROFILE, "displayName": "Cy"}}]
    assert sorted(sources.calls) == [("get", C, PROFILE), ("handle", C)]


def test_handles_are_cached_until_the_stream_says_the_identity_changed(app, sources):
    ingest(app, [follow(A, "f1", C), post(C, "c1", BASE_US + 1)])
    client = app.test_client()
    url = f"{NS}.getFeed?feed=timeline&actor={A}&profiles=true"
    client.get(url)
    client.get(url)
    assert sources.calls.count(("handle", C)) == 1
    sources.handles = {"cy2.test": C}
    ingest(app, [IdentityEvent(C, BASE_US + 2, "cy2.test")])
    assert client.get(url).json["profiles"][0]["handle"] == "cy2.test"
    assert sources.calls.count(("handle", C)) == 2


def test_a_did_without_a_profile_is_not_asked_again_within_the_hour(app, sources):
    ingest(app, [follow(A, "f1", D), post(D, "x1", BASE_US + 1)])
    client = app.test_client()
    for _ in range(2):
        body = client.get(f"{NS}.getFeed?feed=timeline&actor={A}&profiles=true").json
    assert body["profiles"] == [{"did": D, "handle": None}]
    assert sources.calls.count(("get", D, PROFILE)) == 1


def test_list_records_by_actor_backfills_the_author_from_their_pds_once(app, sources):
    client = app.test_client()
    first = client.get(f"{NS}.post.listRecords?actor={D}").json
    again = client.get(f"{NS}.post.listRecords?actor={D}").json
    assert [r["rkey"] for r in first["records"]] == ["d0", "d1", "d2"]
    assert again == first
    assert sources.calls.count(("list", D, POST)) == 1


def test_get_record_honours_profiles(app):
    ingest(app, [post(C, "c1", BASE_US + 1)])
    body = app.test_client().get(f"{NS}.post.getRecord?uri=at://{C}/{POST}/c1&profiles=true").json
    assert body["uri"] == f"at://{C}/{POST}/c1"
    assert [(p["did"], p["handle"], p["value"]["displayName"]) for p in body["profiles"]] == [(C, "cy.test", "Cy")]


def test_follow_and_profile_collections_are_private_unless_configured(make_app, tmp_path):
    default = feeds_app(make_app, tmp_path, toml(), sources=FakeSources()).test_client()
    assert default.get(f"{NS}.follow.listRecords").status_code == 404
    assert default.get(f"{NS}.profile.getRecord?uri=at://{C}/{PROFILE}/self").status_code == 404
    text = toml().replace('[collections.follow]\ncollection = "app.bsky.graph.follow"\n',
                          '[collections.follow]\ncollection = "app.bsky.graph.follow"\nmethods = ["listRecords"]\n')
    opened = feeds_app(make_app, tmp_path, text, sources=FakeSources()).test_client()
    assert opened.get(f"{NS}.follow.listRecords").status_code == 200
    assert opened.get(f"{NS}.follow.getRecord?uri=at://{C}/x/y").status_code == 404


def _cursor(body: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()


@pytest.mark.parametrize("t", [2 ** 63, -(2 ** 63) - 1, 10 ** 30])
def test_a_cursor_outside_int64_gives_the_first_page(app, t):
    ingest(app, [follow(A, "f1", C), post(C, "c1", BASE_US + 1)])
    client = app.test_client()
    cursor = _cursor({"t": t, "u": "at://x", "k": "time"})
    for url in (f"{NS}.getFeed?feed=timeline&actor={A}&cursor={cursor}", f"{NS}.post.listRecords?cursor={cursor}"):
        response = client.get(url)
        assert response.status_code == 200
        assert [r["rkey"] for r in response.json["records"]] == ["c1"]


def test_an_empty_equality_filter_is_ignored(app):
    ingest(app, [post(C, "c1", BASE_US + 1, langs="en"), post(C, "c2", BASE_US + 2)])
    client = app.test_client()
    assert [r["rkey"] for r in client.get(f"{NS}.post.listRecords?langs=").json["records"]] == ["c2", "c1"]
    assert [r["rkey"] for r in client.get(f"{NS}.post.listRecords?langs=en").json["records"]] == ["c1"]


def test_a_url_over_4_kb_answers_an_xrpc_json_error(app):
    response = app.test_client().get(f"{NS}.post.listRecords?langs=" + "x" * 4100)
    assert response.status_code == 414
    assert response.json == {"error": "InvalidRequest", "message": "The URL is longer than 4096 bytes."}
    assert app.test_client().get(f"{NS}.post.listRecords?langs=" + "x" * 3900).status_code == 200


def test_gunicorn_passes_request_lines_up_to_its_maximum():
    """So the 4 KB check above answers instead of gunicorn's own HTML 414."""
    from tests.conftest import REPO

    scope: dict = {}
    exec((REPO / "gunicorn.conf.py").read_text(), scope)
    assert scope["limit_request_line"] == 8190


class _Unreachable(FakeSources):
    """The PLC directory and every PDS down (refused), or blackholed (no answer at all)."""

    def __init__(self, hang: bool = False):
        super().__init__()
        self.hang = hang

    def verified_handle(self, did):
        self.calls.append(("handle", did))
        return self._fail()

    def get_record(self, did, collection, rkey):
        self.calls.append(("get", did, collection))
        return self._fail()

    def _fail(self):
        if self.hang:
            import gevent
            gevent.sleep(30)
        raise SourceError("could not connect")


@pytest.mark.parametrize("hang", [False, True], ids=["refused", "blackholed"])
def test_a_failed_lookup_is_asked_again_only_after_the_retry_interval(make_app, tmp_path, monkeypatch, hang):
    from feather.feeds.read import identities

    monkeypatch.setattr(identities, "LOOKUP_DEADLINE_S", 0.3)
    down = _Unreachable(hang)
    app = feeds_app(make_app, tmp_path, toml(), sources=down)
    config = app.extensions["feeds"]
    t = BASE_US
    with app.app_context(), db.connection_context():
        answers = [identities.hydrate(app, config, [C], now=now)
                   for now in (t, t + 1, t + identities.LOOKUP_RETRY_US - 1)]
        assert answers == [{C: None}] * 3
        assert sorted(down.calls) == [("get", C, PROFILE), ("handle", C)]
        identities.hydrate(app, config, [C], now=t + identities.LOOKUP_RETRY_US)
    assert sorted(down.calls) == [("get", C, PROFILE), ("get", C, PROFILE), ("handle", C), ("handle", C)]


def test_a_failed_recheck_keeps_the_handle_verified_before(make_app, tmp_path):
    from feather.feeds.read import identities

    sources = FakeSources(handles={"cy.test": C})
    app = feeds_app(make_app, tmp_path, toml(), sources=sources)
    config = app.extensions["feeds"]
    with app.app_context(), db.connection_context():
        assert identities.hydrate(app, config, [C], now=BASE_US) == {C: "cy.test"}
        app.extensions["feeds_sources"] = _Unreachable()
        later = BASE_US + identities.HANDLE_TTL_US
        assert identities.hydrate(app, config, [C], now=later) == {C: "cy.test"}
    assert rows(app, "SELECT handle, handle_checked_us FROM feed_identities WHERE did = ?", (C,)) == [
        ("cy.test", later - identities.HANDLE_TTL_US + identities.LOOKUP_RETRY_US)]
