"""The graph-sync pages without JavaScript: plain forms, POST + 303, CSRF, consent, preview before any write.

Also the shared helpers for the sync API tests (signing in without a PDS, an in-memory PDS as the writer).
"""
from __future__ import annotations

import re
import secrets

import pytest

from tests.test_sync_kit import ALICE, BOB, BSKY, CAROL

from feather import sql

PAGE = "/u/alice.test/social-graph-sync"
TANGLED_PROFILE = "sh.tangled.actor.profile"
BSKY_PROFILE = "app.bsky.actor.profile"


def in_db(app, fn):
    """Run fn with a connection of its own: requests close theirs, so none is held across them."""
    from feather.db import db

    with app.app_context(), db.connection_context():
        return fn()


def sign_in(app, client, did=ALICE, handle="alice.test", kind="password", scope=None) -> None:
    """A grant and a browser session row, as feather/auth makes them at sign-in (no PDS needed)."""
    from feather.auth import service
    from feather.auth.grants import Grant
    from feather.auth.web import _hash

    sid = secrets.token_urlsafe(16)

    def store():
        service(app).grants.save(Grant(
            did=did, kind=kind, handle=handle, pds_url="http://127.0.0.1:9", issuer=None,
            scope=scope or ("com.atproto.appPass" if kind == "password" else "atproto"), access="a", refresh="r",
            expires_at=2_000_000_000, dpop_key=None, as_nonce=None, pds_nonce=None, client_kid=None))
        sql.execute("INSERT INTO auth_web_session (id_hash, did, created_at, expires_at) VALUES (?, ?, ?, ?)",
                    (_hash(sid), did, 1, 2_000_000_000))

    in_db(app, store)
    with client.session_transaction() as session:
        session["sid"] = sid


def csrf(client) -> str:
    return client.get("/api/session").json["csrfToken"]


@pytest.fixture
def world(make_app):
    """An app whose sync reads go to an in-memory PDS: alice follows bob and carol on Bluesky;
    bob has a Tangled profile, carol has none."""
    from feather.sync.follow_writer import install_writer
    from feather.sync.memory import MemoryPds

    app = make_app()
    pds = MemoryPds()
    install_writer(app, pds)
    pds.user_follow(ALICE, BSKY, BOB)
    pds.user_follow(ALICE, BSKY, CAROL)
    pds.add_profile(BOB, TANGLED_PROFILE)
    for did in (BOB, CAROL):
        pds.add_profile(did, BSKY_PROFILE)
    client = app.test_client()
    return app, client, pds


def sync_rows(app, table):
    return in_db(app, lambda: sql.rows(f"SELECT * FROM {table}"))


def test_public_page_describes_the_feature_and_the_safety_rule(client):
    r = client.get("/sync")
    assert r.status_code == 200
    body = r.get_data(as_text=True)
    for text in ("Social graph sync", "Bluesky", "Tangled", "Sifa", "Grain", "Semble",
                 "Only an unfollow you make deletes a follow.", "/api/sync"):
        assert text in body
    assert 'href="/login?next=/sync"' in body


def test_own_user_page_has_the_panel_and_others_do_not(world):
    app, client, _ = world
    assert "Manage social graph sync" not in client.get("/u/alice.test").get_data(as_text=True)
    sign_in(app, client)
    body = client.get("/u/alice.test").get_data(as_text=True)
    assert body.index("Social graph sync") < body.index("You are signed in as")  # the panel comes first
    assert f'href="{PAGE}"' in body and ALICE in body
    assert client.get("/u/bob.test").status_code == 404  # bob never signed in here: nobody's page
    bob = app.test_client()
    sign_in(app, bob, did=BOB, handle="bob.test")
    other = client.get("/u/bob.test").get_data(as_text=True)
    assert "Manage social graph sync" not in other and "@bob.test" in other


def test_owner_page_needs_sign_in_and_is_only_for_its_owner(world):
    app, client, _ = world
    r = client.get(PAGE)
    assert (r.status_code, r.headers["Location"]) == (303, "/login?next=/u/alice.test/social-graph-sync")
    sign_in(app, client)
    assert client.get("/u/bob.test/social-graph-sync").status_code == 403
    assert client.post("/u/bob.test/social-graph-sync", data={"action": "pause", "csrf_token": csrf(client)}
                       ).status_code == 403
    assert client.get(f"/u/{ALICE}/social-graph-sync").status_code == 200  # the DID works as the handle


