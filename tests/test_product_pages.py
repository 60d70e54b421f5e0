"""Issue 18: a person can find their way around: the navigation, a home that leads somewhere, errors that help."""
from __future__ import annotations

import re


from tests.test_sync_kit import ALICE
from tests.test_sync_views import sign_in, world  # noqa: F401


def nav(html: str) -> list[tuple[str, str]]:
    block = re.search(r'<nav class="main-nav" aria-label="Main">(.*?)</nav>', html, re.S).group(1)
    return re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', block)


def session_block(html: str) -> str:
    return re.search(r'<div class="session">(.*?)</div>\s*</header>', html, re.S).group(1)


def test_the_navigation_links_the_features_this_instance_serves_on_every_page(client):
    for path in ("/", "/about", "/privacy", "/sync", "/login", "/network/opt-out"):
        assert nav(client.get(path).get_data(as_text=True)) == [
            ("/", "Home"), ("/timeline", "Timeline"), ("/sync", "Sync"), ("/privacy", "Privacy")], path


def test_the_current_page_is_marked_in_the_navigation(client):
    html = client.get("/sync").get_data(as_text=True)
    assert re.findall(r'<a href="([^"]+)" aria-current="page">', html) == ["/sync"]


def test_the_owners_sync_pages_mark_sync_in_the_navigation_but_their_own_page_does_not(world):
    app, client, _ = world
    sign_in(app, client)
    html = client.get("/u/alice.test/social-graph-sync").get_data(as_text=True)
    assert re.findall(r'<a href="([^"]+)" aria-current="page">', nav_html(html)) == ["/sync"]
    assert re.findall(r'<a href="([^"]+)" aria-current="page">', nav_html(client.get("/u/alice.test").get_data(
        as_text=True))) == []


def nav_html(html: str) -> str:
    return re.search(r'<nav class="main-nav" aria-label="Main">(.*?)</nav>', html, re.S).group(1)


def test_the_timeline_entry_is_there_only_while_the_timeline_page_is(make_app):
    app = make_app()
    assert ("/timeline", "Timeline") in nav(app.test_client().get("/").get_data(as_text=True))
    app.view_functions.pop("timeline.page")  # an instance without the timeline page
    assert nav(app.test_client().get("/").get_data(as_text=True)) == [
        ("/", "Home"), ("/sync", "Sync"), ("/privacy", "Privacy")]


def test_sync_leaves_the_navigation_when_the_instance_does_not_offer_it(make_app):
    client = make_app(NSID_ALLOWLIST="app.bsky.*").test_client()
    # The public page still explains why; the navigation keeps the link, the page says "not offered".
    assert ("/sync", "Sync") in nav(client.get("/").get_data(as_text=True))


def test_the_catalogue_is_never_in_the_navigation_or_on_home_only_on_about(make_app):
    client = make_app(FEATHERREADER_NETWORK_PAGE=True).test_client()
    home = client.get("/").get_data(as_text=True)
    assert 'href="/network"' not in home
    assert 'href="/network"' in client.get("/about").get_data(as_text=True)


def test_signed_out_the_header_offers_sign_in_back_to_this_page(client):
    assert 'href="/login?next=/privacy"' in session_block(client.get("/privacy").get_data(as_text=True))
    assert 'href="/login?next=/sync?x%3D1"' in session_block(client.get("/sync?x=1").get_data(as_text=True))
    login = session_block(client.get("/login?next=/about").get_data(as_text=True))
    assert 'href="/login"' in login  # not a sign-in that returns to the sign-in page


def test_signed_in_the_handle_links_to_the_persons_page(world):
    app, client, _ = world
    sign_in(app, client)
    block = session_block(client.get("/about").get_data(as_text=True))
    assert '<a class="account" href="/u/alice.test">@alice.test</a>' in block
    assert ">Sign out</button>" in block


def test_signed_out_home_explains_the_features_and_leads_to_sign_in_sync_and_the_catalogue_page(client):
    html = client.get("/").get_data(as_text=True)
    assert re.findall(r"<h2 id=\"home-[a-z]+\">([^<]+)</h2>", html) == [
        "Timelines", "Follow-graph sync", "The network catalogue"]
    for href in ('href="/login?next=/"', 'href="/sync"', 'href="/about"', 'href="/network/opt-out"'):
        assert href in html


def test_signed_in_home_is_a_dashboard_of_timeline_sync_and_catalogue(world):
    from feather.db import current_dialect, db
    from feather.feeds import config_for
    from feather.feeds.store.records import store
    from feather.feeds.store.schema import ensure

    app, client, _ = world
    sign_in(app, client)
    config = config_for(app.config["FEATHER"])
    post = config.collections["post"]
    with app.app_context(), db.connection_context():
        ensure(config)
        uri = "at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaa22"
        store(post, uri=uri, did="did:plc:bob", rkey="3kaaaaaaaaa22", cid="bafy", record={"text": "hello from bob"},
              time_us=1_767_225_600_000_000)
        db.execute_sql(current_dialect().q("INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?)"),
                       (ALICE, uri, "app.bsky.feed.post", 1_767_225_600_000_000))
    html = client.get("/").get_data(as_text=True)
    assert "<h1>Welcome back, @alice.test</h1>" in html
    assert re.findall(r"<h2 id=\"home-[a-z]+\">([^<]+)</h2>", html) == [
        "Your timeline", "Graph sync", "The network catalogue"]
    assert re.search(r'<span class="who">did:plc:bob</span> <time class="muted" datetime="2026-01-01T00:00:00Z">'
                     r"2026-01-01 00:00 UTC</time>\s*<p>hello from bob</p>", html)
    assert '<span class="badge">Off</span>' in html and 'href="/u/alice.test/social-graph-sync">Set up graph sync' in html
    assert '<span class="badge">Anonymous</span>' in html


