"""Issue 14 on the web edge: proxies and rate limits, production's refusals and HSTS, caching of
personalised pages, the dev CLI outside development, and the SQLite file's mode."""
from __future__ import annotations

import os
import stat

import pytest

from feather.config import ConfigError, load_settings
from tests.test_auth_oauth_fake import keys_env

ALICE = "did:plc:alice000000000000000000"
PROD = {"FEATHERREADER_ENV": "production", "SECRET_KEY": "x" * 32}


def _csrf(client) -> str:
    return client.get("/api/session").json["csrfToken"]


def _login_statuses(client, forwarded_for: list[str], remote="10.0.0.1") -> list[int]:
    token = _csrf(client)
    return [client.post("/login", data={"identifier": "", "csrf_token": token}, headers={"X-Forwarded-For": xff},
                        environ_base={"REMOTE_ADDR": remote}).status_code for xff in forwarded_for]


def test_without_trusted_proxies_a_forwarded_header_cannot_choose_the_rate_limit_bucket(make_app):
    client = make_app(FEATHERREADER_LOGIN_RATE_LIMIT=1).test_client()
    assert _login_statuses(client, ["198.51.100.1", "198.51.100.2", "198.51.100.3"]) == [400, 429, 429]


def test_behind_one_trusted_proxy_each_client_address_has_its_own_bucket(make_app):
    client = make_app(FEATHERREADER_LOGIN_RATE_LIMIT=1, FEATHERREADER_TRUSTED_PROXIES=1).test_client()
    # Every request arrives from the proxy (10.0.0.1); it appends the client's address to the header.
    assert _login_statuses(client, ["198.51.100.1", "198.51.100.2"]) == [400, 400]
    assert _login_statuses(client, ["198.51.100.1"]) == [429]
    # A client that sends its own header only adds a hop the proxy does not vouch for.
    assert _login_statuses(client, ["203.0.113.7, 198.51.100.1"]) == [429]


def test_behind_a_trusted_proxy_the_opt_out_limit_is_per_client_too(make_app):
    client = make_app(FEATHERREADER_LOGIN_RATE_LIMIT=1, FEATHERREADER_TRUSTED_PROXIES=1,
                      FEATHERREADER_NETWORK_PAGE=True).test_client()
    token = _csrf(client)

    def opt_out(xff):
        return client.post("/network/opt-out", data={"handle": "", "csrf_token": token},
                           headers={"X-Forwarded-For": xff}).status_code

    assert [opt_out("198.51.100.1"), opt_out("198.51.100.1"), opt_out("198.51.100.2")] == [400, 429, 400]


def test_production_refuses_private_network_access_without_the_loud_override():
    with pytest.raises(ConfigError) as exc:
        load_settings(env={**PROD, "FEATHERREADER_ALLOW_PRIVATE_NETWORK": "1"})
    assert exc.value.name == "FEATHERREADER_ALLOW_PRIVATE_NETWORK"
    assert "FEATHERREADER_UNSAFE_PRIVATE_NETWORK_IN_PRODUCTION=1" in str(exc.value)
    settings = load_settings(env={**PROD, "FEATHERREADER_ALLOW_PRIVATE_NETWORK": "1",
                                  "FEATHERREADER_UNSAFE_PRIVATE_NETWORK_IN_PRODUCTION": "1"})
    assert settings.featherreader_allow_private_network is True
    assert load_settings(env={"FEATHERREADER_ENV": "development",
                              "FEATHERREADER_ALLOW_PRIVATE_NETWORK": "1"}).featherreader_allow_private_network


def test_production_sends_hsts_and_other_environments_do_not(make_app):
    prod = make_app(**PROD, FEATHERREADER_ALLOW_PRIVATE_NETWORK=False,
                    FEATHERREADER_PUBLIC_URL="https://feather.example.com",
                    FEATHERREADER_OAUTH_CLIENT_KEYS=keys_env("k1")).test_client()
    assert prod.get("/about").headers["Strict-Transport-Security"] == "max-age=31536000"
    assert prod.get("/api/session").headers["Strict-Transport-Security"] == "max-age=31536000"
    assert "Strict-Transport-Security" not in make_app().test_client().get("/about").headers


@pytest.fixture
def signed_in(make_app):
    app = make_app(FEATHERREADER_NETWORK_PAGE=True, FEATHERREADER_ALLOW_APP_PASSWORDS=True)
    app.extensions["auth"].sign_in_password = lambda identifier, password: ALICE  # no PDS here
    client = app.test_client()
    r = client.post("/login/password", data={"identifier": "alice.test", "password": "abcd-efgh-ijkl-mnop",
                                              "csrf_token": _csrf(client)})
    assert r.status_code == 303
    return app, client


def test_pages_rendered_for_a_signed_in_account_are_private_and_not_stored(signed_in):
    app, client = signed_in
    pages = {path: client.get(path) for path in ("/", "/timeline", "/sync", "/privacy", "/api/session")}
    assert {path: (r.status_code, r.headers.get("Cache-Control")) for path, r in pages.items()} == {
        path: (200, "private, no-store") for path in pages}
    anonymous = app.test_client()
    assert {path: anonymous.get(path).headers.get("Cache-Control") for path in ("/", "/privacy", "/about")} == {
        "/": None, "/privacy": None, "/about": None}


