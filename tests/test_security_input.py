"""Issue 14, hostile input: integers spelled in Unicode digits, and JSON nested to exhaust the decoder."""
from __future__ import annotations

import base64
import logging

import pytest

from feather.config import ConfigError, load_settings
from feather.parsing import ascii_int, json_depth_ok
from tests.fixtures.feeds.feedkit import FakeSources, feeds_app, join_backfills, toml
from tests.test_auth_oauth_fake import fake, start  # noqa: F401 - fake is a fixture

A = "did:plc:aaaa"
GET_FEED = "/xrpc/com.example.getFeed"


@pytest.mark.parametrize("raw, expected", [
    ("0", 0), ("42", 42), ("007", 7), ("²", None), ("①", None), ("٣", None), ("1²", None), ("", None),
    (" 5", None), ("5 ", None), ("+5", None), ("-5", None), ("1_000", None), ("9" * 19, None), (None, None),
])
def test_ascii_int_reads_ascii_digits_and_nothing_else(raw, expected):
    assert ascii_int(raw) == expected


def test_ascii_int_takes_a_minus_sign_only_when_asked():
    assert (ascii_int("-5", signed=True), ascii_int("--5", signed=True), ascii_int("-٣", signed=True)) == (-5, None, None)


def test_a_plus_sign_is_refused_even_when_a_sign_is_allowed():
    assert (ascii_int("+5", signed=True), ascii_int("+5"), ascii_int("-5")) == (None, None, None)


@pytest.fixture
def feeds(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, toml(), sources=FakeSources())
    yield app
    join_backfills(app)


@pytest.mark.parametrize("limit", ["%C2%B2", "%E2%91%A0", "%D9%A3", "%EF%BC%93"])  # ² ① ٣ ３
def test_a_feed_limit_in_unicode_digits_is_the_default_page_size_not_a_500(feeds, limit):
    from tests.fixtures.feeds.feedkit import BASE_US, ingest, post

    ingest(feeds, [post(A, f"p{i}", BASE_US + i) for i in range(5)])
    r = feeds.test_client().get(f"/xrpc/com.example.post.listRecords?actor={A}&limit={limit}")
    assert r.status_code == 200
    assert len(r.json["records"]) == 5  # the default (50), not 3 from ٣ or ３


def test_a_setting_in_unicode_digits_is_refused_with_the_variable_named():
    with pytest.raises(ConfigError) as exc:
        load_settings(env={"FEATHERREADER_ENV": "test", "PORT": "٨٠٠٠"})
    assert str(exc.value) == "PORT: expected a whole number; got '٨٠٠٠'"
    assert load_settings(env={"FEATHERREADER_ENV": "test", "PORT": "8_000"}).port == 8000


def test_json_depth_counts_brackets_outside_strings_only():
    assert json_depth_ok("[" * 64 + "]" * 64)
    assert not json_depth_ok("[" * 65 + "]" * 65)
    assert json_depth_ok('{"a": "' + "[" * 500 + '"}')  # brackets inside a string do not nest
    assert json_depth_ok(b'{"a": "\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}')


def test_deeply_nested_json_on_api_session_is_a_clear_400_and_logs_no_error(make_app, caplog):
    client = make_app(FEATHERREADER_ALLOW_APP_PASSWORDS=True).test_client()
    token = client.get("/api/session").json["csrfToken"]
    body = '{"identifier": ' + "[" * 100_000 + "]" * 100_000 + ', "password": "x"}'
    with caplog.at_level(logging.WARNING):
        r = client.post("/api/session", data=body, content_type="application/json",
                        headers={"X-CSRF-Token": token})
    assert (r.status_code, r.json) == (400, {"error": "InvalidRequest",
                                             "message": "JSON nested deeper than 64 levels is refused."})
    assert [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.ERROR] == []


def test_deep_json_never_spends_a_sign_in_attempt(make_app):
    app = make_app(FEATHERREADER_ALLOW_APP_PASSWORDS=True, FEATHERREADER_LOGIN_RATE_LIMIT=1)
    client = app.test_client()
    token = client.get("/api/session").json["csrfToken"]
    for _ in range(3):
        r = client.post("/api/session", data="[" * 1000 + "]" * 1000, content_type="application/json",
                        headers={"X-CSRF-Token": token})
        assert r.status_code == 400
    r = client.post("/api/session", json={"identifier": "a.test", "password": "nope"}, headers={"X-CSRF-Token": token})
    assert r.status_code == 401  # the one allowed attempt is still there: refused as a wrong password


def test_a_cursor_of_deeply_nested_json_reads_page_one(feeds):
    cursor = base64.urlsafe_b64encode(b"[" * 3000).rstrip(b"=").decode()
    r = feeds.test_client().get(f"/xrpc/com.example.post.listRecords?actor={A}&cursor={cursor}")
    assert (r.status_code, r.json) == (200, {"records": []})


def test_a_relay_retry_after_in_unicode_digits_is_ignored_not_a_crash():
    from feather.network.rebuild import retry_after_secs

    # float("²") raises and float("٣") is 3.0: a relay's header must be ASCII digits or a date.
    assert [retry_after_secs(v) for v in ("²", "①", "٣", "３", "120")] == [None, None, None, None, 120.0]


@pytest.mark.parametrize("expires_in", ["²", "٣", "soon", True, -5, "0"])
def test_an_oauth_token_reply_with_an_odd_expires_in_signs_in_with_the_default_lifetime(fake, expires_in):  # noqa: F811
    import time

    from feather.db import db

    def token(req):
        status, headers, body = fake.token(req)
        return status, headers, {**body, "expires_in": expires_in}

    fake.srv.route("POST /oauth/token", token)
    before = int(time.time())
    r = fake.client.get("/oauth/callback", query_string=start(fake)[1])
    assert (r.status_code, r.headers["Location"]) == (303, "/about")
    with fake.app.app_context(), db.connection_context():
        (expires_at,) = db.execute_sql("SELECT expires_at FROM auth_grant").fetchone()
    assert before + 300 <= expires_at <= int(time.time()) + 300