def test_page_is_plain_html_every_post_form_carries_the_csrf_token_and_there_is_no_inline_script(world):
    app, client, _ = world
    sign_in(app, client)
    client.post(PAGE, data={"action": "enable", "confirm": "1", "apps": ["bluesky", "tangled"],
                            "csrf_token": csrf(client)})
    body = client.get(PAGE).get_data(as_text=True)
    forms = re.findall(r"<form[^>]*>.*?</form>", body, re.S)
    posts = [f for f in forms if 'method="post"' in f]
    assert len(posts) >= 2  # pause, sign out
    assert all('name="csrf_token"' in f for f in posts)
    assert '<form method="get" action="/u/alice.test/social-graph-sync/turn-off"' in body  # asks first
    assert re.findall(r"<script(?![^>]*\bsrc=)", body) == [] and " on" + "click=" not in body
    assert 'hx-get="/u/alice.test/social-graph-sync/progress"' in body  # the enhancement, polling the fragment


def test_preview_shows_what_enabling_writes_and_writes_nothing(world):
    app, client, pds = world
    sign_in(app, client)
    r = client.get(PAGE + "/preview?apps=bluesky&apps=tangled")
    assert r.status_code == 200
    body = r.get_data(as_text=True)
    assert "<tr><td>Tangled</td><td>0</td><td>1</td><td>1</td></tr>" in body
    assert "<tr><td>Bluesky</td><td>2</td><td>0</td><td>0</td></tr>" in body
    assert 'name="confirm" value="1"' in body
    assert sync_rows(app, "sync_queue") == [] and sync_rows(app, "sync_backfill_tasks") == []
    assert pds.writes == []


def test_enable_without_confirm_goes_to_the_preview_and_without_csrf_is_refused(world):
    app, client, _ = world
    sign_in(app, client)
    r = client.post(PAGE, data={"action": "enable", "apps": ["bluesky", "tangled"], "csrf_token": csrf(client)})
    assert (r.status_code, r.headers["Location"]) == (303, PAGE + "/preview?apps=bluesky%2Ctangled")
    r = client.post(PAGE, data={"action": "enable", "confirm": "1", "apps": ["bluesky", "tangled"]})
    assert r.status_code == 400 and b"This form had expired, so nothing was sent. Check it and send it again." in r.data
    assert sync_rows(app, "sync_sets") == []


def test_confirmed_enable_pause_resume_disable_each_redirect_back_to_the_page(world):
    from feather.sync import service

    app, client, _ = world
    sign_in(app, client)
    state = lambda: in_db(app, lambda: service.state(ALICE, app.config["FEATHER"]))  # noqa: E731
    token = csrf(client)
    r = client.post(PAGE, data={"action": "enable", "confirm": "1", "apps": ["bluesky", "tangled"],
                                "csrf_token": token})
    assert (r.status_code, r.headers["Location"]) == (303, PAGE)
    assert "Sync is on." in client.get(PAGE).get_data(as_text=True)
    assert (state()["enabled"], state()["apps"], state()["backfill"]) == (
        True, ["bluesky", "tangled"], {"listed": 0, "total": 2, "done": False})
    for action, expect in (("pause", (True, True)), ("resume", (True, False)), ("disable", (False, False))):
        r = client.post(PAGE, data={"action": action, "csrf_token": token, "confirm": "1"})
        assert (r.status_code, r.headers["Location"]) == (303, PAGE), action
        assert (state()["enabled"], state()["paused"]) == expect, action
    body = client.get(PAGE).get_data(as_text=True)
    said = re.findall(r"</time> (.*?)</li>", body)
    assert said == ["Sync turned off. Nothing already written was undone.", "Sync resumed.", "You paused sync.",
                    "Sync turned on for Bluesky and Tangled."]


