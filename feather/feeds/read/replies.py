"""A feed's replies rule (`replies` in the feeds file), applied when it is read.

- `all`: every reply by someone the reader follows, as fan-out stored it;
- `none`: no replies (a record with a `reply` is left out);
- `followed`: a reply shows only when the reader follows the person it replies to (the parent
  post's author), as the Bluesky app's Following feed does. One probe of the follow table's
  (subject, did) index per reply on the page.

Rows are never removed for it: one stored timeline serves every variant reading the same
target, and following someone later shows the replies to them at once.
"""
from __future__ import annotations

from feather.db import current_dialect
from feather.feeds.config import Feed, FeedsConfig
from feather.feeds.read import query
from feather.feeds.store.schema import subject_expr


def restrict(config: FeedsConfig, feed: Feed, actor: str, source: query.Source) -> None:
    if feed.replies == "all":
        return
    d = current_dialect()
    reply = d.json_text("r.record", "reply")
    if feed.replies == "none":
        source.where.append(f"{reply} IS NULL")
        return
    parent = d.at_uri_did(d.json_path_text("r.record", ("reply", "parent", "uri")))
    follow = config.collections[feed.follow].table
    source.where.append(f"({reply} IS NULL OR EXISTS (SELECT 1 FROM {follow} fo"
                        f" WHERE {subject_expr('fo')} = {parent} AND fo.did = ?))")
    source.where_params.append(actor)