def _public_page_app(make_app):
    """An app with one page a view marks public although it shows the viewer's flash: the mistake
    the safety net in feather/security.py exists for."""
    from flask import flash, get_flashed_messages

    app = make_app()

    @app.get("/test-public")
    def public_page():
        if "flash" in request_args():
            flash("Done: only for you.", "info")
            return "set", 200
        return " ".join(get_flashed_messages()) or "nothing", 200, {"Cache-Control": "public, max-age=300"}

    return app


def request_args():
    from flask import request

    return request.args


def test_a_public_page_answered_with_a_session_becomes_private(make_app):
    client = _public_page_app(make_app).test_client()
    anonymous = client.get("/test-public")
    assert (anonymous.get_data(as_text=True), anonymous.headers["Cache-Control"], anonymous.headers["Vary"]) == (
        "nothing", "public, max-age=300", "Cookie")
    client.get("/test-public?flash=1")  # the visitor now carries a session cookie with a flash
    page = client.get("/test-public")
    assert (page.get_data(as_text=True), page.headers["Cache-Control"]) == ("Done: only for you.", "private, no-store")
    client.set_cookie("theme", "dark")  # any cookie may be what a view personalises on
    assert client.get("/test-public").headers["Cache-Control"] == "private, no-store"


def test_the_catalogue_is_public_for_a_signed_in_viewer_because_it_never_names_them(signed_in):
    app, client = signed_in
    for path in ("/network", "/api/network/count?url=https://example.com/feed.xml"):
        r = client.get(path)
        anonymous = app.test_client().get(path)
        assert r.status_code == 200 and ALICE not in r.get_data(as_text=True)
        assert (r.headers["Cache-Control"], "Set-Cookie" in r.headers) == ("public, max-age=300", False)
        assert r.get_data() == anonymous.get_data()


def test_dev_event_cli_refuses_outside_development(make_app):
    for env in ("test", "production"):
        extra = {} if env == "test" else {**PROD, "FEATHERREADER_ALLOW_PRIVATE_NETWORK": False,
                                           "FEATHERREADER_PUBLIC_URL": "https://feather.example.com",
                                           "FEATHERREADER_OAUTH_CLIENT_KEYS": keys_env("k1")}
        app = make_app(**({"FEATHERREADER_ENV": env} | extra))
        result = app.test_cli_runner().invoke(args=["dev-event", "--did", "did:plc:bob", "--collection",
                                                    "app.bsky.graph.follow", "--op", "create", "--rkey", "f1",
                                                    "--subject", "did:plc:alice"])
        assert result.exit_code == 2, result.output
        assert "dev-event is a development tool" in result.output
        assert '"frame"' not in result.output


def test_the_sqlite_file_is_created_owner_only(tmp_path):
    from feather.db import make_database

    old = os.umask(0o022)  # the common default, which would give 0644
    try:
        database = make_database(f"sqlite:///{tmp_path / 'new.db'}")
        database.connect()
        database.execute_sql("CREATE TABLE t (x INTEGER)")
        database.close()
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes["new.db"] == 0o600
    assert all(mode == 0o600 for mode in modes.values()), modes  # -wal and -shm follow the file


def test_an_existing_sqlite_file_keeps_its_mode(tmp_path):
    from feather.db import make_database

    path = tmp_path / "kept.db"
    path.touch(mode=0o640)
    path.chmod(0o640)
    make_database(f"sqlite:///{path}")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_same_for_everyone_page_that_sets_a_cookie_is_not_public(make_app):
    """The catalogue's exemption holds only while nothing of the visitor goes out: a view under
    same_for_everyone that sets a cookie is made private like any other page."""
    from flask import make_response

    from feather.network.views import same_for_everyone

    app = make_app()

    @app.get("/test-same")
    @same_for_everyone
    def same_page():
        response = make_response("the same for all")
        if "cookie" in request_args():
            response.set_cookie("seen", "1")
        return response

    client = app.test_client()
    assert client.get("/test-same").headers["Cache-Control"] == "public, max-age=300"
    r = client.get("/test-same?cookie=1")
    assert (r.headers["Cache-Control"], r.headers["Set-Cookie"].split(";")[0]) == ("private, no-store", "seen=1")


def test_the_session_cookie_follows_a_changed_secret_key_and_its_fallbacks(signed_in):
    """security.SessionCookies builds the signing serializer once per key: a cookie signed under a
    key the app no longer has is nobody's session, and one under a listed fallback still is."""
    app, client = signed_in
    assert client.get("/api/session").json["did"] == ALICE
    cookie, old = client.get_cookie("session").value, app.secret_key
    app.secret_key = "another secret key, rotated" * 2
    assert client.get("/api/session").json["signedIn"] is False  # signed with the old key only
    app.config["SECRET_KEY_FALLBACKS"] = [old]
    client.set_cookie("session", cookie)  # the answer above replaced it (a new CSRF token)
    assert client.get("/api/session").json["did"] == ALICE


def test_a_header_the_view_set_is_kept_and_the_defaults_are_added_once(make_app):
    from flask import make_response

    app = make_app()

    @app.route("/framed-test")
    def framed():
        response = make_response("ok")
        response.headers["x-frame-options"] = "SAMEORIGIN"  # any case: HTTP header names are not
        return response

    headers = app.test_client().get("/framed-test").headers
    assert headers.getlist("X-Frame-Options") == ["SAMEORIGIN"]
    assert headers.getlist("X-Content-Type-Options") == ["nosniff"]
    assert headers.getlist("Referrer-Policy") == ["same-origin"]
