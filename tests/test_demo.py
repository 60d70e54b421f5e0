"""`make demo` works offline: demo/run.py (fake Jetstream replaying demo/events.jsonl + gunicorn) serves a
timeline, the network catalogue and the sync page within a minute, naming people as a new user expects."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.support.browser import free_port

pytestmark = [pytest.mark.slow, pytest.mark.once]  # the demo pins its own SQLite file

REPO = Path(__file__).resolve().parent.parent
DEADLINE_S = 60.0


def test_the_event_log_is_what_make_events_writes(tmp_path):
    out = tmp_path / "events.jsonl"
    subprocess.run([sys.executable, str(REPO / "demo" / "make_events.py"), str(out)], check=True, cwd=REPO,
                   capture_output=True)
    assert out.read_text() == (REPO / "demo" / "events.jsonl").read_text(), "rerun demo/make_events.py"
    frames = [json.loads(line) for line in out.read_text().splitlines()]
    assert all("time_us" not in f for f in frames)  # stamped at replay, so the log always looks recent
    subscribers: dict[str, set] = {}
    for f in frames:
        if f["commit"]["collection"] == "community.lexicon.rss.subscription":
            subscribers.setdefault(f["commit"]["record"]["url"], set()).add(f["did"])
    assert sum(len(s) >= 6 for s in subscribers.values()) >= 3
    assert len({f["did"] for f in frames}) == 20


def _wait_for(what: str, probe, proc, log: Path, deadline: float):
    last = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"demo exited with {proc.returncode}:\n{log.read_text()[-4000:]}"
        try:
            last = probe()
            if last:
                return last
        except requests.RequestException as exc:
            last = exc
        time.sleep(0.5)
    pytest.fail(f"{what} not ready within {DEADLINE_S:.0f} s (last: {last!r})\n{log.read_text()[-4000:]}")


def test_make_demo_shows_a_timeline_the_catalogue_and_sync(tmp_path):
    from demo.feature import accounts, load_frames

    ada = accounts(load_frames())["ada.demo.feather.test"]
    port, js_port = free_port(), free_port()
    log = tmp_path / "demo.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATHERREADER_") and k != "DATABASE_URL"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(REPO / "demo" / "run.py"), "--port", str(port),
                                 "--jetstream-port", str(js_port), "--db", str(tmp_path / "demo.db")],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    deadline = started + DEADLINE_S
    try:
        def feed():
            r = requests.get(f"{base}/xrpc/com.featherreader.getFeed",
                             params={"feed": "timeline", "actor": ada, "limit": 50}, timeout=5)
            return r.json()["records"] if r.status_code == 200 and r.json()["records"] else None

        records = _wait_for("getFeed", feed, proc, log, deadline)
        assert all(r["collection"] == "app.bsky.feed.post" and r["did"] != ada for r in records)
        times = [r["time_us"] for r in records]
        assert times == sorted(times, reverse=True)

        def catalogue():
            text = requests.get(f"{base}/network", timeout=5).text
            return text if "https://blog.example.org/feed.xml</a>: 12 accounts" in text else None

        page = _wait_for("/network", catalogue, proc, log, deadline)
        assert "tiny.example.com" not in page and "solo.example.com" not in page  # below the k-floor

        session = requests.Session()

        def sync_page():
            r = session.get(f"{base}/demo/sign-in", params={"as": "ada"}, timeout=5)
            written = re.search(r"So far: (\d+) writes? done", r.text)
            return r.text if r.status_code == 200 and "follows listed" in r.text and written and int(written[1]) > 0 \
                else None

        html = _wait_for("the sync page", sync_page, proc, log, deadline)
        assert "On for <strong>Bluesky</strong>, <strong>Tangled</strong> and <strong>Sifa</strong>." in html
        # Activity names the demo's people by the profiles the stream brought (offline: no look-up
        # succeeds), and the people waiting for a profile on one app are one line with their names.
        names = {handle.split(".")[0].capitalize() for handle in accounts(load_frames())}
        activity = re.search(r'<ol class="activity">(.*?)</ol>', html, re.S).group(1)
        assert "someone (" not in activity.lower() and "did:plc:" not in activity
        assert set(re.findall(r"</time> Followed (\w+) on (?:Bluesky|Tangled|Sifa)\.</li>", activity)) <= names
        waiting = re.findall(r"</time> (\d+) people have no (?:Sifa|Tangled) profile yet; Feather follows them when"
                             r" they join\.\s*<details class=\"people\"><summary>Show their names</summary>\s*"
                             r"<ul>(.*?)</ul>", activity, re.S)
        assert waiting, activity
        for count, listed in waiting:
            shown = re.findall(r"<li>([^<]*)</li>", listed)
            assert len(shown) == int(count) >= 2 and set(shown) <= names, (count, shown)
        home = session.get(f"{base}/", timeout=5).text
        authors = re.findall(r'<span class="who">(.*?)</span>', home)
        named = [re.fullmatch(r'<strong class="name">(\w+)</strong>', a) for a in authors]
        assert len(authors) == 5 and all(m and m[1] in names for m in named), authors  # names, not DIDs
        print(f"demo ready in {time.monotonic() - started:.1f} s")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-4000:]


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_killing_make_demo_with_sigkill_frees_its_ports_for_the_next_run(tmp_path):
    port, js_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATHERREADER_") and k != "DATABASE_URL"}
    cmd = [sys.executable, str(REPO / "demo" / "run.py"), "--port", str(port), "--jetstream-port", str(js_port),
           "--db", str(tmp_path / "demo.db")]
    for attempt in ("first", "second"):
        log = tmp_path / f"demo-{attempt}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + DEADLINE_S
        _wait_for("/health", lambda: requests.get(f"http://127.0.0.1:{port}/health", timeout=5).ok, proc, log,
                  deadline)
        assert _port_open(js_port)
        proc.kill()  # no chance to stop its children
        proc.wait()
        until = time.monotonic() + 20
        while (_port_open(port) or _port_open(js_port)) and time.monotonic() < until:
            time.sleep(0.2)
        assert not _port_open(port) and not _port_open(js_port), f"{attempt} run's children outlived it"
