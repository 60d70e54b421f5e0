"""The graph-sync JSON API: the contract in docs/api.md ("Graph sync"), with exact error bodies."""
from __future__ import annotations

from tests.test_sync_kit import ALICE, BOB, CAROL
from tests.test_sync_views import csrf, in_db, sign_in, sync_rows, world  # noqa: F401

from feather import sql

SIGNED_OUT = {"error": "AuthenticationRequired",
              "message": "Sign in first: POST /api/session with an app password, or sign in on the web."}
BAD_CSRF = {"error": "InvalidCsrfToken",
            "message": "Missing or invalid CSRF token. Send the header X-CSRF-Token with the csrfToken from "
                       "GET /api/session (with the same session cookie)."}
APPS = ["bluesky", "tangled", "sifa", "grain", "semble"]


def post(client, body, token=None):
    return client.post("/api/sync", json=body, headers={"X-CSRF-Token": token or csrf(client)})


def test_signed_out_calls_are_401_before_anything_else(client):
    for r in (client.get("/api/sync"), client.get("/api/sync/preview?apps=bluesky,tangled"),
              client.get("/api/sync/activity"), client.post("/api/sync", json={"enabled": True})):
        assert (r.status_code, r.json) == (401, SIGNED_OUT)


def test_state_of_a_new_owner(world):
    app, client, _ = world
    sign_in(app, client)
    r = client.get("/api/sync")
    assert (r.status_code, r.json) == (200, {
        "enabled": False, "paused": False, "pause_reason": None, "apps": [], "available_apps": APPS,
        "backfill": {"listed": 0, "total": 0, "done": False}, "queue": {"pending": 0, "done": 0, "failed": 0},
        "waiting": 0, "per_app": [], "next_write": None, "problems": []})
    assert sync_rows(app, "sync_sets") == []  # reading creates nothing


def test_state_changing_calls_need_the_csrf_header(world):
    app, client, _ = world
    sign_in(app, client)
    r = client.post("/api/sync", json={"enabled": True, "apps": ["bluesky", "tangled"]})
    assert (r.status_code, r.json) == (400, BAD_CSRF)
    r = post(client, {"enabled": True, "apps": ["bluesky", "tangled"]}, token="not-the-token")
    assert (r.status_code, r.json) == (400, BAD_CSRF)
    assert sync_rows(app, "sync_sets") == []


def test_client_mistakes_are_400_naming_what_is_wrong(world):
    app, client, _ = world
    sign_in(app, client)
    token = csrf(client)
    cases = [
        ({"apps": ["bluesky", "myspace"]},
         "'myspace' is not an app this instance syncs; choose from bluesky, grain, semble, sifa, tangled"),
        ({"apps": "bluesky"}, '"apps" must be a list of app keys.'),
        ({"enabled": "yes"}, '"enabled" must be true or false.'),
        ({"paused": 1}, '"paused" must be true or false.'),
        ({"enable": True}, "Unknown field 'enable'; send any of enabled, paused, apps."),
        ([1, 2], 'Send a JSON object with any of "enabled", "paused" and "apps".'),
        ({"enabled": True, "apps": ["bluesky"]}, "Choose at least two apps to keep in sync."),
        ({"paused": True}, "Sync is off, so there is nothing to pause or resume."),
    ]
    for body, message in cases:
        r = post(client, body, token)
        assert (r.status_code, r.json) == (400, {"error": "InvalidRequest", "message": message}), body
    r = client.post("/api/sync", data="{not json", content_type="application/json", headers={"X-CSRF-Token": token})
    assert r.status_code == 400 and r.json["error"] == "InvalidRequest"
    assert sync_rows(app, "sync_queue") == []


def test_enable_without_the_write_permission_is_403(world):
    app, client, _ = world
    sign_in(app, client, kind="oauth")
    r = post(client, {"enabled": True, "apps": ["bluesky", "tangled"]})
    assert (r.status_code, r.json) == (403, {
        "error": "ConsentRequired",
        "message": "Sync needs permission to create and delete follow records on the chosen apps. Sign in on the "
                   "web and turn sync on from your page once; scripts can use it after that."})
    assert sync_rows(app, "sync_sets") == []
    assert post(client, {"apps": ["bluesky", "tangled"]}).status_code == 200  # choosing apps writes nothing


