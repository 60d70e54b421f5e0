"""Identity resolution against local fakes: DNS TXT, well-known, resolveHandle, PLC, did:web, cache."""
from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from requests.structures import CaseInsensitiveDict

from feather.atproto import crypto
from feather.atproto.identity import (
    HandleMismatch,
    IdentityResolver,
    UnresolvableDid,
    UnresolvableHandle,
    parse_did_document,
)
from feather.outbound import FetchFailed, FetchResponse

ALICE = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
BOB = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
PLC = "https://plc.test.invalid"
SERVICE = "https://resolver.invalid"


class FakeHttp:
    """url → (status, body) or an exception; records every URL asked for (params included)."""

    allow_private_network = False

    def __init__(self, routes: dict):
        self.routes = routes
        self.calls: list[str] = []

    def get(self, url, params=None, **kwargs):
        full = url + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")
        self.calls.append(full)
        found = self.routes.get(full)
        if found is None:
            raise FetchFailed(f"Could not resolve {full}.", url=full)
        if isinstance(found, Exception):
            raise found
        status, body = found
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return FetchResponse(status, CaseInsensitiveDict(), content, full, ())


class FakeDns:
    def __init__(self, records: dict[str, list[str]] | None = None):
        self.records = records or {}
        self.calls: list[str] = []

    def __call__(self, name):
        self.calls.append(name)
        return self.records.get(name, [])


def did_doc(did: str, handle: str | None = "alice.example.com", pds: str = "https://pds.example.com",
            key: str | None = None) -> dict:
    doc = {"id": did, "alsoKnownAs": [f"at://{handle}"] if handle else [],
           "service": [{"id": "#atproto_pds", "type": "AtprotoPersonalDataServer", "serviceEndpoint": pds}]}
    if key:
        doc["verificationMethod"] = [{"id": f"{did}#atproto", "type": "Multikey", "controller": did,
                                      "publicKeyMultibase": key}]
    return doc


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make(routes=None, dns=None, clock=None) -> tuple[IdentityResolver, FakeHttp, FakeDns]:
    http, dns = FakeHttp(routes or {}), dns or FakeDns()
    kwargs = {"clock": clock} if clock else {}
    return IdentityResolver(http, handle_resolver=SERVICE, plc_url=PLC, txt_lookup=dns, **kwargs), http, dns


def test_handle_resolves_by_dns_txt_without_any_http():
    resolver, http, dns = make(dns=FakeDns({"_atproto.alice.example.com": ["other=1", f"did={ALICE}"]}))
    assert resolver.resolve_handle("Alice.Example.COM") == ALICE
    assert dns.calls == ["_atproto.alice.example.com"]
    assert http.calls == []


def test_handle_falls_back_to_well_known_and_trims_whitespace():
    url = "https://alice.example.com/.well-known/atproto-did"
    resolver, http, _ = make({url: (200, f"  {ALICE}\n".encode())})
    assert resolver.resolve_handle("@alice.example.com") == ALICE
    assert http.calls == [url]


def test_handle_falls_back_to_the_resolve_handle_service_last():
    svc = f"{SERVICE}/xrpc/com.atproto.identity.resolveHandle?handle=alice.example.com"
    resolver, http, _ = make({
        "https://alice.example.com/.well-known/atproto-did": (404, b"not here"),
        svc: (200, {"did": ALICE}),
    })
    assert resolver.resolve_handle("alice.example.com") == ALICE
    assert http.calls == ["https://alice.example.com/.well-known/atproto-did", svc]


def test_dot_test_handles_skip_dns_and_well_known():
    svc = f"{SERVICE}/xrpc/com.atproto.identity.resolveHandle?handle=alice.test"
    resolver, http, dns = make({svc: (200, {"did": ALICE})})
    assert resolver.resolve_handle("alice.test") == ALICE
    assert (dns.calls, http.calls) == ([], [svc])


def test_conflicting_dns_records_fail_without_trying_other_methods():
    resolver, http, _ = make(dns=FakeDns({"_atproto.alice.example.com": [f"did={ALICE}", f"did={BOB}"]}))
    with pytest.raises(UnresolvableHandle, match="name more than one account"):
        resolver.resolve_handle("alice.example.com")
    assert http.calls == []


