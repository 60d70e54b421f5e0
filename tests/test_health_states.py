"""/health and /admin tell the truth in the three states an operator meets: healthy, Jetstream
unreachable, a job failing. The workers run in-process here and publish what they are doing
(feather/process/status.py), exactly as a separate worker process would."""
import socket

import pytest

from feather.db import current_dialect, db
from feather.features import Job
from feather.jetstream import observe
from feather.jetstream.engine import Engine
from feather.jetstream.observe import StreamObserver
from feather.process.scheduler import guarded
from feather.process.verdict import judge
from tests.support import mirror_feature
from tests.support.fake_jetstream import make_commit
from tests.support.waiting import wait_until
from tests.test_jetstream_engine import FAST, connected, engine_for, jetstream, rows  # noqa: F401 (fixtures)
from tests.test_sync_views import sign_in

OPERATOR = "did:plc:operator"


def stream_up(engine, name="global"):
    """Our side of the connection (the fake counts it a moment before the reader resumes)."""
    wait_until(lambda: name in engine.streams and engine.streams[name].connected.is_set(), message="stream connected")


def publish(app, engine):
    with app.app_context(), db.connection_context():
        engine.board.publish()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_healthy_when_the_stream_is_connected_and_jobs_succeed(engine_for, jetstream):  # noqa: F811
    app, engine = engine_for(FEATHERREADER_ADMIN_DIDS=OPERATOR)
    engine.start()
    wait_until(connected(jetstream), message="connection")
    jetstream.append([make_commit("did:plc:alice", "app.bsky.feed.post", "h1", "create")])
    wait_until(lambda: "at://did:plc:alice/app.bsky.feed.post/h1" in rows(), message="applied")
    stream_up(engine)
    # the writer commits, then records the batch for the observer: the row can be visible first
    wait_until(lambda: engine.streams["global"].state.obs.last_applied_at is not None, message="batch observed")
    guarded(app, Job("tidy", lambda: None, 60), board=engine.board)()
    publish(app, engine)

    body = app.test_client().get("/health").get_json()
    assert (body["status"], body["reasons"]) == ("ok", [])
    stream = body["consumers"]["global"]
    assert (stream["connected"], stream["host"], stream["had_error"], stream["last_error_at"], stream["restarts"]) == (
        True, jetstream.url, False, None, 0)
    assert stream["lag_secs"] is not None and stream["connected_since"] is not None
    tidy = body["jobs"]["tidy"]
    assert (tidy["streak"], tidy["runs"], tidy["had_error"], tidy["last_error_at"]) == (0, 1, False, None)


def test_unreachable_jetstream_keeps_the_service_up_and_health_degraded(make_app, monkeypatch):
    monkeypatch.setattr(mirror_feature, "_ready", False)
    url = f"ws://127.0.0.1:{closed_port()}/subscribe"
    app = make_app(FEATHERREADER_JETSTREAM_HOSTS=url, FEATHERREADER_ADMIN_DIDS=OPERATOR)
    engine = Engine(app, mirror_feature.subscriptions(app.config["FEATHER"]), tuning=FAST)
    engine.start()
    try:
        stream = engine.streams["global"]
        wait_until(lambda: stream.stats["connect_failures"] >= 2, message="two failed connects")
        publish(app, engine)
        client = app.test_client()
        response = client.get("/health")
        assert response.status_code == 200  # only a database failure is a 503
        body = response.get_json()
        assert body["status"] == "degraded"
        assert body["reasons"] == ["stream global has not connected to Jetstream"]  # the error is on /admin
        global_ = body["consumers"]["global"]
        assert (global_["connected"], global_["host"], global_["had_error"]) == (False, url, True)
        assert client.get("/about").status_code == 200  # the web side serves on
        sign_in(app, client, did=OPERATOR, handle="operator.test")
        html = client.get("/admin").get_data(as_text=True)
        assert "Overall: degraded" in html and "not connected" in html and url in html
        assert f"stream global has not connected to Jetstream (last error: connect to {url} failed: " in html
    finally:
        engine.stop(timeout=5)