def test_a_missing_page_is_a_friendly_404_and_a_wrong_method_a_friendly_405(client):
    r = client.get("/no-such-page")
    html = r.get_data(as_text=True)
    assert r.status_code == 404 and "<h1>Page not found</h1>" in html
    assert "There is nothing at this address. It may have been mistyped, or what was here has gone." in html
    assert "requested URL was not found" not in html
    r = client.post("/about", data={})
    assert r.status_code in (400, 405)  # the CSRF check may answer first; without it, a 405
    r = client.put("/about")
    assert r.status_code == 405 and "<h1>Not something this page does</h1>" in r.get_data(as_text=True)


def test_api_errors_are_written_for_scripts(client):
    assert client.get("/api/nope").json == {
        "error": "NotFound",
        "message": "No such endpoint or resource. Check the path against the API reference, docs/api.md in Feather's source."}
    r = client.put("/api/session")
    assert (r.status_code, r.json) == (405, {
        "error": "MethodNotAllowed", "message": "This endpoint does not accept PUT. Allowed: DELETE, GET, POST."})


def test_unknown_users_are_404_and_known_ones_have_a_page(world):
    app, client, _ = world
    r = client.get("/u/does-not-exist.example")
    assert r.status_code == 404
    assert "Nobody called does-not-exist.example uses this Feather server." in r.get_data(as_text=True)
    sign_in(app, app.test_client())  # alice signed in here once
    assert client.get("/u/alice.test").status_code == 200


def test_the_own_page_puts_the_h1_before_any_h2(world):
    app, client, _ = world
    sign_in(app, client)
    html = client.get("/u/alice.test").get_data(as_text=True)
    assert re.findall(r"<h([12])", html)[:2] == ["1", "2"]


def test_signed_out_network_me_leads_to_sign_in_and_back(make_app):
    r = make_app(FEATHERREADER_NETWORK_PAGE=True).test_client().get("/network/me")
    assert (r.status_code, r.headers["Location"]) == (303, "/login?next=/network/me")


def test_an_expired_sign_in_form_comes_back_with_what_was_typed_and_one_sentence(client):
    r = client.post("/login", data={"identifier": "alice.example.com", "next": "/sync", "csrf_token": "stale"})
    html = r.get_data(as_text=True)
    assert r.status_code == 400
    assert 'id="login-error">This form had expired, so nothing was sent. Check it and send it again.</p>' in html
    assert re.search(r'<input id="identifier" name="identifier" value="alice.example.com"[^>]*aria-invalid="true" '
                     r'aria-describedby="login-error"', html)
    assert '<input type="hidden" name="next" value="/sync">' in html
    assert re.search(r'name="csrf_token" value="([^"]+)"', html).group(1) != "stale"  # a fresh token to send with


def test_an_expired_app_password_form_keeps_the_handle_but_never_echoes_the_password(make_app):
    client = make_app(FEATHERREADER_ALLOW_APP_PASSWORDS=True).test_client()
    r = client.post("/login/password", data={"identifier": "bob.example.com", "password": "wxyz-wxyz-wxyz-wxyz"})
    html = r.get_data(as_text=True)
    assert r.status_code == 400 and "wxyz-wxyz-wxyz-wxyz" not in html
    assert re.search(r'<input id="pw-identifier" name="identifier" value="bob.example.com"[^>]*aria-invalid="true"', html)


def test_an_expired_opt_out_form_comes_back_with_the_handle(make_app):
    client = make_app().test_client()
    r = client.post("/network/opt-out", data={"handle": "carol.example.com"})
    html = r.get_data(as_text=True)
    assert r.status_code == 400
    assert re.search(r'<input id="handle" name="handle" type="text" value="carol.example.com"', html)
    assert "This form had expired, so nothing was sent." in html


def test_an_expired_button_form_shows_its_page_again_and_does_nothing(world):
    from tests.test_sync_views import sync_rows

    app, client, _ = world
    sign_in(app, client)
    r = client.post("/u/alice.test/social-graph-sync", data={"action": "pause", "csrf_token": "stale"})
    html = r.get_data(as_text=True)
    assert r.status_code == 400 and "<h1>Social graph sync</h1>" in html
    assert "This form had expired, so nothing was sent. Check it and send it again." in html
    assert sync_rows(app, "sync_sets") == []


