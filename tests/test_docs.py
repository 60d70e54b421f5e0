"""The docs stay true to the code: every route is in docs/api.md, every setting in docs/settings.md
(the generated table, exactly), the README stays short and links every document, and no relative
link in the docs leads nowhere."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.once  # reads files and the URL map; the database plays no part

DOCS = REPO / "docs"
SETTINGS_START = "<!-- settings:start (generated from feather/config.py SETTINGS) -->\n"
SETTINGS_END = "<!-- settings:end -->"
README_MAX_LINES = 160

# Every collection serves both record methods, and the instance has a service DID (the Bluesky feed
# generator's routes), so the URL map holds every route any configuration can add.
EVERY_METHOD_FEEDS = """
namespace = "com.featherreader"
[collections.follow]
collection = "app.bsky.graph.follow"
methods = ["listRecords", "getRecord"]
[collections.post]
collection = "app.bsky.feed.post"
[collections.profile]
collection = "app.bsky.actor.profile"
methods = ["listRecords", "getRecord"]
[feeds.timeline]
follow = "follow"
targets = ["post"]
"""


def documents() -> list[Path]:
    return [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]


def every_route(make_app, tmp_path) -> list[str]:
    """`METHOD /path` for every rule of an app with every feature on (the demo plugin included)."""
    feeds = tmp_path / "feeds.toml"
    feeds.write_text(EVERY_METHOD_FEEDS)
    app = make_app(migrate=False, FEATHERREADER_ENV="development", FEATHERREADER_CONFIG=str(feeds),
                   FEATHERREADER_FEED_SERVICE_DID="did:web:feather.example.com",
                   FEATHERREADER_EXTRA_FEATURES="demo.feature", FEATHERREADER_NETWORK_PAGE=True,
                   FEATHERREADER_ALLOW_APP_PASSWORDS=True)
    return sorted({f"{method} {rule.rule}" for rule in app.url_map.iter_rules()
                   for method in rule.methods - {"HEAD", "OPTIONS"}})


def test_every_route_of_the_app_is_in_the_api_reference(make_app, tmp_path):
    routes = every_route(make_app, tmp_path)
    assert "GET /xrpc/com.featherreader.getFeed" in routes and "GET /demo/sign-in" in routes
    api = (DOCS / "api.md").read_text()
    # The route itself, then its closing backtick or its query string: `GET /u/<handle>` is not
    # documented by `GET /u/<handle>/social-graph-sync`.
    missing = [route for route in routes if not re.search(re.escape(f"`{route}") + r"[`?]", api)]
    assert missing == [], "routes docs/api.md does not list (as `METHOD /path…`): " + ", ".join(missing)


def settings_table() -> str:
    text = (DOCS / "settings.md").read_text()
    assert text.count(SETTINGS_START) == 1 and text.count(SETTINGS_END) == 1
    return text.split(SETTINGS_START, 1)[1].split(SETTINGS_END, 1)[0]


def test_the_settings_table_is_the_one_generated_from_settings():
    from feather.config import readme_table

    assert settings_table() == readme_table() + "\n", (
        "docs/settings.md's table is stale: paste the output of "
        "`python -c 'from feather.config import readme_table; print(readme_table())'`")


def test_the_settings_table_is_exactly_the_settings_in_order():
    from feather.config import SETTINGS

    expected = ["| Variable | Default | Meaning |", "|---|---|---|"] + [
        f"| `{s.name}` | `{s.default or '(empty)'}` | {s.help} |" for s in SETTINGS]
    assert settings_table().splitlines() == expected


def test_every_setting_is_documented():
    from feather.config import SETTINGS

    table = settings_table()
    assert [s.name for s in SETTINGS if f"| `{s.name}` |" not in table] == []


def test_the_readme_is_short_and_links_every_document():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < README_MAX_LINES
    linked = {target.split("#", 1)[0] for target in links(readme)}
    wanted = {"CONTRIBUTING.md"} | {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert sorted(wanted - linked) == []


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def links(markdown: str) -> list[str]:
    """The targets of the Markdown links outside code blocks and inline code."""
    text = FENCE.sub("", markdown)
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", markdown), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_every_relative_link_in_the_docs_leads_to_a_file_and_heading_that_exist():
    broken = []
    for doc in documents():
        for target in links(doc.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: … are not ours to check
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            name = f"{doc.relative_to(REPO)} -> {target}"
            if not file.exists():
                broken.append(f"{name} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
                broken.append(f"{name} (no such heading)")
    assert broken == []