def test_turning_sync_off_asks_on_a_page_of_its_own_first(world):
    from feather.sync import service

    app, client, _ = world
    sign_in(app, client)
    token = csrf(client)
    client.post(PAGE, data={"action": "enable", "confirm": "1", "apps": ["bluesky", "tangled"], "csrf_token": token})
    r = client.post(PAGE, data={"action": "disable", "csrf_token": token})  # no confirm=1: refused, asked
    assert (r.status_code, r.headers["Location"]) == (303, PAGE + "/turn-off")
    assert in_db(app, lambda: service.state(ALICE, app.config["FEATHER"])["enabled"]) is True
    body = client.get(PAGE + "/turn-off").get_data(as_text=True)
    assert "<h1>Turn sync off?</h1>" in body
    assert "Nothing more is written: no change is waiting to be written, and listing your follows stops." in body
    form = re.search(r'<form method="post" action="/u/alice.test/social-graph-sync">.*?</form>', body, re.S).group(0)
    assert 'name="confirm" value="1"' in form and 'name="csrf_token"' in form
    assert '<button type="submit" name="action" value="disable">Yes, turn sync off</button>' in form
    assert f'<a href="{PAGE}">Keep sync on</a>' in form
    r = client.post(PAGE, data={"action": "disable", "confirm": "1", "csrf_token": token})
    assert (r.status_code, r.headers["Location"]) == (303, PAGE)
    assert in_db(app, lambda: service.state(ALICE, app.config["FEATHER"])["enabled"]) is False
    r = client.get(PAGE + "/turn-off")  # nothing to confirm any more
    assert (r.status_code, r.headers["Location"]) == (303, PAGE)
    assert "Sync is already off." in client.get(PAGE).get_data(as_text=True)


def test_enable_asks_for_the_write_permission_first(world):
    app, client, _ = world
    sign_in(app, client, kind="oauth")  # granted only "atproto"
    r = client.post(PAGE, data={"action": "enable", "confirm": "1", "apps": ["bluesky", "tangled"],
                                "csrf_token": csrf(client)})
    assert r.status_code == 303
    location = r.headers["Location"]
    assert location.startswith("/oauth/consent?scope=repo%3Aapp.bsky.graph.follow%3Faction%3Dcreate%26action"
                               "%3Ddelete&scope=repo%3Ash.tangled.graph.follow%3Faction%3Dcreate%26action%3Ddelete"
                               "&next=%2Fu%2Falice.test%2Fsocial-graph-sync%2Fpreview%3Fapps%3Dbluesky%252Ctangled")
    assert sync_rows(app, "sync_sets") == []
    consent = client.get(location).get_data(as_text=True)
    assert "repo:sh.tangled.graph.follow?action=create&amp;action=delete" in consent
    # The preview says so before the owner presses the button.
    assert "will first ask you to allow" in client.get(PAGE + "/preview?apps=bluesky,tangled").get_data(as_text=True)


def test_granted_scopes_let_an_oauth_owner_enable(world):
    from feather.sync.service import write_scopes

    app, client, _ = world
    sign_in(app, client, kind="oauth", scope=" ".join(["atproto", *write_scopes(["bluesky", "tangled"])]))
    r = client.post(PAGE, data={"action": "enable", "confirm": "1", "apps": ["bluesky", "tangled"],
                                "csrf_token": csrf(client)})
    assert (r.status_code, r.headers["Location"]) == (303, PAGE)


def test_mistakes_come_back_as_a_flash_on_the_page(world):
    app, client, _ = world
    sign_in(app, client)
    token = csrf(client)
    r = client.post(PAGE, data={"action": "enable", "confirm": "1", "apps": ["bluesky"], "csrf_token": token})
    assert (r.status_code, r.headers["Location"]) == (303, PAGE)
    assert "Choose at least two apps to keep in sync." in client.get(PAGE).get_data(as_text=True)
    r = client.post(PAGE, data={"action": "pause", "csrf_token": token})
    assert "Sync is off, so there is nothing to pause or resume." in client.get(PAGE).get_data(as_text=True)
    r = client.get(PAGE + "/preview?apps=bluesky,myspace")
    assert r.status_code == 303
    assert "&#39;myspace&#39; is not an app this instance syncs" in client.get(PAGE).get_data(as_text=True)
    assert client.post(PAGE, data={"action": "explode", "csrf_token": token}).status_code == 400


def test_progress_fragment_polls_only_while_work_is_in_flight(world):
    from feather.sync import backfill, service

    app, client, pds = world
    sign_in(app, client)
    client.post(PAGE, data={"action": "enable", "confirm": "1", "apps": ["bluesky", "tangled"],
                            "csrf_token": csrf(client)})
    r = client.get(PAGE + "/progress")
    body = r.get_data(as_text=True)
    assert r.status_code == 200 and "<html" not in body and "hx-get" in body
    assert app_lines(body) == [("Bluesky", ["Listing", "0 follows listed so far", "To write", "Nothing waiting to be written."]),
                               ("Tangled", ["Listing", "0 follows listed so far", "To write", "Nothing waiting to be written."])]
    in_db(app, lambda: backfill.burst(pds, sql.now_s))
    body = client.get(PAGE + "/progress").get_data(as_text=True)
    assert app_lines(body) == [
        ("Bluesky", ["Listing", "2 follows listed", "To write", "Nothing waiting to be written."]),
        ("Tangled", ["Listing", "0 follows listed", "To write", "2 follows to write. Next write within a few seconds."])]
    assert "<strong>Next write (Tangled):</strong>\n    Next write within a few seconds." in body
    in_db(app, lambda: service.configure(ALICE, app.config["FEATHER"], sql.now_s(), paused=True))
    body = client.get(PAGE + "/progress").get_data(as_text=True)
    assert "hx-get" not in body and "You paused sync." in body