def test_the_skip_link_leads_to_the_main_content(client):
    html = client.get("/").get_data(as_text=True)
    assert html.index('<a class="skip-link" href="#content">Skip to the content</a>') < html.index("<header")
    assert '<main id="content" tabindex="-1">' in html


def test_an_expired_attribution_form_changes_nothing(make_app):
    from feather.db import db
    from feather.network import store

    app = make_app(FEATHERREADER_NETWORK_PAGE=True)
    app.extensions["feather.current_user"] = lambda: {"did": ALICE, "handle": "alice.test"}
    r = app.test_client().post("/network/attribution", data={"attribution": "on", "csrf_token": "stale"})
    assert r.status_code == 400
    assert "This form had expired, so nothing was sent. Check it and send it again." in r.get_data(as_text=True)
    with app.app_context(), db.connection_context():
        assert store.is_attributed(ALICE) is False


def test_home_shows_the_five_newest_timeline_entries_each_cut_at_280_characters(world):
    from feather.db import current_dialect, db
    from feather.feeds import config_for
    from feather.feeds.store.records import store
    from feather.feeds.store.schema import ensure

    app, client, _ = world
    sign_in(app, client)
    config = config_for(app.config["FEATHER"])
    with app.app_context(), db.connection_context():
        ensure(config)
        for i in range(7):
            uri = f"at://did:plc:bob/app.bsky.feed.post/3kaaaaaaaaa{i}2"
            store(config.collections["post"], uri=uri, did="did:plc:bob", rkey=f"3kaaaaaaaaa{i}2", cid="bafy",
                  record={"text": f"post {i} " + "x" * 300}, time_us=1_767_225_600_000_000 + i * 60_000_000)
            db.execute_sql(current_dialect().q(
                "INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?)"),
                (ALICE, uri, "app.bsky.feed.post", 1_767_225_600_000_000 + i * 60_000_000))
    html = client.get("/").get_data(as_text=True)
    shown = re.findall(r"<p>(post \d x*)</p>", html)
    assert [s[:6] for s in shown] == ["post 6", "post 5", "post 4", "post 3", "post 2"]
    assert {len(s) for s in shown} == {280}


def test_the_home_timeline_panel_names_authors_as_the_timeline_page_does(world):
    from feather.db import current_dialect, db
    from feather.feeds import config_for
    from feather.feeds.store.records import store
    from feather.feeds.store.schema import ensure

    app, client, _ = world
    sign_in(app, client)
    config = config_for(app.config["FEATHER"])
    q = current_dialect().q
    authors = {"did:plc:bob": ("bob.test", "Bob"), "did:plc:carol": ("carol.test", None),
               "did:plc:dave": (None, "Dave"), "did:plc:erin": (None, None)}
    with app.app_context(), db.connection_context():
        ensure(config)
        for i, (did, (handle, display)) in enumerate(authors.items()):
            uri, t = f"at://{did}/app.bsky.feed.post/3kaaaaaaaaa{i}2", 1_767_225_600_000_000 - i * 60_000_000
            store(config.collections["post"], uri=uri, did=did, rkey=f"3kaaaaaaaaa{i}2", cid="bafy",
                  record={"text": f"post by {did}"}, time_us=t)
            db.execute_sql(q("INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?)"),
                           (ALICE, uri, "app.bsky.feed.post", t))
            if handle:
                db.execute_sql(q("INSERT INTO feed_identities (did, handle, handle_checked_us) VALUES (?, ?, 1)"),
                               (did, handle))
            if display:
                store(config.collections["profile"], uri=f"at://{did}/app.bsky.actor.profile/self", did=did,
                      rkey="self", cid="bafy", record={"displayName": display}, time_us=1)
    html = client.get("/").get_data(as_text=True)
    assert re.findall(r'<span class="who">(.*?)</span>', html) == [
        '<strong class="name">Bob</strong> @bob.test', "@carol.test", '<strong class="name">Dave</strong>',
        "did:plc:erin"]  # the DID only for an author the store cannot name


def test_the_home_sync_panel_needs_two_offered_apps(make_app):
    headings = {}
    for allow in ("app.bsky.*", "app.bsky.*,sh.tangled.*"):
        app = make_app(NSID_ALLOWLIST=allow)
        client = app.test_client()
        sign_in(app, client)
        headings[allow] = re.findall(r"<h2 id=\"home-[a-z]+\">([^<]+)</h2>", client.get("/").get_data(as_text=True))
    assert headings == {"app.bsky.*": ["Your timeline", "The network catalogue"],
                        "app.bsky.*,sh.tangled.*": ["Your timeline", "Graph sync", "The network catalogue"]}


def test_a_405_names_the_methods_the_address_accepts_in_the_allow_header(client):
    page = client.put("/about")
    api = client.put("/api/session")
    assert (page.status_code, api.status_code) == (405, 405)
    assert sorted(page.headers["Allow"].split(", ")) == ["GET", "HEAD", "OPTIONS"]
    assert sorted(api.headers["Allow"].split(", ")) == ["DELETE", "GET", "HEAD", "OPTIONS", "POST"]