def test_a_job_failing_its_last_runs_makes_health_degraded_and_shows_on_admin(engine_for, jetstream):  # noqa: F811
    app, engine = engine_for(FEATHERREADER_ADMIN_DIDS=OPERATOR, FEATHERREADER_HEALTH_JOB_FAILURES=3)
    engine.start()
    wait_until(connected(jetstream), message="connection")

    def boom():
        raise RuntimeError("the relay said 502")

    stream_up(engine)
    run = guarded(app, Job("sync-runner", boom, 5), board=engine.board, delay=lambda attempt: 0.0)
    run()
    run()
    publish(app, engine)
    client = app.test_client()
    assert client.get("/health").get_json()["reasons"] == []  # two failures: under the bound
    run()
    publish(app, engine)
    body = client.get("/health").get_json()
    assert body["status"] == "degraded"
    assert body["reasons"] == ["job sync-runner failed its last 3 runs"]
    assert (body["jobs"]["sync-runner"]["streak"], body["jobs"]["sync-runner"]["had_error"]) == (3, True)
    sign_in(app, client, did=OPERATOR, handle="operator.test")
    html = client.get("/admin/status").get_data(as_text=True)
    assert "job sync-runner failed its last 3 runs (last error: RuntimeError: the relay said 502)" in html


class _Settings:
    featherreader_health_max_lag_secs = 300
    featherreader_health_job_failures = 3
    featherreader_disable_scheduler = False


def _stream_row(**facts):
    row = {"state": "running", "connected": True, "ever_connected": True, "lag_secs": 1.0, "idle": None,
           "disconnected_since": None, "last_error": None}
    row.update(facts)
    return {"stream": {"global": [row]}, "task": {"jetstream-engine": [{"subscriptions": ["global", "sync:0"]}]},
            **({} if "sync" not in facts else {})}


@pytest.mark.parametrize("facts, reasons", [
    ({}, ["stream sync:0: no process is running it"]),
    ({"lag_secs": 301.0}, ["stream global is 5 min behind the live stream (more than 300 s)",
                           "stream sync:0: no process is running it"]),
    ({"connected": False, "disconnected_since": 1000.0 - 59, "last_error": "reset"},
     ["stream sync:0: no process is running it"]),
    ({"connected": False, "disconnected_since": 1000.0 - 61, "last_error": "reset"},
     ["stream global has been disconnected for 61 s", "stream sync:0: no process is running it"]),
    ({"lag_secs": 300.0}, ["stream sync:0: no process is running it"]),
    ({"connected": False, "disconnected_since": 1000.0 - 60, "last_error": "reset"},
     ["stream sync:0: no process is running it"]),
    ({"lag_secs": 5400.0}, ["stream global is 90 min behind the live stream (more than 300 s)",
                            "stream sync:0: no process is running it"]),
    ({"lag_secs": 7200.0}, ["stream global is 2 h behind the live stream (more than 300 s)",
                            "stream sync:0: no process is running it"]),
], ids=["one-stream-unowned", "lagging", "disconnected-59s", "disconnected-61s", "lag-at-the-bound", "disconnected-60s", "lag-90min",
        "lag-2h"])
def test_verdict_names_lag_over_the_bound_and_disconnects_over_a_minute(facts, reasons):
    verdict = judge({}, _stream_row(**facts), _Settings(), now=1000.0)
    assert verdict.reasons == reasons


def test_verdict_keeps_the_last_error_out_of_its_reasons_and_in_the_detailed_ones_for_admin():
    verdict = judge({}, _stream_row(connected=False, disconnected_since=1000.0 - 61, last_error="reset"),
                    _Settings(), now=1000.0)
    assert verdict.reasons == ["stream global has been disconnected for 61 s",
                               "stream sync:0: no process is running it"]
    assert verdict.detailed == ["stream global has been disconnected for 61 s (last error: reset)",
                                "stream sync:0: no process is running it"]


def test_verdict_treats_an_idle_shard_as_fine_and_a_watermark_pause_as_degraded():
    idle = _stream_row(connected=False, ever_connected=False, idle="no account to follow")
    idle["stream"]["sync:0"] = [{"connected": False, "ever_connected": False, "idle": "no account to follow"}]
    assert judge({}, idle, _Settings(), now=1000.0).reasons == []
    paused = _stream_row()
    paused["stream"]["sync:0"] = [{"connected": False, "idle": "no account to follow"}]
    saved = {"global": {"cursor_time_us": 1, "last_applied_at": 1, "paused": "database size 10 >= watermark 5"}}
    assert judge(saved, paused, _Settings(), now=1000.0).reasons == [
        "stream global: paused by the disk watermark (database size 10 >= watermark 5)"]


