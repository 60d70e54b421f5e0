"""Issue 14, sign-in: `next` is a same-site path as the browser reads it, and an OAuth callback is
accepted only in the browser that started the sign-in."""
from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from feather.auth.views import safe_next
from tests.test_auth_oauth_fake import ALICE, fake, start  # noqa: F401 - fake is a fixture

EVIL = ["/\t/evil.example", "/\r/x", "/\n/evil.example", "/\r\n/evil.example", "/\x00/evil.example",
        "/\x7f/evil.example", "/\x85/evil.example", "/\\evil.example", "/x\\..\\..\\/evil.example",
        "//evil.example", "///evil.example", "https://evil.example/", "javascript:alert(1)", "\t/evil.example",
        " /evil.example", "evil.example", ""]


@pytest.mark.parametrize("value", EVIL)
def test_next_refuses_anything_a_browser_could_read_as_another_site(app, value):
    with app.test_request_context():
        assert safe_next(value) == "/"


@pytest.mark.parametrize("value", ["/", "/about", "/sync?apps=a,b#top", "/u/alice.test/social-graph-sync",
                                   "/%09/still-a-path", "/caf%C3%A9", "/café"])
def test_next_keeps_same_site_paths(app, value):
    with app.test_request_context():
        assert safe_next(value) == value


def _csrf(client) -> str:
    return client.get("/api/session").json["csrfToken"]


@pytest.mark.parametrize("value", ["/\t/evil.example", "/\r/x", "/\\evil.example"])
def test_password_sign_in_never_redirects_off_site_or_fails(make_app, value):
    app = make_app(FEATHERREADER_ALLOW_APP_PASSWORDS=True)
    # The sign-in itself is not under test here (no PDS): only where the browser is sent after it.
    app.extensions["auth"].sign_in_password = lambda identifier, password: ALICE
    client = app.test_client()
    r = client.post("/login/password", data={"identifier": "alice.test", "password": "abcd-efgh-ijkl-mnop",
                                              "next": value, "csrf_token": _csrf(client)})
    assert (r.status_code, r.headers["Location"]) == (303, "/")


def start_with_next(fake, client, next_value: str) -> dict:  # noqa: F811
    r = client.post("/login", data={"identifier": "alice.test", "csrf_token": _csrf(client), "next": next_value})
    assert r.status_code == 303, r.data
    request_uri = parse_qs(urlsplit(r.headers["Location"]).query)["request_uri"][0]
    return {"code": request_uri, "state": fake.challenges[request_uri][1], "iss": fake.issuer}


@pytest.mark.parametrize("value", ["/\t/evil.example", "/\r/x", "/\\evil.example"])
def test_oauth_sign_in_never_redirects_off_site_or_fails(fake, value):  # noqa: F811
    callback = start_with_next(fake, fake.client, value)
    r = fake.client.get("/oauth/callback", query_string=callback)
    assert (r.status_code, r.headers["Location"]) == (303, "/")


def test_consent_keeps_next_on_this_site(fake):  # noqa: F811
    fake.client.get("/oauth/callback", query_string=start(fake)[1])  # signed in as alice
    page = fake.client.get("/oauth/consent", query_string={"next": "/\t/evil.example", "scope": "atproto"})
    assert page.status_code == 200
    assert 'name="next" value="/"' in page.data.decode()
    seen = {}

    def start_oauth(identifier, **kwargs):  # records what the form hands on; the AS is not under test
        seen.update(kwargs)
        return "https://as.example/authorize", "state-1"

    fake.app.extensions["auth"].start_oauth = start_oauth
    r = fake.client.post("/oauth/consent", data={"next": "/\t/evil.example", "csrf_token": _csrf(fake.client)})
    assert r.status_code == 303 and seen["next_url"] == "/"


