"""The confidential client (private_key_jwt) against a scripted authorization server on loopback.

The reference PDS cannot talk to a confidential client offline (it needs an https client_id on
a public name), so the assertion, PAR, DPoP and the callback checks are verified here.
"""
from __future__ import annotations

import base64
import hashlib
import json
from urllib.parse import parse_qs, urlsplit

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet

from feather.atproto.identity import IdentityResolver
from feather.auth.dpop import new_key
from feather.auth.service import AuthService
from tests.support.oauth_fakes import FakeServer, loopback_client

ALICE = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
BOB = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
PUBLIC = "https://feather.example.com"
CLIENT_ID = f"{PUBLIC}/oauth-client-metadata.json"


def keys_env(*kids):
    out = []
    for kid in kids:
        jwk = new_key().as_dict(private=True)
        jwk["kid"] = kid
        out.append(jwk)
    return json.dumps({"keys": out})


class FakeAS:
    """PDS + authorization server + PLC on one loopback origin, checking what a real AS checks."""

    def __init__(self, srv: FakeServer, other: FakeServer):
        self.srv, self.issuer, self.other = srv, srv.url, other
        self.challenges: dict[str, tuple[str, str]] = {}  # request_uri -> (challenge, state)
        self.sub = ALICE
        meta = {"issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/oauth/authorize",
                "token_endpoint": f"{self.issuer}/oauth/token",
                "pushed_authorization_request_endpoint": f"{self.issuer}/oauth/par",
                "require_pushed_authorization_requests": True, "client_id_metadata_document_supported": True,
                "authorization_response_iss_parameter_supported": True,
                "code_challenge_methods_supported": ["S256"], "dpop_signing_alg_values_supported": ["ES256"],
                "scopes_supported": ["atproto"]}
        self.meta = meta
        srv.route("GET /.well-known/oauth-authorization-server", (200, {}, meta))
        srv.route("GET /.well-known/oauth-protected-resource", (200, {}, {"authorization_servers": [self.issuer]}))
        srv.route("GET /xrpc/com.atproto.identity.resolveHandle", (200, {}, {"did": ALICE}))
        srv.route(f"GET /{ALICE}", (200, {}, self.doc(ALICE, "alice.test", self.issuer)))
        srv.route(f"GET /{BOB}", (200, {}, self.doc(BOB, "bob.test", other.url)))
        other.route("GET /.well-known/oauth-protected-resource",
                    (200, {}, {"authorization_servers": ["https://elsewhere.example.com"]}))
        srv.route("POST /oauth/par", (400, {"DPoP-Nonce": "n1"}, {"error": "use_dpop_nonce"}), self.par)
        srv.route("POST /oauth/token", self.token)

    @staticmethod
    def doc(did, handle, pds):
        return {"id": did, "alsoKnownAs": [f"at://{handle}"], "service": [
            {"id": "#atproto_pds", "type": "AtprotoPersonalDataServer", "serviceEndpoint": pds}]}

    def check_dpop(self, req, path):
        proof = req.headers["DPoP"]
        header = json.loads(base64.urlsafe_b64decode(proof.split(".")[0] + "=="))
        claims = jwt.decode(proof, ECKey.import_key(header["jwk"]), algorithms=["ES256"]).claims
        assert (header["typ"], header["alg"]) == ("dpop+jwt", "ES256") and "d" not in header["jwk"]
        assert (claims["htm"], claims["htu"], claims["nonce"]) == ("POST", f"{self.issuer}{path}", "n1")
        return header["jwk"]

    def check_assertion(self, form, jwks):
        assert form["client_id"] == CLIENT_ID
        assert form["client_assertion_type"] == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
        token = jwt.decode(form["client_assertion"], KeySet.import_key_set(jwks), algorithms=["ES256"])
        c = token.claims
        assert (c["iss"], c["sub"], c["aud"]) == (CLIENT_ID, CLIENT_ID, self.issuer)
        assert c["exp"] > c["iat"] and len(c["jti"]) >= 16
        return token.header["kid"]

    def par(self, req):
        form = req.form
        request_uri = f"urn:ietf:params:oauth:request_uri:req-{len(self.challenges)}"
        self.challenges[request_uri] = (form["code_challenge"], form["state"])
        return 201, {"DPoP-Nonce": "n1"}, {"request_uri": request_uri, "expires_in": 299}

    def token(self, req):
        form = req.form
        if form["grant_type"] == "authorization_code":
            challenge, _ = self.challenges[form["code"]]
            digest = base64.urlsafe_b64encode(hashlib.sha256(form["code_verifier"].encode()).digest())
            assert digest.rstrip(b"=").decode() == challenge
        return 200, {"DPoP-Nonce": "n1"}, {"access_token": "at-1", "refresh_token": "rt-1", "token_type": "DPoP",
                                            "expires_in": 3600, "scope": "atproto", "sub": self.sub}


