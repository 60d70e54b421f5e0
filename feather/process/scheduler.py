"""Scheduled jobs on APScheduler's GeventScheduler: jobs run as greenlets under supervision
(feather.process.supervisor). A job is a feather.features.Job, declared by the features."""
from __future__ import annotations

import logging
from typing import Callable

from feather.features import Job

log = logging.getLogger(__name__)


def guarded(app, job: Job, claim: Callable[[str], bool] | None = None, board=None) -> Callable[[], None]:
    """Run a job inside an app context and a connection of its own, under supervision.

    A failure is logged with its traceback once per streak and recorded (last run, duration,
    last error, failures in a row) on the board for /health and /admin; a failing job backs
    off before its next run. With claim, the job runs only in the process that holds its claim:
    once cluster-wide (unless the job says claimed=False).
    """
    from feather.db import db
    from feather.process.status import Board
    from feather.process.supervisor import run_job

    piece = (board or Board()).piece("job", job.id)
    piece.extra["every_secs"] = job.seconds

    def work() -> None:
        with app.app_context(), db.connection_context():
            job.func(**job.kwargs)

    def run() -> None:
        if claim is not None and job.claimed and not claim(f"job:{job.id}"):
            piece.state = "standby"  # another process owns it
            return
        run_job(piece, work)

    run.piece = piece
    return run


def build_scheduler(app, jobs: list[Job], claim: Callable[[str], bool] | None = None, board=None):
    from datetime import datetime, timedelta, timezone

    from apscheduler.schedulers.gevent import GeventScheduler

    scheduler = GeventScheduler(timezone=timezone.utc)
    now = datetime.now(timezone.utc)
    for job in jobs:
        scheduler.add_job(
            guarded(app, job, claim, board),
            "interval",
            id=job.id,
            name=job.id,
            seconds=job.seconds,
            jitter=job.jitter,
            next_run_time=now + timedelta(seconds=job.first_run_delay),
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
        )
    return scheduler
