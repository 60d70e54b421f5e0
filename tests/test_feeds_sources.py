"""The production feeds sources (feather.feeds.read.sources.AtprotoSources) against a scripted PDS."""
from __future__ import annotations

import time

import pytest

from feather.atproto.identity import IdentityResolver
from feather.feeds.read.sources import AtprotoSources, SourceError
from tests.support.oauth_fakes import FakeServer
from tests.test_identity import FakeDns, FakeHttp

DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
POST = "app.bsky.feed.post"
PLC = "https://plc.test.invalid"
LIST = "GET /xrpc/com.atproto.repo.listRecords"
GET = "GET /xrpc/com.atproto.repo.getRecord"


@pytest.fixture
def pds():
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture
def sources(make_app, pds):
    app = make_app(FEATHERREADER_ALLOW_PRIVATE_NETWORK=True)
    doc = {"id": DID, "alsoKnownAs": ["at://alice.test"],
           "service": [{"id": "#atproto_pds", "type": "AtprotoPersonalDataServer", "serviceEndpoint": pds.url}]}
    http = FakeHttp({f"{PLC}/{DID}": (200, doc)})
    app.extensions["identity_resolver"] = IdentityResolver(http, plc_url=PLC, handle_resolver="", txt_lookup=FakeDns())
    return AtprotoSources(app)


def rec(n: int) -> dict:
    return {"uri": f"at://{DID}/{POST}/r{n}", "cid": f"c{n}", "value": {"text": str(n)}}


def test_list_recent_returns_at_most_limit_records_even_when_the_pds_sends_more(sources, pds):
    pds.route(LIST, (200, {}, {"records": [rec(1), rec(2), rec(3)], "cursor": "next"}),
              (200, {}, {"records": [rec(4)]}))
    got = sources.list_recent(DID, POST, 2, deadline=time.monotonic() + 10)
    assert got == [("r1", "c1", {"text": "1"}), ("r2", "c2", {"text": "2"})]
    assert [r.query.get("limit") for r in pds.calls(LIST)] == ["2"]  # and no second page


def test_list_recent_asks_for_at_most_100_a_page(sources, pds):
    pds.route(LIST, (200, {}, {"records": [rec(1)]}))
    assert len(sources.list_recent(DID, POST, 500, deadline=time.monotonic() + 10)) == 1
    assert pds.calls(LIST)[0].query["limit"] == "100"


@pytest.mark.parametrize("answer", [
    (400, {}, {"error": "RecordNotFound", "message": "Could not locate record"}),
    (400, {}, {"error": "InvalidRequest", "message": "Could not find repo"}),
    (404, {}, {"error": "NotFound"}),
])
def test_a_record_the_pds_says_it_does_not_have_reads_as_none(sources, pds, answer):
    pds.route(GET, answer)
    assert sources.get_record(DID, POST, "r1") is None


def test_a_pds_server_error_on_get_record_is_a_source_error(sources, pds):
    pds.route(GET, (502, {}, {"error": "UpstreamFailure"}))
    with pytest.raises(SourceError):
        sources.get_record(DID, POST, "r1")
    pds.route(GET, (200, {}, {"uri": f"at://{DID}/{POST}/r1", "cid": "c1", "value": {"text": "hi"}}))
    assert sources.get_record(DID, POST, "r1") == ("c1", {"text": "hi"})