@pytest.fixture
def fake(make_app):
    srv, other = FakeServer(), FakeServer()
    fake = FakeAS(srv, other)
    app = make_app(FEATHERREADER_PUBLIC_URL=PUBLIC, FEATHERREADER_OAUTH_CLIENT_KEYS=keys_env("k1", "k0"))
    http = loopback_client()
    resolver = IdentityResolver(http, handle_resolver=srv.url, plc_url=srv.url, txt_lookup=lambda n: [])
    app.extensions["auth"] = AuthService(app.config["FEATHER"], http=http, resolver=resolver)
    fake.app, fake.client = app, app.test_client()
    fake.jwks = fake.client.get("/oauth/jwks.json").json
    yield fake
    srv.close()
    other.close()


def start(fake, identifier="alice.test"):
    token = fake.client.get("/api/session").json["csrfToken"]
    r = fake.client.post("/login", data={"identifier": identifier, "csrf_token": token, "next": "/about"})
    assert r.status_code == 303, r.data
    query = parse_qs(urlsplit(r.headers["Location"]).query)
    request_uri = query["request_uri"][0]
    return r, {"code": request_uri, "state": fake.challenges[request_uri][1], "iss": fake.issuer}


def test_login_form_posts_and_redirects_to_the_authorization_server_after_par(fake):
    r, _ = start(fake)
    assert r.headers["Location"].startswith(f"{fake.issuer}/oauth/authorize?client_id=https%3A%2F%2Ffeather")
    pars = fake.srv.calls("POST /oauth/par")
    assert len(pars) == 2  # the first is answered with a DPoP nonce challenge and retried
    form = pars[1].form
    assert (form["response_type"], form["code_challenge_method"], form["scope"], form["login_hint"]) == (
        "code", "S256", "atproto", "alice.test")
    assert form["redirect_uri"] == f"{PUBLIC}/oauth/callback"
    fake.check_dpop(pars[1], "/oauth/par")
    assert fake.check_assertion(form, fake.jwks) == "k1"


def test_callback_exchanges_the_code_and_signs_in(fake):
    _, callback = start(fake)
    r = fake.client.get("/oauth/callback", query_string=callback)
    assert (r.status_code, r.headers["Location"]) == (303, "/about")
    token_call = fake.srv.calls("POST /oauth/token")[0]
    fake.check_dpop(token_call, "/oauth/token")
    assert fake.check_assertion(token_call.form, fake.jwks) == "k1"
    # the DPoP key of the session is the one PAR used
    assert fake.check_dpop(token_call, "/oauth/token") == fake.check_dpop(fake.srv.calls("POST /oauth/par")[1],
                                                                          "/oauth/par")
    session = fake.client.get("/api/session").json
    assert (session["did"], session["handle"]) == (ALICE, "alice.test")
    with fake.app.app_context():
        assert fake.app.extensions["auth"].grants.load(ALICE).client_kid == "k1"


