"""Sign-in pages and the session API without a PDS: forms, CSRF, rate limit, client metadata, config."""
from __future__ import annotations

import json

import pytest

from feather.auth.dpop import new_key
from feather.auth.views import safe_next
from feather.config import ConfigError
from feather.outbound import FetchFailed


def csrf(client) -> str:
    return client.get("/api/session").json["csrfToken"]


def test_login_page_is_a_plain_form_with_a_csrf_field(client):
    r = client.get("/login?next=/about")
    assert r.status_code == 200
    html = r.data.decode()
    assert '<form method="post" action="/login">' in html
    assert 'name="csrf_token"' in html and 'name="identifier"' in html and 'value="/about"' in html
    assert "<script>" not in html  # nothing inline; the form needs no JavaScript
    assert "App password" not in html  # off by default
    # the form's POST redirects to the user's sign-in server, so https targets are allowed here only
    assert "form-action 'self' https:" in r.headers["Content-Security-Policy"]
    assert "form-action 'self';" in client.get("/about").headers["Content-Security-Policy"]


def test_login_post_without_csrf_token_is_refused(client):
    r = client.post("/login", data={"identifier": "alice.example.com"})
    assert r.status_code == 400
    assert b"This form had expired, so nothing was sent. Check it and send it again." in r.data


def test_api_session_post_without_csrf_header_is_refused_as_json(make_app):
    client = make_app(FEATHERREADER_ALLOW_APP_PASSWORDS=True).test_client()
    r = client.post("/api/session", json={"identifier": "a.test", "password": "aaaa-bbbb-cccc-dddd"})
    assert (r.status_code, r.json["error"]) == (400, "InvalidCsrfToken")


def test_empty_identifier_gets_a_plain_sentence(client):
    r = client.post("/login", data={"identifier": " ", "csrf_token": csrf(client)})
    assert r.status_code == 400
    assert b"Enter your handle (like alice.bsky.social) or your server&#39;s address." in r.data


def test_unresolvable_handle_gets_a_plain_sentence(app, client):
    class NoHttp:
        allow_private_network = False

        def get(self, url, **kwargs):
            raise FetchFailed(f"Could not resolve {url}.", url=url)

    resolver = app.extensions["auth"].resolver
    resolver.http, resolver.txt_lookup, resolver.handle_resolver = NoHttp(), (lambda name: []), ""
    r = client.post("/login", data={"identifier": "nobody.example.com", "csrf_token": csrf(client)})
    assert r.status_code == 400
    assert b"Could not find the account for the handle nobody.example.com." in r.data
    assert b'value="nobody.example.com"' in r.data  # what was typed stays in the box


def test_login_is_rate_limited_per_address(make_app):
    app = make_app(FEATHERREADER_LOGIN_RATE_LIMIT=3)
    client = app.test_client()
    token = csrf(client)
    statuses = [client.post("/login", data={"identifier": "", "csrf_token": token}).status_code for _ in range(5)]
    assert statuses == [400, 400, 400, 429, 429]
    r = client.post("/login", data={"identifier": "", "csrf_token": token})
    assert b"Too many sign-in attempts from your address." in r.data
    other = app.test_client()
    r = other.post("/login", data={"identifier": "", "csrf_token": csrf(other)},
                   environ_base={"REMOTE_ADDR": "192.0.2.9"})
    assert r.status_code == 400  # another address has its own budget


def test_api_session_reports_signed_out_with_a_csrf_token(client):
    body = client.get("/api/session").json
    assert body["signedIn"] is False and body["appPasswords"] is False and len(body["csrfToken"]) > 20


def test_app_password_routes_are_off_unless_enabled(client):
    token = csrf(client)
    r = client.post("/api/session", json={"identifier": "a.test", "password": "x"}, headers={"X-CSRF-Token": token})
    assert (r.status_code, r.json["error"]) == (403, "AppPasswordsDisabled")
    r = client.post("/login/password", data={"identifier": "a.test", "password": "x", "csrf_token": token})
    assert r.status_code == 404


