"""Hostile input to every parser of outside bytes: whatever arrives, each answers with its own
clean error (never a 500's traceback), and a megabyte of its worst known shape is linear work.

Two kinds of test per parser:
  - Hypothesis properties: any input returns a value of the documented kind or raises the
    documented error; anything else (TypeError, RecursionError, OverflowError…) fails.
  - Work bounds: adversarial shapes at 1 MB are decided, each in its own test, and the time is
    reported, never asserted. Linear parsing takes milliseconds; the quadratic shapes these pin
    took minutes to hours, which the suite's per-test timeout (pytest-timeout, 300 s) turns into a
    failure. bench/hostile.py measures the same shapes as a ratio against json.loads.
"""
from __future__ import annotations

import base64
import json
import time

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st
from requests.structures import CaseInsensitiveDict

from feather.atproto import syntax
from feather.atproto.identity import DidDocument, UnresolvableDid
from feather.feeds.read import cursor as cursors
from feather.feeds.web import generator
from feather.feeds.read import query
from feather.feeds.web.service_auth import AuthError, verify
from feather.jetstream.events import DecodeError, decode
from feather.outbound import FetchResponse
from feather.parsing import MAX_JSON_DEPTH, JsonTooDeep, ascii_int, json_depth_ok, loads_limited
from tests.test_feeds_auth import LXM, P256, SERVICE, b64, mint
from tests.test_identity import PLC, make

MB = 1 << 20
NOW = 1_800_000_000
MANY = settings(deadline=None, max_examples=200)

JSON_SHAPES = {  # name -> 1 MB of text; each is a shape that was, or could be, quadratic
    "quote-backslash": '"\\' * (MB // 2),
    "open brackets": "[" * MB,
    "empty arrays": "[]" * (MB // 2),
    "quotes": '"' * MB,
    "backslashes": "\\" * MB,
    "long string": '"' + "a" * (MB - 2) + '"',
    "escaped quotes": '"' + '\\"' * (MB // 2 - 1) + '"',
    "open objects": '{"a":' * (MB // 5),
    "bracket-quote pairs": '["' * (MB // 2),
    "brackets in a string": '"' + "[" * (MB - 2) + '"',
}
jsonish = st.text(alphabet='[]{}"\\:,1a \u2200\x00', max_size=40)
deepish = st.tuples(jsonish, st.integers(1, 80)).map(lambda p: p[0] * p[1])  # repetition nests
leaf = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
        | st.sampled_from([10 ** 30, -(10 ** 30), "\x00", "\ud800", "did:plc:aaaa"]))
values = st.recursive(leaf, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids,
                                                                                      max_size=4), max_leaves=12)


def timed(label: str, call):
    """call()'s value or the exception it raised; how long it took is printed (-s shows it)."""
    started = time.perf_counter()
    try:
        result = call()
    except Exception as exc:  # the caller asserts exactly which
        result = exc
    print(f"{label}: {time.perf_counter() - started:.3f}s")
    return result


def raised(result) -> str:
    return type(result).__name__ if isinstance(result, BaseException) else "value"


# --- JSON: loads_limited, FetchResponse.json, the Flask JSON provider -------------------------

@MANY
@given(st.one_of(jsonish, deepish, st.text()))
@example('"\\' * 3000)
@example("[" * 5000)
def test_loads_limited_returns_or_raises_a_value_error_for_any_text(text):
    try:
        loads_limited(text)
    except ValueError:
        pass


@MANY
@given(st.binary() | deepish.map(str.encode) | deepish.map(lambda s: s.encode("utf-16-le")))
def test_a_reply_body_of_any_bytes_is_json_or_a_value_error(content):
    try:
        FetchResponse(200, CaseInsensitiveDict(), content, "https://pds.example", ()).json()
    except ValueError:
        pass


@pytest.mark.parametrize("name", JSON_SHAPES)
def test_a_megabyte_of_each_hostile_json_shape_is_decided_within_the_bound(name):
    text = JSON_SHAPES[name]
    deep = name in ("open brackets", "open objects", "bracket-quote pairs")
    valid = {"long string": "a" * (MB - 2), "escaped quotes": '"' * (MB // 2 - 1),
             "brackets in a string": "[" * (MB - 2)}
    assert timed(f"json_depth_ok {name}", lambda: json_depth_ok(text)) is (not deep)
    for label, data in (("str", text), ("utf-8", text.encode()), ("utf-16", text.encode("utf-16"))):
        got = timed(f"loads_limited {name} {label}", lambda: loads_limited(data))
        reply = timed(f"FetchResponse.json {name} {label}",
                             lambda: FetchResponse(200, {}, data if label != "str" else data.encode(), "u", ()).json())
        for result in (got, reply):
            if deep:
                assert isinstance(result, JsonTooDeep)
            elif name in valid:
                assert result == valid[name]
            else:
                assert raised(result) == "JSONDecodeError"


@pytest.fixture
def password_app(make_app):
    return make_app(FEATHERREADER_ALLOW_APP_PASSWORDS=True)


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200) | deepish.map(str.encode))
def test_a_request_body_of_any_bytes_is_json_or_a_400(password_app, body):
    from flask import request
    from werkzeug.exceptions import BadRequest

    with password_app.test_request_context("/", method="POST", data=body, content_type="application/json"):
        try:
            request.get_json()
        except BadRequest:
            pass


SEND_JSON = {"error": "InvalidRequest", "message": 'Send JSON {"identifier": "...", "password": "..."}.'}
TOO_DEEP = {"error": "InvalidRequest", "message": f"JSON nested deeper than {MAX_JSON_DEPTH} levels is refused."}


@pytest.mark.parametrize("name", ["quote-backslash", "open brackets", "empty arrays", "quotes", "long string"])
def test_a_megabyte_request_body_of_each_hostile_shape_is_a_400_within_the_bound(password_app, name):
    client = password_app.test_client()
    token = client.get("/api/session").json["csrfToken"]
    r = timed(f"POST /api/session {name}", lambda: client.post(
        "/api/session", data=JSON_SHAPES[name], content_type="application/json", headers={"X-CSRF-Token": token}))
    assert (r.status_code, r.json) == (400, TOO_DEEP if name == "open brackets" else SEND_JSON)


# --- service-auth JWTs ------------------------------------------------------------------------

def check(token: str):
    return verify(token, audience=SERVICE, method=LXM, key_of=lambda did: P256.public_key(), now=NOW)


segment = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=60).map(b64),
    deepish.map(lambda s: b64(s.encode())),
    st.dictionaries(st.sampled_from(["alg", "typ", "iss", "aud", "lxm", "exp", "iat"]), values, max_size=7)
    .map(lambda d: b64(json.dumps(d).encode())),
)