def test_callback_from_another_issuer_is_refused(fake):
    _, callback = start(fake)
    r = fake.client.get("/oauth/callback", query_string={**callback, "iss": "https://evil.example.com"})
    assert r.status_code == 400
    assert b"The sign-in answer came from a different server than the one asked." in r.data
    assert fake.srv.calls("POST /oauth/token") == []


def test_a_callback_state_works_only_once(fake):
    _, callback = start(fake)
    assert fake.client.get("/oauth/callback", query_string=callback).status_code == 303
    r = fake.client.get("/oauth/callback", query_string=callback)
    assert r.status_code == 400 and b"This sign-in was not started in this browser, or was already used." in r.data
    # and the server's own record of the state is gone too, whoever brings it back
    from feather.auth.service import SignInError

    with fake.app.test_request_context(), pytest.raises(SignInError) as exc:
        fake.app.extensions["auth"].finish_oauth(callback)
    assert str(exc.value) == "This sign-in link has expired or was already used. Please start again."


def test_a_token_for_another_account_than_the_handle_is_refused(fake):
    _, callback = start(fake)
    fake.sub = BOB
    r = fake.client.get("/oauth/callback", query_string=callback)
    assert r.status_code == 400
    assert b"You approved the request as a different account than the one that started it." in r.data
    assert fake.client.get("/api/session").json["signedIn"] is False


def test_started_from_a_server_url_the_subs_pds_must_name_the_same_server(fake):
    _, callback = start(fake, identifier=fake.issuer)
    fake.sub = BOB  # bob's PDS names https://elsewhere.example.com as its authorization server
    r = fake.client.get("/oauth/callback", query_string=callback)
    assert r.status_code == 400
    assert b"does not use this sign-in server" in r.data
    assert fake.client.get("/api/session").json["signedIn"] is False


def test_refresh_is_signed_with_the_key_that_started_the_session(fake):
    _, callback = start(fake)
    fake.client.get("/oauth/callback", query_string=callback)
    service = fake.app.extensions["auth"]
    # rotation: a new first key, the old one still listed
    rotated = keys_env("k9")
    env = json.loads(rotated)
    env["keys"] += json.loads(fake.app.config["FEATHER"].featherreader_oauth_client_keys)["keys"]
    from feather.auth.oauth import ClientConfig, OAuthClient

    settings = fake.app.config["FEATHER"]
    object.__setattr__(settings, "featherreader_oauth_client_keys", json.dumps(env))
    service._oauth = OAuthClient(service.http, ClientConfig.from_settings(settings, []))
    with fake.app.app_context():
        service.grants.refresh_after_rejection(ALICE, "at-1")
    refresh = [c for c in fake.srv.calls("POST /oauth/token") if c.form["grant_type"] == "refresh_token"]
    assert len(refresh) == 1 and refresh[0].form["refresh_token"] == "rt-1"
    assert fake.check_assertion(refresh[0].form, {"keys": fake.jwks["keys"]}) == "k1"


def test_a_callback_is_accepted_up_to_the_request_lifetime_and_refused_after(fake):
    from feather.auth.service import REQUEST_TTL_SECS

    service = fake.app.extensions["auth"]
    for late, status in ((REQUEST_TTL_SECS, 303), (REQUEST_TTL_SECS + 1, 400)):
        fake.client.post("/logout", data={"csrf_token": fake.client.get("/api/session").json["csrfToken"]})
        service.clock = lambda: 1_800_000_000
        _, callback = start(fake)
        service.clock = lambda: 1_800_000_000 + late
        r = fake.client.get("/oauth/callback", query_string=callback)
        assert r.status_code == status, (late, r.data[:300])
    assert b"This sign-in link has expired or was already used. Please start again." in r.data
    assert len(fake.srv.calls("POST /oauth/token")) == 1  # the late callback never reached the server


def test_a_token_that_is_not_dpop_bound_is_refused(fake):
    _, callback = start(fake)
    fake.srv.route("POST /oauth/token", (200, {"DPoP-Nonce": "n1"}, {
        "access_token": "at-1", "refresh_token": "rt-1", "token_type": "Bearer", "expires_in": 3600,
        "scope": "atproto", "sub": ALICE}))
    r = fake.client.get("/oauth/callback", query_string=callback)
    assert r.status_code == 400
    assert b"The sign-in server issued a token that is not DPoP-bound." in r.data
    assert fake.client.get("/api/session").json["signedIn"] is False


