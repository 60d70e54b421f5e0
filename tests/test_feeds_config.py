"""The feeds TOML (FEATHERREADER_CONFIG): defaults, shape and the start-up validation errors."""
from __future__ import annotations

import pytest

from feather.config import ConfigError
from feather.feeds.config import FeedsConfigError, Queryable, load, parse
from tests.fixtures.feeds.feedkit import feeds_app


EVERYTHING = {"tangled_repo": "sh.tangled.repo", "tangled_star": "sh.tangled.feed.star",
              "grain_gallery": "social.grain.gallery", "semble_card": "network.cosmik.card",
              "semble_collection": "network.cosmik.collection", "leaflet_document": "pub.leaflet.document",
              "sifa_position": "id.sifa.profile.position", "sifa_project": "id.sifa.profile.project",
              "sifa_publication": "id.sifa.profile.publication"}


def test_the_built_in_default_is_following_following_posts_only_and_everything():
    config = load("")
    assert {s: c.nsid for s, c in config.collections.items()} == {
        "follow": "app.bsky.graph.follow", "post": "app.bsky.feed.post", "repost": "app.bsky.feed.repost",
        "profile": "app.bsky.actor.profile", **EVERYTHING}
    assert list(config.feeds) == ["timeline", "posts", "everything"]  # tests/test_feeds_everything.py: the third
    assert config.collections["repost"].reposts == "post"
    feed = config.feeds["timeline"]
    assert (feed.label, feed.follow, [t.short for t in feed.targets], feed.max_items) == (
        "Following", "follow", ["post", "repost"], 200)
    assert [t.short for t in feed.shown] == ["post"]  # reposts are read merged into posts
    assert feed.reposts_of(feed.targets[0]).nsid == "app.bsky.feed.repost"
    assert (feed.follow_backfill, feed.fanout_max_followers, feed.replies) == (100, None, "all")
    posts = config.feeds["posts"]
    assert (posts.label, [t.short for t in posts.targets], posts.reposts_of(posts.targets[0])) == (
        "Following, posts only", ["post"], None)
    assert config.target_caps() == {"app.bsky.feed.post": 200, "app.bsky.feed.repost": 200,
                                    **{nsid: 200 for nsid in EVERYTHING.values()}}
    assert config.feed_mutating_nsids == {"app.bsky.graph.follow", "app.bsky.feed.post", "app.bsky.feed.repost",
                                          *EVERYTHING.values()}
    assert config.reposted_nsids == {"app.bsky.feed.post"}


def test_a_feeds_replies_rule_and_title_are_checked():
    base = {"collections": {"follow": {"collection": "app.bsky.graph.follow"},
                            "post": {"collection": "app.bsky.feed.post"}}}
    feed = parse({**base, "feeds": {"f": {"targets": ["post"], "replies": "followed", "title": " Mine "}}}).feeds["f"]
    assert (feed.replies, feed.label) == ("followed", "Mine")
    with pytest.raises(FeedsConfigError, match='Feed "f" replies must be one of all, followed, none'):
        parse({**base, "feeds": {"f": {"targets": ["post"], "replies": "some"}}})
    with pytest.raises(FeedsConfigError, match='reposts unknown collection "nope"'):
        parse({"collections": {**base["collections"], "rp": {"collection": "app.bsky.feed.repost", "reposts": "nope"}},
               "feeds": {}})
    with pytest.raises(FeedsConfigError, match="together with fanoutMaxFollowers"):
        parse({"collections": {**base["collections"], "rp": {"collection": "app.bsky.feed.repost", "reposts": "post"}},
               "feeds": {"f": {"targets": ["post", "rp"], "fanoutMaxFollowers": 10}}})