def test_a_stream_whose_reader_has_not_taken_its_first_step_is_starting_not_unconnected():
    """The status publisher can run before an empty sync shard's first membership query (seen on
    PostgreSQL in the whole-process test): /health said it "has not connected" until it went idle."""
    obs = StreamObserver()
    assert obs.snapshot(None, False, False)["starting"] is True
    row = _stream_row(connected=False, ever_connected=False, disconnected_since=None)
    row["stream"]["sync:0"] = [{**obs.snapshot(None, False, False), "state": "running"}]
    row["stream"]["global"][0].update(obs.snapshot(None, False, False))
    assert judge({}, row, _Settings()).reasons == []
    obs.trying("ws://jetstream.test/subscribe")  # a host tried: judged from now on
    row["stream"]["global"][0].update(obs.snapshot(None, False, False))
    assert judge({}, row, _Settings()).reasons == ["stream global has not connected to Jetstream"]
    idle = StreamObserver()
    idle.idle("no account to follow")
    assert idle.starting() is False
    stuck = StreamObserver()  # a reader stuck before its first step is judged after the grace
    assert stuck.starting(now=stuck.created_at + observe.STARTING_GRACE_SECS) is False


def test_admin_is_403_for_anyone_not_listed(make_app):
    app = make_app(FEATHERREADER_ADMIN_DIDS=OPERATOR)
    client = app.test_client()
    assert client.get("/admin").status_code == 403  # signed out
    sign_in(app, client, did="did:plc:someone", handle="someone.test")
    assert client.get("/admin").status_code == 403
    assert client.get("/admin/status").status_code == 403


def test_admin_page_is_complete_without_javascript(make_app):
    from feather.jetstream import store as jstore

    app = make_app(FEATHERREADER_ADMIN_DIDS=OPERATOR, FEATHERREADER_NETWORK_INDEX=True)
    with app.app_context(), db.connection_context(), db.atomic():
        jstore.save_cursor("network", jstore.Cursor(1_700_000_000_000_000))  # saved once, not running now
    client = app.test_client()
    sign_in(app, client, did=OPERATOR, handle="operator.test")
    response = client.get("/admin")
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    for heading in ("Streams", "Scheduled jobs", "Network catalogue", "Graph sync", "Timelines", "Database"):
        assert f"<h2>{heading}</h2>" in html
    assert "Overall: degraded" in html  # nothing runs the workers in this test
    assert 'hx-get="/admin/status"' in html and 'hx-trigger="every 5s"' in html
    assert "<script>" not in html
    # A stream no process runs shows dashes, not a bare unit
    flat = " ".join(html.split())
    assert ('<td data-label="Cursor lag">—</td> <td data-label="Events/s (last minute)">—</td>') in flat


def test_admin_shows_the_catalogue_and_timeline_figures(make_app):
    app = make_app(FEATHERREADER_ADMIN_DIDS=OPERATOR, FEATHERREADER_NETWORK_INDEX=True)
    with app.app_context(), db.connection_context(), db.atomic():
        for feed, count in (("https://a.example/feed", 5), ("https://b.example/feed", 4)):
            db.execute_sql(current_dialect().q("INSERT INTO net_feed_rollup (feed_url, subscriber_count, first_seen,"
                                               " last_seen) VALUES (?, ?, 1, 1)"), (feed, count))
        for actor, uri in (("did:plc:a", "at://x/p/1"), ("did:plc:a", "at://x/p/2"), ("did:plc:b", "at://x/p/1")):
            db.execute_sql(current_dialect().q("INSERT INTO feed_items (actor, uri, collection, time_us)"
                                               " VALUES (?, ?, 'post', 1)"), (actor, uri))
    client = app.test_client()
    sign_in(app, client, did=OPERATOR, handle="operator.test")
    html = " ".join(client.get("/admin").get_data(as_text=True).split())
    assert "<dt>Feeds at or over the floor (k = 5)</dt><dd>1</dd>" in html
    assert "<dt>Actors</dt><dd>2</dd> <dt>Feed rows</dt><dd>3</dd>" in html


