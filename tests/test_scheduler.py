"""Scheduled jobs: failures are logged and the job lives on; claims make a job run once cluster-wide."""
import logging

from feather.scheduler import Job, build_scheduler, guarded


def test_a_failing_job_is_logged_and_runs_again_next_time(app, caplog):
    calls = []

    def flaky():
        calls.append(1)
        raise RuntimeError("upstream said no")

    run = guarded(app, Job("flaky", flaky, 60))
    with caplog.at_level(logging.ERROR, logger="feather.scheduler"):
        run()
        run()
    assert len(calls) == 2
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["scheduled job flaky failed; it will run again at its next time"] * 2


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
