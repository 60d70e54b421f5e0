"""Scheduled jobs on APScheduler's GeventScheduler: jobs run as greenlets under supervision
(feather.process.supervisor). A job is a feather.features.Job, declared by the features."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Callable

from apscheduler.schedulers.gevent import GeventScheduler

from feather.db import db
from feather.features import Job
from feather.process.status import Board
from feather.process.supervisor import run_job

log = logging.getLogger(__name__)


def guarded(app, job: Job, claim: Callable[[str], bool] | None = None, board=None,
            delay: Callable[[int], float] | None = None) -> Callable[[], None]:
    """Run a job inside an app context and a connection of its own, under supervision.

    A failure is logged with its traceback once per streak and recorded (last run, duration,
    last error, failures in a row) on the board for /health and /admin; a failing job backs
    off before its next run. With claim, the job runs only in the process that holds its claim:
    once cluster-wide (unless the job says claimed=False). delay is the backoff (attempt →
    seconds; supervisor.backoff_delay unless given).
    """
    piece = (board or Board()).piece("job", job.id)
    piece.extra["every_secs"] = job.seconds

    def work() -> None:
        with app.app_context(), db.connection_context():
            job.func(**job.kwargs)

    def run() -> None:
        if claim is not None and job.claimed and not claim(f"job:{job.id}"):
            piece.state = "standby"  # another process owns it
            return
        run_job(piece, work, delay)

    run.piece = piece
    return run


def build_scheduler(app, jobs: list[Job], claim: Callable[[str], bool] | None = None, board=None,
                    delay: Callable[[int], float] | None = None):
    scheduler = GeventScheduler(timezone=timezone.utc)
    now = datetime.now(timezone.utc)
    for job in jobs:
        scheduler.add_job(
            guarded(app, job, claim, board, delay),
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
