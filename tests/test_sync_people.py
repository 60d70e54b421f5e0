"""The people cache (feather/sync/people.py): pages name people by display name and verified handle,
never by DID, and never wait on the network; the sync-people job fills the cache in the background.

Identity answers come from local fakes (tests/test_identity.py's FakeHttp and FakeDns behind a real
IdentityResolver), so the two-way handle check is the production code's.
"""
from __future__ import annotations

import pytest

from tests.test_identity import PLC, FakeDns, did_doc, make
from tests.test_sync_kit import T0

from feather import sql

ADA = "did:plc:adaadaadaadaadaadaadaada"
EVE = "did:plc:eveeveeveeveeveeveeveeve"
PDS = "https://pds.example.com"


@pytest.fixture
def db_app(app):
    from feather.db import db

    with app.app_context(), db.connection_context():
        yield app


def world(docs: dict, dns: dict):
    """A resolver over PLC documents and DNS TXT records, and a profile reader over a dict."""
    routes = {f"{PLC}/{did}": (200, doc) for did, doc in docs.items()}
    resolver, http, _ = make(routes, FakeDns({f"_atproto.{h}": [f"did={d}"] for h, d in dns.items()}))
    profiles: dict[str, dict] = {}
    reads: list[str] = []

    def read_profile(pds: str, did: str):
        reads.append(f"{pds} {did}")
        return profiles.get(did)

    return resolver, http, profiles, read_profile, reads


def cached(did):
    return sql.rows("SELECT handle, display_name, fetched_at, next_fetch_at, failures FROM sync_people WHERE did = ?",
                    (did,))


def test_a_page_never_waits_it_marks_unknown_people_as_wanted(db_app):
    from feather.sync.people import UNKNOWN, labels

    assert labels([ADA, ADA, None, "not a did"], T0) == {ADA: UNKNOWN, "not a did": UNKNOWN}
    assert cached(ADA) == [(None, None, 0, 0, 0)]  # wanted: due for the job at once
    assert cached("not a did") == []  # never looked up


def test_the_job_fills_in_a_verified_handle_and_the_display_name(db_app):
    from feather.sync.people import labels, refresh_due

    resolver, http, profiles, read_profile, reads = world({ADA: did_doc(ADA, "ada.example.com", PDS)},
                                                          {"ada.example.com": ADA})
    profiles[ADA] = {"$type": "app.bsky.actor.profile", "displayName": "Ada Lovelace"}
    labels([ADA], T0)
    assert refresh_due(T0, resolver, read_profile) == 1
    assert reads == [f"{PDS} {ADA}"]
    assert cached(ADA) == [("ada.example.com", "Ada Lovelace", T0, T0 + 7 * 86400, 0)]
    assert labels([ADA], T0 + 5) == {ADA: "Ada Lovelace (@ada.example.com)"}
    calls = len(http.calls)
    assert refresh_due(T0 + 5, resolver, read_profile) == 0 and len(http.calls) == calls  # fresh: not asked again
    profiles.pop(ADA)  # a week later the answer is refreshed: the display name is gone now
    assert refresh_due(T0 + 7 * 86400, resolver, read_profile) == 1
    assert labels([ADA], T0 + 7 * 86400) == {ADA: "@ada.example.com"}


def test_a_handle_that_does_not_point_back_is_never_shown(db_app):
    from feather.sync.people import NAMELESS, labels, refresh_due

    # Eve's document claims ada's handle, whose DNS names ada: the claim does not verify.
    resolver, _, profiles, read_profile, _ = world({EVE: did_doc(EVE, "ada.example.com", PDS)},
                                                   {"ada.example.com": ADA})
    labels([EVE], T0)
    refresh_due(T0, resolver, read_profile)
    assert labels([EVE], T0) == {EVE: NAMELESS}
    profiles[EVE] = {"displayName": "Eve"}
    refresh_due(T0 + 7 * 86400, resolver, read_profile)
    assert labels([EVE], T0 + 7 * 86400) == {EVE: "Eve"}


def test_display_names_lose_control_and_direction_characters_and_are_capped(db_app):
    from feather.sync.people import clean_name

    assert clean_name("  Ada\u202e\u200b  \n Lovelace\x07 ") == "Ada Lovelace"
    assert clean_name("x" * 200) == "x" * 63 + "…"
    assert (clean_name(""), clean_name(" \u202e "), clean_name(42), clean_name(None)) == (None, None, None, None)


def test_a_display_name_of_exactly_the_cap_is_kept_whole():
    from feather.sync.people import clean_name

    assert clean_name("x" * 64) == "x" * 64
    assert clean_name("x" * 65) == "x" * 63 + "…"


def test_a_failed_look_up_backs_off_and_is_tried_again(db_app):
    from feather.sync.people import UNREACHABLE, labels, refresh_due

    resolver, http, profiles, read_profile, _ = world({}, {})  # PLC does not know ada yet
    labels([ADA], T0)
    assert refresh_due(T0, resolver, read_profile) == 0
    assert cached(ADA) == [(None, None, 0, T0 + 600, 1)]
    assert labels([ADA], T0) == {ADA: UNREACHABLE}
    assert refresh_due(T0 + 599, resolver, read_profile) == 0 and cached(ADA)[0][4] == 1  # not due yet
    assert refresh_due(T0 + 600, resolver, read_profile) == 0
    assert cached(ADA) == [(None, None, 0, T0 + 600 + 1200, 2)]  # doubled
    http.routes[f"{PLC}/{ADA}"] = (200, did_doc(ADA, "ada.example.com", PDS))
    resolver.txt_lookup.records["_atproto.ada.example.com"] = [f"did={ADA}"]
    assert refresh_due(T0 + 1800, resolver, read_profile) == 1
    assert labels([ADA], T0 + 1800) == {ADA: "@ada.example.com"}