def test_targets_take_short_names_or_tables_with_their_own_cap():
    config = parse({
        "namespace": "com.example",
        "collections": {"follow": {"collection": "app.bsky.graph.follow"},
                        "post": {"collection": "app.bsky.feed.post"},
                        "repost": {"collection": "app.bsky.feed.repost"}},
        "feeds": {"home": {"follow": "follow", "targets": ["post", {"collection": "repost", "maxItems": 50}],
                           "maxItems": 300, "followBackfill": 20, "fanoutMaxFollowers": 10_000}},
    })
    home = config.feeds["home"]
    assert [(t.short, t.nsid, t.cap) for t in home.targets] == [
        ("post", "app.bsky.feed.post", 300), ("repost", "app.bsky.feed.repost", 50)]
    assert (home.follow_backfill, home.fanout_max_followers) == (20, 10_000)
    assert config.collections["repost"].table == "feed_records_repost"


def test_queryable_fields_become_camel_case_parameters():
    config = parse({"collections": {"event": {"collection": "community.lexicon.calendar.event",
                                              "queryable": {"subject.uri": {}, "startsAt": {"type": "range"}}}}})
    assert config.collections["event"].queryable == {
        "subjectUri": Queryable(("subject", "uri"), "subjectUri", False),
        "startsAt": Queryable(("startsAt",), "startsAt", True)}


def test_a_feed_without_a_follow_collection_gets_the_bluesky_one():
    config = parse({"collections": {"post": {"collection": "app.bsky.feed.post"}},
                    "feeds": {"t": {"targets": ["post"]}}})
    assert config.collections["follow"].nsid == "app.bsky.graph.follow"


@pytest.mark.parametrize("data, message", [
    ({"collections": {"post": {"collection": "app.bsky.feed.post"}},
      "feeds": {"timeline": {"follow": "follows", "targets": ["post"]}}},
     'Feed "timeline" references unknown follow collection "follows"'),
    ({"collections": {"follow": {"collection": "app.bsky.graph.follow"}},
      "feeds": {"timeline": {"follow": "follow", "targets": ["posts"]}}},
     'Feed "timeline" references unknown target collection "posts"'),
    ({"collections": {"follow": {"collection": "app.bsky.graph.follow"}},
      "feeds": {"timeline": {"targets": [{"collection": "app.bsky.feed.post"}]}}},
     'Feed "timeline" references unknown target collection "app.bsky.feed.post"'),
    ({"collections": {"post": {"collection": "not an nsid"}}}, 'Collection "post": "not an nsid" is not a valid NSID'),
    ({"collections": {"post": {"collection": "app.bsky.feed.post", "queryable": {"a'b": {}}}}},
     "queryable field \"a'b\" is not a plain dotted field name"),
    ({"namespace": "com..bad"}, 'namespace "com..bad"'),
    ({"collections": {"f": {"collection": "app.bsky.graph.follow"}, "p": {"collection": "app.bsky.feed.post"}},
      "feeds": {"t": {"follow": "f", "targets": ["p"], "maxItems": 0}}}, 'Feed "t" maxItems must be a whole number >= 1'),
])
def test_validation_names_the_feed_and_the_unknown_short_name(data, message):
    with pytest.raises(FeedsConfigError) as err:
        parse(data)
    assert message in str(err.value)


def test_a_bad_file_fails_the_app_at_start(make_app, tmp_path):
    path = tmp_path / "feeds.toml"
    path.write_text('[feeds.timeline]\nfollow = "follow"\ntargets = ["nope"]\n'
                    '[collections.follow]\ncollection = "app.bsky.graph.follow"\n')
    with pytest.raises(ConfigError) as err:
        make_app(FEATHERREADER_CONFIG=str(path))
    assert str(err.value) == (f'FEATHERREADER_CONFIG: {path}: Feed "timeline" references unknown target collection "nope"')
    path.write_text("this is = = not toml")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        make_app(FEATHERREADER_CONFIG=str(path))
    with pytest.raises(ConfigError, match="cannot read"):
        make_app(FEATHERREADER_CONFIG=str(tmp_path / "missing.toml"))


