"""Scheduled jobs: failures are logged once per streak and recorded, the job lives on (with a
backoff); claims make a job run once cluster-wide."""
import logging
import time
from types import SimpleNamespace

from feather.features import Job
from feather.process import supervisor
from feather.process.scheduler import build_scheduler, guarded


def test_a_failing_job_logs_its_traceback_once_per_streak_and_keeps_running(app, caplog):
    outcomes = iter([RuntimeError("upstream said no")] * 3 + [None] + [RuntimeError("again")])
    calls = []

    def flaky():
        calls.append(1)
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome

    run = guarded(app, Job("flaky", flaky, 60), delay=lambda attempt: 0.0)
    with caplog.at_level(logging.INFO, logger="feather.process.supervisor"):
        for _ in range(3):
            run()
        assert (run.piece.streak, run.piece.last_error, run.piece.state) == (3, "RuntimeError: upstream said no",
                                                                            "retrying")
        run()
        assert (run.piece.streak, run.piece.runs, run.piece.failures) == (0, 4, 3)
        run()
    assert len(calls) == 5
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage().splitlines()[0] for r in errors] == [
        "job flaky failed: it will run again after a backoff"] * 2  # the first of each streak
    assert "RuntimeError: upstream said no" in errors[0].getMessage()  # with its traceback
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        "job flaky recovered after 3 failure(s) in a row"]


def test_a_failing_job_skips_its_runs_until_the_backoff_has_passed(app):
    calls = []

    def failing():
        calls.append(1)
        raise RuntimeError("down")

    run = guarded(app, Job("down", failing, 5), delay=lambda attempt: 3600.0)
    run()
    run()
    run()
    assert len(calls) == 1
    assert run.piece.skipped == 2


def test_a_job_runs_only_where_its_claim_is_held(app):
    calls = []
    claimed = {"job:mine"}
    mine = guarded(app, Job("mine", lambda: calls.append("mine"), 60), claim=claimed.__contains__)
    theirs = guarded(app, Job("theirs", lambda: calls.append("theirs"), 60), claim=claimed.__contains__)
    mine()
    theirs()
    assert calls == ["mine"]


def test_jobs_run_inside_an_app_context_with_a_database_connection(app):
    from flask import current_app

    from feather.db import db

    seen = []
    guarded(app, Job("ctx", lambda: seen.append((current_app.name, db.is_closed())), 60))()
    assert seen == [(app.name, False)]


def test_scheduler_registers_each_job_once_by_id(app):
    scheduler = build_scheduler(app, [Job("a", lambda: None, 10), Job("b", lambda: None, 20, jitter=2.0)])
    assert sorted(job.id for job in scheduler.get_jobs()) == ["a", "b"]
    assert {job.name for job in scheduler.get_jobs()} == {"a", "b"}


def test_a_failing_job_runs_again_the_very_second_its_backoff_ends(app, monkeypatch):
    clock = [1_000.0]
    monkeypatch.setattr(supervisor, "time", SimpleNamespace(time=lambda: clock[0], monotonic=time.monotonic))
    calls = []

    def failing():
        calls.append(clock[0])
        raise RuntimeError("down")

    run = guarded(app, Job("down", failing, 5), delay=lambda attempt: 30.0)
    run()
    assert run.piece.next_try_at == 1_030.0
    clock[0] = 1_029.9
    run()
    clock[0] = 1_030.0
    run()
    assert calls == [1_000.0, 1_030.0]
    assert run.piece.skipped == 1


def test_postgres_and_postgresql_urls_both_claim_through_advisory_locks(tmp_path):
    from feather.process.workers import FileClaims, PgClaims, claims_for

    for url in ("postgres://feather:pw@db.example/feather", "postgresql://feather:pw@db.example/feather"):
        claims = claims_for(SimpleNamespace(database_url=url, sqlite_path=None, featherreader_data_dir=str(tmp_path)))
        assert isinstance(claims, PgClaims)
        assert claims.url == "postgresql://feather:pw@db.example/feather"
    sqlite = claims_for(SimpleNamespace(database_url="sqlite:///x.db", sqlite_path=tmp_path / "x.db",
                                        featherreader_data_dir=str(tmp_path)))
    assert isinstance(sqlite, FileClaims) and sqlite.path == tmp_path / "x.db.workers.lock"
