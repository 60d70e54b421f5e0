"""The catalogue's URL rules: privacy classification and canonicalisation, from fixture files."""
import json

import pytest

from feather.network import privacy
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "network"
PRIVACY = json.loads((FIXTURES / "privacy-cases.json").read_text())
CANONICAL = json.loads((FIXTURES / "canonical-cases.json").read_text())


@pytest.mark.parametrize("case", PRIVACY["cases"], ids=lambda c: c["url"][:70])
def test_classifies_each_fixture_url_by_the_first_matching_rule(case):
    assert privacy.classify(case["url"]) == case["expect"], case["rule"]


@pytest.mark.parametrize("case", PRIVACY["storable"], ids=lambda c: c["url"][:70] or "empty")
def test_only_http_urls_and_publication_uris_are_storable(case):
    assert privacy.is_storable(case["url"]) is case["expect"]


@pytest.mark.parametrize("case", CANONICAL["cases"], ids=lambda c: c["why"])
def test_canonicalises_each_fixture_url(case):
    assert privacy.canonicalise(case["url"]) == case["canonical"]


@pytest.mark.parametrize("group", CANONICAL["same"])
def test_spellings_of_one_feed_share_one_key(group):
    assert len({privacy.indexable(u) for u in group}) == 1


@pytest.mark.parametrize("group", CANONICAL["different"])
def test_urls_that_may_be_different_feeds_keep_different_keys(group):
    assert len({privacy.indexable(u) for u in group}) == len(group)


def test_indexable_drops_private_and_unstorable_urls_and_canonicalises_the_rest():
    assert privacy.indexable("https://example.com/feed?token=abcdefgh") is None
    assert privacy.indexable("javascript:alert(1)") is None
    assert privacy.indexable(None) is None
    assert privacy.indexable("https://x.example/" + "a" * 3000) is None
    assert privacy.indexable("HTTPS://Example.com/feed/?utm_source=x") == "https://example.com/feed"


def test_canonicalising_never_turns_a_private_url_public():
    # the tracking parameter goes, the secret does not
    assert privacy.indexable("https://example.com/feed?utm_source=x&key=abcdefgh12") is None


CREDENTIAL_KEYS = ("token key auth secret k sig hash access apikey api_key uuid id u s p private password pw").split()


@pytest.mark.parametrize("key", CREDENTIAL_KEYS)
def test_every_credential_query_key_makes_a_url_private_with_a_long_or_uuid_value(key):
    base = "https://blog.example/feed.xml?"
    assert privacy.classify(f"{base}{key}=abcdefgh") == "private"  # 8 characters
    assert privacy.classify(f"{base}{key.upper()}=abcdefgh") == "private"  # case-insensitive key
    assert privacy.classify(f"{base}{key}=123e4567-e89b-12d3-a456-426614174000") == "private"
    assert privacy.classify(f"{base}{key}=abcdefg") == "public"  # 7 characters: not a secret's shape
    assert privacy.indexable(f"{base}{key}=abcdefgh") is None


@pytest.mark.parametrize("key", ["tokens", "my_key", "xtoken", "passwords"])
def test_a_credential_key_matches_the_whole_parameter_name_only(key):
    assert privacy.classify(f"https://blog.example/feed.xml?{key}=abcdefgh") == "public"


@pytest.mark.parametrize("url", [
    "https://user:pw@blog.example/feed.xml",
    "https://user@blog.example/feed.xml",
    "https://:secret@blog.example/feed.xml",
    "HTTP://User:Pass@Blog.Example/",
])
def test_a_url_with_userinfo_is_never_indexed(url):
    assert privacy.classify(url) == "private" and privacy.indexable(url) is None