def test_enable_pause_resume_disable_return_the_new_state(world):
    app, client, _ = world
    sign_in(app, client)
    token = csrf(client)
    r = post(client, {"enabled": True, "apps": ["tangled", "bluesky"]}, token)
    assert r.status_code == 200
    assert {k: r.json[k] for k in ("enabled", "paused", "apps", "backfill")} == {
        "enabled": True, "paused": False, "apps": ["bluesky", "tangled"],
        "backfill": {"listed": 0, "total": 2, "done": False}}
    r = post(client, {"paused": True}, token)
    assert (r.json["enabled"], r.json["paused"], r.json["pause_reason"]) == (True, True, "paused by you")
    r = post(client, {"paused": False}, token)
    assert (r.json["paused"], r.json["pause_reason"]) == (False, None)
    r = post(client, {"apps": ["bluesky", "tangled", "sifa"]}, token)
    assert (r.json["apps"], r.json["backfill"]["total"]) == (["bluesky", "tangled", "sifa"], 1)
    r = post(client, {"enabled": False}, token)
    assert (r.json["enabled"], r.json["paused"]) == (False, False)
    assert client.get("/api/sync").json == r.json


def test_a_set_that_is_on_keeps_two_apps(world):
    app, client, _ = world
    sign_in(app, client)
    token = csrf(client)
    post(client, {"enabled": True, "apps": ["bluesky", "tangled"]}, token)
    r = post(client, {"apps": ["bluesky"]}, token)
    assert (r.status_code, r.json["message"]) == (400, "Choose at least two apps to keep in sync.")


def test_preview_counts_per_app_and_writes_nothing(world):
    app, client, pds = world
    sign_in(app, client)
    r = client.get("/api/sync/preview?apps=bluesky,tangled")
    assert r.status_code == 200
    assert r.json == {
        "apps": [{"app": "bluesky", "name": "Bluesky", "following": 2, "will_follow": 0, "will_wait": 0},
                 {"app": "tangled", "name": "Tangled", "following": 0, "will_follow": 1, "will_wait": 1}],
        "will_follow": 1, "will_wait": 1, "hours": 0.0, "duration": "under an hour", "daily_follow_cap": None,
        "large": False, "advice": None, "estimated": False, "complete": True}
    assert sync_rows(app, "sync_sets") == [] and pds.writes == []
    assert client.get("/api/sync/preview?apps=tangled&apps=bluesky").json == r.json  # repeated form too


def test_preview_mistakes_are_400(world):
    app, client, _ = world
    sign_in(app, client)
    r = client.get("/api/sync/preview?apps=bluesky,friendster")
    assert (r.status_code, r.json["error"]) == (400, "InvalidRequest")
    assert "'friendster'" in r.json["message"]
    for query in ("?apps=bluesky", ""):  # no set yet: no apps to fall back on
        r = client.get("/api/sync/preview" + query)
        assert (r.status_code, r.json) == (400, {"error": "InvalidRequest",
                                                 "message": "Name at least two apps: ?apps=bluesky,tangled"})


def test_preview_of_a_large_backfill_names_the_daily_cap(make_app):
    from feather.sync.follow_writer import install_writer
    from feather.sync.memory import MemoryPds

    for cap, expect in ((None, "SYNC_APP_DAILY_FOLLOW_CAP (most follows per app per day)"),
                        ("100", "At most 100 follows per app per day (SYNC_APP_DAILY_FOLLOW_CAP)")):
        app = make_app(**({"SYNC_APP_DAILY_FOLLOW_CAP": cap} if cap else {}))
        pds = MemoryPds()
        install_writer(app, pds)
        for n in range(300):
            did = f"did:plc:friend{n:04d}"
            pds.user_follow(ALICE, "app.bsky.graph.follow", did)
            pds.add_profile(did, "app.bsky.actor.profile")
        client = app.test_client()
        sign_in(app, client)
        r = client.get("/api/sync/preview?apps=bluesky,semble").json
        assert (r["apps"][1]["will_follow"], r["will_follow"], r["large"]) == (300, 300, True)
        assert expect in r["advice"]
        # 900 points: the 15,000-a-day share is the binding one (1.44 h); the cap spreads 300 over three days
        assert (r["hours"], r["duration"]) == ((1.44, "about 2 hours") if cap is None else (72.0, "about 3 days"))
        assert r["estimated"]  # more subjects than the preview checks profiles for


def test_activity_lists_the_newest_rows(world):
    app, client, _ = world
    sign_in(app, client)
    token = csrf(client)
    post(client, {"enabled": True, "apps": ["bluesky", "tangled"]}, token)
    post(client, {"paused": True}, token)
    r = client.get("/api/sync/activity?limit=1")
    assert r.status_code == 200
    assert [(a["kind"], a["detail"], a["message"]) for a in r.json["activity"]] == [
        ("paused", "paused by you", "You paused sync.")]
    assert set(r.json["activity"][0]) == {"at", "app", "kind", "subject", "points", "detail", "message"}
    assert [a["kind"] for a in client.get("/api/sync/activity").json["activity"]] == ["paused", "enabled"]
    for bad in ("0", "201", "ten", "-1", "%C2%B2", "%E2%91%A0", "%D9%A3"):  # ², ①, Arabic-Indic 3
        r = client.get(f"/api/sync/activity?limit={bad}")
        assert (r.status_code, r.json) == (400, {"error": "InvalidRequest",
                                                 "message": "limit must be a whole number from 1 to 200."})


