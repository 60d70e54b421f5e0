"""The FEED_SERVE gate of getFeed and getFeedSkeleton: the actor is served, becomes served (a
reader, under FEED_SERVE_MAX_ACTORS), or is refused with 403 (signed-in only) or 503 (full)."""
from __future__ import annotations

from feather.db import db
from feather.errors import ApiError
from feather.feeds.config import FeedsConfig
from feather.feeds.store import served


def admit_reader(config: FeedsConfig, settings, did: str) -> None:
    """getFeed's gate: the actor is served, becomes served (readers, under the cap), or is refused."""
    mode = settings.feed_serve
    if mode == served.ALL or served.is_served(config, did):
        return
    if mode == served.SIGNED_IN:
        raise ApiError(403, "NotServed", "This instance keeps timelines only for accounts that signed in here.")
    if served.readers() >= settings.feed_serve_max_actors:
        raise ApiError(503, "NotServed", "This instance serves as many readers as it can; try again later.")
    with db.atomic():
        served.serve(did, "reader")
