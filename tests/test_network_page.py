"""/network, the count API and the consent pages (docs/design.md, "The network catalogue")."""
import logging
import re

import pytest

from feather import sql
from feather.db import db
from feather.jetstream import store as jstore
from feather.jetstream.events import CommitEvent
from feather.network import store, subscriptions

NSID = "community.lexicon.rss.subscription"
T = 1_760_000_000_000_000


def seed(app, feeds: dict[str, int], start=0):
    """feeds: url -> number of distinct subscribing accounts (did:plc:s0, s1, ...)."""
    settings = app.config["FEATHER"].as_dict()
    from feather.config import Settings

    on = Settings({**settings, "FEATHERREADER_NETWORK_INDEX": True})
    (sub,) = [s for s in subscriptions(on)]
    events, t = [], T + start
    for url, n in feeds.items():
        for i in range(n):
            t += 1
            events.append(CommitEvent(f"did:plc:s{i}", t, "create", NSID, f"r{abs(hash(url)) % 10**8}",
                                      {"url": url, "createdAt": "2026-01-02T03:04:05Z"}, "bafy"))
    with db.connection_context():
        jstore.apply_batch(sub, events, None)


class Directory:
    """The network's handles as the opt-out sees them: `handles` maps each one that resolves to its
    DID. A DID is never looked up: the opt-out takes it as typed (test_network_consent.py)."""

    def __init__(self, handles=None):
        self.handles = handles or {}

    def resolve_handle(self, handle):
        from feather.atproto.identity import UnresolvableHandle

        if handle not in self.handles:
            raise UnresolvableHandle(f"The handle {handle} does not resolve.", handle)
        return self.handles[handle]


def with_directory(app, handles=None):
    app.extensions["identity_resolver"] = Directory(handles)
    return app


@pytest.fixture
def page_app(make_app):
    return with_directory(make_app(FEATHERREADER_NETWORK_PAGE=True))


def csrf(client, path):
    html = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def test_the_page_and_the_count_api_are_not_served_when_the_flag_is_off(make_app):
    client = make_app().test_client()
    assert client.get("/network").status_code == 404
    resp = client.get("/api/network/count?url=https://example.com/feed")
    assert (resp.status_code, resp.json["error"]) == (404, "NotFound")


def test_empty_catalogue_says_nothing_to_show_yet_with_a_last_updated_time(page_app):
    html = page_app.test_client().get("/network").get_data(as_text=True)
    assert "Nothing to show yet." in html and "Last updated: never." in html
    seed(page_app, {"https://few.example/feed": 2})
    html = page_app.test_client().get("/network").get_data(as_text=True)
    assert "Nothing to show yet." in html
    assert re.search(r'Last updated: <time datetime="20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ">', html)


def test_a_feed_with_four_subscribers_is_hidden_and_with_five_is_shown(page_app):
    seed(page_app, {"https://four.example/feed": 4, "https://five.example/feed": 5})
    client = page_app.test_client()
    html = client.get("/network").get_data(as_text=True)
    assert "four.example" not in html
    assert html.count("https://five.example/feed</a>") == 2  # both sections
    assert "five.example/feed</a>: 5 accounts" in html
    assert client.get("/api/network/count?url=https://four.example/feed/").json == {"url": "https://four.example/feed"}
    assert client.get("/api/network/count?url=HTTPS://five.example/feed").json == {
        "url": "https://five.example/feed", "subscribers": 5}


def test_two_requests_get_byte_identical_cacheable_html(page_app):
    seed(page_app, {f"https://f{i}.example/feed": 5 + i % 3 for i in range(30)})
    client = page_app.test_client()
    first, second = client.get("/network"), page_app.test_client().get("/network")
    assert first.data == second.data
    assert first.headers["Cache-Control"] == "public, max-age=300"
    assert "Set-Cookie" not in first.headers and b"csrf_token" not in first.data
    assert b"<script" not in first.data.replace(b'<script src="/static/vendor/htmx.min.js" defer></script>', b"")


