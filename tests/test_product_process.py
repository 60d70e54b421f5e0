"""The product as two people meet it, with the whole service running: the `make run` process (gunicorn,
the gevent worker and its background workers), Bluesky's reference PDS on loopback, and Debian's
Chromium driven by Playwright. Everything goes through pages, by clicking, the way a person does.

People (fresh accounts on the reference PDS, signed in with app passwords):
  - Ada, at 1280 px with JavaScript on;
  - Ben, at 390 px with JavaScript off; he also operates this instance (FEATHERREADER_ADMIN_DIDS).

Steps:
  1. Both open the home page and follow "Sign in" (back to home afterwards). Ben's first try is sent
     with an invalid form token: the form comes back with his handle and one sentence, nothing sent.
     Both see the signed-in home dashboard (timeline, sync and catalogue panels).
  2. Each finds Timeline, Sync, their own page and Privacy through the navigation only; every page
     either visits has its headings in order (one h1, none before it, no level skipped).
  3. Ada asks to be named in the catalogue (home panel -> attribution page); Ben turns graph sync on
     (own page -> manage -> preview -> turn on), so the service holds rows of every kind about him.
  4. Ben opens /admin on his phone once the running workers have published their stream and job
     rows: the tables reflow (no horizontal overflow at 390 px, every cell shows its column's label).
  5. Ben opens "Delete my data" (Privacy -> the confirmation page). kill -9 of the whole service, then
     a restart (the generated development SECRET_KEY must be the one kept in the data folder).
     Both are still signed in; Ben presses the button on the page loaded before the crash.
  6. Ben is also signed in on a second device (HTTP). End state, exact: Ben is signed out on both; his
     refresh token, as Feather held it, is refused by the PDS; signed in again with a new app
     password, his export holds nothing but that new sign-in (one browser session, a new grant);
     Ada's export is byte-for-byte what it was before, and she is still signed in and named.

Timing is printed (`-s` shows it); nothing asserts on time.
"""
from __future__ import annotations

import json
import random
import re
import string
import time
from pathlib import Path

import pytest

from tests.browser.helpers import heading_problems
from tests.support.browser import ARTIFACTS, ensure_htmx
from tests.support.fake_jetstream import FakeJetstream
from tests.support.pds import xrpc
from tests.support.process_world import (
    Person,
    app_password,
    create_account,
    ok,
    print_service_log,
    wait_for,
)
from tests.support.service_process import ServiceProcess, service_env

pytestmark = [pytest.mark.pds, pytest.mark.browser, pytest.mark.slow, pytest.mark.once]  # browser: SQLite pass (the deletion on PostgreSQL: test_product_data_live.py)

EXPIRED = "This form had expired, so nothing was sent. Check it and send it again."
DELETED = ("Your data on this server is deleted and you are signed out. Your records on your own server "
           "are untouched.")
PANELS = ["Your timeline", "Graph sync", "The network catalogue"]
NAV = ["Home", "Timeline", "Sync", "Privacy"]


