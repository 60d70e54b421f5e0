"""/health: one real page read, JSON facts, 503 only on a measured database failure."""

from feather.db import current_dialect, db


def test_health_is_200_and_degraded_when_no_process_runs_the_workers(client):
    """Before issue 20 this answered "ok" with no consumer at all: a service ingesting nothing."""
    response = client.get("/health")
    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "degraded"
    assert body["reasons"] == ["no process is running the background workers (or none has reported in the "
                               "last 30 s): nothing is ingested and no job runs"]
    assert body["version"] == "0.1.0"
    assert body["database"]["ok"] is True
    assert body["database"]["schema_version"] >= 45
    assert body["consumers"] == {}
    assert body["jobs"] == {}
    assert body["fetch_paused"] is False


def test_health_names_the_kill_switch_when_workers_are_disabled(make_app):
    body = make_app(FEATHERREADER_DISABLE_SCHEDULER=True).test_client().get("/health").get_json()
    assert body["status"] == "degraded"
    assert body["reasons"] == ["background workers are disabled (FEATHERREADER_DISABLE_SCHEDULER=1): "
                               "nothing is ingested and no job runs"]


def test_health_reports_consumer_heartbeat_and_pause(client):
    from feather.jetstream import store

    with db.connection_context(), db.atomic():
        store.save_cursor("global", store.Cursor(1_700_000_000_000_000))
        store.set_paused("network", "database size 10 >= watermark 5")
    body = client.get("/health").get_json()
    assert body["consumers"]["global"]["cursor_time_us"] == 1_700_000_000_000_000
    assert body["consumers"]["global"]["paused"] is None
    assert body["consumers"]["network"]["paused"] == "database size 10 >= watermark 5"
    assert body["fetch_paused"] is True


def test_health_is_503_when_the_database_is_broken(make_app, database_url, tmp_path):
    if current_dialect_for(database_url) == "sqlite":
        app = make_app()
        db.close()
        path = database_url[len("sqlite:///"):]
        for suffix in ("", "-wal", "-shm"):
            try:
                with open(path + suffix, "r+b") as fh:
                    fh.write(b"this is not a database" * 100)
            except FileNotFoundError:
                pass
    else:
        app = make_app(migrate=False, DATABASE_URL=database_url.rsplit("/", 1)[0] + "/feather_no_such_database")
    response = app.test_client().get("/health")
    assert response.status_code == 503
    assert response.get_json()["database"]["ok"] is False


def current_dialect_for(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgresql"


def test_health_makes_no_network_call(client, monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("health opened a network connection")

    if current_dialect().is_sqlite:
        monkeypatch.setattr(socket.socket, "connect", refuse)
    assert client.get("/health").status_code == 200
