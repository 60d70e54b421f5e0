"""The Activity list as a person reads it: consecutive rows of one kind and app whose sentences differ
only by the person are one line ("19 people have no Sifa profile yet; …") with the names in a
<details>, which works with JavaScript off. GET /api/sync/activity keeps one row per row.

The clock is fake: T0 is 2027-01-15 08:00:00 UTC.
"""
from __future__ import annotations

import re

import pytest

from tests.test_sync_kit import ALICE, BOB, CAROL, DAVE, T0
from tests.test_sync_status import env, make_env, name  # noqa: F401
from tests.test_sync_views import PAGE, in_db, sign_in, world  # noqa: F401

from feather import sql

PEOPLE = [(f"did:plc:person{n:017d}", f"p{n}.test", f"Person {n}") for n in range(19)]


def seed(rows, at: int = T0) -> None:
    """Activity rows, oldest first: (app, kind, subject, detail)."""
    from feather.sync.store import ensure_set, record_activity

    ensure_set(ALICE, at)
    for app, kind, subject, detail in rows:
        record_activity(ALICE, at, app, kind, subject, 3 if kind == "follow" else 0, detail)


def lines(now: int = T0) -> list[tuple[str, int, list[str]]]:
    from feather.sync import service

    return [(g["message"], g["count"], g["people"]) for g in service.activity(ALICE, 50, now=now).groups]


def test_nineteen_people_waiting_for_a_sifa_profile_are_one_line_with_their_names(env):
    from feather.sync import service

    for did, handle, display in PEOPLE:
        name(did, handle, display)
    seed([("sifa", "waiting", did, None) for did, _, _ in PEOPLE])
    assert lines() == [("19 people have no Sifa profile yet; Feather follows them when they join.", 19,
                        [f"Person {n} (@p{n}.test)" for n in range(18, -1, -1)])]
    rows = service.activity(ALICE, 50, now=T0)  # the API's rows are untouched: one per row, each its sentence
    assert len(rows) == 19
    assert rows[0] == {"at": T0, "app": "sifa", "kind": "waiting", "subject": PEOPLE[18][0], "points": 0,
                       "detail": None, "message": "Person 18 (@p18.test) has no Sifa profile yet; Feather follows"
                                                  " them there when they join."}


def test_only_consecutive_rows_of_the_same_kind_and_app_group(env):
    name(BOB, "bob.test", "Bob")
    name(CAROL, "carol.test", None)
    name(DAVE, "dave.test", "Dave")
    seed([("tangled", "follow", BOB, None), ("tangled", "follow", CAROL, None), ("tangled", "follow", DAVE, None),
          ("sifa", "follow", BOB, None),  # another app
          ("sifa", "waiting", CAROL, None),  # another kind
          ("sifa", "follow", DAVE, None), ("sifa", "follow", CAROL, None)])
    assert lines() == [
        ("Followed 2 people on Sifa.", 2, ["@carol.test", "Dave (@dave.test)"]),
        ("@carol.test has no Sifa profile yet; Feather follows them there when they join.", 1, ["@carol.test"]),
        ("Followed Bob (@bob.test) on Sifa.", 1, ["Bob (@bob.test)"]),
        ("Followed 3 people on Tangled.", 3, ["Dave (@dave.test)", "@carol.test", "Bob (@bob.test)"]),
    ]


def test_rows_whose_sentences_differ_by_more_than_the_person_stay_apart(env):
    name(BOB, "bob.test", "Bob")
    name(CAROL, "carol.test", "Carol")
    name(DAVE, "dave.test", "Dave")
    seed([("sifa", "failed", BOB, "follow: HTTP 400 InvalidRequest"),
          ("sifa", "failed", CAROL, "follow: HTTP 400 InvalidRequest"),
          ("sifa", "failed", DAVE, "follow: HTTP 502 Bad Gateway"),  # another reason
          ("grain", "waiting", BOB, None), ("grain", "waiting", BOB, None),  # the same person twice is not "2 people"
          ("", "resumed", None, None), ("", "resumed", None, None)])  # rows about nobody never group
    assert lines() == [
        ("Sync resumed.", 1, []),
        ("Sync resumed.", 1, []),
        ("Bob (@bob.test) has no Grain profile yet; Feather follows them there when they join.", 1,
         ["Bob (@bob.test)"]),
        ("Bob (@bob.test) has no Grain profile yet; Feather follows them there when they join.", 1,
         ["Bob (@bob.test)"]),
        ("Could not follow Dave (@dave.test) on Sifa: HTTP 502 Bad Gateway. Feather gave up.", 1,
         ["Dave (@dave.test)"]),
        ("Could not follow 2 people on Sifa: HTTP 400 InvalidRequest. Feather gave up.", 2,
         ["Carol (@carol.test)", "Bob (@bob.test)"]),
    ]