def test_an_authorization_server_naming_another_issuer_is_refused_before_any_request(fake):
    fake.srv.route("GET /.well-known/oauth-authorization-server",
                   (200, {}, {**fake.meta, "issuer": "https://evil.example.com"}))
    token = fake.client.get("/api/session").json["csrfToken"]
    r = fake.client.post("/login", data={"identifier": "alice.test", "csrf_token": token, "next": "/about"})
    assert r.status_code == 400
    assert f"The authorization server at {fake.issuer} claims to be &#39;https://evil.example.com&#39;.".encode() in r.data
    assert fake.srv.calls("POST /oauth/par") == []


def test_a_renewed_session_for_another_account_is_refused_and_the_grant_needs_reauth(fake):
    from feather.auth.grants import NeedsReauth

    _, callback = start(fake)
    fake.client.get("/oauth/callback", query_string=callback)
    fake.sub = BOB  # the token endpoint now answers for bob
    service = fake.app.extensions["auth"]
    with fake.app.app_context():
        with pytest.raises(NeedsReauth):
            service.grants.refresh_after_rejection(ALICE, "at-1")
        grant = service.grants.load(ALICE)
    assert (grant.did, grant.access, grant.status) == (ALICE, "at-1", "needs_reauth")


def test_an_app_password_session_for_another_account_is_refused(fake):
    from feather.auth.service import SignInError

    service = fake.app.extensions["auth"]
    session = {"did": ALICE, "handle": "alice.test", "accessJwt": "a.b.c", "refreshJwt": "r.s.t"}
    fake.srv.route("POST /xrpc/com.atproto.server.createSession", (200, {}, {**session, "did": BOB}),
                   (200, {}, session))
    with fake.app.test_request_context():
        with pytest.raises(SignInError) as refused:
            service.sign_in_password("alice.test", "abcd-efgh-ijkl-mnop")
        assert service.grants.load(ALICE) is None
        service.sign_in_password("alice.test", "abcd-efgh-ijkl-mnop")  # the same server, answering for alice
        assert service.grants.load(ALICE).kind == "password"
    assert str(refused.value) == "Your server did not complete the sign-in. Try again later."


@pytest.mark.parametrize("tokens", [
    {"accessJwt": "a.b.c"},  # no refresh token
    {"accessJwt": "a.b.c", "refreshJwt": 5},
    {"accessJwt": ["a"], "refreshJwt": "r.s.t"},
    {"accessJwt": "a.b.c", "refreshJwt": "r" * 16_385},
])
def test_an_app_password_session_without_two_string_tokens_is_a_clean_refusal(fake, tokens):
    from feather.auth.service import SignInError

    service = fake.app.extensions["auth"]
    fake.srv.route("POST /xrpc/com.atproto.server.createSession", (200, {}, {"did": ALICE, **tokens}))
    with fake.app.test_request_context():
        with pytest.raises(SignInError) as refused:
            service.sign_in_password("alice.test", "abcd-efgh-ijkl-mnop")
        assert service.grants.load(ALICE) is None
    assert str(refused.value) == "Your server did not complete the sign-in. Try again later."


# --- the authorization-server metadata cache: anyone can name an issuer, so it is bounded

def as_metadata(issuer, **override):
    meta = {"issuer": issuer, "authorization_endpoint": f"{issuer}/oauth/authorize",
            "token_endpoint": f"{issuer}/oauth/token", "pushed_authorization_request_endpoint": f"{issuer}/oauth/par",
            "require_pushed_authorization_requests": True, "client_id_metadata_document_supported": True,
            "authorization_response_iss_parameter_supported": True, "code_challenge_methods_supported": ["S256"],
            "dpop_signing_alg_values_supported": ["ES256"], "scopes_supported": ["atproto"]}
    return {**meta, **override}


