"""Issue 18: the person's data: what the privacy page lists, the JSON export, and "delete my data"
(a confirmation page, then every feature's rows for that person gone and the session revoked at their server)."""
from __future__ import annotations

import json
import re

from tests.test_sync_kit import ALICE, BOB, CAROL
from tests.test_sync_views import csrf, in_db, sign_in, world  # noqa: F401

T = 1_767_225_600  # 2026-01-01T00:00:00Z
FEED = "https://blog.example.com/feed.xml"


def seed_everything(app, did=ALICE, handle="alice.test"):
    """One row of every kind a feature keeps about `did`: a timeline, a sync set with its mirror, queue,
    waiting list and activity, catalogue rows and the attribution choice."""
    from feather.db import current_dialect
    from feather.feeds.store.served import serve
    from feather.network import store as net
    from feather.sync import queue, store as sync

    def seed():
        q = current_dialect().q
        from feather.db import db

        serve(did, "signed-in")
        db.execute_sql(q("UPDATE feed_actors SET added_us = ? WHERE did = ?"), (T * 1_000_000, did))
        db.execute_sql(q("INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?)"),
                       (did, f"at://{BOB}/app.bsky.feed.post/3kaaaaaaaaa22", "app.bsky.feed.post", T * 1_000_000))
        sync.set_apps(did, ["bluesky", "tangled"], T)
        queue.upsert_mirror(did, "bluesky", "3kfollow00001", BOB, T)
        queue.enqueue_follow(did, "tangled", BOB, "backfill", T)
        queue.add_waiting(did, "tangled", CAROL, T, T + 3600)
        sync.record_activity(did, T, "tangled", "follow", BOB, 3, None)
        net.upsert(did, "3ksub00000001", FEED, "2026-01-01T00:00:00Z", T * 1_000_000, max_per_did=50, touched=set())
        net.refresh_rollup({FEED})
        net.set_attribution(did, handle, True)
        db.execute_sql(q("INSERT INTO feed_generators (uri, publisher_did, rkey, feed, display_name, published_us)"
                         " VALUES (?, ?, 'timeline', 'timeline', 'Following', ?)"),
                       (f"at://{did}/app.bsky.feed.generator/timeline", did, T * 1_000_000))
    in_db(app, seed)


def held_section(html: str) -> dict[str, list[str]]:
    block = re.search(r'<dl class="held">(.*?)</dl>', html, re.S).group(1)
    out, current = {}, None
    for tag, text in re.findall(r"<(dt|dd)[^>]*>(.*?)</\1>", block, re.S):
        if tag == "dt":
            current = out.setdefault(text, [])
        else:
            current.append(text)
    return out


def count_rows(app, did):
    from feather.db import current_dialect, db

    tables = {"feed_actors": "did", "feed_items": "actor", "sync_sets": "owner_did", "sync_follow_mirror": "owner_did",
              "sync_queue": "owner_did", "sync_waiting": "owner_did", "sync_activity": "owner_did",
              "net_subscription": "did", "net_attribution": "did", "auth_grant": "did", "auth_web_session": "did",
              "feed_generators": "publisher_did"}
    return in_db(app, lambda: {t: db.execute_sql(current_dialect().q(f"SELECT count(*) FROM {t} WHERE {c} = ?"),
                                                 (did,)).fetchone()[0] for t, c in tables.items()})


def test_the_privacy_page_lists_everything_held_about_the_signed_in_person(world):
    app, client, _ = world
    sign_in(app, client)
    seed_everything(app)
    held = held_section(client.get("/privacy").get_data(as_text=True))
    assert held == {
        "Timelines": ["That your timeline is kept on this server (since 2026-01-01).",
                      "Your timeline: 1 entry, each a link to a public post by someone you follow and its time."],
        "Graph sync": ["Your choice of apps (bluesky, tangled) and whether sync is on (it is off).",
                       "A copy of 1 follow record on those apps (who you follow; public records).",
                       "1 follow or unfollow to write or already written (the queue).",
                       "1 follow waiting for someone to make a profile on an app.",
                       "1 line of activity log (what was written, when, and any error)."],
        "The network catalogue": [
            "1 public RSS subscription record of yours (feed URL, record key and date), counted anonymously in the "
            "catalogue.",
            "Your choice to be named next to the feeds you subscribe to, with your handle."],
        "Signing in": [
            "Your DID and handle (@alice.test), your server&#39;s address (http://127.0.0.1:9) and an app-password "
            "session with your server, its tokens encrypted, since " + held_since(app) + ".",
            "1 signed-in browser session (a random identifier and its dates; no address, no device details)."],
    }


