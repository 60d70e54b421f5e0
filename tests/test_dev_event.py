"""The dev injection tool's gate: POST /admin/dev/jetstream-event answers only a signed-in operator,
in development, on loopback (401 signed out, 403 anyone else, in the XRPC error shape); `flask
dev-event` runs only in development (the server's own shell operates by definition)."""
from __future__ import annotations

import json

import pytest

from feather.db import db
from tests.test_auth_oauth_fake import keys_env

OPERATOR = "did:plc:operator0000000000000000"
STRANGER = "did:plc:stranger0000000000000000"
ROUTE = "/admin/dev/jetstream-event"
LOOPBACK = {"REMOTE_ADDR": "127.0.0.1"}
POST = {"did": "did:plc:alice", "op": "create", "collection": "app.bsky.feed.post", "rkey": "3kabc"}
PRODUCTION = {"FEATHERREADER_ENV": "production", "SECRET_KEY": "x" * 32, "FEATHERREADER_ALLOW_PRIVATE_NETWORK": False,
              "FEATHERREADER_PUBLIC_URL": "https://feather.example.com", "FEATHERREADER_OAUTH_CLIENT_KEYS": keys_env("k1")}
NOT_DEVELOPMENT = {"error": "Forbidden",
                   "message": "Event injection is only available in development mode, from loopback."}


def dev_app(make_app, **settings):
    from tests.support import mirror_feature

    mirror_feature._ready = False
    return make_app(**{"FEATHERREADER_ENV": "development", "FEATHERREADER_ADMIN_DIDS": [OPERATOR],
                       "FEATHERREADER_ALLOW_APP_PASSWORDS": True,
                       "FEATHERREADER_EXTRA_FEATURES": "tests.support.mirror_feature", **settings})


def sign_in(app, did: str, https: bool = False):
    """A browser session for did (the app-password check stubbed: no PDS here); (client, CSRF token)."""
    app.extensions["auth"].sign_in_password = lambda identifier, password: did
    client = app.test_client()
    if https:  # production's session cookie is Secure
        client.environ_base["wsgi.url_scheme"] = "https"
    token = client.get("/api/session").json["csrfToken"]
    r = client.post("/login/password", data={"identifier": "someone.test", "password": "abcd-efgh-ijkl-mnop",
                                              "csrf_token": token})
    assert r.status_code == 303, r.data
    return client, client.get("/api/session").json["csrfToken"]


def post(client, token, body, **kw):
    return client.post(ROUTE, json=body, headers={"X-CSRF-Token": token} if token else {},
                       environ_base=kw.pop("environ_base", LOOPBACK), **kw)


def mirrored(app) -> dict:
    from tests.support import mirror_feature

    with app.app_context(), db.connection_context():
        return mirror_feature.mirror_rows()


def test_a_signed_out_caller_is_told_to_sign_in_with_401(make_app):
    app = dev_app(make_app)
    r = post(app.test_client(), None, POST)
    assert (r.status_code, r.json) == (401, {
        "error": "AuthenticationRequired",
        "message": "Sign in first as an operator: POST /api/session with an app password, or sign in on the web."})
    assert mirrored(app) == {}


def test_a_signed_in_account_that_is_not_an_operator_gets_403(make_app):
    app = dev_app(make_app)
    client, token = sign_in(app, STRANGER)
    r = post(client, token, POST)
    assert (r.status_code, r.json) == (403, {"error": "Forbidden",
                                             "message": "Event injection is for this server's operators only."})
    assert mirrored(app) == {}


def test_an_operator_runs_the_event_through_the_handlers_with_200(make_app):
    app = dev_app(make_app)
    client, token = sign_in(app, OPERATOR)
    r = post(client, token, POST)
    assert r.status_code == 200, r.data
    assert r.json["frame"]["commit"]["rkey"] == "3kabc" and r.json["subscriptions"] == ["global"]
    assert list(mirrored(app)) == ["at://did:plc:alice/app.bsky.feed.post/3kabc"]
    with app.app_context(), db.connection_context():  # injected events move no cursor
        assert db.execute_sql("SELECT count(*) FROM jetstream_cursor").fetchone()[0] == 0


def test_an_operator_without_the_csrf_token_is_refused_and_nothing_runs(make_app):
    app = dev_app(make_app)
    client, _ = sign_in(app, OPERATOR)
    r = post(client, "forged", POST)
    assert (r.status_code, r.json["error"]) == (400, "InvalidCsrfToken")
    assert mirrored(app) == {}


def test_an_operator_off_loopback_is_refused_with_403(make_app):
    app = dev_app(make_app)
    client, token = sign_in(app, OPERATOR)
    r = post(client, token, POST, environ_base={"REMOTE_ADDR": "203.0.113.9"})
    assert (r.status_code, r.json) == (403, NOT_DEVELOPMENT)
    assert mirrored(app) == {}