def test_sections_hold_25_rows_ordered_by_count_then_url(page_app):
    seed(page_app, {f"https://f{i:02d}.example/feed": 5 + (i % 3) for i in range(30)})
    html = page_app.test_client().get("/network").get_data(as_text=True)
    popular = html[html.index("Most subscribed"):]
    urls = re.findall(r'<a href="(https://f\d\d\.example/feed)"', popular)
    assert len(urls) == 25
    expected = sorted((f"https://f{i:02d}.example/feed" for i in range(30)), key=lambda u: (-(5 + int(u[9:11]) % 3), u))
    assert urls == expected[:25]


def test_recently_added_holds_the_25_newest_feeds_at_or_over_the_floor_newest_first(page_app):
    feeds = {f"https://r{i:02d}.example/feed": 5 for i in range(30)}  # first seen in this order
    feeds["https://newest-but-hidden.example/feed"] = 4
    seed(page_app, feeds)
    html = page_app.test_client().get("/network").get_data(as_text=True)
    recent = html[html.index("Recently added"):html.index("Most subscribed")]
    urls = re.findall(r'<a href="(https://[^"]+)"', recent)
    assert urls == [f"https://r{i:02d}.example/feed" for i in range(29, 4, -1)]


def test_non_http_urls_render_as_escaped_text_never_as_links(page_app):
    pub = "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/site.standard.publication/3lwafzkjqm25s"
    seed(page_app, {pub: 5, "https://q.example/feed?a=%22%3E%3Cb%3E": 5})
    html = page_app.test_client().get("/network").get_data(as_text=True)
    assert f'href="{pub}"' not in html and pub in html
    assert "<b>" not in html


def test_nobody_is_named_unless_they_opted_in(page_app):
    seed(page_app, {"https://named.example/feed": 5})
    with db.connection_context(), db.atomic():
        store.set_attribution("did:plc:s3", "carol.example", True)
    html = page_app.test_client().get("/network").get_data(as_text=True)
    assert "including carol.example" in html
    for i in (0, 1, 2, 4):
        assert f"did:plc:s{i}" not in html


def opt_out_and_read_the_answer(app, did):
    client = app.test_client()
    token = csrf(client, "/network/opt-out")
    resp = client.post("/network/opt-out", data={"handle": did, "csrf_token": token})
    assert (resp.status_code, resp.headers["Location"]) == (303, "/network/opt-out/done")
    return client.get("/network/opt-out/done").data


def test_the_opt_out_answer_is_the_same_for_every_input_and_the_log_names_nobody(page_app, caplog):
    seed(page_app, {"https://gone.example/feed": 5})
    with caplog.at_level(logging.INFO):  # production's level (DEBUG adds peewee's SQL trace)
        indexed = opt_out_and_read_the_answer(page_app, "did:plc:s0")
        never_seen = opt_out_and_read_the_answer(page_app, "did:plc:nobody")
    assert indexed == never_seen and b"You are opted out" in indexed
    assert "did:plc:s0" not in caplog.text and "did:plc:nobody" not in caplog.text
    assert "network: an account opted out" in caplog.text


def test_opt_out_is_a_plain_form_post_that_deletes_rows_and_redirects(page_app):
    seed(page_app, {"https://gone.example/feed": 5})
    client = page_app.test_client()
    opt_out_and_read_the_answer(page_app, "did:plc:s0")
    with db.connection_context():
        assert db.execute_sql("SELECT count(*) FROM net_subscription WHERE did = 'did:plc:s0'").fetchone()[0] == 0
        assert db.execute_sql("SELECT did FROM net_optout").fetchall() == [("did:plc:s0",)]
    assert "gone.example" not in client.get("/network").get_data(as_text=True)  # 4 left: under the floor


def test_opt_out_resolves_a_handle_to_its_did(page_app):
    with_directory(page_app, handles={"alice.example.com": "did:plc:alice"})
    client = page_app.test_client()
    token = csrf(client, "/network/opt-out")
    resp = client.post("/network/opt-out", data={"handle": "@alice.example.com", "csrf_token": token})
    assert resp.status_code == 303
    with db.connection_context():
        assert db.execute_sql("SELECT did FROM net_optout").fetchall() == [("did:plc:alice",)]