def test_the_privacy_page_lists_the_features_in_their_declared_order_sign_in_last(world):
    app, client, _ = world
    sign_in(app, client)
    seed_everything(app)
    held = held_section(client.get("/privacy").get_data(as_text=True))
    assert list(held) == ["Timelines", "Graph sync", "The network catalogue", "Signing in"]  # order 10, 20, 30, 100


def held_since(app):
    import time

    from feather.db import db

    created = in_db(app, lambda: db.execute_sql("SELECT created_at FROM auth_grant").fetchone()[0])
    return time.strftime("%Y-%m-%d", time.gmtime(created))


def test_signed_out_the_privacy_page_offers_sign_in_and_lists_no_one(client):
    html = client.get("/privacy").get_data(as_text=True)
    assert '<dl class="held">' not in html and 'href="/login?next=/privacy"' in html


def test_the_export_is_a_json_download_of_the_same_without_tokens(world):
    app, client, _ = world
    sign_in(app, client)
    seed_everything(app)
    r = client.get("/privacy/export")
    assert r.headers["Content-Disposition"] == 'attachment; filename="feather-my-data.json"'
    assert r.headers["Cache-Control"] == "no-store"
    body = json.loads(r.data)
    assert (body["did"], body["handle"]) == (ALICE, "alice.test")
    assert body["timelines"]["timeline"] == [
        {"uri": f"at://{BOB}/app.bsky.feed.post/3kaaaaaaaaa22", "collection": "app.bsky.feed.post",
         "time_us": T * 1_000_000}]
    assert body["sync"]["sets"][0]["apps"] == "bluesky,tangled"
    assert [m["subject"] for m in body["sync"]["follow_mirror"]] == [BOB]
    assert [(a["app"], a["kind"], a["subject"]) for a in body["sync"]["activity"]] == [("tangled", "follow", BOB)]
    assert body["network"] == {"indexed_records": [{"rkey": "3ksub00000001", "feed_url": FEED,
                                                    "created_at": "2026-01-01T00:00:00Z"}],
                               "attributed": True, "opted_out": False}
    assert body["sign_in"]["grant"]["tokens"] == "held encrypted; not exported (they are secrets, not your data)"
    assert '"a"' not in r.get_data(as_text=True).replace('"access"', "")  # the stored access token is "a"


def test_delete_asks_first_and_a_post_without_confirm_deletes_nothing(world):
    app, client, _ = world
    sign_in(app, client)
    seed_everything(app)
    before = count_rows(app, ALICE)
    page = client.get("/privacy/delete").get_data(as_text=True)
    assert "<h1>Delete your data</h1>" in page and '<input type="hidden" name="confirm" value="1">' in page
    r = client.post("/privacy/delete", data={"csrf_token": csrf(client)})
    assert r.status_code == 200 and "<h1>Delete your data</h1>" in r.get_data(as_text=True)
    assert count_rows(app, ALICE) == before


def test_delete_removes_every_row_about_the_person_revokes_at_their_server_and_signs_out(world, monkeypatch):
    from feather.auth.service import AuthService

    app, client, _ = world
    sign_in(app, client)
    seed_everything(app)
    other = app.test_client()
    sign_in(app, other, did=BOB, handle="bob.test")
    seed_everything(app, did=BOB, handle="bob.test")
    revoked = []
    monkeypatch.setattr(AuthService, "revoke_everywhere", lambda self, did: revoked.append(did))
    r = client.post("/privacy/delete", data={"confirm": "1", "csrf_token": csrf(client)})
    assert (r.status_code, r.headers["Location"]) == (303, "/")
    assert revoked == [ALICE]
    assert set(count_rows(app, ALICE).values()) == {0}
    assert set(count_rows(app, BOB).values()) == {1}  # nobody else's data moves
    assert client.get("/api/session").json["signedIn"] is False
    assert "Your data on this server is deleted and you are signed out." in client.get("/").get_data(as_text=True)


def test_the_catalogue_count_drops_with_the_deleted_rows_and_an_opt_out_stays(world, monkeypatch):
    from feather.auth.service import AuthService
    from feather.db import db
    from feather.network import store as net

    app, client, _ = world
    sign_in(app, client)
    seed_everything(app)
    in_db(app, lambda: net.opt_out(BOB))
    monkeypatch.setattr(AuthService, "revoke_everywhere", lambda self, did: None)
    subscribers = "SELECT subscriber_count FROM net_feed_rollup"
    assert in_db(app, lambda: db.execute_sql(subscribers).fetchall()) == [(1,)]
    client.post("/privacy/delete", data={"confirm": "1", "csrf_token": csrf(client)})
    assert in_db(app, lambda: db.execute_sql(subscribers).fetchall()) == []
    assert in_db(app, lambda: net.is_opted_out(BOB)) is True


