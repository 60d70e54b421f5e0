"""Test support: the whole service as `make run` starts it, in a subprocess, spoken to over HTTP only.

    svc = ServiceProcess(env, tmp_path / "gunicorn.log").start()     # waits for GET /health == 200
    requests.get(svc.url + "/api/session")
    svc.kill9()        # SIGKILL to the whole process group (gunicorn master and its worker): a crash
    svc.start()        # same port, same environment: a restart
    svc.stop()         # SIGTERM (graceful), SIGKILL after a grace period; idempotent

The command is the Makefile's `run` target: `gunicorn -k gevent -w 1 --access-logfile - --bind
127.0.0.1:PORT app:app` from the repository root (tests/test_engine_process.py holds the two to the
same flags), so gunicorn.conf.py migrates and starts the background workers in the web worker.
Each start appends to the same log file, with a banner line, so one file tells the whole story;
`log_text()` / `log_tail()` read it back for failure messages.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 60.0

__all__ = ["ServiceProcess", "free_port", "service_env"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_env(**settings) -> dict:
    """os.environ plus the settings (values stringified; True/False -> 1/0, None removes the variable)."""
    env = dict(os.environ)
    for key in [k for k in env if k.startswith(("FEATHERREADER_", "SYNC_", "NSID_", "FEED_"))]:
        env.pop(key)  # nothing from the caller's shell leaks into the service under test
    env["PYTHONUNBUFFERED"] = "1"
    env["FEED_LABELERS"] = ""  # no labeler on the internet; a test that wants one names its fake
    for key, value in settings.items():
        if value is None:
            env.pop(key, None)
        elif isinstance(value, bool):
            env[key] = "1" if value else "0"
        else:
            env[key] = str(value)
    return env


def error_records(text: str) -> list[str]:
    """Each ERROR record of a service log, with the last line of its traceback (the exception)."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if line[:4].isdigit() and line[4:5] == "-":  # a new record starts with its date
            records.append([line])
        elif records:
            records[-1].append(line)
    return [r[0] + (" | " + r[-1].strip() if len(r) > 1 else "") for r in records if " ERROR " in r[0]]


class ServiceProcess:
    def __init__(self, env: dict, log_path: Path, port: int | None = None, workers: int = 1):
        self.env = env
        self.log_path = Path(log_path)
        self.port = port or free_port()
        self.workers = workers
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._log = None

    # --- lifecycle
    def start(self, timeout: float = START_TIMEOUT) -> "ServiceProcess":
        if self.running():
            raise RuntimeError("the service is already running")
        self.starts += 1
        self._log = open(self.log_path, "ab")
        self._log.write(f"\n===== start #{self.starts} at {time.strftime('%H:%M:%S')} on port {self.port} =====\n"
                        .encode())
        self._log.flush()
        cmd = [sys.executable, "-m", "gunicorn", *self.gunicorn_args()]
        # Own session = own process group: kill9() takes the master and its workers at once, like a
        # machine losing power, and nothing of ours is left holding the port or the worker lock.
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.wait_healthy(timeout)
        return self

    def gunicorn_args(self) -> list[str]:
        """The Makefile's `run` line (and the Procfile's), bound to loopback on our port. No control
        socket flag: gunicorn.conf.py turns it off, and that is what a second instance relies on."""
        return ["-k", "gevent", "-w", str(self.workers), "--access-logfile", "-",
                "--bind", f"127.0.0.1:{self.port}", "app:app"]

    def wait_healthy(self, timeout: float = START_TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the service exited with code {self.proc.returncode} before it was healthy;"
                                   f" log tail:\n{self.log_tail()}")
            try:
                r = requests.get(self.url + "/health", timeout=3)
                if r.status_code == 200:
                    return r.json()
                last = f"{r.status_code} {r.text[:200]}"
            except requests.RequestException as exc:
                last = f"{type(exc).__name__}"
            time.sleep(0.2)
        raise RuntimeError(f"GET /health did not answer 200 within {timeout:.0f} s ({last}); log tail:\n"
                           f"{self.log_tail()}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL the whole process group (gunicorn master + worker) and reap the master."""
        proc = self.proc
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
        self._wait_group_gone(proc.pid)
        self._wait_commits_landed()
        self._close_log("kill -9")

    def stop(self, grace: float = 20.0) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()  # gunicorn: graceful shutdown; worker_exit stops the background workers
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
        except ProcessLookupError:
            pass
        if proc.poll() is None:
            proc.wait(10)
        self._wait_group_gone(proc.pid)
        self._close_log("stop")

    def _wait_group_gone(self, pgid: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                return
            time.sleep(0.05)

    def _wait_commits_landed(self, timeout: float = 5.0) -> None:
        """A COMMIT PostgreSQL received before the kill still commits after it: a test that reads
        the cursors right after kill -9 must wait for those backends, or it reads one batch early
        (seen once in CI: a shard's saved cursor moved past the value the test had read)."""
        url = self.env.get("DATABASE_URL", "")
        if not url.startswith("postgres"):
            return
        import psycopg2

        conn = psycopg2.connect(url)
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                " AND pid <> pg_backend_pid() AND state = 'active'")
                    if cur.fetchone()[0] == 0:
                        return
                    time.sleep(0.05)
        finally:
            conn.close()

    def _close_log(self, how: str) -> None:
        if self._log is not None and not self._log.closed:
            self._log.write(f"===== {how} at {time.strftime('%H:%M:%S')} =====\n".encode())
            self._log.close()

    # --- observation
    def health(self) -> dict:
        r = requests.get(self.url + "/health", timeout=30)  # a busy 2-core machine: slow is not down
        r.raise_for_status()
        return r.json()

    def cursor(self, name: str) -> int:
        """The saved cursor (time_us) of one consumer, from /health; 0 when it has none yet."""
        consumer = self.health().get("consumers", {}).get(name) or {}
        return int(consumer.get("cursor_time_us") or 0)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:]) or "(empty log)"

    def __enter__(self) -> "ServiceProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
