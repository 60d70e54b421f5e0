"""Publishing a feed generator record: operators only, the collection's write permission asked for
when they click, the record written to their own repo and remembered for describeFeedGenerator."""
from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from feather.auth import is_admin
from feather.atproto.pds import ScopeMissing
from feather.feeds.web.publish import PublishError, check_text, graphemes
from tests.fixtures.feeds.feedkit import feeds_app, toml
from tests.test_sync_views import csrf, sign_in

A, B = "did:plc:aaaa", "did:plc:bbbb"
SCOPE = "repo:app.bsky.feed.generator"
URI = f"at://{A}/app.bsky.feed.generator/timeline"


class FakeRepo:
    """The publisher's PDS as a PdsClient sees it: records by (collection, rkey)."""

    def __init__(self, refuse=None):
        self.records, self.refuse = {}, refuse

    def put_record(self, repo, collection, rkey, record):
        if self.refuse:
            raise self.refuse
        self.records[(repo, collection, rkey)] = record
        return {"uri": f"at://{repo}/{collection}/{rkey}", "cid": "bafyfake"}

    def delete_record(self, repo, collection, rkey):
        self.records.pop((repo, collection, rkey), None)
        return {}


@pytest.fixture
def world(make_app, tmp_path, monkeypatch):
    app = feeds_app(make_app, tmp_path, toml(), FEATHERREADER_PUBLIC_URL="https://feather.example.com",
                    FEATHERREADER_ADMIN_DIDS=[A])
    repo = FakeRepo()
    monkeypatch.setattr("feather.feeds.web.publish_views.pds_client", lambda did: repo)
    return app, app.test_client(), repo


def post_form(client, **fields):
    return client.post("/feeds/publish", data={"csrf_token": csrf(client), "feed": "timeline", **fields})


def describe(client):
    return client.get("/xrpc/app.bsky.feed.describeFeedGenerator").json


def test_only_the_configured_operators_are_admins(make_app):
    app = make_app(FEATHERREADER_ADMIN_DIDS=f"{A}, did:plc:zzzz")
    with app.app_context():
        assert [is_admin(d) for d in (A, "did:plc:zzzz", B, f"{A}0", "did:plc:aaa", "", None)] == [
            True, True, False, False, False, False, False]


def test_someone_who_is_not_an_operator_cannot_publish(world):
    app, client, repo = world
    sign_in(app, client, did=B, handle="bob.test")
    assert client.get("/feeds/publish").status_code == 403
    assert post_form(client, action="publish", display_name="Mine").status_code == 403
    assert repo.records == {}


def test_publishing_writes_the_record_and_the_generator_lists_it(world):
    app, client, repo = world
    sign_in(app, client, did=A, handle="alice.test")  # an app-password grant may write any collection
    r = post_form(client, action="publish", display_name="  Following  ", description="Everyone I follow, in order")
    assert (r.status_code, r.headers["Location"]) == (303, "/feeds/publish")
    record = repo.records[(A, "app.bsky.feed.generator", "timeline")]
    assert {k: v for k, v in record.items() if k != "createdAt"} == {
        "$type": "app.bsky.feed.generator", "did": "did:web:feather.example.com", "displayName": "Following",
        "description": "Everyone I follow, in order"}
    assert describe(client) == {"did": "did:web:feather.example.com", "feeds": [{"uri": URI}]}
    page = client.get("/feeds/publish").text
    assert f"Published: {URI}." in page and f"Published as <code>{URI}</code>" in page
    post_form(client, action="unpublish")
    assert repo.records == {} and describe(client)["feeds"] == []


def test_an_oauth_sign_in_without_the_permission_is_asked_for_it_first(world):
    app, client, repo = world
    sign_in(app, client, did=A, handle="alice.test", kind="oauth", scope="atproto")
    r = post_form(client, action="publish", display_name="Following", description="Mine")
    target = urlsplit(r.headers["Location"])
    query = parse_qs(target.query)
    assert (r.status_code, target.path, query["scope"]) == (303, "/oauth/consent", [SCOPE])
    assert query["next"] == ["/feeds/publish?feed=timeline&display_name=Following&description=Mine"]
    assert repo.records == {}
    page = client.get(query["next"][0]).text  # back from consent: the form is filled in again
    assert 'value="Following"' in page and ">Mine</textarea>" in page


def test_with_the_permission_granted_an_oauth_sign_in_publishes(world):
    app, client, repo = world
    sign_in(app, client, did=A, handle="alice.test", kind="oauth", scope=f"atproto {SCOPE}")
    post_form(client, action="publish", display_name="Following")
    assert list(repo.records) == [(A, "app.bsky.feed.generator", "timeline")]


def test_a_refused_write_is_reported_and_nothing_is_remembered(world):
    app, client, repo = world
    repo.refuse = ScopeMissing("Missing required scope", status=403, error="ScopeMissingError")
    sign_in(app, client, did=A, handle="alice.test")
    post_form(client, action="publish", display_name="Following")
    assert "Your server refused the write: Missing required scope" in client.get("/feeds/publish").text
    assert describe(client)["feeds"] == []


def test_display_name_and_description_follow_the_lexicons_limits(world):
    app, client, repo = world
    sign_in(app, client, did=A, handle="alice.test")
    post_form(client, action="publish", display_name="x" * 25)
    assert "The display name is longer than 24 characters." in client.get("/feeds/publish").text
    assert repo.records == {}
    # 50 code points but 10 graphemes (180 bytes of the 240 allowed): accepted
    assert check_text("👩‍👩‍👧" * 10, "e\u0301" * 300) == ("👩‍👩‍👧" * 10, "e\u0301" * 300)
    for name, desc in (("", "x"), ("x" * 25, ""), ("ok", "x" * 301)):
        with pytest.raises(PublishError):
            check_text(name, desc)
    assert [graphemes(s) for s in ("abc", "e\u0301", "👍🏽", "👩‍👩‍👧", "🇫🇷")] == [3, 1, 1, 1, 2]


def test_a_display_name_of_exactly_24_characters_is_accepted():
    assert check_text("x" * 24, "y" * 300) == ("x" * 24, "y" * 300)


def test_publishing_again_renames_the_feed_on_the_page_and_in_the_record(world):
    app, client, repo = world
    sign_in(app, client, did=A, handle="alice.test")
    post_form(client, action="publish", display_name="Following")
    post_form(client, action="publish", display_name="Friends", description="Renamed")
    assert repo.records[(A, "app.bsky.feed.generator", "timeline")]["displayName"] == "Friends"
    page = client.get("/feeds/publish").text
    assert f"Published as <code>{URI}</code> (“Friends”)." in page and "(“Following”)" not in page


def test_an_oauth_sign_in_without_the_permission_hears_of_a_too_long_name_before_the_consent_page(world):
    app, client, repo = world
    sign_in(app, client, did=A, handle="alice.test", kind="oauth", scope="atproto")
    r = post_form(client, action="publish", display_name="x" * 25)
    assert (r.status_code, r.headers["Location"]) == (303, "/feeds/publish")
    assert "The display name is longer than 24 characters." in client.get("/feeds/publish").text
    assert repo.records == {}


def test_an_unknown_action_is_a_400_naming_the_two_the_page_sends(world):
    app, client, repo = world
    sign_in(app, client, did=A, handle="alice.test")
    r = post_form(client, action="rename", display_name="Following")
    assert r.status_code == 400
    assert "Unknown action; the page sends publish or unpublish." in r.text
    assert repo.records == {}
