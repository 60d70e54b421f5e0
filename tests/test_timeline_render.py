"""What the timeline page makes of a record: escaped text, facets as safe links, embeds in words."""
from __future__ import annotations

from feather.feeds.read.render import Embed, ago, embeds, exact, rich_text

FACET = "app.bsky.richtext.facet"
POST_URL = "https://bsky.app/profile/did:plc:bbbb/post/3kabc"


def facet(start, end, **feature):
    kind = feature.pop("kind", "link")
    return {"index": {"byteStart": start, "byteEnd": end}, "features": [{"$type": f"{FACET}#{kind}", **feature}]}


def test_text_is_escaped_and_a_link_facet_becomes_a_link():
    text = "<script>alert(1)</script> see example.com"
    start = len(text.encode()) - len("example.com")
    html = str(rich_text(text, [facet(start, start + 11, uri="https://example.com/?a=1&b=\"2\"")]))
    assert html == ('&lt;script&gt;alert(1)&lt;/script&gt; see <a href="https://example.com/?a=1&amp;b=&#34;2&#34;"'
                    ' rel="nofollow noopener ugc">example.com</a>')


def test_facet_offsets_are_utf8_bytes_not_characters():
    text = "héllo 🦋 @bob.test"  # é is 2 bytes, the butterfly 4
    start = len("héllo 🦋 ".encode())
    html = str(rich_text(text, [facet(start, start + 9, kind="mention", did="did:plc:bbbb")]))
    assert html == ('héllo 🦋 <a href="https://bsky.app/profile/did:plc:bbbb" rel="nofollow noopener ugc">'
                    '@bob.test</a>')


def test_a_tag_facet_links_to_the_hashtag_with_the_tag_escaped():
    html = str(rich_text("#a&b", [facet(0, 4, kind="tag", tag="a&b")]))
    assert html == '<a href="https://bsky.app/hashtag/a%26b" rel="nofollow noopener ugc">#a&amp;b</a>'


def test_unsafe_or_broken_facets_leave_plain_escaped_text():
    text = "click <me> now 🦋!"
    broken = [
        facet(0, 5, uri="javascript:alert(1)"),  # not http(s)
        facet(6, 10, uri="data:text/html,hi"),
        facet(15, 17, uri="https://cut.example/"),  # inside the butterfly's four bytes
        facet(0, 999, uri="https://long.example/"),  # past the end
        facet(5, 3, uri="https://backwards.example/"),
        facet(0, 5, kind="mention", did="not a did"),
        {"index": {"byteStart": True, "byteEnd": 3}, "features": [{"$type": f"{FACET}#link", "uri": "https://x.y/"}]},
        "not a facet",
    ]
    assert str(rich_text(text, broken)) == "click &lt;me&gt; now 🦋!"


def test_overlapping_facets_keep_the_first():
    html = str(rich_text("abcdef", [facet(2, 5, uri="https://second.example/"), facet(0, 3, uri="https://first.example/")]))
    assert html == '<a href="https://first.example/" rel="nofollow noopener ugc">abc</a>def'


def test_non_text_is_empty():
    assert str(rich_text(None)) == "" and str(rich_text(["<b>"])) == ""


def test_images_show_their_alt_text_linked_to_the_post_never_the_blob():
    embed = {"$type": "app.bsky.embed.images",
             "images": [{"alt": "<b>a cat</b>", "image": {"ref": {"$link": "bafy"}}}, {"alt": ""}]}
    assert embeds(embed, POST_URL) == [Embed("Image", "<b>a cat</b>", POST_URL),
                                       Embed("Image", "no description", POST_URL)]


def test_an_external_embed_links_only_to_web_addresses():
    good = {"$type": "app.bsky.embed.external", "external": {"uri": "https://news.example/a", "title": "News"}}
    bad = {"$type": "app.bsky.embed.external", "external": {"uri": "javascript:alert(1)", "title": "Click"}}
    assert embeds(good, POST_URL) == [Embed("Link", "News", "https://news.example/a")]
    assert embeds(bad, POST_URL) == [Embed("Link", "Click", None)]


def test_a_quote_with_media_shows_both():
    embed = {"$type": "app.bsky.embed.recordWithMedia",
             "record": {"record": {"uri": "at://did:plc:cccc/app.bsky.feed.post/3kq", "cid": "bafy"}},
             "media": {"$type": "app.bsky.embed.video", "alt": "a clip"}}
    assert embeds(embed, POST_URL) == [Embed("Video", "a clip", POST_URL),
                                       Embed("Quoted post", "open it on Bluesky",
                                             "https://bsky.app/profile/did:plc:cccc/post/3kq")]


def test_relative_times_and_the_exact_time():
    now = 1_800_000_000
    us = lambda seconds_ago: (now - seconds_ago) * 1_000_000  # noqa: E731
    assert [ago(us(s), now) for s in (5, 120, 7200, 3 * 86400)] == ["now", "2m", "2h", "3d"]
    assert ago(us(10 * 86400), now) == "5 Jan"  # now is 2027-01-15 08:00 UTC
    assert ago(us(30 * 86400), now) == "16 Dec 2026"  # another year: the year is shown
    assert ago(us(400 * 86400), now) == "11 Dec 2025"
    assert exact(us(0)) == "2027-01-15 08:00 UTC"


def test_relative_times_turn_at_the_exact_minute_hour_day_and_week():
    now = 1_800_000_000
    us = lambda seconds_ago: (now - seconds_ago) * 1_000_000  # noqa: E731
    assert [ago(us(s), now) for s in (59, 60, 3599, 3600, 86399, 86400, 7 * 86400 - 1)] == \
        ["now", "1m", "59m", "1h", "23h", "1d", "6d"]
    assert ago(us(7 * 86400), now) == "8 Jan"
    assert ago(us(-30), now) == "now"  # a post stamped in the future reads as now


def test_an_empty_facet_range_links_nothing():
    assert str(rich_text("ab", [facet(1, 1, uri="https://example.com/")])) == "ab"
    assert str(rich_text("ab", [facet(1, 2, uri="https://example.com/")])) == \
        'a<a href="https://example.com/" rel="nofollow noopener ugc">b</a>'