def test_two_people_find_their_way_survive_a_kill9_and_one_deletes_their_data(pds, database_url, tmp_path, browser):
    t0 = time.monotonic()

    def mark(label: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {label}", flush=True)

    ensure_htmx()
    sfx = "".join(random.choice(string.ascii_lowercase) for _ in range(5))  # the session PDS is shared
    ada, ben = create_account(pds, f"ada{sfx}"), create_account(pds, f"ben{sfx}")
    data_dir = tmp_path / "data"
    mark("two accounts on the reference PDS")
    with FakeJetstream() as js:
        env = service_env(
            DATABASE_URL=database_url, FEATHERREADER_ENV="development", FEATHERREADER_DATA_DIR=data_dir,
            FEATHERREADER_ALLOW_APP_PASSWORDS=True, FEATHERREADER_ALLOW_PRIVATE_NETWORK=True,
            FEATHERREADER_JETSTREAM_HOSTS=js.url, FEATHERREADER_PLC_URL=pds.plc_url,
            FEATHERREADER_HANDLE_RESOLVER=pds.pds_url, FEATHERREADER_ADMIN_DIDS=ben.did,
            FEATHERREADER_LOG_LEVEL="INFO", SECRET_KEY=None)  # development keeps a generated one
        svc = ServiceProcess(env, tmp_path / "gunicorn.log")
        desk = browser.new_context(base_url=svc.url, java_script_enabled=True, viewport={"width": 1280, "height": 900})
        phone = browser.new_context(base_url=svc.url, java_script_enabled=False, viewport={"width": 390, "height": 844})
        pages = {"ada": desk.new_page(), "ben": phone.new_page()}
        console: list[str] = []
        pages["ada"].on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        pages["ada"].on("pageerror", lambda e: console.append(str(e)))
        try:
            scenario(pds, svc, pages, ada, ben, data_dir, database_url, mark)
            assert console == [], f"console errors with JavaScript on: {console}"
        except BaseException:
            ARTIFACTS.mkdir(exist_ok=True)
            for who, page in pages.items():
                try:
                    page.screenshot(path=str(ARTIFACTS / f"product-process-{who}.png"), full_page=True)
                    (ARTIFACTS / f"product-process-{who}.html").write_text(page.content())
                except Exception as exc:  # noqa: BLE001 (a dead page must not hide the test's own failure)
                    print(f"screenshot of {who} failed: {exc}")
            print_service_log(svc, 80)
            raise
        finally:
            desk.close()
            phone.close()
            svc.stop()
    mark("done")


def scenario(pds, svc, pages, ada, ben, data_dir: Path, database_url: str, mark) -> None:
    a, b = pages["ada"], pages["ben"]
    svc.start()
    mark(f"service up on {svc.url}")
    problems: list[str] = []  # headings out of order, collected on every page and asserted at the end

    # 1. Sign in through the sign-in page; Ben's first form carries an invalid token.
    for page in (a, b):
        page.goto("/")
        problems += heading_problems(page)
        click(page, page.locator("header.site").get_by_role("link", name="Sign in"))
        assert page.url == f"{svc.url}/login?next=/", page.url
        problems += heading_problems(page)
    sign_in(a, ada, app_password(pds, ada))
    b.fill("#pw-identifier", ben.handle)
    b.fill("#password", app_password(pds, ben, "feather-e2e-first"))
    b.evaluate("document.querySelector('#pw-identifier').form.querySelector('[name=csrf_token]').value = 'stale'")
    response = click(b, b.get_by_role("button", name="Sign in with an app password"))
    assert response.status == 400
    assert b.locator("#login-error").inner_text() == EXPIRED
    assert (b.input_value("#pw-identifier"), b.input_value("#password")) == (ben.handle, "")
    assert b.locator("header.site .account").count() == 0
    sign_in(b, ben, app_password(pds, ben))
    for page, acct in ((a, ada), (b, ben)):
        assert page.get_by_role("heading", level=1).inner_text() == f"Welcome back, @{acct.handle}"
        assert page.locator(".panels h2").all_inner_texts() == PANELS
        problems += heading_problems(page)
    mark("both signed in through the sign-in page (Ben after an invalid form token); home is the dashboard")

    # 2. Timeline, Sync, their own page and Privacy, through the navigation only.
    for page, acct in ((a, ada), (b, ben)):
        problems += walk(page, acct, svc.url)
    mark("both found Timeline, Sync, their own page and Privacy by the navigation")

    # 3. Ada asks to be named; Ben turns graph sync on.
    click(a, a.locator("header.site .brand"))
    click(a, a.get_by_role("link", name="Choose whether you are named"))
    problems += heading_problems(a)
    click(a, a.get_by_role("button", name="Name me next to my feeds"))
    assert "You may now be named" in a.locator("p.flash.ok").inner_text()
    click(b, b.locator("header.site .account"))
    click(b, b.get_by_role("link", name="Manage social graph sync"))
    problems += heading_problems(b)
    click(b, b.get_by_role("button", name="Preview", exact=True))
    problems += heading_problems(b)
    click(b, b.get_by_role("button", name="Turn sync on", exact=True))
    assert b.locator("p.flash.info").inner_text().startswith("Sync is on."), b.locator("main").inner_text()[:500]
    ada_export = export(a)
    assert ada_export["network"]["attributed"] is True
    mark("Ada is named in the catalogue; Ben's graph sync is on")

    # 4. /admin on Ben's phone, with the rows the running workers publish.
    rows = admin_rows(b)
    problems += heading_problems(b)
    problems += reflow_problems(b)
    mark(f"/admin at 390 px: {rows}")

    # 5. The delete confirmation is open when the service dies; both survive the restart.
    click(b, b.get_by_role("navigation", name="Main").get_by_role("link", name="Privacy"))
    click(b, b.get_by_role("link", name="Delete my data"))
    assert b.get_by_role("heading", level=1).inner_text() == "Delete your data"
    held = b.locator("dl.held").inner_text()
    for line in ("Your choice of apps (bluesky, tangled) and whether sync is on (it is on).",
                 "of activity log", "That your timeline is kept on this server", "app-password session"):
        assert line in held, f"{line!r} is not among what Ben holds:\n{held}"
    problems += heading_problems(b)
    svc.kill9()
    mark("kill -9 with Ben's delete confirmation open")
    svc.start()
    mark("service restarted")
    a.reload()
    assert a.locator("header.site .account").inner_text() == f"@{ada.handle}", "Ada was signed out by the restart"
    second = b.context.new_page()  # the confirmation page stays as it was loaded before the crash
    second.goto("/")
    assert second.locator("header.site .account").inner_text() == f"@{ben.handle}", "Ben was signed out by the restart"
    second.close()

    # 6. Ben deletes his data with the form he had open; the end state, exactly. He is also signed in
    # on a second device (a script, over HTTP), whose session must end with the deletion too.
    laptop = Person(svc, ben, "Ben's laptop")
    laptop.sign_in(app_password(pds, ben, "feather-e2e-laptop"))
    refresh = held_refresh_token(database_url, data_dir, ben.did)  # the latest sign-in's grant
    deleted_at = int(time.time())
    response = click(b, b.get_by_role("button", name="Delete my data and sign me out"))
    first = response.request.redirected_from
    assert first is not None and (first.method, first.response().status) == ("POST", 303), response.url
    assert b.url == f"{svc.url}/"
    assert b.locator("p.flash.info").inner_text() == DELETED
    assert b.locator("header.site .account").count() == 0
    assert b.locator("header.site").get_by_role("link", name="Sign in").is_visible()
    assert b.context.request.get("/api/session").json()["signedIn"] is False
    mark("Ben deleted his data and is signed out")

    renewed = xrpc(pds.pds_url, "POST", "com.atproto.server.refreshSession", token=refresh)
    assert renewed.status_code in (400, 401) and renewed.json().get("error") in ("ExpiredToken", "InvalidToken"), \
        f"the PDS still renews the session Feather held for Ben: {renewed.status_code} {renewed.text[:300]}"
    assert laptop.get("/api/session").json()["signedIn"] is False, "Ben's other device is still signed in"
    laptop.sign_in(app_password(pds, ben, "feather-e2e-again"))
    left = ok(laptop.get("/privacy/export"), "Ben's export after the deletion")
    print(f"  Ben's export after signing in again: {json.dumps(left)[:600]}")
    assert_only_a_new_sign_in(left, ben, deleted_at)
    assert export(a) == ada_export, "Ada's data changed when Ben deleted his"
    click(a, a.locator("header.site .brand"))
    assert a.locator("header.site .account").inner_text() == f"@{ada.handle}"
    assert a.locator("#home-network + p .badge").inner_text() == "Named"
    mark("the PDS refuses Ben's old session; Ben's export holds only the new sign-in; Ada untouched")
    assert problems == [], "headings out of order or tables that do not reflow:\n" + "\n".join(problems)


def click(page, locator):
    """Click a link or button and wait for the page it leads to; returns that response."""
    with page.expect_navigation() as nav:
        locator.click()
    return nav.value


def sign_in(page, acct, password: str) -> None:
    page.fill("#pw-identifier", acct.handle)
    page.fill("#password", password)
    click(page, page.get_by_role("button", name="Sign in with an app password"))
    assert page.locator("header.site .account").inner_text() == f"@{acct.handle}", page.locator("main").inner_text()
    assert page.url.endswith("/") and not page.url.endswith("//"), page.url  # back where the person started


def walk(page, acct, base: str) -> list[str]:
    nav = page.get_by_role("navigation", name="Main")
    assert [link.inner_text() for link in nav.get_by_role("link").all()] == NAV
    problems = []
    for label, path, h1 in (("Timeline", "/timeline", None), ("Sync", "/sync", "Social graph sync")):
        click(page, nav.get_by_role("link", name=label, exact=True))
        assert page.url == base + path, page.url
        assert nav.get_by_role("link", name=label, exact=True).get_attribute("aria-current") == "page"
        if h1:
            assert page.get_by_role("heading", level=1).inner_text() == h1
        problems += heading_problems(page)
    click(page, page.locator("header.site .account"))
    assert page.url == f"{base}/u/{acct.handle}"
    assert page.get_by_role("heading", level=1).inner_text() == f"@{acct.handle}"
    problems += heading_problems(page)
    click(page, nav.get_by_role("link", name="Privacy", exact=True))
    assert page.url == base + "/privacy"
    assert page.get_by_role("heading", name="What this server holds about you").is_visible()
    problems += heading_problems(page)
    return problems


def export(page) -> dict:
    r = page.context.request.get("/privacy/export")
    assert r.status == 200 and r.headers["content-type"].startswith("application/json"), r.status
    return r.json()


def admin_rows(page) -> dict[str, list[str]]:
    """Open /admin until the workers' stream and job rows are there; their names per table."""
    found: dict[str, list[str]] = {}

    def published() -> bool:
        page.goto("/admin")
        for section in ("Streams", "Scheduled jobs"):
            table = page.locator("section").filter(has=page.get_by_role("heading", name=section, exact=True))
            found[section] = table.locator("tbody th[scope=row]").all_inner_texts()
        return all(found.values())
    wait_for(published, 45, lambda: f"stream and job rows on /admin: {found}", interval=1.0)
    return found


REFLOW = """() => [...document.querySelectorAll('table.reflow')].flatMap(table => {
  const heads = [...table.querySelectorAll('thead th')].map(th => th.textContent.trim());
  return [...table.querySelectorAll('tbody tr')].flatMap(tr => [...tr.children].map((cell, i) => ({
    row: tr.querySelector('th').textContent.trim(), column: heads[i], tag: cell.tagName,
    label: cell.dataset.label || null, shown: getComputedStyle(cell, '::before').content,
    display: getComputedStyle(cell).display, right: cell.getBoundingClientRect().right})));
})"""


def reflow_problems(page) -> list[str]:
    """At 390 px: nothing wider than the screen, every data cell stacked and showing its column's name."""
    width = page.viewport_size["width"]
    problems = []
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    if overflow > 0:
        problems.append(f"/admin is {overflow} px wider than the {width} px screen")
    cells = page.evaluate(REFLOW)
    assert cells, "no table rows on /admin"
    for c in cells:
        where = f"/admin {c['row']} / {c['column']}"
        if c["tag"] == "TH":
            continue  # the row's own name, shown as its title
        if c["label"] != c["column"] or c["shown"] != json.dumps(c["column"]):
            problems.append(f"{where}: labelled {c['label']!r}, shows {c['shown']!r}")
        if c["display"] != "grid":
            problems.append(f"{where}: not stacked on a phone (display {c['display']})")
        if c["right"] > width:
            problems.append(f"{where}: ends at {c['right']:.0f} px, past the screen")
    print(f"  /admin: {len(cells)} cells checked at {width} px")
    return problems


def held_refresh_token(database_url: str, data_dir: Path, did: str) -> str:
    """The refresh token Feather holds for did, opened the way the service opens it (the development
    SECRET_KEY kept in the data folder): what the PDS must refuse once the person has deleted their data."""
    from types import SimpleNamespace

    from playhouse.db_url import connect

    from feather.auth.seal import Sealer

    sealer = Sealer.from_settings(SimpleNamespace(featherreader_token_keys="",
                                                  secret_key=(data_dir / "dev-secret-key").read_text().strip()))
    db = connect(database_url)
    try:
        mark = "%s" if database_url.startswith("postgres") else "?"
        row = db.execute_sql(f"SELECT refresh_enc FROM auth_grant WHERE did = {mark}", (did,)).fetchone()
    finally:
        db.close()
    assert row is not None, f"no grant held for {did}"
    return sealer.open(row[0], f"{did}:refresh")


def assert_only_a_new_sign_in(body: dict, acct, deleted_at: int) -> None:
    """The export of someone who deleted their data and signed in again: the new grant, browser
    session and timeline registration (all made after the deletion), and not one row from before."""
    grant, sessions = body["sign_in"]["grant"], body["sign_in"]["browser_sessions"]
    assert (body["did"], grant["kind"], len(sessions)) == (acct.did, "password", 1), body
    assert grant["created_at"] >= deleted_at and sessions[0]["created_at"] >= deleted_at, body["sign_in"]
    served = body["timelines"]["served"]
    assert served["source"] == "signed-in" and served["added_us"] >= deleted_at * 1_000_000, served
    assert body["sync"] == {"sets": [], "follow_mirror": [], "queue": [], "waiting": [], "activity": []}, body["sync"]
    assert body["network"] == {"indexed_records": [], "attributed": False, "opted_out": False}, body["network"]
    assert body["timelines"]["timeline"] == [], body["timelines"]
    assert set(body) == {"did", "handle", "sign_in", "sync", "network", "timelines"}, sorted(body)
    assert re.fullmatch(r"ben[a-z]{5}\.test", body["handle"]), body["handle"]