@pytest.fixture
def issuers():
    """One loopback server standing in for many issuers: `<url>/as<n>` each serves its own metadata."""
    srv = FakeServer()

    def make(n: int, **override) -> str:
        issuer = f"{srv.url}/as{n}"
        srv.route(f"GET /as{n}/.well-known/oauth-authorization-server", (200, {}, as_metadata(issuer, **override)))
        return issuer

    make.srv = srv
    yield make
    srv.close()


def metadata_fetches(srv, issuer) -> int:
    return len(srv.calls(f"GET {urlsplit(issuer).path}/.well-known/oauth-authorization-server"))


def bare_client(**kw):
    from feather.auth.oauth import ClientConfig, OAuthClient

    return OAuthClient(loopback_client(), ClientConfig("http://localhost", "http://127.0.0.1/oauth/callback",
                                                       "atproto"), **kw)


def test_the_server_cache_holds_at_most_its_maximum_and_drops_the_oldest_issuer(issuers):
    client = bare_client(max_servers=3)
    names = [issuers(n) for n in range(5)]
    for issuer in names:
        assert client.server(issuer).token_endpoint == f"{issuer}/oauth/token"
    assert len(client._servers) == 3
    for issuer in names[2:]:  # the three newest are still held: no second fetch
        client.server(issuer)
    assert [metadata_fetches(issuers.srv, i) for i in names] == [1, 1, 1, 1, 1]
    client.server(names[0])  # the oldest two were dropped: asked again
    assert [metadata_fetches(issuers.srv, i) for i in names] == [2, 1, 1, 1, 1]
    assert len(client._servers) == 3


def test_a_cached_server_is_asked_again_once_its_ttl_has_passed(issuers):
    now = [1000.0]
    client = bare_client(clock=lambda: now[0], server_ttl=600.0)
    issuer = issuers(0)
    client.server(issuer)
    now[0] = 1599.9
    client.server(issuer)
    assert metadata_fetches(issuers.srv, issuer) == 1
    now[0] = 1600.0
    client.server(issuer)
    assert metadata_fetches(issuers.srv, issuer) == 2


def test_an_endpoint_longer_than_2048_characters_is_refused_as_malformed_and_not_kept(issuers):
    from feather.auth.oauth import MAX_URL_CHARS, OAuthError

    client = bare_client()
    base = issuers(0)
    at_bound = issuers(1, token_endpoint=f"{base}/t/".ljust(MAX_URL_CHARS, "x"))
    assert len(client.server(at_bound).token_endpoint) == 2048
    for n, field_name in enumerate(("authorization_endpoint", "token_endpoint",
                                    "pushed_authorization_request_endpoint", "revocation_endpoint"), start=2):
        issuer = issuers(n, **{field_name: f"{base}/t/".ljust(MAX_URL_CHARS + 1, "x")})
        with pytest.raises(OAuthError) as refused:
            client.server(issuer)
        assert refused.value.message == (f"The authorization server {issuer} lists an endpoint address too long "
                                         "to be real."), field_name
    assert len(client._servers) == 1  # only the server at the bound


def test_a_revocation_endpoint_that_is_not_a_string_is_refused(issuers):
    from feather.auth.oauth import OAuthError

    issuer = issuers(0, revocation_endpoint={"url": "https://example.com/revoke"})
    with pytest.raises(OAuthError) as refused:
        bare_client().server(issuer)
    assert refused.value.message == f"The authorization server {issuer} lists a malformed revocation endpoint."


def test_an_issuer_longer_than_2048_characters_is_refused_before_any_request(issuers):
    from feather.auth.oauth import OAuthError

    issuer = f"{issuers.srv.url}/".ljust(2049, "a")
    with pytest.raises(OAuthError) as refused:
        bare_client().server(issuer)
    assert refused.value.message == "That sign-in server's address is too long to be real."
    assert issuers.srv.requests == []
