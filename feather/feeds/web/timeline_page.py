"""The timeline page: /timeline for the signed-in person, complete without JavaScript.

Without JavaScript: the newest page, an "Older posts" link (?cursor=…), a note and a Reload link
while the timeline is being filled in, and one link per feed when several are configured.
A feed with several targets gets one link per target (?collection=<short name>), as getFeed's
`collection` parameter does. htmx only adds to that: the "Older posts" link loads the next page in place when it scrolls into
view (/timeline/more), a notice polls for "N new posts" (/timeline/new), and while the timeline
fills in, the region re-fetches itself (/timeline/region) until it is complete.
"""
from __future__ import annotations

from urllib.parse import urlencode

from flask import Blueprint, abort, current_app, render_template, request, url_for

from feather.auth import current_account, login_required
from feather.feeds.read import apps, reposts, timeline
from feather.feeds.tasks import backfill
from feather.errors import ApiError
from feather.feeds.web import budget, context

bp = Blueprint("timeline", __name__)


def _feed(config):
    name = request.args.get("feed") or next(iter(config.feeds), None)
    feed = config.feeds.get(name) if name else None
    if feed is None:
        abort(404, "There is no such feed on this instance.")
    return feed


def _target(feed):
    """The target the page shows: ?collection= (short name or NSID), else the feed's first; a
    mixed feed shows every target at once (None) unless one is asked for."""
    wanted = request.args.get("collection")
    if not wanted:
        return None if feed.mixed else feed.shown[0]
    for target in feed.shown:
        if wanted in (target.short, target.nsid):
            return target
    abort(404, "This feed has no such collection.")


def _default(feed):
    return None if feed.mixed else feed.shown[0]


def _picker(feed, keep) -> list[tuple[str, str, str]]:
    """(name, label, url) of each choice of what the page shows: a mixed feed's "all" first, then
    each target, by its app's words where read/apps.py knows them ("Tangled repositories");
    nothing when there is only one choice."""
    choices = ([("all", "all", None)] if feed.mixed else []) + [
        (t.short, apps.collection_label(t.nsid, t.short), None if t is _default(feed) else t.short)
        for t in feed.shown]
    if len(choices) < 2:
        return []
    return [(name, label, _url("timeline.page", **{**keep, "collection": value})) for name, label, value in choices]


def _keep(config, feed, target) -> dict:
    """The query parameters every link of the page carries forward (defaults left out)."""
    return {"feed": feed.name if len(config.feeds) > 1 or request.args.get("feed") else None,
            "collection": target.short if target is not None and target is not _default(feed) else None,
            "limit": request.args.get("limit") and str(timeline.page_size(request.args.get("limit"))),
            "q": _query() or None}


def _query() -> str:
    """The search box's words (?q=), or "" for the whole timeline."""
    return (request.args.get("q") or "").strip()


def _url(endpoint: str, **params) -> str:
    clean = {k: v for k, v in params.items() if v not in (None, "")}
    return url_for(endpoint) + ("?" + urlencode(clean) if clean else "")


def _context() -> dict:
    config = context.config()
    feed = _feed(config)
    target = _target(feed)
    did = current_account().did
    app = current_app._get_current_object()
    # Signing in already started this; a page view only restarts one that failed and is due again.
    backfill.maybe_start(app, config, feed, did)
    limit = timeline.page_size(request.args.get("limit"))
    cursor = request.args.get("cursor") or None
    reposts.fill_read(app, config, feed, target, did, admit=lambda: budget.try_spend(app, request.remote_addr),
                      cursor=cursor)
    q, search_error = _query(), None
    try:
        entries, older, top = timeline.read(app, config, feed, did, cursor, limit, target=target, search=q)
    except ApiError as exc:  # a search that cannot run: the page says why, with the box to fix it
        if not q:
            raise
        entries, older, top, search_error = [], None, None, exc.message
    keep = _keep(config, feed, target)
    return {
        "q": q, "search_error": search_error, "search_url": url_for("timeline.page"),
        "search_keep": {k: v for k, v in keep.items() if k != "q" and v},
        "feed": feed, "feeds": [(name, f.label) for name, f in config.feeds.items()], "entries": entries, "cursor": cursor, "target": target,
        "target_urls": _picker(feed, keep), "current": target.short if target is not None else "all",
        "filling": timeline.filling(config, feed, did),
        "older_url": _url("timeline.page", cursor=older, **keep) if older else None,
        "more_url": _url("timeline.more", cursor=older, **keep) if older else None,
        "new_url": _url("timeline.new", top=top, **keep) if top and not cursor and not q else None,
        "page_url": _url("timeline.page", **keep),
        "all_url": _url("timeline.page", **{**keep, "q": None}),
        "region_url": _url("timeline.region", **keep),
    }


@bp.get("/timeline")
@login_required
def page():
    found = _context()
    return render_template("timeline/page.html", **found), 400 if found["search_error"] else 200


@bp.get("/timeline/region")
@login_required
def region():
    """The part of the page that fills in (htmx polls it while the first backfill runs)."""
    return render_template("timeline/_region.html", **_context())


@bp.get("/timeline/more")
@login_required
def more():
    """The next older page as list items, ending with the next "Older posts" item (htmx)."""
    return render_template("timeline/_entries.html", **_context())


@bp.get("/timeline/new")
@login_required
def new():
    """The "N new posts" notice: a link to the newest page, or nothing (htmx polls it)."""
    config = context.config()
    feed = _feed(config)
    target = _target(feed)
    count = timeline.newer_count(config, feed, current_account().did, request.args.get("top"), target)
    keep = _keep(config, feed, target)
    return render_template("timeline/_new.html", count=count, page_url=_url("timeline.page", **keep))
