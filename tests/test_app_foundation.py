"""The skeleton: factory, settings, pages, errors, CSRF, security headers."""
import threading

import gevent
import pytest

from feather import create_app
from feather.config import ConfigError, load_settings
from tests.conftest import PG_URL


def _live_greenlets():
    import gc

    return sum(1 for obj in gc.get_objects() if isinstance(obj, gevent.Greenlet) and not obj.dead)


def test_create_app_starts_no_thread_greenlet_or_connection(database_url, tmp_path):
    from feather.db import db

    threads_before = set(threading.enumerate())
    greenlets_before = _live_greenlets()
    create_app({"DATABASE_URL": database_url, "FEATHERREADER_ENV": "test",
                "FEATHERREADER_DATA_DIR": str(tmp_path)})
    assert set(threading.enumerate()) == threads_before
    assert _live_greenlets() == greenlets_before
    assert db.is_closed()


def test_bad_integer_setting_names_variable_and_accepted_values():
    with pytest.raises(ConfigError) as err:
        load_settings({"PORT": "eighty", "FEATHERREADER_ENV": "test"})
    assert str(err.value) == "PORT: expected a whole number; got 'eighty'"


def test_bad_choice_setting_lists_the_choices():
    with pytest.raises(ConfigError) as err:
        load_settings({"FEATHERREADER_ENV": "staging"})
    assert str(err.value) == "FEATHERREADER_ENV: expected one of production, development, test; got 'staging'"


def test_bad_boolean_setting_names_variable():
    with pytest.raises(ConfigError) as err:
        load_settings({"FEATHERREADER_ENV": "test", "FEATHERREADER_DISABLE_SCHEDULER": "maybe"})
    assert err.value.name == "FEATHERREADER_DISABLE_SCHEDULER"
    assert "1/0, true/false" in str(err.value)


def test_bad_database_url_names_variable():
    with pytest.raises(ConfigError) as err:
        load_settings({"FEATHERREADER_ENV": "test", "DATABASE_URL": "mysql://x/y"})
    assert err.value.name == "DATABASE_URL"
    assert "postgresql://" in str(err.value)


@pytest.mark.parametrize("secret", ["", "dev", "changeme", "short-key"])
def test_production_refuses_missing_or_known_secret_key(secret, tmp_path):
    with pytest.raises(ConfigError) as err:
        load_settings({"FEATHERREADER_ENV": "production", "SECRET_KEY": secret,
                       "FEATHERREADER_DATA_DIR": str(tmp_path)})
    assert err.value.name == "SECRET_KEY"


def test_production_accepts_a_real_secret_key(tmp_path):
    settings = load_settings({"SECRET_KEY": "x" * 40, "FEATHERREADER_DATA_DIR": str(tmp_path)})
    assert settings.secret_key == "x" * 40
    assert settings.is_production


def test_development_generates_and_keeps_a_secret_key(tmp_path):
    env = {"FEATHERREADER_ENV": "development", "FEATHERREADER_DATA_DIR": str(tmp_path)}
    first = load_settings(env).secret_key
    assert len(first) == 64
    assert load_settings(env).secret_key == first


def test_default_database_is_sqlite_file_in_data_dir(tmp_path):
    settings = load_settings({"FEATHERREADER_ENV": "test", "FEATHERREADER_DATA_DIR": str(tmp_path)})
    assert settings.database_url == f"sqlite:///{tmp_path}/feather.db"