def test_opt_out_without_the_csrf_token_is_refused(page_app):
    assert page_app.test_client().post("/network/opt-out", data={"handle": "did:plc:x"}).status_code == 400


def test_opt_out_is_rate_limited_like_login(make_app):
    client = with_directory(make_app(FEATHERREADER_LOGIN_RATE_LIMIT=2)).test_client()
    token = csrf(client, "/network/opt-out")
    codes = [client.post("/network/opt-out", data={"handle": f"did:plc:x{i}", "csrf_token": token}).status_code
             for i in range(3)]
    assert codes == [303, 303, 429]


def test_attribution_needs_a_signed_in_session(page_app):
    client = page_app.test_client()
    resp = client.get("/network/attribution")
    assert resp.status_code == 401 and "Sign in" in resp.get_data(as_text=True)
    page_app.extensions["feather.current_user"] = lambda: {"did": "did:plc:s1", "handle": "bob.example"}
    token = csrf(client, "/network/attribution")
    assert client.post("/network/attribution", data={"attribution": "on", "csrf_token": token}).status_code == 303
    with db.connection_context():
        assert db.execute_sql("SELECT did, handle FROM net_attribution").fetchall() == [("did:plc:s1", "bob.example")]
    client.post("/network/attribution", data={"attribution": "off", "csrf_token": token})
    with db.connection_context():
        assert db.execute_sql("SELECT count(*) FROM net_attribution").fetchone()[0] == 0


def test_opting_out_also_withdraws_a_choice_to_be_named(page_app):
    seed(page_app, {"https://named.example/feed": 6})
    with db.connection_context(), db.atomic():
        store.set_attribution("did:plc:s3", "carol.example", True)
    opt_out_and_read_the_answer(page_app, "did:plc:s3")
    with db.connection_context():
        assert db.execute_sql("SELECT count(*) FROM net_attribution").fetchone()[0] == 0


def test_an_account_that_opted_out_cannot_turn_attribution_on(page_app):
    page_app.extensions["feather.current_user"] = lambda: {"did": "did:plc:s1", "handle": "bob.example"}
    client = page_app.test_client()
    token = csrf(client, "/network/attribution")  # the form, opened before opting out in another tab
    with db.connection_context(), db.atomic():
        store.opt_out("did:plc:s1")
    assert client.post("/network/attribution", data={"attribution": "on", "csrf_token": token}).status_code == 303
    assert "You opted out of indexing, so there is nothing to attribute." in client.get(
        "/network/attribution").get_data(as_text=True)
    with db.connection_context():
        assert db.execute_sql("SELECT count(*) FROM net_attribution").fetchone()[0] == 0


def test_privacy_page_explains_the_catalogue_and_links_the_opt_out(app):
    html = app.test_client().get("/privacy").get_data(as_text=True)
    assert "Public records from the wider network" in html
    assert 'href="/network/opt-out"' in html and "at least 5 subscribers" in html
    assert 'href="/privacy"' in app.test_client().get("/").get_data(as_text=True)  # from the landing footer


def test_network_is_linked_only_from_about_and_only_when_on(make_app):
    off = make_app().test_client()
    assert 'href="/network"' not in off.get("/about").get_data(as_text=True)
    on = make_app(FEATHERREADER_NETWORK_PAGE=True).test_client()
    assert 'href="/network"' in on.get("/about").get_data(as_text=True)
    assert 'href="/network"' not in on.get("/").get_data(as_text=True)


def test_the_count_api_refuses_private_urls(page_app):
    resp = page_app.test_client().get("/api/network/count?url=https://example.com/feed?token=abcdefgh12")
    assert (resp.status_code, resp.json["error"]) == (400, "InvalidRequest")


def test_the_fallback_limiter_allows_the_limit_per_address_per_window():
    from feather.network.consent import RateLimiter

    now = [0.0]
    limiter = RateLimiter(2, window=300, clock=lambda: now[0])
    assert [limiter.allow("1.2.3.4") for _ in range(3)] == [True, True, False]
    assert limiter.allow("5.6.7.8") is True
    now[0] = 301
    assert limiter.allow("1.2.3.4") is True