def test_an_oauth_callback_opened_in_another_browser_is_refused(fake):  # noqa: F811
    _, callback = start(fake)  # the attacker starts a sign-in to their own account...
    victim = fake.app.test_client()  # ...and sends the callback URL to someone else
    r = victim.get("/oauth/callback", query_string=callback)
    assert r.status_code == 400
    assert b"This sign-in was not started in this browser, or was already used." in r.data
    assert victim.get("/api/session").json["signedIn"] is False
    assert fake.srv.calls("POST /oauth/token") == []  # refused before the code was spent
    r = fake.client.get("/oauth/callback", query_string=callback)  # the browser that started it still can
    assert (r.status_code, r.headers["Location"]) == (303, "/about")


def test_an_oauth_callback_without_any_state_is_refused(fake):  # noqa: F811
    _, callback = start(fake)
    r = fake.client.get("/oauth/callback", query_string={k: v for k, v in callback.items() if k != "state"})
    assert r.status_code == 400 and fake.srv.calls("POST /oauth/token") == []


def test_demo_sign_in_keeps_next_on_this_site(make_app):
    app = make_app(FEATHERREADER_ENV="development", FEATHERREADER_EXTRA_FEATURES=["demo.feature"])
    client = app.test_client()
    r = client.get("/demo/sign-in", query_string={"as": "ada", "next": "/\t/evil.example"})
    assert (r.status_code, r.headers["Location"]) == (303, "/")
    r = client.get("/demo/sign-in", query_string={"as": "ada", "next": "/network"})
    assert (r.status_code, r.headers["Location"]) == (303, "/network")


def test_a_failed_callback_spends_the_state_in_this_browser_too(fake):  # noqa: F811
    """Single use is kept in the browser as well as on the server: after a callback that failed
    (here the answer named another issuer), the same state is refused by the browser check,
    before the server's record is even looked at."""
    _, callback = start(fake)
    r = fake.client.get("/oauth/callback", query_string={**callback, "iss": "https://evil.example.com"})
    assert r.status_code == 400
    r = fake.client.get("/oauth/callback", query_string=callback)
    assert r.status_code == 400
    assert b"This sign-in was not started in this browser, or was already used." in r.data
    assert fake.srv.calls("POST /oauth/token") == []


def _sign_in_codes(client, addrs: list[str]) -> list[int]:
    """POST /login with nothing typed from each address in turn: the limit is counted before anything
    else (400 "Enter your handle" under it, 429 over it), so no network is needed."""
    token = _csrf(client)
    return [client.post("/login", data={"identifier": "", "csrf_token": token},
                        environ_base={"REMOTE_ADDR": addr}).status_code for addr in addrs]


def test_two_addresses_in_one_64_share_the_sign_in_limit_and_another_64_does_not(make_app):
    client = make_app(FEATHERREADER_LOGIN_RATE_LIMIT=2).test_client()
    assert _sign_in_codes(client, ["2001:db8:1:2::1", "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::ffff",
                                   "2001:db8:1:3::1", "2001:db8:1:3::2", "2001:db8:1:3::3"]) == [
        400, 400, 429, 400, 400, 429]


def test_the_three_sign_in_forms_count_in_one_64_bucket(make_app):
    from feather.auth.service import SignInError

    app = make_app(FEATHERREADER_LOGIN_RATE_LIMIT=2, FEATHERREADER_ALLOW_APP_PASSWORDS=True)
    tried = []

    def refuse(identifier, password):  # no PDS here: every password is wrong
        tried.append(identifier)
        raise SignInError("That password is not right.")

    app.extensions["auth"].sign_in_password = refuse
    client = app.test_client()
    assert _sign_in_codes(client, ["2001:db8:9:9::1"]) == [400]
    r = client.post("/login/password", data={"identifier": "alice.test", "password": "x", "csrf_token": _csrf(client)},
                    environ_base={"REMOTE_ADDR": "2001:db8:9:9::2"})
    assert r.status_code == 400 and tried == ["alice.test"]  # the second attempt in the /64: still let through
    r = client.post("/api/session", json={"identifier": "alice.test", "password": "x"},
                    headers={"X-CSRF-Token": _csrf(client)}, environ_base={"REMOTE_ADDR": "2001:db8:9:9::3"})
    assert (r.status_code, r.json["error"]) == (429, "RateLimitExceeded") and tried == ["alice.test"]
