"""What a process does when it starts: migrate (and let each feature make or repair the tables no
migration can), then run the workers if it is allowed to."""
from __future__ import annotations

import gc
import logging
import signal

import gevent
from gevent.event import Event

from feather import db as dbmod, features
from feather.migrate import upgrade
from feather.process.workers import Workers

log = logging.getLogger(__name__)

STANDBY_RETRY_SECS = 5.0


def migrate(app) -> list[int]:
    applied = upgrade(dbmod.db.obj)
    opened = dbmod.db.is_closed()
    if opened:
        dbmod.db.connect()
    try:
        features.ensure_schema(app.config["FEATHER"])
    finally:
        if opened:
            dbmod.db.close()
    return applied


def freeze_startup_objects() -> None:
    """Take what the process made while starting (modules, the app, its settings and config) out of
    the garbage collector's reach: it lives as long as the process, yet every full collection
    walked all of it again. In a web process that walk stopped every request for about 300 ms,
    about once a minute under steady reads (bench/scale.py's reader, 126 MiB); after the freeze
    the same reads saw no pause over 55 ms (docs/performance.md)."""
    gc.collect()
    gc.freeze()


def start_web_process(app) -> Workers:
    migrate(app)
    freeze_startup_objects()
    workers = Workers(app)
    if app.config["FEATHER"].featherreader_run_workers:
        workers.start()
    else:
        log.info("FEATHERREADER_RUN_WORKERS=0: this web process runs no background workers")
    return workers


def run_worker_process(app) -> None:
    """`flask worker`: the workers without a web server, until SIGTERM or SIGINT."""
    migrate(app)
    freeze_startup_objects()
    stop = Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, stop.set)
    workers = Workers(app)
    if app.config["FEATHER"].featherreader_disable_scheduler:
        log.info("FEATHERREADER_DISABLE_SCHEDULER is set: the worker process has nothing to do")
        return
    # A standby worker keeps trying the lock, so it takes over when the active one dies.
    while not workers.start():
        if stop.wait(STANDBY_RETRY_SECS):
            return
    stop.wait()
    log.info("signal received: stopping workers")
    workers.stop()
