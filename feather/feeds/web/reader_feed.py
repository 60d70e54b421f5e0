"""A person's timeline in any feed reader: private Atom and JSON Feed URLs.

`/timeline` offers "Read in a feed reader": POST /timeline/reader makes a link for the feed on
screen (or a new one, which revokes the old: rotating), shown once on the page that answers the
POST, since only its hash is kept (store/reader_links.py); POST /timeline/reader/revoke ends it.
`GET /r/<token>.atom` and `/r/<token>.json` answer the newest entries of that person's timeline,
made from what the page shows (read/syndication.py), with conditional GET (ETag, Last-Modified,
304) and `Cache-Control: private`. A revoked token and one that never existed answer the same
404. The access log masks the token (feather/process/accesslog.py).
"""
from __future__ import annotations

from flask import Blueprint, Response, abort, current_app, render_template, request, url_for

from feather.auth import current_account, login_required
from feather.db import db
from feather.feeds.read import render, reposts, syndication, timeline
from feather.feeds.store import reader_links
from feather.feeds.web import budget, context

bp = Blueprint("reader_feed", __name__)
KINDS = {"atom": syndication.atom, "json": syndication.json_feed}


def _feed_named(name: str | None):
    config = context.config()
    feed = config.feeds.get(name or next(iter(config.feeds), ""))
    if feed is None:
        abort(404, "There is no such feed on this instance.")
    return config, feed


@bp.app_context_processor
def _links():
    """`reader_link_since(feed)`: when the signed-in person's live link to it was made, or None."""
    def since(feed_name: str) -> str | None:
        account = current_account()
        if account is None:
            return None
        made = reader_links.live(account.did).get(feed_name)
        return render.exact(made) if made else None
    return {"reader_link_since": since}


@bp.get("/r/<token>.atom", defaults={"kind": "atom"})
@bp.get("/r/<token>.json", defaults={"kind": "json"})
def read(token: str, kind: str):
    found = reader_links.owner(token)
    config = context.config()
    feed = config.feeds.get(found[1]) if found else None
    if feed is None:
        abort(404, "This feed link does not exist, or was revoked.")
    did = found[0]
    app = current_app._get_current_object()
    target = None if feed.mixed else feed.shown[0]
    reposts.fill_read(app, config, feed, target, did, admit=lambda: budget.try_spend(app, request.remote_addr))
    entries, _older, _top = timeline.read(app, config, feed, did, None, syndication.MAX_ENTRIES, target=target)
    page_url = url_for("timeline.page", feed=feed.name, _external=True)
    common = {"title": f"{feed.label} · Feather", "self_url": request.base_url, "page_url": page_url,
              "created_iso": render.iso(0)}
    if kind == "atom":
        common["feed_id"] = f"tag:{request.host.split(':')[0]},2026:feather/{did}/{feed.name}"
    rendered = KINDS[kind](entries, **common)
    headers = {"ETag": rendered.etag, "Last-Modified": rendered.last_modified, "Cache-Control": "private, max-age=60",
               "Referrer-Policy": "no-referrer"}
    if syndication.not_modified(rendered, request.headers.get("If-None-Match"), request.if_modified_since):
        return Response(status=304, headers=headers)
    return Response(rendered.body, content_type=rendered.content_type, headers=headers)


@bp.post("/timeline/reader")
@login_required
def make():
    config, feed = _feed_named(request.form.get("feed"))
    did = current_account().did
    with db.atomic():
        token = reader_links.create(did, feed.name)
    urls = {kind: url_for("reader_feed.read", token=token, kind=kind, _external=True) for kind in KINDS}
    return render_template("timeline/reader_made.html", feed=feed, urls=urls)


@bp.post("/timeline/reader/revoke")
@login_required
def revoke():
    config, feed = _feed_named(request.form.get("feed"))
    with db.atomic():
        reader_links.revoke(current_account().did, feed.name)
    return render_template("timeline/reader_made.html", feed=feed, urls=None)
