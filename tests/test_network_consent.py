"""Consent both ways: an opt-out by DID that needs nothing from the network, the owner clearing
their own opt-out, and the opt-out limit counted per IPv6 /64.

The identity lookups here are the real resolver talking to a scripted PLC directory and handle
service on loopback, so "nothing was fetched" is what that server saw, not what a stub was told.
"""
import hashlib
import re
import socket
import time

import pytest

from feather import sql
from feather.db import db
from feather.jetstream import store as jstore
from feather.jetstream.events import CommitEvent
from feather.network import store, subscriptions
from tests.support.oauth_fakes import FakeServer
from tests.test_network_page import NSID, T, csrf, seed

HANDLE_SERVICE = "GET /xrpc/com.atproto.identity.resolveHandle"
DONE = "/network/opt-out/done"


@pytest.fixture
def network():
    """A PLC directory with no DID documents (every one is gone: 404) and a handle service that
    knows alice.test; every request either receives is recorded."""
    server = FakeServer()
    server.route(HANDLE_SERVICE, lambda req: (200, {}, {"did": "did:plc:alice"})
                 if req.query.get("handle") == "alice.test"
                 else (400, {}, {"error": "InvalidRequest", "message": "Unable to resolve handle"}))
    yield server
    server.close()


def closed_port_url() -> str:
    """An address where nothing listens: the PLC directory in an outage."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def consent_app(make_app, network):
    return make_app(FEATHERREADER_NETWORK_PAGE=True, FEATHERREADER_PLC_URL=network.url,
                    FEATHERREADER_HANDLE_RESOLVER=network.url)


def post_opt_out(app, text, addr="192.0.2.10"):
    client = app.test_client()
    token = csrf(client, "/network/opt-out")
    resp = client.post("/network/opt-out", data={"handle": text, "csrf_token": token},
                       environ_base={"REMOTE_ADDR": addr})
    return client, resp


def opt_outs() -> list[str]:
    with db.connection_context():
        return [r[0] for r in db.execute_sql("SELECT did FROM net_optout ORDER BY did").fetchall()]


def rows(did: str) -> int:
    with db.connection_context():
        return store.rows_for_did(did)


def alert(html: str) -> str:
    return re.search(r'<p class="flash notice error" role="alert" id="handle-error">([^<]*)</p>', html).group(1)


# --- opting out by DID fetches nothing
def test_an_opt_out_by_did_fetches_nothing_and_answers_the_same_for_an_indexed_and_an_unknown_account(
        consent_app, network):
    seed(consent_app, {"https://gone.example/feed": 5})  # did:plc:s0 … s4 indexed
    answers = []
    for did in ("did:plc:s0", "did:plc:neverseen"):
        client, resp = post_opt_out(consent_app, did)
        done = client.get(DONE)
        answers.append((resp.status_code, resp.headers["Location"], resp.data, done.status_code, done.data))
    assert answers[0] == answers[1]
    assert answers[0][:2] == (303, DONE) and b"You are opted out" in answers[0][4]
    assert network.requests == []  # neither the PLC directory nor anything else was asked
    assert opt_outs() == ["did:plc:neverseen", "did:plc:s0"]
    assert rows("did:plc:s0") == 0


def test_an_opt_out_by_did_works_while_the_plc_directory_is_down(make_app):
    app = make_app(FEATHERREADER_NETWORK_PAGE=True, FEATHERREADER_PLC_URL=closed_port_url())
    seed(app, {"https://gone.example/feed": 5})
    for did in ("did:plc:s1", "did:web:no-such-host.example"):
        _, resp = post_opt_out(app, did)
        assert (resp.status_code, resp.headers["Location"]) == (303, DONE)
    assert opt_outs() == ["did:plc:s1", "did:web:no-such-host.example"]
    assert rows("did:plc:s1") == 0


def test_a_did_plc_typed_in_capitals_opts_out_the_account(consent_app):
    seed(consent_app, {"https://gone.example/feed": 5})
    _, resp = post_opt_out(consent_app, "did:plc:S2")
    assert resp.status_code == 303 and opt_outs() == ["did:plc:s2"] and rows("did:plc:s2") == 0


def test_a_handle_is_resolved_to_its_did_and_no_did_document_is_fetched(consent_app, network):
    _, resp = post_opt_out(consent_app, "@alice.test")
    assert (resp.status_code, resp.headers["Location"]) == (303, DONE)
    assert opt_outs() == ["did:plc:alice"]
    assert [(r.method, r.path, r.query) for r in network.requests] == [
        ("GET", "/xrpc/com.atproto.identity.resolveHandle", {"handle": "alice.test"})]


def test_a_handle_that_cannot_be_resolved_gets_its_own_sentence_and_changes_nothing(consent_app):
    _, resp = post_opt_out(consent_app, "nobody.test")
    assert resp.status_code == 400
    assert alert(resp.get_data(as_text=True)) == (
        "The handle nobody.test could not be looked up (it may be misspelt, or its server may not be answering), "
        "so nothing was changed. Check the spelling, or enter the account&#39;s DID instead (like did:plc:abc123): "
        "an opt-out by DID needs no lookup.")
    assert opt_outs() == []


@pytest.mark.parametrize("text, sentence", [
    ("did:plc:", "did:plc: is not a valid DID, so nothing was changed. A DID looks like did:plc:abc123."),
    ("did:plc:abc def", "did:plc:abc def is not a valid DID, so nothing was changed. A DID looks like did:plc:abc123."),
    ("<b>alice</b>", "&lt;b&gt;alice&lt;/b&gt; is neither a handle nor a DID, so nothing was changed. A handle looks "
                     "like alice.bsky.social, a DID like did:plc:abc123."),
    ("alice", "alice is neither a handle nor a DID, so nothing was changed. A handle looks like alice.bsky.social, "
              "a DID like did:plc:abc123."),
])
def test_text_that_is_neither_a_handle_nor_a_did_is_refused_without_a_lookup(consent_app, network, text, sentence):
    _, resp = post_opt_out(consent_app, text)
    assert resp.status_code == 400 and alert(resp.get_data(as_text=True)) == sentence
    assert network.requests == [] and opt_outs() == []


# --- the owner clears their own opt-out
def signed_in(app, did):
    """A real signed-in browser: a session row and its cookie, as sign-in leaves them."""
    sid = f"session-of-{did}"
    with db.connection_context():
        sql.execute("INSERT INTO auth_web_session (id_hash, did, created_at, expires_at) VALUES (?,?,?,?)",
                    (hashlib.sha256(sid.encode()).hexdigest(), did, int(time.time()), int(time.time()) + 3600))
    client = app.test_client()
    with client.session_transaction() as sess:
        sess["sid"] = sid
    return client


def opted_out_at(did, us):
    with db.connection_context(), db.atomic():
        store.opt_out(did)
        sql.execute("UPDATE net_optout SET created_at = ? WHERE did = ?", (us, did))


CLEAR_FORM = re.compile(r'<form method="post" action="/network/attribution">\s*<input type="hidden" name="csrf_token" '
                        r'value="([^"]+)">\s*<input type="hidden" name="opt_out" value="clear">\s*'
                        r'<button type="submit">Clear my opt-out</button>')


def test_the_owner_sees_when_they_opted_out_clears_it_from_network_me_and_can_then_be_named(consent_app):
    opted_out_at("did:plc:bob", T)  # 2025-10-09T08:53:20Z
    client = signed_in(consent_app, "did:plc:bob")
    page = client.get("/network/me").get_data(as_text=True)  # the PDS is unreachable here: the page says so
    assert ('You opted out of this instance\'s catalogue on <time datetime="2025-10-09T08:53:20Z">2025-10-09</time>,\n'
            "so none of your records are counted and you are never named.") in page.replace("&#39;", "'")
    form = CLEAR_FORM.search(page)
    assert form, page
    resp = client.post("/network/attribution", data={"csrf_token": form.group(1), "opt_out": "clear"})
    assert (resp.status_code, resp.headers["Location"]) == (303, "/network/attribution")
    assert opt_outs() == []
    after = client.get("/network/attribution").get_data(as_text=True)
    assert "Your opt-out is cleared." in after and "Clear my opt-out" not in after
    assert '<button type="submit">Name me next to my feeds</button>' in after
    token = csrf(client, "/network/attribution")
    assert client.post("/network/attribution", data={"attribution": "on", "csrf_token": token}).status_code == 303
    with db.connection_context():
        assert store.is_attributed("did:plc:bob") is True
    assert "You opted out" not in client.get("/network/me").get_data(as_text=True)


def test_the_attribution_page_of_an_opted_out_account_offers_the_same_clear_form(consent_app):
    opted_out_at("did:plc:bob", T)
    page = signed_in(consent_app, "did:plc:bob").get("/network/attribution").get_data(as_text=True)
    assert CLEAR_FORM.search(page) and "2025-10-09</time>" in page and "Name me next to my feeds" not in page


def test_clearing_acts_on_the_signed_in_account_only_never_on_one_the_form_names(consent_app):
    opted_out_at("did:plc:victim", T)
    opted_out_at("did:plc:bob", T)
    client = signed_in(consent_app, "did:plc:bob")
    token = csrf(client, "/network/attribution")
    for _ in range(2):  # the second time bob has nothing left to clear
        resp = client.post("/network/attribution", data={"csrf_token": token, "opt_out": "clear",
                                                          "did": "did:plc:victim", "handle": "did:plc:victim"})
        assert resp.status_code == 303
        assert opt_outs() == ["did:plc:victim"]
    assert "You have no opt-out to clear" in client.get("/network/attribution").get_data(as_text=True)


def test_clearing_needs_a_signed_in_session_and_a_valid_token(consent_app):
    opted_out_at("did:plc:bob", T)
    stranger = consent_app.test_client()
    token = csrf(stranger, "/network/opt-out")  # a valid token, but nobody signed in
    resp = stranger.post("/network/attribution", data={"csrf_token": token, "opt_out": "clear", "did": "did:plc:bob"})
    assert resp.status_code == 401
    owner = signed_in(consent_app, "did:plc:bob")
    assert owner.post("/network/attribution", data={"opt_out": "clear"}).status_code == 400  # no token
    assert owner.post("/network/attribution", data={"opt_out": "clear", "csrf_token": "forged"}).status_code == 400
    assert opt_outs() == ["did:plc:bob"]


def apply(app, events):
    from feather.config import Settings

    (sub,) = subscriptions(Settings({**app.config["FEATHER"].as_dict(), "FEATHERREADER_NETWORK_INDEX": True}))
    with db.connection_context():
        jstore.apply_batch(sub, events, None)


def subscribe(did, rkey, url, at):
    return CommitEvent(did, at, "create", NSID, rkey, {"url": url, "createdAt": "2026-01-02T03:04:05Z"}, "bafy")


def test_clearing_brings_nothing_back_by_itself_and_the_live_stream_counts_what_comes_next(consent_app):
    seed(consent_app, {"https://feed.example/a": 5})  # did:plc:s0 … s4
    with db.connection_context(), db.atomic():
        store.set_attribution("did:plc:s0", "s0.example", True)
        store.opt_out("did:plc:s0")
    apply(consent_app, [subscribe("did:plc:s0", "r-during", "https://feed.example/b", T + 100)])  # skipped
    client = signed_in(consent_app, "did:plc:s0")
    client.post("/network/attribution", data={"csrf_token": csrf(client, "/network/attribution"), "opt_out": "clear"})
    assert opt_outs() == []
    with db.connection_context():
        assert store.rows_for_did("did:plc:s0") == 0  # neither the rows the opt-out deleted nor the skipped one
        assert store.is_attributed("did:plc:s0") is False  # being named needs a new yes
        counts = db.execute_sql("SELECT feed_url, subscriber_count FROM net_feed_rollup ORDER BY feed_url").fetchall()
    assert counts == [("https://feed.example/a", 4)]
    apply(consent_app, [subscribe("did:plc:s0", "r-after", "https://feed.example/a", sql.now_us())])
    with db.connection_context():
        assert sql.execute("SELECT rkey FROM net_subscription WHERE did = ?",
                           ("did:plc:s0",)).fetchall() == [("r-after",)]
        assert db.execute_sql("SELECT subscriber_count FROM net_feed_rollup").fetchall() == [(5,)]


# --- the opt-out limit counts an IPv6 client by its /64
def test_two_addresses_in_one_64_share_the_opt_out_limit_and_another_64_does_not(make_app):
    app = make_app(FEATHERREADER_NETWORK_PAGE=True, FEATHERREADER_LOGIN_RATE_LIMIT=2)
    codes = [post_opt_out(app, f"did:plc:x{i}", addr)[1].status_code for i, addr in enumerate(
        ["2001:db8:1:2::1", "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2:ffff:ffff:ffff:fffe",
         "2001:db8:1:3::1", "2001:db8:1:3::2", "2001:db8:1:3::3"])]
    assert codes == [303, 303, 429, 303, 303, 429]
    assert opt_outs() == ["did:plc:x0", "did:plc:x1", "did:plc:x3", "did:plc:x4"]


def test_an_ipv4_mapped_address_shares_the_opt_out_limit_of_its_ipv4_address(make_app):
    app = make_app(FEATHERREADER_NETWORK_PAGE=True, FEATHERREADER_LOGIN_RATE_LIMIT=2)
    codes = [post_opt_out(app, f"did:plc:y{i}", addr)[1].status_code
             for i, addr in enumerate(["192.0.2.7", "::ffff:192.0.2.7", "192.0.2.7", "192.0.2.8"])]
    assert codes == [303, 303, 429, 303]


def test_the_per_process_fallback_limiter_counts_by_the_same_key(app):
    from feather.network import consent

    for addr, key in [("2001:db8:1:2::1", "2001:db8:1:2::/64"), ("2001:db8:1:2:ffff::9", "2001:db8:1:2::/64"),
                      ("::ffff:192.0.2.1", "192.0.2.1"), ("192.0.2.1", "192.0.2.1")]:
        with app.test_request_context(environ_base={"REMOTE_ADDR": addr}):
            assert consent.client_key() == key