def test_unresolvable_handle_names_it_in_a_plain_sentence():
    resolver, _, _ = make()
    with pytest.raises(UnresolvableHandle) as err:
        resolver.resolve_handle("nobody.example.com")
    assert str(err.value) == "Could not find the account for the handle nobody.example.com."


@pytest.mark.parametrize("bad", ["not a handle", "alice", "alice.local", "did:plc:x", ""])
def test_invalid_or_reserved_handles_are_refused_without_lookups(bad):
    resolver, http, dns = make()
    with pytest.raises(UnresolvableHandle):
        resolver.resolve_handle(bad)
    assert (http.calls, dns.calls) == ([], [])


def test_well_known_body_that_is_not_a_did_is_ignored():
    resolver, _, _ = make({"https://alice.example.com/.well-known/atproto-did": (200, b"<html>hi</html>")})
    with pytest.raises(UnresolvableHandle):
        resolver.resolve_handle("alice.example.com")


def test_did_plc_document_gives_handle_and_pds():
    resolver, http, _ = make({f"{PLC}/{ALICE}": (200, did_doc(ALICE, pds="https://pds.example.com/"))})
    doc = resolver.resolve_did(ALICE)
    assert (doc.did, doc.handle, doc.pds) == (ALICE, "alice.example.com", "https://pds.example.com")
    assert resolver.pds_endpoint(ALICE) == "https://pds.example.com"
    assert http.calls == [f"{PLC}/{ALICE}"]  # the second lookup came from the cache


def test_did_web_document_is_fetched_from_the_host():
    did = "did:web:alice.example.com"
    resolver, http, _ = make({"https://alice.example.com/.well-known/did.json": (200, did_doc(did))})
    assert resolver.pds_endpoint(did) == "https://pds.example.com"


def test_did_web_with_a_port_is_refused_except_for_localhost():
    resolver, http, _ = make()
    with pytest.raises(UnresolvableDid, match="bare host names only"):
        resolver.resolve_did("did:web:example.com%3A8080")
    assert http.calls == []


def test_document_for_another_did_is_refused():
    resolver, _, _ = make({f"{PLC}/{ALICE}": (200, did_doc(BOB))})
    with pytest.raises(UnresolvableDid, match="belongs to another DID"):
        resolver.resolve_did(ALICE)


def test_missing_did_is_a_clear_error():
    resolver, _, _ = make({f"{PLC}/{ALICE}": (404, {"message": "DID not registered"})})
    with pytest.raises(UnresolvableDid) as err:
        resolver.resolve_did(ALICE)
    assert str(err.value) == f"The account {ALICE} does not exist or was deleted."


@pytest.mark.parametrize("endpoint", ["ftp://pds.example.com", "https://pds.example.com/xrpc", "nope", 7,
                                      "https://user@pds.example.com"])
def test_malformed_pds_endpoints_are_not_used(endpoint):
    assert parse_did_document(ALICE, did_doc(ALICE, pds=endpoint)).pds is None


def test_pds_service_needs_the_right_id_and_type():
    doc = did_doc(ALICE)
    doc["service"] = [{"id": "#other", "type": "AtprotoPersonalDataServer", "serviceEndpoint": "https://a.com"},
                      {"id": "#atproto_pds", "type": "Other", "serviceEndpoint": "https://b.com"},
                      {"id": f"{ALICE}#atproto_pds", "type": "AtprotoPersonalDataServer",
                       "serviceEndpoint": "https://c.com"}]
    assert parse_did_document(ALICE, doc).pds == "https://c.com"


def test_bidirectional_check_accepts_a_handle_that_points_back():
    resolver, _, _ = make({f"{PLC}/{ALICE}": (200, did_doc(ALICE))},
                          FakeDns({"_atproto.alice.example.com": [f"did={ALICE}"]}))
    ident = resolver.resolve_identity("alice.example.com")
    assert (ident.did, ident.handle, ident.pds) == (ALICE, "alice.example.com", "https://pds.example.com")


