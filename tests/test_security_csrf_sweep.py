"""Issue 14: every route that changes state refuses a request without a valid CSRF token.

The sweep walks the app's URL map, so a route added later is covered without touching this file,
and it sends each request from a signed-in browser session, where a forgotten check would do
real work (a planted `csrf.exempt` on /network/attribution sets the attribution; on /oauth/consent
it starts an OAuth flow). A refusal must be the CSRF refusal itself, not some later 400.
"""
from __future__ import annotations

import pytest

ALICE = "did:plc:alice000000000000000000"
UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
CSRF_PAGE = b"This form had expired, so nothing was sent. Check it and send it again."

# Blueprints that opt out of flask-wtf's automatic check, and why they are still safe; the sweep
# holds each to its own rule below. Anything else exempt fails the test.
EXEMPT = {
    "sync_api": "checks the token by hand after the session, so a signed-out script is told 401 first",
    "jetstream_dev": "development-only, loopback-only, operator-only, JSON-only event injection; checks the token "
                     "by hand after the operator check; 403 everywhere else",
}
# What a forged request would carry: enough that the view would act on it if nothing refused it.
BODIES = {
    "network.attribution": {"data": {"attribution": "on"}},
    "network.opt_out": {"data": {"handle": ALICE}},
    "auth.login": {"data": {"identifier": "alice.test", "next": "/"}},
    "auth.login_password": {"data": {"identifier": "alice.test", "password": "abcd-efgh-ijkl-mnop"}},
    "auth.consent": {"data": {"scope": "atproto", "next": "/"}},
    "auth.api_sign_in": {"json": {"identifier": "alice.test", "password": "abcd-efgh-ijkl-mnop"}},
    "sync.act": {"data": {"action": "enable"}},
    "pages.delete": {"data": {"confirm": "1"}},
    "sync_api.post_state": {"json": {"enabled": True}},
    "jetstream_dev.dev_event": {"json": {"did": ALICE, "op": "create", "collection": "app.bsky.graph.follow",
                                         "subject": "did:plc:bob"}},
}


def signed_in(make_app, **settings):
    app = make_app(FEATHERREADER_NETWORK_PAGE=True, FEATHERREADER_ALLOW_APP_PASSWORDS=True, **settings)
    app.extensions["auth"].sign_in_password = lambda identifier, password: ALICE  # no PDS here
    client = app.test_client()
    token = client.get("/api/session").json["csrfToken"]
    r = client.post("/login/password", data={"identifier": "alice.test", "password": "abcd-efgh-ijkl-mnop",
                                              "csrf_token": token})
    assert r.status_code == 303
    assert client.get("/api/session").json["signedIn"] is True
    return app, client


def unsafe_routes(app) -> list[tuple[str, str, str]]:
    adapter = app.url_map.bind("localhost")
    out = []
    for rule in app.url_map.iter_rules():
        for method in sorted(rule.methods & UNSAFE):
            url = adapter.build(rule.endpoint, {arg: "alice.test" for arg in rule.arguments}, method=method)
            out.append((rule.endpoint, method, url))
    return sorted(out)


def exempt_endpoints(app) -> set[str]:
    from feather.security import csrf

    exempt = set()
    for endpoint, view in app.view_functions.items():
        blueprint = endpoint.rsplit(".", 1)[0] if "." in endpoint else None
        if f"{view.__module__}.{view.__name__}" in csrf._exempt_views or blueprint in {
                bp.name for bp in csrf._exempt_blueprints}:
            exempt.add(endpoint)
    return exempt


def test_the_sweep_sees_every_state_changing_route(make_app):
    app, _ = signed_in(make_app)
    assert [(e, m) for e, m, _ in unsafe_routes(app)] == [
        ("auth.api_sign_in", "POST"), ("auth.api_sign_out", "DELETE"), ("auth.consent", "POST"),
        ("auth.login", "POST"), ("auth.login_password", "POST"), ("auth.logout", "POST"),
        ("feed_publish.act", "POST"), ("jetstream_dev.dev_event", "POST"), ("network.attribution", "POST"),
        ("network.opt_out", "POST"), ("pages.delete", "POST"), ("reader_feed.make", "POST"),
        ("reader_feed.revoke", "POST"), ("sync.act", "POST"), ("sync_api.post_state", "POST")]


def test_only_the_known_blueprints_are_exempt_from_the_automatic_check(make_app):
    app, _ = signed_in(make_app)
    unsafe = {endpoint for endpoint, _, _ in unsafe_routes(app)}
    assert {e for e in exempt_endpoints(app) if e in unsafe} == {"sync_api.post_state", "jetstream_dev.dev_event"}
    assert {e.split(".")[0] for e in exempt_endpoints(app) if e in unsafe} == set(EXEMPT)


@pytest.mark.parametrize("send_bad_token", [False, True])
def test_every_state_changing_route_refuses_a_signed_in_browser_without_a_valid_token(make_app, send_bad_token):
    app, client = signed_in(make_app)
    for endpoint, method, url in unsafe_routes(app):
        body = dict(BODIES.get(endpoint, {"data": {"x": "1"}}))
        headers = {"X-CSRF-Token": "forged"} if send_bad_token else {}
        if send_bad_token and "data" in body:
            body["data"] = {**body["data"], "csrf_token": "forged"}
        r = client.open(url, method=method, headers=headers, **body)
        where = f"{method} {url} -> {r.status_code} {r.data[:200]!r}"
        if endpoint.startswith("jetstream_dev."):
            assert r.status_code == 403, where  # not development: refused outright
        elif r.is_json:
            assert (r.status_code, r.json["error"]) == (400, "InvalidCsrfToken"), where
        else:
            assert r.status_code == 400 and CSRF_PAGE in r.data, where
        assert client.get("/api/session").json["signedIn"] is True, where  # nothing was undone either


def test_the_dev_event_route_refuses_what_a_cross_site_form_can_send_even_in_development(make_app):
    _, client = signed_in(make_app, FEATHERREADER_ENV="development", FEATHERREADER_ADMIN_DIDS=[ALICE])
    token = client.get("/api/session").json["csrfToken"]
    body = {"did": ALICE, "op": "create", "collection": "app.bsky.graph.follow", "subject": "did:plc:bob"}
    for data, content_type in [(body, None), ('{"did": "did:plc:alice", "op": "create"}', "text/plain")]:
        r = client.post("/admin/dev/jetstream-event", data=data, content_type=content_type,
                        environ_base={"REMOTE_ADDR": "127.0.0.1"})  # a form carries no token
        assert (r.status_code, r.json["error"]) == (400, "InvalidCsrfToken")
        # Even with the operator's token (which a forger cannot read) a form body is no event.
        r = client.post("/admin/dev/jetstream-event", data=data, content_type=content_type,
                        headers={"X-CSRF-Token": token}, environ_base={"REMOTE_ADDR": "127.0.0.1"})
        assert (r.status_code, r.json["error"]) == (400, "InvalidRequest")