@MANY
@given(st.lists(segment, min_size=1, max_size=4).map(".".join))
@example(f"{b64(b'[' * 5000)}.e30.AA")
@example(f"{b64(json.dumps({'alg': ['ES256']}).encode())}.e30.AA")
def test_any_token_that_is_not_signed_is_refused_with_an_auth_error(token):
    with pytest.raises(AuthError):
        check(token)


times = st.one_of(st.integers(NOW - 100, NOW + 100), st.floats(), st.booleans(), st.none(), st.text(max_size=4),
                  st.sampled_from([10 ** 30, -(10 ** 30), float(NOW), NOW + 0.5]))


@MANY
@given(exp=times, iat=times, nbf=times, alg=st.sampled_from(["ES256", ["ES256"], {"a": 1}, None, 1]))
@example(exp=NOW + 60, iat=NOW, nbf=None, alg="ES256")
@example(exp=float("nan"), iat=NOW, nbf=None, alg="ES256")
def test_a_signed_token_is_accepted_exactly_when_its_times_are_whole_numbers_in_the_window(exp, iat, nbf, alg):
    token = mint(P256, alg=alg if isinstance(alg, str) else "ES256", exp=exp, iat=iat, nbf=nbf)
    if not isinstance(alg, str):  # the header says something other than a string alg
        _, rest = token.split(".", 1)
        token = b64(json.dumps({"typ": "JWT", "alg": alg}).encode()) + "." + rest
    whole = type(exp) is int and type(iat) is int and (nbf is None or type(nbf) is int)
    # The documented checks (feather/feeds/web/service_auth.py), with the 30 s skew and the hour's lifetime.
    valid = whole and exp + 30 >= NOW >= iat - 30 and (nbf is None or nbf <= NOW + 30) \
        and exp - iat <= 3600 and exp - NOW <= 3630
    try:
        accepted = check(token) == "did:plc:aaaa"
    except AuthError:
        accepted = False
    assert accepted is (valid and isinstance(alg, str))