def test_settings_defaults(app):
    s = app.config["FEATHER"]
    assert (s.feed_prune_sweep_actors, s.feed_prune_recovery_interval_ms, s.feed_service_auth) == (500, 21_600_000, False)


def test_routes_follow_the_namespace(make_app, tmp_path):
    app = feeds_app(make_app, tmp_path, '[collections.post]\ncollection = "app.bsky.feed.post"\n'
                    '[feeds.t]\ntargets = ["post"]\n')
    rules = sorted(r.rule for r in app.url_map.iter_rules() if r.rule.startswith("/xrpc/com.featherreader"))
    assert rules == ["/xrpc/com.featherreader.getFeed", "/xrpc/com.featherreader.post.getRecord",
                     "/xrpc/com.featherreader.post.listRecords"]


BASE = ('[collections.follow]\ncollection = "app.bsky.graph.follow"\n'
        '[collections.post]\ncollection = "app.bsky.feed.post"\n')


@pytest.mark.parametrize("text, message", [
    ('namepsace = "com.example"\n' + BASE, 'top level: unknown key "namepsace"'),
    (BASE + '[feeds.t]\ntargets = ["post"]\nmaxitems = 1000\n', '[feeds.t]: unknown key "maxitems"'),
    (BASE.replace('"app.bsky.feed.post"\n', '"app.bsky.feed.post"\nqueriable = {}\n'),
     '[collections.post]: unknown key "queriable"'),
    (BASE + '[feeds.t]\ntargets = [{ collection = "post", maxitems = 5 }]\n', 'Feed "t" target: unknown key "maxitems"'),
    (BASE + '[collections.posts]\ncollection = "app.bsky.feed.post"\n',
     '[collections.posts] and [collections.post] both name "app.bsky.feed.post"'),
    (BASE + '[feeds.t]\ntargets = ["post", "post"]\n', 'Feed "t" lists target "post" twice'),
    ('actors = ["alice.test"]\n' + BASE, 'actors must be a list of DIDs'),
])
def test_a_misspelled_key_or_a_duplicate_is_an_error_naming_it_and_the_file(tmp_path, text, message):
    path = tmp_path / "feeds.toml"
    path.write_text(text)
    with pytest.raises(FeedsConfigError) as err:
        load(str(path))
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_actors_are_read_as_dids():
    config = parse({"actors": ["did:plc:aaaa", "did:web:example.com", "did:plc:aaaa"]})
    assert config.actors == ("did:plc:aaaa", "did:web:example.com")


def test_follow_and_profile_collections_serve_no_method_unless_they_list_some():
    config = parse({
        "collections": {"follow": {"collection": "app.bsky.graph.follow"},
                        "post": {"collection": "app.bsky.feed.post"},
                        "profile": {"collection": "app.bsky.actor.profile"},
                        "listed": {"collection": "sh.tangled.actor.profile", "methods": ["getRecord"]}},
        "feeds": {"timeline": {"targets": ["post"]}},
        "profiles": ["app.bsky.actor.profile", "sh.tangled.actor.profile"],
    })
    assert {short: sorted(config.methods_of(short)) for short in config.collections} == {
        "follow": [], "post": ["getRecord", "listRecords"], "profile": [], "listed": ["getRecord"]}


def test_a_collection_takes_up_to_32_queryable_fields():
    from feather.feeds.config import MAX_QUERYABLE_FIELDS

    fields = {f"f{i}": {} for i in range(MAX_QUERYABLE_FIELDS)}
    config = parse({"collections": {"post": {"collection": "app.bsky.feed.post", "queryable": fields}}})
    assert len(config.collections["post"].queryable) == 32
    with pytest.raises(FeedsConfigError, match="at most 32 fields"):
        parse({"collections": {"post": {"collection": "app.bsky.feed.post",
                                        "queryable": {**fields, "one_more": {}}}}})
