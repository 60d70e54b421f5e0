"""Real worker processes: kill -9 mid-stream converges; only one process runs the workers."""
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from feather.db import db
from tests.conftest import REPO
from tests.support import mirror_feature
from tests.support.eventlog import mixed_log
from tests.support.fake_jetstream import FakeJetstream
from tests.support.waiting import wait_until as _wait

pytestmark = pytest.mark.slow


def wait_until(predicate, timeout=60.0, interval=0.1, message="condition"):
    _wait(predicate, timeout=timeout, interval=interval, message=message)


class Worker:
    def __init__(self, env, log_path):
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "flask", "--app", "app", "worker"], cwd=REPO,
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def output(self):
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def worker_env(make_app, database_url, tmp_path):
    make_app()  # migrate the database the workers will share
    def env_for(js):
        env = dict(os.environ)
        env.update(DATABASE_URL=database_url, FEATHERREADER_ENV="test",
                   FEATHERREADER_DATA_DIR=str(tmp_path / "data"), FEATHERREADER_JETSTREAM_HOSTS=js.url,
                   FEATHERREADER_ALLOW_PRIVATE_NETWORK="1",
                   FEATHERREADER_EXTRA_FEATURES="tests.support.mirror_feature", PYTHONUNBUFFERED="1")
        env.pop("MIRROR_DIDS_FILE", None)
        return env
    return env_for


def db_rows():
    with db.connection_context():
        return mirror_feature.mirror_rows()


def test_kill_9_mid_stream_then_restart_equals_state_from_the_log(worker_env, tmp_path):
    rng = random.Random(11)
    log = mixed_log(12_000, seed=5, identity_every=97)
    chunks = [log[i:i + 1500] for i in range(0, len(log), 1500)]
    with FakeJetstream() as js:
        env = worker_env(js)
        worker = Worker(env, tmp_path / "worker.log")
        try:
            wait_until(lambda: js.stats()["connections"] == 1, message="first connection")
            js.append(chunks[0])
            wait_until(lambda: _cursor_saved(), message="first cursor save")
            for chunk in chunks[1:]:
                js.append(chunk)
                time.sleep(rng.uniform(0.05, 0.6))
                worker.kill9()
                worker.log.close()
                worker = Worker(env, tmp_path / "worker.log")
                wait_until(lambda: js.stats()["connections"] == 1, message="reconnection")
            expected, _ = mirror_feature.expected_state(log)
            wait_until(lambda: db_rows() == expected, timeout=90, message="database equal to the log's state")
            assert len(expected) > 5000
        finally:
            worker.terminate()


def _cursor_saved():
    with db.connection_context():
        return db.execute_sql("SELECT count(*) FROM jetstream_cursor WHERE name = 'global'").fetchone()[0] == 1


def test_second_process_does_not_start_a_second_set_of_workers(worker_env, tmp_path):
    with FakeJetstream() as js:
        env = worker_env(js)
        first = Worker(env, tmp_path / "first.log")
        second = None
        try:
            wait_until(lambda: js.stats()["connections"] == 1, message="first worker connected")
            second = Worker(env, tmp_path / "second.log")
            wait_until(lambda: "standing by" in second.output(), timeout=30,
                       message="second worker to stand by")
            time.sleep(3.0)  # more than a claim round: the standby must still not connect
            assert js.stats()["connects_total"] == 1
            first.kill9()
            wait_until(lambda: js.stats()["connections"] == 1 and js.stats()["connects_total"] == 2,
                       timeout=30, message="standby to take over and connect")
            assert js.stats()["connects_total"] == 2
        finally:
            first.terminate()
            if second is not None:
                second.terminate()


def test_sigterm_stops_a_worker_cleanly_and_saves_the_cursor(worker_env, tmp_path):
    with FakeJetstream() as js:
        worker = Worker(worker_env(js), tmp_path / "worker.log")
        try:
            wait_until(lambda: js.stats()["connections"] == 1, message="connection")
            last = js.append(mixed_log(200, seed=9))
            wait_until(lambda: len(db_rows()) > 0, message="some rows")
            worker.proc.terminate()
            assert worker.proc.wait(20) == 0
            assert "background workers stopped" in worker.output()
            with db.connection_context():
                saved = db.execute_sql("SELECT time_us FROM jetstream_cursor WHERE name='global'").fetchone()[0]
            assert saved == last
        finally:
            worker.terminate()