def test_the_route_refuses_even_a_signed_in_operator_in_production_and_in_test(make_app):
    for settings in (PRODUCTION, {"FEATHERREADER_ENV": "test"}):
        app = dev_app(make_app, **settings)
        client, token = sign_in(app, OPERATOR, https=True)
        assert client.get("/api/session").json["signedIn"] is True
        r = post(client, token, POST)
        assert (r.status_code, r.json) == (403, NOT_DEVELOPMENT), settings["FEATHERREADER_ENV"]
        assert mirrored(app) == {}


def test_the_command_runs_only_in_development(make_app):
    args = ["dev-event", "--did", "did:plc:bob", "--collection", "app.bsky.feed.post", "--op", "create",
            "--rkey", "p1"]
    for settings in (PRODUCTION, {"FEATHERREADER_ENV": "test"}):
        app = dev_app(make_app, **settings)
        result = app.test_cli_runner().invoke(args=args)
        assert result.exit_code == 2, result.output
        assert "dev-event is a development tool: it runs only with FEATHERREADER_ENV=development" in result.output
        assert mirrored(app) == {}
    app = dev_app(make_app)
    result = app.test_cli_runner().invoke(args=args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["subscriptions"] == ["global"]
    assert list(mirrored(app)) == ["at://did:plc:bob/app.bsky.feed.post/p1"]


def test_write_for_an_account_without_a_stored_session_is_a_sentence_and_nothing_runs(make_app):
    app = dev_app(make_app)
    result = app.test_cli_runner().invoke(args=["dev-event", "--write", "--as", STRANGER, "--collection",
                                                "app.bsky.feed.post", "--record", '{"text": "hi"}'])
    assert (result.exit_code, result.output) == (1, f"Error: {STRANGER} has no usable session on this server. "
                                                    "Sign in here as that account (an app password is enough), "
                                                    "then try again.\n")
    client, token = sign_in(app, OPERATOR)  # a browser session, but no grant row: the PDS stub signed nobody in
    r = post(client, token, {"write": True, "collection": "app.bsky.feed.post", "record": {"text": "hi"}})
    assert (r.status_code, r.json) == (400, {
        "error": "SessionRequired", "message": f"{OPERATOR} has no usable session on this server. Sign in here "
                                              "as that account (an app password is enough), then try again."})
    assert mirrored(app) == {}


def test_write_is_refused_in_production_before_anything_is_written(make_app):
    app = dev_app(make_app, **PRODUCTION)
    app.extensions["auth"].pds_client = lambda did: pytest.fail("production must not reach the PDS")
    result = app.test_cli_runner().invoke(args=["dev-event", "--write", "--as", OPERATOR, "--collection",
                                                "app.bsky.feed.post", "--record", '{"text": "hi"}'])
    assert result.exit_code == 2, result.output
    assert "dev-event is a development tool: it runs only with FEATHERREADER_ENV=development" in result.output
    client, token = sign_in(app, OPERATOR, https=True)
    r = post(client, token, {"write": True, "collection": "app.bsky.feed.post", "record": {"text": "hi"}})
    assert (r.status_code, r.json) == (403, NOT_DEVELOPMENT)


def test_write_flags_that_cannot_make_a_record_are_usage_errors(make_app):
    app = dev_app(make_app)
    cases = {("--op", "identity"): "--write writes a record: --op is create, update or delete",
             ("--op", "update", "--collection", "app.bsky.feed.post"): "--rkey is required for update and delete",
             ("--collection", "app.bsky.feed.post", "--record", "[1]"): "--record is a JSON object"}
    for flags, message in cases.items():
        result = app.test_cli_runner().invoke(args=["dev-event", "--write", "--as", OPERATOR, *flags])
        assert (result.exit_code, message in result.output) == (2, True), result.output
    result = app.test_cli_runner().invoke(args=["dev-event", "--did", OPERATOR, "--collection", "app.bsky.feed.post"])
    assert (result.exit_code, "--op is required" in result.output) == (2, True), result.output
    client, token = sign_in(app, OPERATOR)
    for body, message in [({"write": "yes", "collection": "app.bsky.feed.post"}, "write is true or left out."),
                          ({"write": True, "op": "update", "collection": "app.bsky.feed.post"},
                           "rkey is required for update and delete."),
                          ({"write": True, "op": "identity"},
                           "With write, op is create, update or delete, and collection is required.")]:
        r = post(client, token, body)
        assert (r.status_code, r.json) == (400, {"error": "InvalidRequest", "message": message})
    assert mirrored(app) == {}