def test_admin_timeline_counts_stop_at_the_cap_and_seek_actor_to_actor(make_app, monkeypatch):
    from feather.feeds.read import operator as sections
    from tests.test_feeds_explain import plan, unbounded_scans

    app = make_app(FEATHERREADER_ADMIN_DIDS=OPERATOR)
    with app.app_context(), db.connection_context(), db.atomic():
        for actor, uri in (("did:plc:a", "at://x/p/1"), ("did:plc:a", "at://x/p/2"), ("did:plc:b", "at://x/p/1"),
                           ("did:plc:c", "at://x/p/3")):
            db.execute_sql(current_dialect().q("INSERT INTO feed_items (actor, uri, collection, time_us)"
                                               " VALUES (?, ?, 'post', 1)"), (actor, uri))
    client = app.test_client()
    sign_in(app, client, did=OPERATOR, handle="operator.test")

    def figures():
        html = " ".join(client.get("/admin").get_data(as_text=True).split())
        return html[html.index("<dt>Actors</dt>"):html.index("<dt>Last full prune pass</dt>")]

    # Only the operator is served and follows nobody: one DID matters, so the feeds ask by DID.
    ingest = ("<dt>Ingest</dt><dd>narrow: 1 DID matters (at most 30000), asked for by DID on the"
              " <code>feeds:</code> streams</dd> ")
    assert figures() == "<dt>Actors</dt><dd>3</dd> <dt>Feed rows</dt><dd>4</dd> " + ingest
    monkeypatch.setattr(sections, "COUNT_CAP", 3)
    assert figures() == "<dt>Actors</dt><dd>3</dd> <dt>Feed rows</dt><dd>over 3</dd> " + ingest
    monkeypatch.setattr(sections, "COUNT_CAP", 2)
    assert figures() == "<dt>Actors</dt><dd>over 2</dd> <dt>Feed rows</dt><dd>over 2</dd> " + ingest
    with app.app_context(), db.connection_context():
        lines = plan(sections.ACTORS_SQL, (2,))
    assert unbounded_scans(lines, ["feed_items", "f"]) == [], lines


def test_published_rows_are_live_for_30_s_freshest_first_and_forgotten_after_a_day(make_app):
    """feather/process/status.py: a heartbeat STALE_SECS old still counts; of two processes publishing the
    same piece the freshest comes first; a row a day old is deleted by the next publish."""
    from feather.process import status

    app = make_app()
    with app.app_context(), db.connection_context():
        q = current_dialect().q
        board = status.Board()
        board.piece("job", "tidy")
        board.publish()
        ((beat,),) = db.execute_sql(q("SELECT heartbeat_at FROM worker_status WHERE owner = ?"),
                                    (board.owner,)).fetchall()
        for owner, at in (("older:1", beat - 5), ("gone:2", beat - status.FORGET_SECS - 60)):
            db.execute_sql(q("INSERT INTO worker_status (kind, name, owner, heartbeat_at, body) VALUES (?, ?, ?, ?, ?)"),
                           ("job", "tidy", owner, at, "{}"))
        assert [r["owner"] for r in status.read(now=beat + status.STALE_SECS)["job"]["tidy"]] == [board.owner]
        assert [r["owner"] for r in status.read(now=beat)["job"]["tidy"]] == [board.owner, "older:1"]
        assert status.read(now=beat + status.STALE_SECS + 1) == {}
        board.publish()
        owners = sorted(r[0] for r in db.execute_sql("SELECT owner FROM worker_status").fetchall())
        assert owners == sorted([board.owner, "older:1"])


def test_operator_status_gathers_the_figures_of_every_feature_extras_included(make_app, monkeypatch):
    import sys
    import types

    from feather import features

    extra = types.ModuleType("tests_status_feature")  # FEATHERREADER_EXTRA_FEATURES names any importable module
    extra.operator_status = lambda settings: {"widgets": 3}
    monkeypatch.setitem(sys.modules, "tests_status_feature", extra)
    app = make_app(FEATHERREADER_EXTRA_FEATURES="tests_status_feature")
    with app.app_context(), db.connection_context():
        found = features.operator_status(app.config["FEATHER"])
    assert list(found) == ["feather.feeds", "feather.network", "feather.sync", "tests_status_feature"]
    assert found["tests_status_feature"] == {"widgets": 3}
