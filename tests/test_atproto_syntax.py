"""Identifier syntax against the atproto interop vectors, plus the TID clock."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from feather.atproto import syntax
from feather.atproto.syntax import AtUri, InvalidSyntax, TidClock

VECTORS = Path(__file__).parent / "fixtures" / "atproto-syntax"


def _cases(name: str) -> list[str]:
    # Only the line break is stripped: leading/trailing spaces are part of some invalid cases.
    lines = (VECTORS / name).read_text(encoding="utf-8").split("\n")
    return [ln for ln in lines if ln and not ln.startswith("#")]


KINDS = {
    "did": (syntax.is_valid_did, syntax.ensure_valid_did),
    "handle": (syntax.is_valid_handle, syntax.ensure_valid_handle),
    "nsid": (syntax.is_valid_nsid, syntax.ensure_valid_nsid),
    "aturi": (syntax.is_valid_at_uri, syntax.ensure_valid_at_uri),
    "recordkey": (syntax.is_valid_record_key, syntax.ensure_valid_record_key),
    "tid": (syntax.is_valid_tid, syntax.ensure_valid_tid),
    "atidentifier": (syntax.is_valid_at_identifier, syntax.ensure_valid_at_identifier),
    "datetime": (syntax.is_valid_datetime, syntax.ensure_valid_datetime),
}


def _params(validity: str):
    out = []
    for kind in KINDS:
        cases = _cases(f"{kind}_syntax_{validity}.txt")
        if kind == "datetime" and validity == "invalid":
            cases += _cases("datetime_parse_invalid.txt")
        out += [pytest.param(kind, c, id=f"{kind}-{i}") for i, c in enumerate(cases)]
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_has_vectors_on_both_sides(kind):
    assert len(_cases(f"{kind}_syntax_valid.txt")) >= 4
    assert len(_cases(f"{kind}_syntax_invalid.txt")) >= 4


@pytest.mark.parametrize("kind,case", _params("valid"))
def test_accepts_every_valid_vector(kind, case):
    is_valid, ensure = KINDS[kind]
    assert is_valid(case) is True
    assert ensure(case) == case


@pytest.mark.parametrize("kind,case", _params("invalid"))
def test_rejects_every_invalid_vector(kind, case):
    is_valid, ensure = KINDS[kind]
    assert is_valid(case) is False
    with pytest.raises(InvalidSyntax):
        ensure(case)


@pytest.mark.parametrize("value", [None, 42, b"did:plc:abc", "did:plc:abc\n", "a.test\n"])
def test_rejects_non_strings_and_trailing_newlines(value):
    assert not syntax.is_valid_did(value)
    assert not syntax.is_valid_handle(value)
    assert not syntax.is_valid_at_uri(value)


def test_invalid_syntax_is_a_value_error_with_a_sentence():
    with pytest.raises(ValueError) as exc:
        syntax.ensure_valid_did("DID:plc:x")
    assert str(exc.value) == "'DID:plc:x' is not a valid DID."


def test_error_message_truncates_huge_input():
    with pytest.raises(InvalidSyntax) as exc:
        syntax.ensure_valid_record_key("o" * 10_000)
    assert len(str(exc.value)) < 120


def test_parse_at_uri_splits_authority_collection_and_rkey():
    uri = syntax.parse_at_uri("at://did:plc:7iza6de2dwap2sbkpav7c6c6/app.bsky.graph.follow/3jzfcijpj2z2a")
    assert uri == AtUri("did:plc:7iza6de2dwap2sbkpav7c6c6", "app.bsky.graph.follow", "3jzfcijpj2z2a")
    assert str(uri) == "at://did:plc:7iza6de2dwap2sbkpav7c6c6/app.bsky.graph.follow/3jzfcijpj2z2a"


def test_parse_at_uri_leaves_missing_parts_none():
    assert syntax.parse_at_uri("at://alice.test") == AtUri("alice.test", None, None)
    assert syntax.parse_at_uri("at://alice.test/app.bsky.feed.post") == AtUri(
        "alice.test", "app.bsky.feed.post", None
    )


@pytest.mark.parametrize("bad", ["at://did:plc:x/app.bsky.feed.post/", "https://a.test", "at://a.test#frag"])
def test_parse_at_uri_raises_invalid_syntax(bad):
    with pytest.raises(InvalidSyntax, match="not a valid AT-URI"):
        syntax.parse_at_uri(bad)


def test_normalize_handle_lowercases():
    assert syntax.normalize_handle("Alice.Bsky.Social") == "alice.bsky.social"


@pytest.mark.parametrize("handle,blocked", [("laptop.local", True), ("a.ONION", True), ("alice.test", False)])
def test_disallowed_handle_tlds(handle, blocked):
    assert syntax.is_disallowed_handle_tld(handle) is blocked


def test_parse_datetime_normalises_to_utc():
    got = syntax.parse_datetime("1985-04-12T23:20:50.1234567Z")
    assert got == datetime(1985, 4, 12, 23, 20, 50, 123456, tzinfo=timezone.utc)
    assert syntax.parse_datetime("1985-04-12T23:20:50-07:00") == datetime(
        1985, 4, 13, 6, 20, 50, tzinfo=timezone.utc
    )


def test_encode_and_decode_tid_round_trip():
    assert syntax.encode_tid(0, 0) == "2222222222222"
    tid = syntax.encode_tid(1_700_000_000_123_456, 1023)
    assert syntax.is_valid_tid(tid)
    assert syntax.decode_tid(tid) == (1_700_000_000_123_456, 1023)


@pytest.mark.parametrize("ts,clock_id", [(-1, 0), (1 << 53, 0), (0, 1024), (0, -1)])
def test_encode_tid_rejects_out_of_range_parts(ts, clock_id):
    with pytest.raises(ValueError):
        syntax.encode_tid(ts, clock_id)


def test_tid_clock_strictly_increases_when_the_wall_clock_stands_still():
    clock = TidClock(clock_id=7, now_us=lambda: 1_700_000_000_000_000)
    tids = [clock.next_tid() for _ in range(10_000)]
    assert all(a < b for a, b in zip(tids, tids[1:]))
    assert all(syntax.is_valid_tid(t) for t in tids)
    first_ts, cid = syntax.decode_tid(tids[0])
    assert (first_ts, cid) == (1_700_000_000_000_000, 7)
    assert syntax.decode_tid(tids[-1])[0] == first_ts + 9_999


def test_tid_clock_does_not_go_back_when_the_wall_clock_does():
    readings = iter([2_000_000, 1_000_000, 1_000_000, 3_000_000])
    clock = TidClock(clock_id=0, now_us=lambda: next(readings))
    stamps = [syntax.decode_tid(clock.next_tid())[0] for _ in range(4)]
    assert stamps == [2_000_000, 2_000_001, 2_000_002, 3_000_000]


def test_tid_clock_follows_the_wall_clock_when_it_advances():
    readings = iter(range(5_000_000, 5_000_000 + 50 * 10, 10))
    clock = TidClock(now_us=lambda: next(readings))
    stamps = [syntax.decode_tid(clock.next_tid())[0] for _ in range(50)]
    assert stamps == list(range(5_000_000, 5_000_000 + 50 * 10, 10))


def test_tid_clock_rejects_a_clock_id_over_ten_bits():
    with pytest.raises(ValueError):
        TidClock(clock_id=1024)


def test_module_next_tid_is_valid_monotonic_and_current():
    tids = [syntax.next_tid() for _ in range(10_000)]
    assert len(set(tids)) == len(tids)
    assert tids == sorted(tids)
    assert all(syntax.is_valid_tid(t) for t in tids[:100])
    ts, _ = syntax.decode_tid(tids[0])
    now_us = datetime.now(timezone.utc).timestamp() * 1e6
    assert abs(ts - now_us) < 60e6


def test_a_did_web_localhost_port_runs_from_1_to_65535():
    assert syntax.did_web_host("did:web:localhost%3A1") == "localhost:1"
    assert syntax.did_web_host("did:web:localhost%3A65535") == "localhost:65535"
    assert syntax.did_web_host("did:web:localhost%3A65536") is None
    assert syntax.did_web_host("did:web:localhost%3A0") is None