def test_bidirectional_check_refuses_a_handle_the_document_does_not_claim():
    resolver, _, _ = make({f"{PLC}/{ALICE}": (200, did_doc(ALICE, handle="someone-else.com"))},
                          FakeDns({"_atproto.alice.example.com": [f"did={ALICE}"]}))
    with pytest.raises(HandleMismatch, match="not confirmed"):
        resolver.resolve_identity("alice.example.com")


def test_did_whose_claimed_handle_points_elsewhere_has_no_verified_handle():
    resolver, _, _ = make({f"{PLC}/{ALICE}": (200, did_doc(ALICE))},
                          FakeDns({"_atproto.alice.example.com": [f"did={BOB}"]}))
    ident = resolver.resolve_identity(ALICE)
    assert (ident.did, ident.handle) == (ALICE, None)


def test_cache_answers_within_ttl_and_asks_again_after():
    clock = Clock()
    dns = FakeDns({"_atproto.alice.example.com": [f"did={ALICE}"]})
    resolver, _, _ = make(dns=dns, clock=clock)
    resolver.resolve_handle("alice.example.com")
    clock.now += 299
    resolver.resolve_handle("alice.example.com")
    assert len(dns.calls) == 1
    clock.now += 2
    resolver.resolve_handle("alice.example.com")
    assert len(dns.calls) == 2


def test_failures_are_not_cached():
    dns = FakeDns()
    resolver, _, _ = make(dns=dns)
    for _ in range(2):
        with pytest.raises(UnresolvableHandle):
            resolver.resolve_handle("alice.example.com")
    assert len(dns.calls) == 2


def test_resolve_actor_returns_dids_unchanged_without_lookups():
    resolver, http, dns = make()
    assert resolver.resolve_actor(ALICE) == ALICE
    assert (http.calls, dns.calls) == ([], [])


@pytest.mark.parametrize("curve", [ec.SECP256R1(), ec.SECP256K1()])
def test_signing_key_is_extracted_from_the_multikey(curve):
    private = ec.generate_private_key(curve)
    key = crypto.encode_multikey(private.public_key())
    resolver, _, _ = make({f"{PLC}/{ALICE}": (200, did_doc(ALICE, key=key))})
    public = resolver.signing_key(ALICE)
    assert public.public_numbers() == private.public_key().public_numbers()


def test_known_did_key_vectors_parse_to_the_right_curves():
    # Vectors from the atproto cryptography spec.
    p256 = "did:key:zDnaembgSGUhZULN2Caob4HLJPaxBh92N7rtH21TErzqf8HQo"
    k256 = "did:key:zQ3shqwJEJyMBsBXCWyCBpUBMqxcon9oHB7mCvx4sSpMdLJwc"
    assert crypto.parse_did_key(p256)[0] == "p256"
    assert crypto.parse_did_key(k256)[0] == "k256"


def test_signature_check_accepts_low_s_and_refuses_high_s():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    private = ec.generate_private_key(ec.SECP256R1())
    r, s = decode_dss_signature(private.sign(b"msg", ec.ECDSA(hashes.SHA256())))
    n = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
    low, high = min(s, n - s), max(s, n - s)
    raw = lambda s_: r.to_bytes(32, "big") + s_.to_bytes(32, "big")  # noqa: E731
    assert crypto.verify_signature(private.public_key(), b"msg", raw(low)) is True
    assert crypto.verify_signature(private.public_key(), b"msg", raw(high)) is False
    assert crypto.verify_signature(private.public_key(), b"other", raw(low)) is False


def test_a_cached_answer_expires_exactly_at_its_ttl_and_the_oldest_entry_makes_room():
    from feather.atproto.cache import TtlCache

    now = [100.0]
    cache = TtlCache(10.0, lambda: now[0], max_entries=2)
    cache.put("a", "did:plc:a")
    now[0] = 109.999
    assert cache.get("a") == "did:plc:a"
    now[0] = 110.0
    assert cache.get("a") is None
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (None, 2, 3)