def test_the_api_follows_the_engine_end_to_end_with_an_in_memory_pds(world):
    """enable -> backfill -> runner: the API's counters move the way docs/api.md says."""
    from feather.sync import backfill
    from feather.sync.runner import Runner

    app, client, pds = world
    sign_in(app, client)
    post(client, {"enabled": True, "apps": ["bluesky", "tangled"]})
    in_db(app, lambda: backfill.burst(pds, sql.now_s))
    state = client.get("/api/sync").json
    assert (state["backfill"], state["queue"]) == ({"listed": 2, "total": 2, "done": True},
                                                   {"pending": 2, "done": 0, "failed": 0})
    in_db(app, lambda: Runner(pds, app.config["FEATHER"]).tick(concurrent=False))
    state = client.get("/api/sync").json
    assert (state["queue"], state["waiting"]) == ({"pending": 0, "done": 1, "failed": 0}, 1)
    assert list(pds.records(ALICE, "sh.tangled.graph.follow").values()) == [BOB]
    assert CAROL not in pds.records(ALICE, "sh.tangled.graph.follow").values()


def test_404s_are_json(make_app):
    app = make_app(NSID_BLOCKLIST="sh.tangled.*,id.sifa.*,social.grain.*,network.cosmik.*")
    client = app.test_client()
    sign_in(app, client)
    r = client.get("/api/sync")
    assert (r.status_code, r.json) == (404, {"error": "NotFound", "message": "Graph sync is not offered on this instance."})
    r = app.test_client().get("/api/sync/nothing-here")
    assert r.status_code == 404 and r.json["error"] == "NotFound"


def test_state_explains_each_apps_listing_queue_and_waits(world):
    """The fields added for issue 13: records listed against the preview's count, the next write and
    why, people waiting for a profile, named by handle (the people cache), with exact values."""
    from feather.sync import backfill
    from feather.sync.runner import Runner

    app, client, pds = world
    sign_in(app, client)
    client.get("/api/sync/preview?apps=bluesky,tangled")  # remembers 2 follows on Bluesky, 0 on Tangled
    post(client, {"enabled": True, "apps": ["bluesky", "tangled"]})
    bluesky = client.get("/api/sync").json["per_app"][0]
    assert bluesky["listing"] | {"measured_at": 0} == {
        "status": "listing", "records": 0, "expected": 2, "expected_complete": True, "measured_at": 0,
        "attempts": 0, "error": None, "retry_at": None, "summary": "0 of about 2 follows listed"}
    in_db(app, lambda: backfill.burst(pds, sql.now_s))
    in_db(app, lambda: sql.execute("INSERT INTO sync_people (did, handle, display_name, wanted_at, fetched_at,"
                                   " next_fetch_at) VALUES (?, 'bob.test', NULL, 1, 1, 1)", (BOB,)))
    state = client.get("/api/sync").json
    now = state["next_write"]["at"]
    assert state["next_write"] == {"at": now, "reason": "ready", "message": "Next write within a few seconds.",
                                   "subject": BOB, "subject_name": "@bob.test", "app": "tangled", "name": "Tangled"}
    tangled = state["per_app"][1]
    assert tangled["queue"] == {"pending": 2, "follows": 2, "unfollows": 0, "failed": 0, "next": {
        "at": now, "reason": "ready", "message": "Next write within a few seconds.", "subject": BOB,
        "subject_name": "@bob.test"}, "summary": "2 follows to write."}
    in_db(app, lambda: Runner(pds, app.config["FEATHER"]).tick(concurrent=False))
    state = client.get("/api/sync").json
    tangled = state["per_app"][1]
    assert (tangled["queue"]["pending"], tangled["queue"]["next"], state["next_write"], state["problems"]) == (
        0, None, None, [])
    assert tangled["waiting"]["count"] == 1
    assert tangled["waiting"]["message"].startswith("1 person has no Tangled profile yet: Feather follows them there"
                                                    " as soon as they create one (next check ")
    words = [a["message"] for a in client.get("/api/sync/activity").json["activity"]]
    assert words == ["Someone (name not looked up yet) has no Tangled profile yet; Feather follows them there"
                     " when they join.", "Followed @bob.test on Tangled.",
                     "Finished listing your follows: 2 follows to write.", "Sync turned on for Bluesky and Tangled."]