def sign_in(app, client, did="did:plc:viewer"):
    """A real signed-in browser: a session row and its cookie (permanent, so Flask would refresh it)."""
    import hashlib
    import time

    sid = "test-session-id"
    with db.connection_context():
        sql.execute("INSERT INTO auth_web_session (id_hash, did, created_at, expires_at) VALUES (?,?,?,?)"
                    " ON CONFLICT (id_hash) DO NOTHING",
                    (hashlib.sha256(sid.encode()).hexdigest(), did, int(time.time()), int(time.time()) + 3600))
    with client.session_transaction() as sess:
        sess.permanent = True
        sess["sid"] = sid
        sess["_flashes"] = [("ok", f"Done. {did} is opted out: 4 records")]


def test_the_page_and_the_count_are_the_same_bytes_for_a_signed_in_viewer_with_a_pending_flash(page_app):
    seed(page_app, {"https://same.example/feed": 5})
    with db.connection_context(), db.atomic():
        store.set_attribution("did:plc:s2", "dana.example", True)
    stranger, member = page_app.test_client(), page_app.test_client()
    sign_in(page_app, member)
    assert "Sign out" in member.get("/about").get_data(as_text=True)  # really signed in elsewhere
    sign_in(page_app, member)  # /about consumed the flash: plant it again
    for path in ("/network", "/api/network/count?url=https://same.example/feed"):
        a, b = stranger.get(path), member.get(path)
        assert (b.status_code, b.data, sorted(b.headers.items())) == (a.status_code, a.data, sorted(a.headers.items()))
        assert b.headers["Cache-Control"] == "public, max-age=300"
        assert "Set-Cookie" not in b.headers and "Vary" not in b.headers
    assert b"did:plc:viewer" not in member.get("/network").data and b"csrf_token" not in member.get("/network").data
    assert "Done. did:plc:viewer" in member.get("/about").get_data(as_text=True)  # the flash waited for its page


def test_no_other_page_is_marked_public(page_app):
    client = page_app.test_client()
    sign_in(page_app, client)
    paths = [r.rule for r in page_app.url_map.iter_rules()
             if "GET" in r.methods and not r.arguments and not r.rule.startswith(("/static", "/admin", "/demo"))]
    query = {"/api/network/count": "?url=https://example.com/feed"}
    public = sorted(p for p in paths if "public" in (client.get(p + query.get(p, "")).headers.get("Cache-Control") or ""))
    assert public == ["/api/network/count", "/network"]


def test_a_name_is_shown_only_while_its_handle_is_freshly_verified(page_app, monkeypatch):
    from feather.jetstream.events import IdentityEvent
    from feather.network import names

    seed(page_app, {"https://named.example/feed": 5})
    with db.connection_context(), db.atomic():
        store.set_attribution("did:plc:s3", "carol.example", True)
    assert "including carol.example" in page_app.test_client().get("/network").get_data(as_text=True)
    settings = page_app.config["FEATHER"].as_dict()
    from feather.config import Settings

    (sub,) = subscriptions(Settings({**settings, "FEATHERREADER_NETWORK_INDEX": True}))
    with db.connection_context():  # carol's handle changes hands
        jstore.apply_batch(sub, [IdentityEvent("did:plc:s3", T + 99, "carol.example", None)], None)
    html = page_app.test_client().get("/network").get_data(as_text=True)
    assert "including did:plc:s3" in html and "carol.example" not in html

    class Resolver:
        def __init__(self, handle):
            self.handle, self.asked = handle, []

        def resolve_identity(self, did):
            self.asked.append(did)
            return type("Identity", (), {"handle": self.handle})()

    now = sql.now_us()
    with db.connection_context():
        resolver = Resolver("carol.new.example")
        assert names.refresh(resolver, now) == 1 and resolver.asked == ["did:plc:s3"]
        assert names.refresh(Resolver("x"), now + 1) == 0  # checked: not again for a day
    assert "including carol.new.example" in page_app.test_client().get("/network").get_data(as_text=True)
    monkeypatch.setattr(sql, "now_us", lambda: now + names.FRESH_US + 1)  # checks failed for two days
    assert "including did:plc:s3" in page_app.test_client().get("/network").get_data(as_text=True)