def test_each_run_looks_up_at_most_its_share_never_looked_up_first(db_app):
    from feather.sync.people import labels, refresh_due

    dids = [f"did:plc:person{n:017d}" for n in range(25)]
    docs = {d: did_doc(d, f"p{n}.example.com", PDS) for n, d in enumerate(dids)}
    resolver, http, _, read_profile, reads = world(docs, {f"p{n}.example.com": d for n, d in enumerate(dids)})
    labels(dids, T0)
    assert refresh_due(T0, resolver, read_profile, limit=20) == 20
    assert len(reads) == 20
    assert sql.scalar("SELECT COUNT(*) FROM sync_people WHERE fetched_at = 0") == 5
    assert refresh_due(T0 + 20, resolver, read_profile, limit=20) == 5


def test_people_no_page_has_shown_for_30_days_are_forgotten(db_app):
    from feather.sync.people import labels, refresh_due

    resolver, _, _, read_profile, _ = world({}, {})
    labels([ADA], T0)
    labels([EVE], T0 + 29 * 86400)
    refresh_due(T0 + 30 * 86400 + 1, resolver, read_profile, limit=0)
    assert (cached(ADA), len(cached(EVE))) == ([], 1)


def test_the_sync_people_job_is_scheduled(app):
    from feather.sync import jobs, people

    job = next(j for j in jobs(app.config["FEATHER"]) if j.id == "sync-people")
    assert (job.seconds, job.claimed) == (people.RUN_SECS, True)


# --- what Feather already holds: the timelines' verified handles and stored profile records
def hold(did: str, handle: str | None = None, display=None, handle_checked_us: int = 1) -> None:
    """What the feeds feature keeps about did: a verified handle in feed_identities and/or the
    app.bsky.actor.profile record the stream stored."""
    from flask import current_app

    from feather.db import current_dialect, db
    from feather.feeds import config_for
    from feather.feeds.store.records import store
    from feather.feeds.store.schema import ensure

    config = config_for(current_app.config["FEATHER"])
    ensure(config)
    if handle is not None:
        db.execute_sql(current_dialect().q("INSERT INTO feed_identities (did, handle, handle_checked_us)"
                                           " VALUES (?, ?, ?)"), (did, handle, handle_checked_us))
    if display is not None:
        profile = config.by_nsid("app.bsky.actor.profile")
        store(profile, uri=f"at://{did}/app.bsky.actor.profile/self", did=did, rkey="self", cid="bafy",
              record={"$type": "app.bsky.actor.profile", "displayName": display}, time_us=1)


CAROL = "did:plc:carolcarolcarolcarolcaro"
DAVE = "did:plc:davedavedavedavedavedave"


def test_people_the_timelines_hold_are_named_before_any_look_up(db_app):
    from feather.sync.people import UNKNOWN, labels

    hold(ADA, "ada.example.com", "Ada Lovelace")
    hold(EVE, display="Eve")
    hold(CAROL, "carol.example.com")
    assert labels([ADA, EVE, CAROL, DAVE], T0) == {ADA: "Ada Lovelace (@ada.example.com)", EVE: "Eve",
                                                   CAROL: "@carol.example.com", DAVE: UNKNOWN}
    assert cached(ADA) == [(None, None, 0, 0, 0)]  # still wanted: the job verifies and refreshes on its own


def test_a_failed_look_up_still_names_a_person_whose_profile_the_stream_stored(db_app):
    from feather.sync.people import UNREACHABLE, labels, refresh_due

    resolver, _, _, read_profile, _ = world({}, {})  # offline: every look-up fails
    hold(EVE, display="Eve")
    labels([EVE, DAVE], T0)
    assert refresh_due(T0, resolver, read_profile) == 0
    assert labels([EVE, DAVE], T0) == {EVE: "Eve", DAVE: UNREACHABLE}


def test_the_caches_own_answer_comes_first_and_the_store_fills_what_it_lacks(db_app):
    from feather.sync.people import labels, refresh_due

    resolver, _, _, read_profile, _ = world({ADA: did_doc(ADA, "ada.example.com", PDS)}, {"ada.example.com": ADA})
    labels([ADA], T0)
    refresh_due(T0, resolver, read_profile)  # a handle, no display name on the PDS
    hold(ADA, "stale.example.com", "Countess Ada")
    assert labels([ADA], T0) == {ADA: "Countess Ada (@ada.example.com)"}


def test_a_handle_an_identity_event_unverified_and_a_hostile_name_are_not_shown_as_stored(db_app):
    from feather.sync.people import UNKNOWN, labels

    hold(CAROL, "carol.example.com", handle_checked_us=0)  # the stream said carol's identity changed
    hold(EVE, display="  E\u202eve\u200b\n ")
    assert labels([CAROL, EVE], T0) == {CAROL: UNKNOWN, EVE: "Eve"}


def test_the_activity_list_names_people_the_store_holds(db_app):
    from feather.sync import service
    from feather.sync.store import ensure_set, record_activity

    ensure_set(ADA, T0)
    hold(EVE, display="Eve")
    record_activity(ADA, T0, "sifa", "waiting", EVE, 0, None)
    record_activity(ADA, T0, "tangled", "follow", EVE, 3, None)
    assert [a["message"] for a in service.activity(ADA, 50, now=T0)] == [
        "Followed Eve on Tangled.", "Eve has no Sifa profile yet; Feather follows them there when they join."]