def test_an_account_password_is_refused_in_favour_of_an_app_password(make_app):
    client = make_app(FEATHERREADER_ALLOW_APP_PASSWORDS=True).test_client()
    r = client.post("/login/password", data={"identifier": "alice.test", "password": "hunter2",
                                              "csrf_token": csrf(client)})
    assert r.status_code == 400
    assert b"Use an app password (four groups of four letters or digits" in r.data


@pytest.mark.parametrize("value, expected", [
    ("/sync?x=1", "/sync?x=1"), ("//evil.example/x", "/"), ("https://evil.example/", "/"), ("/\\evil", "/"),
    (None, "/"), ("", "/"),
])
def test_next_only_allows_same_site_paths(app, value, expected):
    with app.test_request_context():
        assert safe_next(value) == expected


def test_loopback_client_metadata_when_no_public_url(client):
    meta = client.get("/oauth-client-metadata.json").json
    assert meta["client_id"].startswith("http://localhost?redirect_uri=http%3A%2F%2F127.0.0.1%3A8000%2Foauth%2Fcallback")
    assert (meta["token_endpoint_auth_method"], meta["dpop_bound_access_tokens"]) == ("none", True)
    assert "jwks_uri" not in meta


def _keys_env(*kids: str) -> tuple[str, list]:
    keys = []
    for kid in kids:
        jwk = new_key().as_dict(private=True)
        jwk["kid"] = kid
        keys.append(jwk)
    return json.dumps({"keys": keys}), keys


def test_confidential_client_metadata_and_jwks(make_app):
    env, keys = _keys_env("k2", "k1")
    client = make_app(FEATHERREADER_PUBLIC_URL="https://feather.example.com",
                      FEATHERREADER_OAUTH_CLIENT_KEYS=env).test_client()
    meta = client.get("/oauth-client-metadata.json").json
    assert meta == {
        "client_id": "https://feather.example.com/oauth-client-metadata.json", "client_name": "Feather",
        "client_uri": "https://feather.example.com", "application_type": "web",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "redirect_uris": ["https://feather.example.com/oauth/callback"], "scope": meta["scope"],
        "dpop_bound_access_tokens": True, "token_endpoint_auth_method": "private_key_jwt",
        "token_endpoint_auth_signing_alg": "ES256", "jwks_uri": "https://feather.example.com/oauth/jwks.json",
        "policy_uri": "https://feather.example.com/privacy", "tos_uri": "https://feather.example.com/terms"}
    assert meta["scope"].split()[0] == "atproto"
    jwks = client.get("/oauth/jwks.json").json["keys"]
    assert [k["kid"] for k in jwks] == ["k2", "k1"]
    assert all("d" not in k and k["alg"] == "ES256" and k["use"] == "sig" for k in jwks)


def test_production_without_a_public_url_refuses_to_start(make_app):
    with pytest.raises(ConfigError) as err:
        make_app(FEATHERREADER_ENV="production", SECRET_KEY="x" * 32, FEATHERREADER_ALLOW_PRIVATE_NETWORK=False)
    assert err.value.name == "FEATHERREADER_PUBLIC_URL"


def test_public_url_without_client_keys_refuses_to_start(make_app):
    with pytest.raises(ConfigError) as err:
        make_app(FEATHERREADER_ENV="production", SECRET_KEY="x" * 32, FEATHERREADER_ALLOW_PRIVATE_NETWORK=False,
                 FEATHERREADER_PUBLIC_URL="https://feather.example.com")
    assert err.value.name == "FEATHERREADER_OAUTH_CLIENT_KEYS"


def test_logout_needs_csrf_and_ends_the_session(client):
    assert client.post("/logout").status_code == 400
    r = client.post("/logout", data={"csrf_token": csrf(client)})
    assert (r.status_code, r.headers["Location"]) == (303, "/")


def test_consent_page_sends_signed_out_visitors_to_sign_in(client):
    r = client.get("/oauth/consent?scope=repo:app.bsky.graph.follow")
    assert r.status_code == 303 and r.headers["Location"].startswith("/login?next=")
