"""A test feature with one scheduled job that calls a peer over HTTP, loaded through
FEATHERREADER_EXTRA_FEATURES=tests.support.peer_job_feature.

PEER_JOB_URL (env) names the peer. Pointed at a port nobody listens on, every run fails the way a
job whose peer is down fails in production: what a whole-process test then checks is the
supervision around it (the streak, /health's reason, /admin's row), not the job. The product's
own jobs absorb a dead peer by design (they log and retry their own work), so none of them can
be made to fail honestly from the outside.
"""
from __future__ import annotations

import os

JOB_ID = "peer-probe"
EVERY_SECS = 1.0


def probe() -> None:
    import requests

    requests.get(os.environ["PEER_JOB_URL"], timeout=5).raise_for_status()


def jobs(settings) -> list:
    from feather.features import Job

    return [Job(JOB_ID, probe, EVERY_SECS, first_run_delay=0.5)]
