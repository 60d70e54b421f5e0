"""The adapter over feather/atproto/pds.py: duplicate-rkey 500s, missing records, and a dead session."""
from __future__ import annotations

import pytest

from feather.atproto.pds import AuthInvalid, RecordNotFound, ServerError
from feather.sync.follow_writer import PdsFollowWriter, SessionGone

FOLLOW = "sh.tangled.graph.follow"


class StubClient:
    def __init__(self, records=None, fail_create=None):
        self.records = dict(records or {})
        self.fail_create = fail_create
        self.calls = []

    def create_record(self, repo, collection, record, rkey=None):
        self.calls.append(("create", rkey))
        if self.fail_create:
            raise self.fail_create
        self.records[rkey] = record

    def get_record(self, repo, collection, rkey):
        if rkey not in self.records:
            raise RecordNotFound("no such record", status=400, error="RecordNotFound")
        return {"uri": f"at://{repo}/{collection}/{rkey}", "value": self.records[rkey]}

    def delete_record(self, repo, collection, rkey):
        self.calls.append(("delete", rkey))
        raise RecordNotFound("gone", status=400, error="RecordNotFound")


def writer_for(client):
    w = PdsFollowWriter(lambda did: client, resolver=None, http=None)
    w._reader = lambda did: client
    return w


def test_a_500_on_create_is_success_when_the_record_is_already_there_with_our_subject():
    client = StubClient({"3kaaaaaaaaaa2": {"subject": "did:plc:bob"}}, fail_create=ServerError("dup", status=500))
    writer_for(client).create_follow("did:plc:alice", FOLLOW, "3kaaaaaaaaaa2", "did:plc:bob", "2026-01-01T00:00:00Z")
    assert client.calls == [("create", "3kaaaaaaaaaa2")]


def test_a_500_on_create_is_raised_when_the_record_is_not_there():
    client = StubClient(fail_create=ServerError("boom", status=500))
    with pytest.raises(ServerError):
        writer_for(client).create_follow("did:plc:alice", FOLLOW, "3kaaaaaaaaaa2", "did:plc:bob", "x")


def test_deleting_a_missing_record_is_not_an_error():
    client = StubClient()
    writer_for(client).delete_follow("did:plc:alice", FOLLOW, "3kaaaaaaaaaa2")
    assert client.calls == [("delete", "3kaaaaaaaaaa2")]


def test_no_session_or_needs_reauth_becomes_session_gone():
    for session_for in (lambda did: None, lambda did: (_ for _ in ()).throw(AuthInvalid("needs re-auth"))):
        writer = PdsFollowWriter(session_for, resolver=None, http=None)
        with pytest.raises(SessionGone):
            writer.create_follow("did:plc:alice", FOLLOW, "3kaaaaaaaaaa2", "did:plc:bob", "x")


def test_an_empty_page_ends_the_listing_even_when_a_cursor_comes_back():
    class Lister(StubClient):
        def __init__(self, pages):
            super().__init__()
            self.pages = pages

        def list_records(self, repo, collection, limit=100, cursor=None):
            return self.pages[cursor]

    record = {"uri": f"at://did:plc:alice/{FOLLOW}/3kaaaaaaaaaa2", "value": {"subject": "did:plc:bob"}}
    writer = writer_for(Lister({None: ([record], "page2"), "page2": ([], "page2")}))  # echoes its cursor forever
    assert writer.list_follows("did:plc:alice", FOLLOW, None) == ([("3kaaaaaaaaaa2", "did:plc:bob")], "page2")
    assert writer.list_follows("did:plc:alice", FOLLOW, "page2") == ([], None)


def test_the_in_memory_pds_answers_a_create_at_an_existing_rkey_with_a_500_and_keeps_the_record():
    from feather.sync.memory import MemoryPds
    from feather.sync.follow_writer import ServerError as WriterServerError

    pds = MemoryPds()
    pds.create_follow("did:plc:alice", FOLLOW, "3kfollow00001", "did:plc:bob", "2026-01-01T00:00:00.000Z")
    with pytest.raises(WriterServerError) as err:
        pds.create_follow("did:plc:alice", FOLLOW, "3kfollow00001", "did:plc:carol", "2026-01-01T00:00:00.000Z")
    assert err.value.status == 500
    assert pds.records("did:plc:alice", FOLLOW) == {"3kfollow00001": "did:plc:bob"}
    assert [w[4] for w in pds.writes] == ["did:plc:bob"]