def test_a_group_of_writes_cut_short_and_of_unnamed_people_reads_as_plain_words(env):
    seed([("bluesky", "interrupted", BOB, "follow"), ("bluesky", "interrupted", CAROL, "follow"),
          ("tangled", "unfollow", BOB, None), ("tangled", "unfollow", CAROL, None)])
    assert lines() == [
        ("Unfollowed 2 people on Tangled.", 2,
         ["Someone (name not looked up yet)", "Someone (name not looked up yet)"]),
        ("Interrupted while sent to your PDS: follow 2 people on Bluesky. Feather checks whether each was written"
         " before trying again.", 2, ["Someone (name not looked up yet)", "Someone (name not looked up yet)"]),
    ]


def test_a_group_spanning_minutes_carries_its_first_and_newest_time(env):
    from feather.sync import service

    name(BOB, "bob.test", "Bob")
    name(CAROL, "carol.test", "Carol")
    seed([("tangled", "waiting", BOB, None)], at=T0 - 600)
    seed([("tangled", "waiting", CAROL, None)], at=T0)
    [line] = service.activity(ALICE, 50, now=T0).groups
    assert (line["first_at"], line["at"], line["count"]) == (T0 - 600, T0, 2)


# --- the page, JavaScript off
@pytest.fixture
def page_world(world):  # noqa: F811
    app, client, _ = world
    sign_in(app, client)
    return app, client


def activity_items(body: str) -> list[str]:
    block = re.search(r'<ol class="activity">(.*?)</ol>', body, re.S).group(1)
    return [" ".join(re.sub(r"<[^>]+>", " ", item).split())
            for item in re.findall(r'<li class="(?:ok|bad)">(.*?)</li>\s*(?=<li class=|$)', block, re.S)]


def test_the_page_shows_a_group_as_one_line_and_lists_the_names_in_details(page_world):
    app, client = page_world
    now = sql.now_s()

    def fill():
        for did, handle, display in PEOPLE[:3]:
            name(did, handle, display, now=now)
        seed([("sifa", "waiting", did, None) for did, _, _ in PEOPLE[:3]] + [("tangled", "follow", BOB, None)],
             at=now)
        name(BOB, "bob.test", "Bob", now=now)
    in_db(app, fill)
    body = client.get(PAGE).get_data(as_text=True)
    assert "did:plc:" not in body
    assert "<script" not in re.search(r'<ol class="activity">.*?</ol>', body, re.S).group(0)
    assert re.search(r"</time> 3 people have no Sifa profile yet; Feather follows them when they join\.\s*"
                     r'<details class="people"><summary>Show their names</summary>\s*'
                     r"<ul><li>Person 2 \(@p2\.test\)</li><li>Person 1 \(@p1\.test\)</li>"
                     r"<li>Person 0 \(@p0\.test\)</li></ul>\s*</details></li>", body)
    assert [re.sub(r"^\d\d:\d\d UTC ", "", item) for item in activity_items(body)] == [
        "Followed Bob (@bob.test) on Tangled.",
        "3 people have no Sifa profile yet; Feather follows them when they join. Show their names"
        " Person 2 (@p2.test) Person 1 (@p1.test) Person 0 (@p0.test)"]
    assert body.count("<details") == 1  # a single row has no names list


def test_a_group_spanning_minutes_shows_from_when_to_when(page_world):
    from feather.sync.status import clock

    app, client = page_world
    now = sql.now_s()

    def fill():
        seed([("tangled", "follow", BOB, None)], at=now - 3600)
        seed([("tangled", "follow", CAROL, None)], at=now)
        name(BOB, "bob.test", "Bob", now=now)
        name(CAROL, "carol.test", "Carol", now=now)
    in_db(app, fill)
    body = client.get(PAGE).get_data(as_text=True)
    first, last = (clock(at, sql.now_s()) for at in (now - 3600, now))
    assert re.search(rf'<span class="when"><time datetime="[^"]+">{re.escape(first)}</time> to '
                     rf'<time datetime="[^"]+">{re.escape(last)}</time></span> Followed 2 people on Tangled\.', body)