@pytest.mark.skipif(bool(PG_URL), reason="SQLite pragmas only apply to SQLite")
def test_sqlite_pragmas_are_wal_busy_timeout_and_foreign_keys(app):
    from feather import db as feather_db
    from feather.db import db

    with db.connection_context():
        assert db.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 5000
        assert db.execute_sql("PRAGMA foreign_keys").fetchone()[0] == 1
        assert db.execute_sql("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert db.execute_sql("PRAGMA cache_size").fetchone()[0] == -32_000
        assert db.execute_sql("PRAGMA wal_autocheckpoint").fetchone()[0] == 100_000  # backstop (db.py)
        limit = db.execute_sql("PRAGMA journal_size_limit").fetchone()[0]
        assert limit == 256 * 1024 * 1024
        assert limit > feather_db.WAL_BOUND_BYTES  # a busy WAL is never truncated
        assert db.execute_sql("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY


@pytest.mark.parametrize("path", ["/", "/about", "/privacy", "/terms", "/no-such-page"])
def test_every_page_has_the_footer_links(client, path):
    html = client.get(path).get_data(as_text=True)
    for href in ('href="/privacy"', 'href="/terms"', 'href="/about"'):
        assert href in html


def test_pages_carry_security_headers(client):
    response = client.get("/")
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"
    assert response.headers["X-Frame-Options"] == "DENY"


def test_htmx_is_served_from_static_not_a_cdn(client):
    html = client.get("/").get_data(as_text=True)
    assert '<script src="/static/vendor/htmx.min.js" defer></script>' in html
    assert "<script>" not in html


def test_unknown_xrpc_route_is_json_error(client):
    response = client.get("/xrpc/com.example.nothing")
    assert response.status_code == 404
    assert response.get_json()["error"] == "NotFound"


def test_unknown_page_is_html_error(client):
    response = client.get("/nowhere")
    assert response.status_code == 404
    assert response.mimetype == "text/html"


def test_unexpected_exception_is_500_without_a_stack_trace(make_app):
    app = make_app()

    @app.get("/api/boom")
    def boom():
        raise RuntimeError("secret internals")

    response = app.test_client().get("/api/boom")
    assert response.status_code == 500
    body = response.get_json()
    assert body["error"] == "InternalServerError"
    assert "secret internals" not in response.get_data(as_text=True)
    assert "Traceback" not in response.get_data(as_text=True)


def test_post_without_csrf_token_is_refused(make_app):
    app = make_app()

    @app.post("/form-under-test")
    def form_under_test():
        return "accepted"

    client = app.test_client()
    response = client.post("/form-under-test", data={"x": "1"})
    assert response.status_code == 400
    assert "This form had expired, so nothing was sent. Check it and send it again." in response.get_data(as_text=True)


def test_post_with_csrf_token_is_accepted(make_app):
    from flask_wtf.csrf import generate_csrf

    app = make_app()

    @app.get("/token-under-test")
    def token_under_test():
        return generate_csrf()

    @app.post("/form-under-test")
    def form_under_test():
        return "accepted"

    client = app.test_client()
    token = client.get("/token-under-test").get_data(as_text=True)
    response = client.post("/form-under-test", data={"csrf_token": token})
    assert response.status_code == 200
    assert response.get_data(as_text=True) == "accepted"


def test_gunicorn_logs_access_to_stdout_and_opens_no_shared_control_socket():
    """gunicorn 25+ puts a control socket at one path per user: a second instance collided with it."""
    import runpy

    from gunicorn.config import Config

    from tests.conftest import REPO

    conf = runpy.run_path(str(REPO / "gunicorn.conf.py"))
    cfg = Config()
    for name in ("accesslog", "control_socket_disable"):
        cfg.set(name, conf[name])  # gunicorn refuses a name it does not know
    assert (cfg.accesslog, cfg.control_socket_disable) == ("-", True)
    assert "--access-logfile -" in (REPO / "Procfile").read_text()
    assert "--access-logfile -" in (REPO / "Makefile").read_text()


@pytest.mark.once
def test_a_web_process_applies_the_migrations_and_without_run_workers_starts_no_worker(make_app, tmp_path):
    """gunicorn.conf.py's post_fork: feather.process.runtime.start_web_process on a fresh database."""
    from feather.db import db
    from feather.migrate import discover
    from feather.process.runtime import start_web_process

    import gc

    app = make_app(migrate=False, DATABASE_URL=f"sqlite:///{tmp_path}/fresh.db", FEATHERREADER_RUN_WORKERS="0")
    gc.unfreeze()
    workers = start_web_process(app)
    try:
        assert gc.get_freeze_count() > 0  # what starting made is out of the full collections' walk
        assert workers.running is False
        with db.connection_context():
            applied = {row[0] for row in db.execute_sql("SELECT version FROM schema_version").fetchall()}
        assert applied == {m.version for m in discover()}
    finally:
        workers.stop()
        gc.unfreeze()


@pytest.mark.once
def test_flask_worker_with_the_scheduler_disabled_has_nothing_to_do_and_returns(make_app, tmp_path, monkeypatch):
    import gc
    import signal

    from feather.process.runtime import run_worker_process

    installed = []  # the handlers would outlive the test in pytest's own process
    monkeypatch.setattr(gevent, "signal_handler", lambda sig, handler: installed.append(sig))
    app = make_app(migrate=False, DATABASE_URL=f"sqlite:///{tmp_path}/fresh.db", FEATHERREADER_DISABLE_SCHEDULER="1")
    gc.unfreeze()
    try:
        with gevent.Timeout(20):  # a guard only: the standby loop would wait for a signal forever
            run_worker_process(app)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert sorted(installed) == sorted([signal.SIGTERM, signal.SIGINT])


def test_an_empty_flag_is_off_and_a_numbers_upper_bound_is_allowed(tmp_path):
    settings = load_settings({"FEATHERREADER_ENV": "test", "FEATHERREADER_DATA_DIR": str(tmp_path),
                              "FEATHERREADER_DISABLE_SCHEDULER": "", "PORT": "65535",
                              "FEATHERREADER_TRUSTED_PROXIES": "10"})
    assert (settings.featherreader_disable_scheduler, settings.port, settings.featherreader_trusted_proxies) == (
        False, 65535, 10)
    with pytest.raises(ConfigError) as err:
        load_settings({"FEATHERREADER_ENV": "test", "FEATHERREADER_DATA_DIR": str(tmp_path), "PORT": "65536"})
    assert str(err.value) == "PORT: expected a number <= 65535; got 65536"


def test_the_in_memory_sqlite_url_is_a_valid_database_url(tmp_path):
    settings = load_settings({"FEATHERREADER_ENV": "test", "FEATHERREADER_DATA_DIR": str(tmp_path),
                              "DATABASE_URL": "sqlite://:memory:"})
    assert settings.database_url == "sqlite://:memory:"


def test_with_an_invalid_configuration_flask_help_says_why_only_some_commands_are_there():
    from feather.cli import stand_in_app

    app = stand_in_app("PORT: expected a whole number; got 'eighty'")
    result = app.test_cli_runner().invoke(args=["--help"])
    assert result.exit_code == 0
    assert ("The configuration is invalid (PORT: expected a whole number; got 'eighty'), so only these commands "
            "are available.") in " ".join(result.output.split())
    assert "new-oauth-client-key" in result.output and "worker" not in result.output