def app_lines(html: str) -> list[tuple[str, list[str]]]:
    """Each app's heading and its dt/dd texts, from the progress fragment."""
    out = []
    for name, dl in re.findall(r"<h3>(.*?)</h3>\s*<dl>(.*?)</dl>", html, re.S):
        out.append((name, [" ".join(t.split()) for t in re.findall(r"<d[td]>(.*?)</d[td]>", dl, re.S)]))
    return out


def test_the_page_names_people_shows_failures_and_no_did(world):
    from feather.sync import backfill
    from feather.sync.runner import Runner

    app, client, pds = world
    sign_in(app, client)
    client.get(PAGE + "/preview?apps=bluesky,tangled")  # remembers: 2 follows on Bluesky, 0 on Tangled
    client.post(PAGE, data={"action": "enable", "confirm": "1", "apps": ["bluesky", "tangled"],
                            "csrf_token": csrf(client)})
    assert "0 of about 2 follows listed" in client.get(PAGE + "/progress").get_data(as_text=True)
    in_db(app, lambda: backfill.burst(pds, sql.now_s))
    in_db(app, lambda: sql.execute("INSERT INTO sync_people (did, handle, display_name, wanted_at, fetched_at,"
                                   " next_fetch_at) VALUES (?, 'bob.test', 'Bob', 1, 1, 1)", (BOB,)))
    pds.faults.append("500")
    in_db(app, lambda: Runner(pds, app.config["FEATHER"]).tick(concurrent=False))
    from feather.sync.status import when

    before = sql.now_s()
    body = client.get(PAGE).get_data(as_text=True)
    after = sql.now_s()  # on a loaded machine the page may render a second or more after the try
    assert "did:plc:" not in body
    retry_at = in_db(app, lambda: sql.scalar("SELECT not_before FROM sync_queue WHERE subject = ?", (BOB,)))
    failure = "Could not follow Bob (@bob.test) on Tangled (try 1 of 5): internal error. Trying again at {}."
    rendered = {failure.format(when(retry_at, now)) for now in range(before, after + 1)}
    problems = re.search(r'<div class="problems">.*?</div>', body, re.S).group(0)
    [shown] = re.findall(r"<li>(.*?)</li>", problems)
    assert shown in rendered, (shown, rendered)
    assert re.findall(r"</time> (.*?)</li>", body)[:2] == [shown, "Finished listing your follows: 2 follows to write."]


def test_pages_404_when_the_instance_offers_fewer_than_two_apps(make_app):
    app = make_app(NSID_ALLOWLIST="app.bsky.*")
    client = app.test_client()
    sign_in(app, client)
    assert client.get(PAGE).status_code == 404
    assert "does not offer graph sync" in client.get("/sync").get_data(as_text=True)
    assert "Manage social graph sync" not in client.get("/u/alice.test").get_data(as_text=True)


def test_an_unfollow_that_failed_for_good_is_counted_as_a_change_not_a_follow(world):
    app, client, pds = world
    sign_in(app, client)
    client.post(PAGE, data={"action": "enable", "confirm": "1", "apps": ["bluesky", "tangled"],
                            "csrf_token": csrf(client)})
    now = sql.now_s()
    in_db(app, lambda: sql.execute(
        "INSERT INTO sync_queue (owner_did, app, kind, subject, rkey, origin, status, attempts, last_error,"
        " created_at, updated_at) VALUES (?, 'tangled', 'unfollow', ?, '3kfailedunf22', 'event', 'failed', 5,"
        " 'internal error', ?, ?)", (ALICE, BOB, now, now)))
    body = client.get(PAGE + "/progress").get_data(as_text=True)
    assert app_lines(body)[1] == ("Tangled", ["Listing", "0 follows listed so far", "To write",
                                              "Nothing waiting to be written.", "Failed",
                                              "1 change could not be written"])
