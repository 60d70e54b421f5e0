"""The app registry, the lexicon parity check, the instance allow/block lists, and the safety rule's
structure (only the handler's delete branch can insert an unfollow)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from feather.config import load_settings
from feather.sync import apps as registry

FEATHER = Path(__file__).resolve().parent.parent / "feather"
LEXICON = FEATHER.parent / "lexicons" / "run" / "airglow" / "graphSync.json"


def settings(**env):
    return load_settings({"FEATHERREADER_ENV": "test", **env})


def test_registry_and_lexicon_known_values_agree():
    import json

    known = json.loads(LEXICON.read_text())["defs"]["main"]["record"]["properties"]["apps"]["items"]["knownValues"]
    assert known == [app.key for app in registry.APPS]


def test_lexicon_parses_as_a_record_with_the_apps_array():
    import json

    doc = json.loads(LEXICON.read_text())
    assert (doc["lexicon"], doc["id"], doc["defs"]["main"]["type"]) == (1, "run.airglow.graphSync", "record")


def test_registry_collections_match_the_verified_nsids():
    assert {a.key: (a.follow, a.profile, a.own_profile) for a in registry.APPS} == {
        "bluesky": ("app.bsky.graph.follow", "app.bsky.actor.profile", True),
        "tangled": ("sh.tangled.graph.follow", "sh.tangled.actor.profile", True),
        "sifa": ("id.sifa.graph.follow", "id.sifa.profile.self", True),
        "grain": ("social.grain.graph.follow", "social.grain.actor.profile", True),
        "semble": ("network.cosmik.follow", "app.bsky.actor.profile", False),
    }


def test_every_app_is_offered_by_default_and_three_are_watched_live():
    s = settings()
    assert registry.offered_keys(s) == ["bluesky", "tangled", "sifa", "grain", "semble"]
    assert registry.live_profile_collections(s) == ["id.sifa.profile.self", "sh.tangled.actor.profile",
                                                    "social.grain.actor.profile"]


def test_block_list_hides_an_app_whose_follow_or_own_profile_collection_is_blocked():
    s = settings(NSID_BLOCKLIST="sh.tangled.actor.profile,social.grain.*")
    assert registry.offered_keys(s) == ["bluesky", "sifa", "semble"]


def test_semble_is_not_hidden_by_blocking_the_bluesky_profile_it_borrows():
    s = settings(NSID_BLOCKLIST="app.bsky.actor.profile")
    assert registry.offered_keys(s) == ["tangled", "sifa", "grain", "semble"]


def test_allow_list_offers_only_apps_whose_collections_are_all_allowed():
    s = settings(NSID_ALLOWLIST="app.bsky.*,sh.tangled.*,network.cosmik.follow")
    assert registry.offered_keys(s) == ["bluesky", "tangled", "semble"]


def test_a_profile_collection_requiring_dids_is_not_watched_live():
    s = settings(NSID_REQUIRES_DIDS="app.bsky.*,id.sifa.profile.self")
    assert registry.live_profile_collections(s) == ["sh.tangled.actor.profile", "social.grain.actor.profile"]
    assert registry.recheck_days(registry.BY_KEY["sifa"], s) == 2
    assert registry.recheck_days(registry.BY_KEY["tangled"], s) == 7


def test_semble_borrowing_the_bluesky_profile_is_never_watched_live_even_when_bluesky_is():
    s = settings(NSID_REQUIRES_DIDS="")
    assert registry.live_profile_collections(s) == ["app.bsky.actor.profile", "id.sifa.profile.self",
                                                    "sh.tangled.actor.profile", "social.grain.actor.profile"]
    bluesky, semble = registry.BY_KEY["bluesky"], registry.BY_KEY["semble"]
    assert (registry.watched_live(bluesky, s), registry.watched_live(semble, s)) == (True, False)
    assert (registry.recheck_days(bluesky, s), registry.recheck_days(semble, s)) == (7, 2)


def test_normalize_keys_keeps_registry_order_and_names_a_bad_key():
    s = settings(NSID_BLOCKLIST="id.sifa.*")
    assert registry.normalize_keys(["semble", "bluesky", "semble"], s) == ["bluesky", "semble"]
    with pytest.raises(ValueError, match="'sifa' is not an app"):
        registry.normalize_keys(["bluesky", "sifa"], s)


# --- the safety rule, by construction
def _sources():
    for path in sorted(FEATHER.rglob("*.py")):
        yield path, path.read_text()


def test_only_the_handler_delete_branch_inserts_an_unfollow_row():
    """The unfollow insert lives in the queue's one function for it (the queue module writes
    sync_queue), and the handler's delete branch is the only code that calls that function."""
    found, callers = [], []
    for path, text in _sources():
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                body = ast.get_source_segment(text, node) or ""
                if re.search(r"INSERT INTO sync_queue.{0,400}?'unfollow'", body, re.S):
                    found.append((path.relative_to(FEATHER).as_posix(), node.name))
                for call in ast.walk(node):
                    func = getattr(call, "func", None) if isinstance(call, ast.Call) else None
                    if getattr(func, "attr", getattr(func, "id", None)) == "enqueue_observed_unfollow":
                        callers.append((path.relative_to(FEATHER).as_posix(), node.name))
        assert "enqueue_observed_unfollow" not in text.replace("def enqueue_observed_unfollow", "") or \
            path.name in ("handler.py",), f"{path} names the unfollow insert without calling it from the handler"
    assert found == [("sync/queue.py", "enqueue_observed_unfollow")]
    assert callers == [("sync/handler.py", "follow_deleted")]


def test_every_queue_insert_names_its_kind_literally():
    """A kind passed as a parameter could smuggle an unfollow past the test above."""
    kinds = []
    for path, text in _sources():
        assert text.count("INSERT INTO sync_queue") == len(re.findall(
            r"INSERT INTO sync_queue \(([^)]*)\)\s*\"?\s*\"? VALUES \(([^)]*)\)", text, re.S)), path
        for match in re.finditer(r"INSERT INTO sync_queue \(([^)]*)\)\s*\"?\s*\"? VALUES \(([^)]*)\)", text, re.S):
            columns = [c.strip() for c in match.group(1).split(",")]
            values = [v.strip() for v in match.group(2).split(",")]
            kinds.append((path.name, values[columns.index("kind")]))
    assert sorted(kinds) == [("queue.py", "'follow'"), ("queue.py", "'unfollow'")]


def test_backfill_sweep_runner_and_service_never_import_the_handler():
    for name in ("backfill.py", "queue.py", "service.py", "runner.py"):
        imports = [line for line in (FEATHER / "sync" / name).read_text().splitlines() if "import" in line]
        assert not [line for line in imports if "handler" in line], name
