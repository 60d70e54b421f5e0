"""Browser test bed: the real app under gunicorn, and Debian's Chromium driven by Playwright.

Fixtures (loaded by tests/browser/conftest.py):
    feather_server (session) -> FeatherServer: `gunicorn -k gevent -w 1 app:app` on a free loopback port,
                                development mode, a temp SQLite file, sign-in pointed at the `pds` fixture
    browser        (session) -> a Playwright Browser: /usr/bin/chromium headless with the flags that work
                                on a closed network (no sandbox, no background traffic), a fresh profile
    page_nojs                -> a Page in a context with JavaScript disabled (plain forms, POST + 303)
    page_js                  -> a Page with JavaScript on (htmx)
    Both pages collect `page.console_errors` (console errors, page errors, CSP violations) and are
    screenshotted into test-artifacts/ when the test fails.

No chromium or no playwright -> skip, unless FEATHER_REQUIRE_BROWSER=1 (CI), where it fails.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-quic"]
FOOTER_LINKS = {"Privacy": "/privacy", "Terms": "/terms", "About": "/about"}


def unavailable(msg: str):
    if os.environ.get("FEATHER_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{msg} (FEATHER_REQUIRE_BROWSER=1)", pytrace=False)
    pytest.skip(msg)


def chromium_path() -> str:
    for candidate in (os.environ.get("FEATHER_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    unavailable("chromium not installed (apt-get install -y chromium)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_htmx() -> None:
    """`make install` copies htmx from node_modules; do the same when only node_modules is there."""
    target = REPO / "static" / "vendor" / "htmx.min.js"
    source = REPO / "node_modules" / "htmx.org" / "dist" / "htmx.min.js"
    if not target.is_file() and source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


class FeatherServer:
    """The app as a user runs it: `flask db upgrade`, then gunicorn with the gevent worker."""

    def __init__(self, workdir: Path, env: dict[str, str], port: int | None = None):
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db_path = self.workdir / "feather.db"
        self.log_path = self.workdir / "gunicorn.log"
        self.env = {**os.environ, "FEATHERREADER_ENV": "development", "DATABASE_URL": f"sqlite:///{self.db_path}",
                    "FEATHERREADER_DATA_DIR": str(self.workdir / "data"), "FEATHERREADER_DISABLE_SCHEDULER": "1",
                    "FEATHERREADER_LOG_LEVEL": "INFO", "PORT": str(self.port), "PYTHONUNBUFFERED": "1",
                    "FEED_LABELERS": "", **env}  # no labeler on the internet; a test that wants one names its fake
        self.proc: subprocess.Popen | None = None

    def _bin(self, name: str) -> str:
        return str(Path(sys.executable).parent / name)

    def start(self, timeout: float = 60.0) -> "FeatherServer":
        self.workdir.mkdir(parents=True, exist_ok=True)
        up = subprocess.run([self._bin("flask"), "--app", "app", "db", "upgrade"], cwd=REPO, env=self.env,
                            capture_output=True, text=True, timeout=120)
        if up.returncode != 0:
            raise RuntimeError(f"flask db upgrade failed:\n{up.stdout}\n{up.stderr}")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [self._bin("gunicorn"), "-k", "gevent", "-w", "1", "--bind", f"127.0.0.1:{self.port}", "app:app"],
            cwd=REPO, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code in (200, 503):
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"gunicorn did not answer /health within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # gunicorn's own group (start_new_session)
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            except ProcessLookupError:
                pass
        self._log.close()

    # --- seeding through `flask dev-event` on the server's own shell (FEATHERREADER_ENV=development):
    # the HTTP route answers only a signed-in operator.
    def inject(self, **event) -> dict:
        args = [self._bin("flask"), "--app", "app", "dev-event"]
        for name in ("did", "collection", "op", "rkey", "subject"):
            if event.get(name) is not None:
                args += [f"--{name}", event.pop(name)]
        if "record" in event:
            args += ["--record", json.dumps(event.pop("record"))]
        assert not event, f"dev-event has no flag for {sorted(event)}"
        done = subprocess.run(args, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"flask dev-event failed:\n{done.stdout}\n{done.stderr}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def launch_browser(playwright):
    return playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)


@pytest.fixture(scope="session")
def playwright_instance():
    chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright_instance):
    # launch() gives every run a fresh temporary --user-data-dir, removed at close.
    b = launch_browser(playwright_instance)
    yield b
    b.close()


@pytest.fixture(scope="session")
def feather_server(pds, tmp_path_factory):
    ensure_htmx()
    server = FeatherServer(tmp_path_factory.mktemp("feather-browser"), {
        "FEATHERREADER_NETWORK_PAGE": "1",
        "FEATHERREADER_NETWORK_INDEX": "1",  # lets the dev injection route reach the catalogue's handler
        "FEATHERREADER_ALLOW_APP_PASSWORDS": "1",
        "FEATHERREADER_ALLOW_PRIVATE_NETWORK": "1",
        "FEATHERREADER_HANDLE_RESOLVER": pds.pds_url,
        "FEATHERREADER_PLC_URL": pds.plc_url,
        "FEATHERREADER_LOGIN_RATE_LIMIT": "1000",
        "FEATHERREADER_ADOPTION_INTERVAL_SECS": "0",
        "FEATHERREADER_RELAY_HOSTS": "http://127.0.0.1:9",
        # carol operates this instance: the signed-in page walk includes /admin
        "FEATHERREADER_ADMIN_DIDS": pds.accounts["carol"].did,
    })
    server.start()
    yield server
    server.stop()


def _watch(page) -> None:
    page.console_errors = []
    page.on("console", lambda msg: page.console_errors.append(f"console.{msg.type}: {msg.text}")
            if msg.type == "error" else None)
    page.on("pageerror", lambda exc: page.console_errors.append(f"pageerror: {exc}"))


def _page(request, browser, js: bool):
    context = browser.new_context(java_script_enabled=js, base_url=request.getfixturevalue("feather_server").url)
    context.set_default_timeout(15_000)
    if js:  # CSP violations, as the page itself sees them (also logged to the console)
        context.add_init_script("window.__csp = []; document.addEventListener('securitypolicyviolation',"
                                " e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));")
    page = context.new_page()
    _watch(page)
    yield page
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-150:]
        try:
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
            (ARTIFACTS / f"{name}.html").write_text(page.content())
        except Exception as exc:  # a crashed page must not hide the test's own failure
            print(f"screenshot failed: {exc}", file=sys.stderr)
    context.close()


@pytest.fixture
def page_nojs(request, browser):
    yield from _page(request, browser, js=False)


@pytest.fixture
def page_js(request, browser):
    yield from _page(request, browser, js=True)


def capture_reports(item, call, outcome) -> None:
    """For a conftest's pytest_runtest_makereport hookwrapper: remember each phase's report on the item."""
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
