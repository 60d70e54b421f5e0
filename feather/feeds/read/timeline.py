"""A person's timeline as the page shows it: entries, paging, "N new posts", and filling-in state.

The page reads exactly what getFeed reads (the same source and keyset pipeline, query.py and
hybrid.py), so the page, the JSON and the Bluesky feed generator can never disagree about what
is in a timeline or in which order. A feed with several targets (posts, and galleries on Grain,
say) shows one at a time, as getFeed's `collection` parameter does: the first by default.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from markupsafe import Markup

from feather import sql
from feather.feeds.config import Feed, FeedsConfig, Target
from feather.feeds.read import cursor as cursors
from feather.feeds.read import apps, hybrid, labels, query, render
from feather.feeds.read.identities import hydrate, stored_handles
from feather.feeds.store import records
from feather.feeds.store.schema import subject_expr

POST = "app.bsky.feed.post"
PAGE_SIZE, MAX_PAGE_SIZE = 30, 100
NEW_POSTS_CAP = 100  # "99+ new posts": counting further would only cost
BACKFILL_MAX_RETRIES = 3  # failed follow listings after which the page says the listing keeps failing


@dataclass
class Entry:
    uri: str
    did: str
    name: str | None  # display name from the author's profile record, if any
    handle: str | None  # verified both ways, else None
    html: Markup
    embeds: list = field(default_factory=list)
    url: str | None = None  # the post on bsky.app
    ago: str = ""
    exact: str = ""
    iso: str = ""
    reply_to: str | None = None  # the replied-to post's author, by name, handle or DID
    reply_url: str | None = None  # that post on bsky.app
    reposted_by: str | None = None  # who reposted it into this timeline (the newest such repost)
    reposter_url: str | None = None  # their profile on bsky.app
    shown_iso: str = ""  # when it entered the timeline: its own time, or the repost's
    warn: str | None = None  # a label's name: the post is shown behind a "Show" control (read/labels.py)
    unchecked: bool = False  # a labeler has not answered for it yet: the page says so quietly
    card: apps.Card | None = None  # another app's record (read/apps.py): its app, kind, title and link


def page_size(raw: str | None) -> int:
    value = query.parse_limit(raw) if raw else PAGE_SIZE
    return min(value, MAX_PAGE_SIZE)


def source(config: FeedsConfig, feed: Feed, did: str, target: Target | None = None):
    """(the collection whose filters and search apply, the source); a mixed feed with no target
    reads every target (filters and search are its first target's)."""
    if target is None and not feed.mixed:
        target = feed.shown[0]
    collection = config.collections[(target or feed.shown[0]).short]
    return collection, hybrid.feed_source(config, feed, target, did)


def read(app, config: FeedsConfig, feed: Feed, did: str, cursor: str | None, limit: int,
         now: float | None = None, target: Target | None = None,
         search: str | None = None) -> tuple[list[Entry], str | None, str | None]:
    """(entries newest first, the cursor of the next older page or None, the newest entry's
    position as a cursor, for the new-posts check). With search, getFeed's `search=`: the
    timeline's posts that match, most relevant first (query.run raises ApiError for one that
    cannot run)."""
    collection, src = source(config, feed, did, target)
    page = query.run(config, collection, {"limit": str(limit), "cursor": cursor or "", "search": search or ""}, src)
    shown = page["records"]
    reposters = [r["reason"]["by"] for r in shown if r.get("reason")]
    handles = hydrate(app, config, [r["did"] for r in shown] + reposters) if shown else {}
    values = [r["value"] if isinstance(r["value"], dict) else {} for r in shown]
    context = _Context(config, collection, [r["did"] for r in shown] + reposters, values)
    context.handles.update({did: h for did, h in handles.items() if h and did in reposters})
    names = context.names
    out = []
    verdicts = labels.page_verdicts(app, shown, values)  # moderation: hidden posts are left out
    nsids = [r.get("collection") or collection.nsid for r in shown]
    starred = _starred(config, nsids, values)
    for r, nsid, value, parent, quote, verdict in zip(shown, nsids, values, context.parents, context.quotes,
                                                      verdicts):
        if verdict.hide:
            continue
        card = apps.card(nsid, r["did"], r["rkey"], value, handle=handles.get(r["did"]), starred=starred)
        url = card.href if card else render.post_url(r["uri"])
        text = value.get("text")
        if card is not None:
            text = card.description
        elif not isinstance(text, str):  # a collection with no renderer: its most text-like field
            text = next((value[k] for k in ("title", "name", "description") if isinstance(value.get(k), str)), "")
        t = r["time_us"]
        out.append(Entry(r["uri"], r["did"], names.get(r["did"]), handles.get(r["did"]),
                         render.rich_text(text, card.facets if card else value.get("facets")),
                         [] if card else context.embeds(value, quote, url), url,
                         render.ago(t, now), render.exact(t), render.iso(t),
                         context.label(render.author_of(parent)) if parent else None, render.post_url(parent),
                         *_reposter(context, r.get("reason")), shown_iso=render.iso(_position(r)[0]),
                         warn=verdict.warn_name, unchecked=verdict.unchecked, card=card))
    # The feed's keyset: a repost's row sits at the repost's time and URI, not the post's.
    top = cursors.encode(*_position(shown[0]), "time") if shown else None
    return out, page.get("cursor"), top


def _starred(config: FeedsConfig, nsids: list[str], values: list[dict]) -> dict:
    """{repository URI: its stored record} for the page's Tangled stars: a star names its
    repository only by URI, and the card shows the name when Feather holds that record."""
    subjects = [u for nsid, v in zip(nsids, values) if (u := apps.star_subject(nsid, v))]
    repos = config.by_nsid(apps.TANGLED_REPO)
    if not subjects or repos is None:
        return {}
    found = records.load_many(repos, subjects)
    return {uri: value for uri, (_cid, raw, _t) in found.items()
            if isinstance(value := records.parse_value(raw), dict)}


def _position(record: dict) -> tuple[int, str]:
    """(time, uri) of the feed row that shows the record: the repost's when one brought it."""
    reason = record.get("reason")
    return (reason["time_us"], reason["repost"]) if reason else (record["time_us"], record["uri"])


def _reposter(context: "_Context", reason: dict | None) -> tuple[str | None, str | None]:
    if not reason:
        return None, None
    return context.label(reason["by"]), render.profile_url(reason["by"])


class _Context:
    """Who the page's posts reply to and quote, from the store only (no lookup per mention): names
    from stored profiles, else a verified handle, else the DID; a quoted post's text when stored."""

    def __init__(self, config: FeedsConfig, collection, authors: list[str], values: list[dict]):
        self.parents = [render.reply_parent(v) for v in values]  # one per post, None where it answers nobody
        self.quotes = [render.quoted(v) for v in values]
        referenced = [uri for uri in self.parents + self.quotes if uri]
        mentioned = [render.author_of(uri) for uri in referenced]
        self.names = _display_names(config, authors + mentioned)
        self.handles = stored_handles(mentioned)
        quoted = [uri for uri in self.quotes if uri]
        stored = records.load_many(collection, quoted) if quoted and collection.nsid == POST else {}
        self.quoted_text = {}
        for uri, (_cid, raw, _t) in stored.items():
            quoted_value = records.parse_value(raw)
            if isinstance(quoted_value, dict) and isinstance(quoted_value.get("text"), str):
                self.quoted_text[uri] = quoted_value["text"]

    def label(self, did: str) -> str:
        return self.names.get(did) or (f"@{self.handles[did]}" if did in self.handles else did)

    def embeds(self, value: dict, uri: str | None, url: str | None) -> list:
        """The post's embeds, the quote of a stored post (`uri`) told by its author and text."""
        shown = render.embeds(value.get("embed"), url)
        if uri is None or uri not in self.quoted_text:
            return shown
        href = render.post_url(uri)
        richer = render.Embed(f"Quoted post by {self.label(render.author_of(uri))}",
                              self.quoted_text[uri].strip()[:300] or "(no text)", href)
        return [richer if e.label == "Quoted post" and e.href == href else e for e in shown]


def _display_names(config: FeedsConfig, dids: list[str]) -> dict[str, str]:
    """Display names from stored profile records (identities.hydrate fetched the missing ones)."""
    names: dict[str, str] = {}
    if not dids:
        return names
    for nsid in config.profiles:
        c = config.by_nsid(nsid)
        if c is None:
            continue
        found = records.load_many(c, [f"at://{d}/{nsid}/self" for d in dict.fromkeys(dids)])
        for uri, (_cid, text, _t) in found.items():
            value = records.parse_value(text)
            name = value.get("displayName") if isinstance(value, dict) else None
            if isinstance(name, str) and name.strip():
                names.setdefault(uri.split("/")[2], name.strip()[:64])
    return names


def newer_count(config: FeedsConfig, feed: Feed, did: str, top: str | None, target: Target | None = None) -> int:
    """Entries newer than top (a cursor of the newest entry shown), up to NEW_POSTS_CAP."""
    position = cursors.decode(top, "time")
    if position is None:
        return 0
    _collection, src = source(config, feed, did, target)
    t, u = src.t, src.u
    where = list(src.where) + [f"({t} > ? OR ({t} = ? AND {u} < ?))"]
    statement = (f"SELECT count(*) FROM (SELECT 1 AS one {src.from_sql} WHERE {' AND '.join(where)}"
           f" LIMIT {NEW_POSTS_CAP}) newer")
    params = src.from_params + src.where_params + [position.t, position.t, position.u]
    return int(sql.scalar(statement, params))


def filling(config: FeedsConfig, feed: Feed, did: str, now_ms: int | None = None) -> str | None:
    """A sentence while the timeline is still being filled in, or None once it is complete.

    Two stages: listing the person's follows from their PDS (the first-read backfill), then,
    under admission, fetching the newest posts of everyone they follow (the feeds-fetch job).
    """
    row = sql.one("SELECT completed, started_at, retries, last_error FROM feed_backfills"
                  " WHERE actor = ? AND feed = ?", (did, feed.name))
    if row is None or not row[0]:
        if row is not None and row[3] and row[2] >= BACKFILL_MAX_RETRIES:
            return ("Your follows could not be listed from your server yet; Feather tries again every few "
                    "minutes. Posts from people you follow still arrive as they are written.")
        return "Filling in your timeline: listing the accounts you follow from your server."
    follow = config.collections[feed.follow].table
    pending = sql.scalar(f"SELECT count(*) FROM feed_fetches ff WHERE ff.fetched_us IS NULL AND ff.did IN"
                         f" (SELECT {subject_expr('f')} FROM {follow} f WHERE f.did = ?)", (did,))
    if pending:
        return (f"Filling in your timeline: fetching recent posts of {pending} account"
                f"{'s' if pending != 1 else ''} you follow.")
    return None