def test_revoking_an_oauth_session_revokes_both_tokens_at_the_authorization_server(make_app, monkeypatch):
    from feather.auth import service
    from feather.auth.grants import Grant
    from feather.auth.service import AuthService

    app = make_app()
    auth = service(app)
    calls = []

    class OAuth:
        def server(self, issuer):
            calls.append(("server", issuer))
            return "the-server"

        def revoke(self, server, key, nonce, token, kid):
            calls.append(("revoke", server, token))

    monkeypatch.setattr(AuthService, "oauth", property(lambda self: OAuth()))

    def run():
        auth.grants.save(Grant(did=ALICE, kind="oauth", handle="alice.test", pds_url="https://pds.example",
                               issuer="https://as.example", scope="atproto", access="ACCESS", refresh="REFRESH",
                               expires_at=2_000_000_000, dpop_key=None, as_nonce=None, pds_nonce=None,
                               client_kid=None))
        auth.revoke_everywhere(ALICE)
    in_db(app, run)
    assert calls == [("server", "https://as.example"), ("revoke", "the-server", "REFRESH"),
                     ("revoke", "the-server", "ACCESS")]


def test_a_server_that_cannot_be_reached_does_not_keep_the_rows(world, monkeypatch):
    from feather.auth.service import AuthService

    app, client, _ = world
    sign_in(app, client)

    def down(self, did):
        raise OSError("connection refused")

    monkeypatch.setattr(AuthService, "revoke_everywhere", down)
    r = client.post("/privacy/delete", data={"confirm": "1", "csrf_token": csrf(client)})
    assert r.status_code == 303
    assert count_rows(app, ALICE)["auth_grant"] == 0


def test_the_export_lists_the_timeline_newest_first_with_its_backfills_and_the_waiting_follows(world):
    from feather.db import current_dialect, db

    app, client, _ = world
    sign_in(app, client)
    seed_everything(app)

    def more():
        q = current_dialect().q
        db.execute_sql(q("INSERT INTO feed_items (actor, uri, collection, time_us) VALUES (?, ?, ?, ?)"),
                       (ALICE, f"at://{BOB}/app.bsky.feed.post/3kaaaaaaaaa33", "app.bsky.feed.post",
                        (T + 60) * 1_000_000))
        db.execute_sql(q("INSERT INTO feed_backfills (actor, feed, completed) VALUES (?, 'timeline', 1)"), (ALICE,))
    in_db(app, more)
    body = json.loads(client.get("/privacy/export").data)
    assert [e["uri"].rsplit("/", 1)[1] for e in body["timelines"]["timeline"]] == ["3kaaaaaaaaa33", "3kaaaaaaaaa22"]
    assert body["timelines"]["backfills"] == [{"feed": "timeline", "completed": True}]
    assert body["sync"]["waiting"] == [{"app": "tangled", "subject": CAROL, "since": T, "next_check_at": T + 3600}]


def test_delete_also_removes_the_backfill_bookkeeping_the_sync_lanes_and_the_persons_cached_name(world, monkeypatch):
    from feather.auth.service import AuthService
    from feather.db import current_dialect, db

    app, client, _ = world
    sign_in(app, client)
    seed_everything(app)
    kept = {"feed_backfills": "actor", "sync_lanes": "owner_did", "sync_people": "did"}

    def more():
        q = current_dialect().q
        db.execute_sql(q("INSERT INTO feed_backfills (actor, feed, completed) VALUES (?, 'timeline', 1)"), (ALICE,))
        db.execute_sql(q("INSERT INTO sync_lanes (owner_did, app) VALUES (?, 'tangled')"), (ALICE,))
        db.execute_sql(q("INSERT INTO sync_people (did, handle, wanted_at) VALUES (?, 'alice.test', ?)"), (ALICE, T))

    def counts():
        return {t: db.execute_sql(current_dialect().q(f"SELECT count(*) FROM {t} WHERE {c} = ?"),
                                  (ALICE,)).fetchone()[0] for t, c in kept.items()}
    in_db(app, more)
    assert in_db(app, counts) == {"feed_backfills": 1, "sync_lanes": 1, "sync_people": 1}
    monkeypatch.setattr(AuthService, "revoke_everywhere", lambda self, did: None)
    client.post("/privacy/delete", data={"confirm": "1", "csrf_token": csrf(client)})
    assert in_db(app, counts) == {"feed_backfills": 0, "sync_lanes": 0, "sync_people": 0}
