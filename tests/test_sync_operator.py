"""Graph sync's figures on /admin, through its operator_status hook (feather/sync/operator.py).

Each figure is pinned at its edge: the budget count puts one owner exactly at the hourly limit
with a follow's cost left (not waiting) and one a point past it (waiting), so a different cost
than the pacer's, or another window, changes the page.
"""
from __future__ import annotations

from feather import features, sql
from feather.db import db
from feather.sync import pacer
from tests.test_sync_views import sign_in

OPERATOR = "did:plc:operator"
A, B, C, D = (f"did:plc:owner{n}" for n in "abcd")


def seed(settings, now: int) -> None:
    hourly, daily = settings.sync_hourly_points, settings.sync_daily_points
    for owner, enabled, paused, parked_until in ((A, 1, 0, 0), (B, 1, 1, 0), (C, 0, 0, now + 3600), (D, 1, 0, 0)):
        sql.execute("INSERT INTO sync_sets (owner_did, enabled, paused, parked_until, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)", (owner, enabled, paused, parked_until, now, now))
    for owner, status, updated_at in ((A, "pending", now), (A, "pending", now), (A, "sending", now),
                                      (B, "pending", now), (D, "pending", now), (C, "failed", now - 100),
                                      (C, "failed", now - 2 * pacer.DAY)):
        sql.execute("INSERT INTO sync_queue (owner_did, app, kind, subject, origin, status, created_at, updated_at)"
                    " VALUES (?, 'tangled', 'follow', 'did:plc:subject', 'event', ?, ?, ?)",
                    (owner, status, updated_at, updated_at))
    for owner, app, leased_by, lease_until in ((A, "tangled", "w1", now + 60), (B, "tangled", "w2", now - 60),
                                               (D, "tangled", None, 0)):
        sql.execute("INSERT INTO sync_lanes (owner_did, app, leased_by, lease_until) VALUES (?, ?, ?, ?)",
                    (owner, app, leased_by, lease_until))
    # A: one point short of a follow this hour (waiting). B: exactly a follow's room left (not
    # waiting, and paused besides). D: the hour is free, the day is not (waiting).
    for owner, at, points in ((A, now - 60, hourly - pacer.CREATE_POINTS + 1),
                              (B, now - 60, hourly - pacer.CREATE_POINTS),
                              (D, now - 2 * pacer.HOUR, daily - pacer.CREATE_POINTS + 1)):
        sql.execute("INSERT INTO sync_activity (owner_did, at, app, kind, subject, points) VALUES (?, ?, 'tangled',"
                    " 'follow', 'did:plc:subject', ?)", (owner, at, points))


EXPECTED = {"sets": 4, "enabled": 3, "paused": 1, "rate_limited": 1, "queue_pending": 4, "queue_sending": 1,
            "lanes_running": 1, "waiting_on_budget": 2, "failed_last_day": 1}


def test_the_hook_counts_sets_queue_lanes_budget_and_failures(make_app):
    app = make_app()
    settings = app.config["FEATHER"]
    with app.app_context(), db.connection_context():
        now = sql.now_s()
        with db.atomic():
            seed(settings, now)
        assert features.operator_status(settings)["feather.sync"] == EXPECTED


def test_admin_shows_the_sync_figures_the_hook_reports(make_app):
    app = make_app(FEATHERREADER_ADMIN_DIDS=OPERATOR)
    with app.app_context(), db.connection_context(), db.atomic():
        seed(app.config["FEATHER"], sql.now_s())
    client = app.test_client()
    sign_in(app, client, did=OPERATOR, handle="operator.test")
    html = " ".join(client.get("/admin").get_data(as_text=True).split())
    assert ("<dt>Sync sets</dt><dd>4 (3 on, 1 paused)</dd>"
            " <dt>Queue</dt><dd>4 pending, 1 being sent, 1 failed in the last day</dd>"
            " <dt>Lanes running</dt><dd>1</dd>"
            " <dt>Accounts waiting on budget</dt><dd>2</dd>"
            " <dt>Accounts waiting on a 429</dt><dd>1</dd>") in html
