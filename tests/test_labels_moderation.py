"""The moderation decision, pure: self-labels, which labels hide and which mask, negations and
expiry, the labelers a client asks for. No database, no network."""
from __future__ import annotations

import pytest

from feather.atproto.labels import datetime_us, in_effect, parse_label
from feather.errors import ApiError
from feather.feeds.read.labels import Verdict, Wanted, requested, self_labels, verdict

pytestmark = pytest.mark.once

A = "did:plc:aaaa"
L = "did:plc:labeler"
URI = f"at://{A}/app.bsky.feed.post/3k"
OTHER = "at://did:plc:bbbb/app.bsky.feed.post/3j"


def lab(val, uri=URI, src=L, cts="2025-01-01T00:00:00.000Z", **kw):
    return {"src": src, "uri": uri, "val": val, "cts": cts, **kw}


def selfl(*vals):
    return {"text": "hi", "createdAt": "2025-02-03T04:05:06.000Z",
            "labels": {"$type": "com.atproto.label.defs#selfLabels", "values": [{"val": v} for v in vals]}}


def test_an_unlabelled_post_is_shown_as_it_is():
    assert verdict({"text": "hi"}, A, URI, []) == Verdict(hide=False, warn=None, unchecked=False)


@pytest.mark.parametrize("val", ["!hide", "!takedown", "!suspend"])
def test_a_hide_on_the_post_or_on_the_account_drops_it(val):
    assert verdict({}, A, URI, [lab(val)]) == Verdict(hide=True)
    assert verdict({}, A, URI, [lab(val, uri=A)]) == Verdict(hide=True)  # account-level: every post of A


@pytest.mark.parametrize("val,name", [("porn", "Adult content"), ("sexual", "Sexually suggestive"),
                                      ("nudity", "Nudity"), ("graphic-media", "Graphic media"),
                                      ("!warn", "Content warning")])
def test_adult_graphic_and_warn_labels_mask_the_post_with_the_labels_name(val, name):
    v = verdict({}, A, URI, [lab(val)])
    assert (v, v.warn_name) == (Verdict(warn=val), name)
    assert verdict({}, A, URI, [lab(val, uri=A)]) == Verdict(warn=val)  # on the account too


def test_warn_is_not_hide_and_hide_wins_over_every_warning():
    assert verdict({}, A, URI, [lab("!warn")]).hide is False
    assert verdict(selfl("porn"), A, URI, [lab("!warn"), lab("!hide", uri=A)]) == Verdict(hide=True)


def test_the_most_explicit_label_names_the_mask():
    labels = [lab("!warn"), lab("nudity"), lab("graphic-media"), lab("sexual"), lab("porn")]
    assert verdict({}, A, URI, labels).warn == "porn"
    assert verdict({}, A, URI, labels[:4]).warn == "sexual"
    assert verdict({}, A, URI, labels[:3]).warn == "graphic-media"
    assert verdict({}, A, URI, labels[:2]).warn == "nudity"


def test_other_labels_and_labels_on_other_subjects_change_nothing():
    assert verdict({}, A, URI, [lab("spam"), lab("rude", uri=A), lab("porn", uri=OTHER), lab("!hide", uri="did:plc:bbbb")]) \
        == Verdict()


def test_self_labels_come_from_the_record_with_the_author_as_their_source():
    assert verdict(selfl("nudity"), A, URI, []) == Verdict(warn="nudity")
    assert verdict(selfl("!hide"), A, URI, []) == Verdict(hide=True)
    assert self_labels(selfl("porn", "porn", "graphic-media"), A, URI, "bafycid") == [
        {"src": A, "uri": URI, "cid": "bafycid", "val": "porn", "cts": "2025-02-03T04:05:06.000Z"},
        {"src": A, "uri": URI, "cid": "bafycid", "val": "graphic-media", "cts": "2025-02-03T04:05:06.000Z"}]


@pytest.mark.parametrize("labels", [
    ["porn"],  # not the selfLabels object
    {"values": [{"val": "porn"}]},  # no $type
    {"$type": "com.atproto.label.defs#selfLabels", "values": "porn"},
    {"$type": "com.atproto.label.defs#other", "values": [{"val": "porn"}]},
])
def test_malformed_self_labels_are_ignored(labels):
    assert verdict({"labels": labels}, A, URI, []) == Verdict()
    assert verdict("not a record", A, URI, []) == Verdict()