TOKEN_SHAPES = {  # 3/4 MB of JSON is 1 MB of base64
    "header of brackets": b64(b"[" * (MB * 3 // 4)) + ".e30.AA",
    "claims of quote-backslash": "e30." + b64(JSON_SHAPES["quote-backslash"][:MB * 3 // 4].encode()) + ".AA",
    "claims of open objects": "e30." + b64(JSON_SHAPES["open objects"][:MB * 3 // 4].encode()) + ".AA",
    "dots": "." * MB,
    "base64": "A" * MB + ".e30.AA",
}


@pytest.mark.parametrize("name", TOKEN_SHAPES)
def test_a_megabyte_token_is_refused_within_the_bound(name):
    result = timed(f"verify {name}", lambda: check(TOKEN_SHAPES[name]))
    assert (raised(result), result.error) == ("AuthError", "BadJwt")


# --- DID documents: the bytes a PLC directory or a did:web host answers ------------------------

DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
doc_keys = st.sampled_from(["id", "alsoKnownAs", "service", "verificationMethod", "type", "serviceEndpoint",
                            "publicKeyMultibase"])
doc_values = st.recursive(leaf | st.sampled_from([DID, "#atproto", "#atproto_pds", "Multikey", "at://a.test",
                                                  "AtprotoPersonalDataServer", "https://pds.test", "zQ3s"]),
                          lambda kids: st.lists(kids, max_size=3) | st.dictionaries(doc_keys, kids, max_size=4),
                          max_leaves=16)
documents = st.one_of(
    st.dictionaries(doc_keys, doc_values, max_size=5).map(lambda d: {**d, "id": DID}),
    st.dictionaries(doc_keys, doc_values, max_size=5),
).map(lambda d: json.dumps(d).encode()) | st.binary(max_size=80) | deepish.map(str.encode)


def resolve(body: bytes):
    """The document and signing key the resolver makes of body, or UnresolvableDid."""
    resolver, _, _ = make({f"{PLC}/{DID}": (200, body)})
    try:
        doc = resolver.resolve_did(DID)
        return doc, resolver.signing_key(DID)
    except UnresolvableDid as exc:
        return exc


@MANY
@given(documents)
@example(json.dumps({"id": DID, "alsoKnownAs": 5, "service": True, "verificationMethod": 1.5}).encode())
@example(json.dumps({"id": DID, "verificationMethod": [{"id": "#atproto", "type": ["Multikey"],
                                                        "publicKeyMultibase": "z"}]}).encode())
def test_a_did_document_of_any_bytes_resolves_or_is_unresolvable(body):
    result = resolve(body)
    if not isinstance(result, UnresolvableDid):
        doc, _key = result
        assert isinstance(doc, DidDocument) and doc.did == DID
        assert doc.pds is None or doc.pds.startswith(("https://", "http://"))


def _doc(**fields) -> bytes:
    return json.dumps({"id": DID, **fields}).encode()


DOC_SHAPES = {
    "a key of a megabyte of base58": _doc(verificationMethod=[{"id": "#atproto", "type": "Multikey",
                                                               "publicKeyMultibase": "z" + "2" * MB}]),
    "a legacy key of a megabyte": _doc(verificationMethod=[{"id": "#atproto", "publicKeyMultibase": "z" + "2" * MB,
                                                            "type": "EcdsaSecp256k1VerificationKey2019"}]),
    "many handles": _doc(alsoKnownAs=["at://-bad-"] * (MB // 14)),
    "many services": _doc(service=[{"id": "#x"}] * (MB // 12)),
    "quote-backslash": JSON_SHAPES["quote-backslash"].encode(),
    "open brackets": JSON_SHAPES["open brackets"].encode(),
}


@pytest.mark.parametrize("name", DOC_SHAPES)
def test_a_megabyte_did_document_is_refused_within_the_bound(name):
    result = timed(f"resolve_did {name}", lambda: resolve(DOC_SHAPES[name]))
    assert isinstance(result, UnresolvableDid)
    expected = {"a key of a megabyte of base58": "is unusable", "a legacy key of a megabyte": "is unusable",
                "many handles": "publishes no signing key", "many services": "publishes no signing key"}
    assert expected.get(name, "is malformed or belongs to another DID") in str(result)


# --- identifiers: handles, DIDs, NSIDs, AT-URIs, record keys, TIDs, datetimes, did:web hosts --

identifiers = st.one_of(
    st.text(max_size=60),
    st.text(alphabet="abc019.-_:%/#@?~*AZ \n", max_size=80),
    st.from_regex(syntax._DID, fullmatch=True),
    st.from_regex(syntax._HANDLE, fullmatch=True),
    st.from_regex(syntax._NSID, fullmatch=True),
    st.from_regex(syntax._AT_URI, fullmatch=True),
    st.from_regex(syntax._DATETIME, fullmatch=True),  # 9999-12-31T23:59:59-23:59 is valid, and past 9999 in UTC
    st.from_regex(syntax._TID, fullmatch=True),
    st.from_regex(r"did:web:[a-z0-9.%A-Z-]{1,40}", fullmatch=True),
)
ENSURES = [syntax.ensure_valid_did, syntax.ensure_valid_handle, syntax.ensure_valid_nsid, syntax.ensure_valid_at_uri,
           syntax.ensure_valid_record_key, syntax.ensure_valid_tid, syntax.ensure_valid_datetime,
           syntax.normalize_handle]
PARSES = [syntax.parse_at_uri, syntax.parse_datetime, syntax.decode_tid] + ENSURES


@settings(deadline=None, max_examples=300)
@given(identifiers)
@example("9999-12-31T23:59:59-23:59")
@example("0001-01-01T00:00:00+00:01")
def test_identifier_parsers_answer_or_raise_invalid_syntax_for_any_text(text):
    for check in (syntax.is_valid_did, syntax.is_valid_handle, syntax.is_valid_nsid, syntax.is_valid_at_uri,
                  syntax.is_valid_record_key, syntax.is_valid_tid, syntax.is_valid_datetime):
        assert check(text) in (True, False)
    for parse in PARSES:
        try:
            parse(text)
        except syntax.InvalidSyntax:
            pass
    host = syntax.did_web_host(text)
    assert host is None or isinstance(host, str)


IDENTIFIER_SHAPES = {
    "letters": "a" * MB, "labels": "a." * (MB // 2), "hyphens": "a-" * (MB // 2), "did": "did:a:" + "a" * MB,
    "did:web escapes": "did:web:" + "%3A" * (MB // 3), "at-uri": "at://" + "a/" * (MB // 2),
    "fraction digits": "2025-01-01T00:00:00." + "1" * MB + "Z", "base32": "2" * MB,
}


@pytest.mark.parametrize("name", IDENTIFIER_SHAPES)
def test_a_megabyte_identifier_is_refused_by_every_parser_within_the_bound(name):
    text = IDENTIFIER_SHAPES[name]
    for parse in PARSES:
        assert raised(timed(f"{parse.__name__} {name}", lambda: parse(text))) == "InvalidSyntax"
    assert timed(f"did_web_host {name}", lambda: syntax.did_web_host(text)) is None


# --- feed cursors and page sizes ----------------------------------------------------------------

def _cursor(body) -> str:
    return base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()


cursor_texts = st.one_of(
    st.text(max_size=80),
    st.binary(max_size=80).map(lambda b: base64.urlsafe_b64encode(b).decode()),
    st.fixed_dictionaries({"t": values, "u": values, "k": st.sampled_from(["time", "field:createdAt"])},
                          optional={"v": values}).map(_cursor),
)


def bindable(text: str) -> bool:
    return "\x00" not in text and not any("\ud800" <= c <= "\udfff" for c in text)


@MANY
@given(cursor_texts, st.sampled_from(["time", "field:createdAt"]))
@example(_cursor({"t": 1, "u": "a\x00b", "k": "time"}), "time")
@example(_cursor({"t": 1, "u": "\ud800", "k": "time"}), "time")
@example(_cursor({"t": 1, "u": "x", "v": "\x00", "k": "field:createdAt"}), "field:createdAt")
def test_a_cursor_decodes_only_to_values_a_sql_parameter_can_hold(text, kind):
    cur = cursors.decode(text, kind)
    if cur is None:
        return
    assert type(cur.t) is int and -(2 ** 63) <= cur.t < 2 ** 63
    assert isinstance(cur.u, str) and bindable(cur.u)
    assert cur.v is None or type(cur.v) in (str, int, float)
    if isinstance(cur.v, str):
        assert bindable(cur.v)
    if type(cur.v) is int:
        assert -(2 ** 63) <= cur.v < 2 ** 63
    if isinstance(cur.v, float):
        assert cur.v == cur.v


@MANY
@given(st.none() | st.text(max_size=30) | st.integers().map(str))
def test_a_page_size_is_always_within_the_lexicons_range(raw):
    assert 1 <= query.parse_limit(raw) <= query.MAX_LIMIT
    assert 1 <= generator.parse_limit(raw) <= generator.MAX_LIMIT
    if raw is not None and raw.isascii() and raw.isdigit() and len(raw) <= 18:
        assert query.parse_limit(raw) == max(1, min(query.MAX_LIMIT, int(raw)))


@pytest.mark.parametrize("text", [_cursor({"t": 1, "u": "x" * MB, "k": "time"}), "A" * MB, '"\\' * (MB // 2)],
                         ids=["a megabyte u", "base64", "quote-backslash"])
def test_a_megabyte_cursor_is_ignored_within_the_bound(text):
    assert timed("cursor.decode", lambda: cursors.decode(text, "time")) is None
    assert timed("parse_limit", lambda: query.parse_limit(text)) == query.DEFAULT_LIMIT


@pytest.fixture
def feeds(make_app, tmp_path):
    from tests.fixtures.feeds.feedkit import BASE_US, FakeSources, feeds_app, ingest, join_backfills, post, toml

    app = feeds_app(make_app, tmp_path, toml(), sources=FakeSources())
    ingest(app, [post("did:plc:aaaa", "p1", BASE_US + 1)])
    yield app
    join_backfills(app)


@pytest.mark.parametrize("body, sort", [
    pytest.param({"t": 1, "u": "a\x00b", "k": "time"}, "", id="NUL in u"),  # PostgreSQL refuses NUL in text
    pytest.param({"t": 1, "u": "\ud800", "k": "time"}, "", id="surrogate in u"),  # neither database binds one
    pytest.param({"t": 1, "u": "x", "v": "\x00", "k": "field:createdAt"}, "createdAt", id="NUL in v"),
    pytest.param({"t": 1, "u": "x", "v": "\udfff", "k": "field:createdAt"}, "createdAt", id="surrogate in v"),
])
def test_a_cursor_spelling_nul_or_a_lone_surrogate_reads_page_one(feeds, body, sort):
    r = feeds.test_client().get(f"/xrpc/com.example.post.listRecords?actor=did:plc:aaaa&sort={sort}"
                                f"&cursor={_cursor(body)}")
    assert r.status_code == 200
    assert [rec["rkey"] for rec in r.json["records"]] == ["p1"]


# --- Jetstream frames ---------------------------------------------------------------------------

frames = st.one_of(
    st.binary(max_size=120),
    deepish,
    st.fixed_dictionaries({"did": values | st.just("did:plc:aaaa"), "time_us": values | st.integers(0, 2 ** 60),
                           "kind": st.sampled_from(["commit", "identity", "account", "other"]) | values},
                          optional={"commit": st.dictionaries(st.sampled_from(
                              ["operation", "collection", "rkey", "record", "cid", "rev"]), values
                              | st.sampled_from(["create", "delete", "app.bsky.feed.post"])),
                              "identity": values, "account": values, "cursor": values}).map(json.dumps),
)


@MANY
@given(frames)
@example('{"did": "did:plc:a", "time_us": 1, "kind": "commit", "commit": ' + "[" * 1100 + "]" * 1100 + "}")
def test_a_jetstream_frame_of_any_bytes_is_an_event_or_a_decode_error(frame):
    try:
        decode(frame)
    except DecodeError:
        pass


def _post_frame(record_depth: int) -> str:
    nested = "[" * (record_depth - 1) + "]" * (record_depth - 1)  # the record object is one level
    return ('{"did": "did:plc:aaaa", "time_us": 1760000000000001, "kind": "commit", "commit": {"operation": '
            '"create", "collection": "app.bsky.feed.post", "rkey": "p1", "cid": "bafyx", "record": {"$type": '
            '"app.bsky.feed.post", "text": "x", "createdAt": "2025-10-09T08:53:20.000Z", "deep": %s}}}' % nested)


def test_a_record_nested_deeper_than_json_can_store_and_read_is_a_decode_error():
    from feather.jetstream.events import MAX_FRAME_DEPTH

    # orjson reads 1,024 levels; json.dumps (storing it) and json.loads (every page showing it) do not.
    with pytest.raises(DecodeError) as err:
        decode(_post_frame(1000))
    assert str(err.value) == f"frame nested deeper than {MAX_FRAME_DEPTH} levels"
    with pytest.raises(DecodeError):
        decode(_post_frame(MAX_JSON_DEPTH + 1).encode())
    assert decode(_post_frame(MAX_JSON_DEPTH).encode()).record["deep"] == json.loads(
        "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1))
    # Brackets inside strings are not levels: a post of 500 [ is an ordinary post.
    assert decode(_post_frame(2).replace('"text": "x"', '"text": "' + "[" * 500 + '"')).record["text"] == "[" * 500


def test_a_record_at_the_depth_limit_is_stored_and_read_back(feeds):
    from tests.fixtures.feeds.feedkit import ingest

    ingest(feeds, [decode(_post_frame(MAX_JSON_DEPTH))])
    r = feeds.test_client().get("/xrpc/com.example.post.listRecords?actor=did:plc:aaaa")
    assert r.status_code == 200
    deep = [rec for rec in json.loads(r.data)["records"] if "deep" in rec["value"]]  # r.json is depth-limited
    assert deep and deep[0]["value"]["deep"] == json.loads("[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1))


@pytest.mark.parametrize("name", ["quote-backslash", "open brackets", "empty arrays", "long string", "open objects"])
def test_a_megabyte_jetstream_frame_is_a_decode_error_within_the_bound(name):
    frame = JSON_SHAPES[name].encode()
    result = timed(f"jetstream decode {name}", lambda: decode(frame))
    assert (raised(result), str(result)) == ("DecodeError", "frame is not a JSON object" if name == "long string"
                                           else "not JSON: JSONDecodeError")


def test_a_megabyte_record_of_empty_arrays_is_read_within_the_bound():
    # Valid and shallow but all brackets: orjson reads it, and so does the depth check after it.
    frame = _post_frame(2).replace('"deep": []', '"deep": [' + "[]," * (MB // 3) + "[]]").encode()
    event = timed("jetstream decode a record of empty arrays", lambda: decode(frame))
    assert event.record["deep"] == [[]] * (MB // 3 + 1)


# --- integers -----------------------------------------------------------------------------------

@MANY
@given(st.text(max_size=24) | st.integers().map(str) | st.none() | st.integers(), st.booleans())
@example("٣", False)
@example("-0", True)
def test_ascii_int_is_int_of_ascii_digits_or_none(raw, signed):
    value = ascii_int(raw, signed=signed)
    digits = raw[1:] if signed and isinstance(raw, str) and raw.startswith("-") else raw
    plain = isinstance(digits, str) and 1 <= len(digits) <= 18 and all("0" <= c <= "9" for c in digits)
    assert value == (int(raw) if plain else None)


@pytest.mark.parametrize("raw", ["9" * MB, "٣" * MB, "-" + "1" * MB, " " * MB + "1"],
                         ids=["digits", "arabic-indic digits", "negative", "spaces"])
def test_a_megabyte_integer_is_none_within_the_bound(raw):
    assert timed("ascii_int", lambda: ascii_int(raw, signed=True)) is None


# --- form fields ----------------------------------------------------------------------------------

@MANY
@given(st.lists(st.text(max_size=30), max_size=5), st.text(max_size=80), st.text(max_size=400))
@example([",,bluesky, ,"], "\u200d" * 3, "\u0301" * 10)
def test_form_fields_parse_or_raise_their_own_error(apps, name, description):
    from feather.config import load_settings
    from feather.feeds.web.publish import PublishError, check_text
    from feather.sync.api import parse_apps
    from feather.sync.apps import normalize_keys

    keys = parse_apps(apps)
    assert all(k and k == k.strip() and "," not in k for k in keys)
    try:
        normalize_keys(keys, load_settings(env={"FEATHERREADER_ENV": "test"}))
    except ValueError:
        pass
    try:
        assert check_text(name, description) == (name.strip(), description.strip())
    except PublishError:
        pass


@settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.none() | st.text(max_size=40) | st.text(alphabet="/\\@:.%\t\n ?#a", max_size=20))
def test_a_next_field_is_a_same_site_path_or_home(password_app, value):
    from feather.auth.views import safe_next

    with password_app.test_request_context("/"):
        home = safe_next(None)
        assert safe_next(value) in (home, value)
        assert safe_next(value).startswith("/") and not safe_next(value).startswith("//")


@pytest.mark.parametrize("name", ["apps", "next", "display name"])
def test_a_megabyte_form_field_is_answered_within_the_bound(password_app, name):
    from feather.auth.views import safe_next
    from feather.feeds.web.publish import PublishError, check_text
    from feather.sync.api import parse_apps

    if name == "apps":
        assert timed("parse_apps", lambda: parse_apps(["," * MB, "a," * (MB // 2)])) == ["a"] * (MB // 2)
    elif name == "next":
        with password_app.test_request_context("/"):
            assert timed("safe_next", lambda: safe_next("/" + "a/" * (MB // 2))) == "/" + "a/" * (MB // 2)
            assert timed("safe_next", lambda: safe_next("/\t" * (MB // 2))) == "/"
    else:
        result = timed("check_text", lambda: check_text("\U0001f469\u200d" * (MB // 2), ""))
        assert isinstance(result, PublishError)


# --- the feeds TOML config ------------------------------------------------------------------------

toml_texts = st.one_of(
    st.text(max_size=120),
    st.text(alphabet='[]{}="\'.,#\n abc1\\', max_size=120),
    st.lists(st.sampled_from(['namespace = "com.example"\n', "[collections.post]\n", 'collection = "a.b.c"\n',
                              "[feeds.timeline]\n", 'targets = ["post"]\n', "follow = []\n", "follow = 1\n",
                              'targets = [{collection = "post", maxItems = 0}]\n', "maxItems = -1\n",
                              "queryable = { a = 1 }\n", "methods = [[]]\n", 'actors = ["x"]\n', "a.b.c = 1\n",
                              "[[feeds.x]]\n"]), max_size=8).map("".join),
    st.binary(max_size=60),
)


@pytest.fixture
def config_file(tmp_path):
    return tmp_path / "feeds.toml"


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(toml_texts)
@example('[collections.follow]\ncollection = "app.bsky.graph.follow"\n[feeds.timeline]\nfollow = []\ntargets = ["x"]\n')
@example("a = " + "[" * 2000)
@example(b"\xff\xfe")
def test_a_feeds_config_of_any_bytes_loads_or_is_a_config_error(config_file, text):
    from feather.feeds.config import FeedsConfig, FeedsConfigError, load

    config_file.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    try:
        assert isinstance(load(str(config_file)), FeedsConfig)
    except FeedsConfigError:
        pass


DOTTY = "has a line with more than 64 dots outside strings and comments"
TOML_SHAPES = {  # name -> (1 MB of config, what the error says after the file's name)
    "a dotted key": ("a" + ".a" * (MB // 2) + " = 1", DOTTY),
    "a quoted dotted key": ('"a".' * (MB // 4) + '"a" = 1', DOTTY),
    "nested arrays": ("a = " + "[" * MB, "nests arrays or tables too deeply"),
    "nested inline tables": ("a = " + "{b = " * (MB // 5), "nests arrays or tables too deeply"),
    "keys of 64 parts": ("\n".join(f"k{i}" + ".a" * 63 + " = 1" for i in range(MB // 140)),
                         'top level: unknown key "k0"'),
    "an unterminated string": ('a = "' + "\\" * MB, "is not valid TOML: Unterminated string"),
    "quotes": ('"' * MB, "is not valid TOML"),
    "not UTF-8": (b"\xff" * MB, "is not UTF-8 (byte 0)"),
}


@pytest.mark.parametrize("name", TOML_SHAPES)
def test_a_megabyte_feeds_config_is_refused_within_the_bound(config_file, name):
    from feather.feeds.config import load

    text, said = TOML_SHAPES[name]
    config_file.write_bytes(text if isinstance(text, bytes) else text.encode())
    result = timed(f"feeds config {name}", lambda: load(str(config_file)))
    assert raised(result) == "FeedsConfigError"
    assert str(result).startswith(f"FEATHERREADER_CONFIG: {config_file} {said}") or \
        str(result).startswith(f"{config_file}: {said}")


def test_dots_in_strings_and_comments_do_not_count_towards_a_dotted_key(config_file):
    from feather.feeds.config import load

    config_file.write_text("# " + "." * 100 + "\n" + 'namespace = "com.example" # ' + "." * 100 + "\n"
                           + "actors = [" + ", ".join(f'"did:web:{i}.a.b.example"' for i in range(40)) + "]\n")
    config = load(str(config_file))
    assert (config.namespace, len(config.actors)) == ("com.example", 40)


@MANY
@given(st.dictionaries(st.sampled_from(["namespace", "collections", "feeds", "profiles", "actors"]), values
                       | st.dictionaries(st.text(max_size=5), st.dictionaries(st.sampled_from(
                           ["collection", "queryable", "methods", "follow", "targets", "maxItems"]), values)),
                       max_size=5))
@example({"collections": {"f": {"collection": "a.b.c"}}, "feeds": {"t": {"follow": [], "targets": ["f"]}}})
def test_a_parsed_feeds_config_of_any_shape_is_valid_or_a_config_error(data):
    from feather.feeds.config import FeedsConfig, FeedsConfigError, parse

    try:
        assert isinstance(parse(data), FeedsConfig)
    except FeedsConfigError:
        pass


# --- the other JSON the service reads: a session token's exp, client keys, a dev event's record ----

exp_bodies = st.one_of(
    st.fixed_dictionaries({"exp": values | st.sampled_from([float("nan"), float("inf"), 1e400, 2 ** 53, 1.7e9])})
    .map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=40), deepish.map(str.encode),
)


@MANY
@given(exp_bodies)
@example(b'{"exp": Infinity}')
@example(b"[" * 5000)
def test_a_session_tokens_exp_schedules_a_refresh_a_column_can_hold_or_the_default(body):
    from feather.auth.service import _jwt_exp

    exp = _jwt_exp(f"e30.{b64(body)}.AA", -1)
    assert exp == -1 or (type(exp) is int and 0 < exp < 2 ** 53)


@pytest.mark.parametrize("raw", ["[" * 5000, '{"keys": ' + "[" * 5000 + "}", '"\\' * (MB // 2)],
                         ids=["brackets", "keys of brackets", "quote-backslash"])
def test_client_keys_nested_or_hostile_are_a_config_error(raw):
    from feather.auth.dpop import load_client_keys
    from feather.config import ConfigError

    result = timed("load_client_keys", lambda: load_client_keys(raw))
    assert raised(result) == "ConfigError" and isinstance(result, ConfigError)
    assert str(result).startswith("FEATHERREADER_OAUTH_CLIENT_KEYS: not a JWK or JWK Set: ")


def test_a_dev_event_record_nested_too_deep_is_a_usage_error(make_app):
    app = make_app(FEATHERREADER_ENV="development")
    result = app.test_cli_runner().invoke(args=["dev-event", "--did", "did:plc:bob", "--collection",
                                                "app.bsky.feed.post", "--op", "create", "--rkey", "p1",
                                                "--record", "[" * 5000])
    assert result.exit_code == 2
    assert f"--record is not JSON: JSON nested deeper than {MAX_JSON_DEPTH} levels is refused." in result.output
