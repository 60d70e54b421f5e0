"""Reference hydration (Contrail's `hydrate<Ref>=true`): a record's referenced post, embedded.

Two references are known for posts: `parent` (the post a reply answers, `reply.parent`) and
`quote` (the post a quote embeds, `embed.record` or a recordWithMedia's record). With
`hydrateParent=true` (or `1`) each record that has a parent stored here carries it under
`parent`, in the record shape (uri, cid, did, collection, rkey, time_us, value); `hydrateQuote`
does the same under `quote`. A reference the store does not hold is left out: nothing is fetched,
so one page costs one primary-key read per reference kind.
"""
from __future__ import annotations

from typing import Mapping

from feather.feeds.config import Collection
from feather.feeds.read import query, render
from feather.feeds.store import records

POST = "app.bsky.feed.post"
REFS = {"parent": ("hydrateParent", render.reply_parent), "quote": ("hydrateQuote", render.quoted)}


def wanted(params: Mapping[str, str]) -> list[str]:
    return [name for name, (param, _) in REFS.items() if params.get(param) in ("true", "1")]


def hydrate(c: Collection, out: list[dict], params: Mapping[str, str]) -> None:
    """Add the wanted references to each record of `out` (in place)."""
    names = wanted(params)
    if not names or c.nsid != POST:
        return
    for name in names:
        pick = REFS[name][1]
        refs = {i: pick(r["value"]) for i, r in enumerate(out) if isinstance(r.get("value"), dict)}
        uris = sorted({u for u in refs.values() if u})
        stored = records.load_many(c, uris) if uris else {}
        for i, uri in refs.items():
            if uri in stored:
                cid, text, time_us = stored[uri]
                did, _nsid, rkey = uri[len("at://"):].split("/", 2)
                out[i][name] = query.format_record(c, (uri, cid, did, rkey, text, time_us))