def test_at_most_ten_self_labels_are_read():
    many = selfl(*[f"v{i}" for i in range(10)], "porn")
    assert len(self_labels(many, A, URI)) == 10 and verdict(many, A, URI, []) == Verdict()


def test_unchecked_is_carried_as_given():
    assert verdict({}, A, URI, [], unchecked=True) == Verdict(unchecked=True)
    assert verdict({}, A, URI, [lab("porn")], unchecked=True) == Verdict(warn="porn", unchecked=True)


def test_a_negation_removes_the_earlier_label_and_a_later_label_puts_it_back():
    first = lab("porn", cts="2025-01-01T00:00:00.000Z")
    neg = lab("porn", cts="2025-01-02T00:00:00.000Z", neg=True)
    again = lab("porn", cts="2025-01-03T00:00:00.000Z")
    other = lab("nudity", cts="2025-01-01T00:00:00.000Z")
    assert in_effect([first, other, neg], 0) == [other]
    assert in_effect([first, neg, again], 0) == [again]
    assert in_effect([neg, first], 0) == []  # order sent does not matter: the newest cts does
    # A negation by another labeler, or of another subject, removes nothing.
    assert in_effect([first, lab("porn", src="did:plc:other", neg=True, cts="2025-01-09T00:00:00Z")], 0)[0] is first


def test_an_expired_label_is_not_in_effect():
    now = datetime_us("2025-06-01T00:00:00Z")
    past = lab("porn", exp="2025-05-31T23:59:59.999Z")
    future = lab("nudity", exp="2025-06-01T00:00:00.001Z")
    at_now = lab("sexual", exp="2025-06-01T00:00:00Z")
    assert in_effect([past, future, at_now], now) == [future]


def test_a_labelers_label_is_checked_and_kept_as_sent():
    sent = lab("porn", cid="bafyx", ver=1, neg=False, exp="2026-01-01T00:00:00Z", sig={"$bytes": "AA"}, extra="x")
    assert parse_label(sent) == {k: v for k, v in sent.items() if k != "extra"}
    for bad in [lab("porn", src="not-a-did"), lab("", uri=URI), lab("x" * 129), lab("porn", cts="yesterday"),
                lab("porn", exp="soon"), lab("porn", neg="true"), {**lab("porn"), "uri": 5}, "label", None]:
        assert parse_label(bad) is None, bad


def test_the_labelers_a_client_asks_for():
    assert requested(None, None) is None
    assert requested("", None) == []
    assert requested(f"{L}, did:plc:two", None) == [Wanted(L), Wanted("did:plc:two")]
    assert requested(None, f"{L};redact, did:plc:two") == [Wanted(L, True), Wanted("did:plc:two")]
    assert requested(f"{L},did:plc:two", "did:plc:two;redact") == [Wanted(L), Wanted("did:plc:two", True)]
    with pytest.raises(ApiError) as e:
        requested("alice.example.com", None)
    assert (e.value.status, e.value.error) == (400, "InvalidRequest")
    with pytest.raises(ApiError):
        requested(",".join(f"did:plc:l{i}" for i in range(21)), None)


def test_a_labelers_endpoint_is_its_atproto_labeler_service_of_type_atproto_labeler():
    from feather.atproto.identity import parse_did_document

    def doc(*services):
        return parse_did_document(L, {"id": L, "service": list(services)})

    good = {"id": "#atproto_labeler", "type": "AtprotoLabeler", "serviceEndpoint": "https://mod.example.com/"}
    assert doc(good).service_endpoint("atproto_labeler", "AtprotoLabeler") == "https://mod.example.com"
    assert doc({**good, "id": f"{L}#atproto_labeler"}).service_endpoint("atproto_labeler", "AtprotoLabeler") \
        == "https://mod.example.com"
    for bad in [{**good, "type": "AtprotoPersonalDataServer"}, {**good, "id": "#atproto_pds"},
                {**good, "serviceEndpoint": "ftp://mod.example.com"}, {**good, "serviceEndpoint": 5}, "svc"]:
        assert doc(bad).service_endpoint("atproto_labeler", "AtprotoLabeler") is None, bad
