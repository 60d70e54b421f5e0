"""Reposts in timelines: a repost's feed row names the record it reposts.

A repost by someone the reader follows is fanned out like a post: one feed_items row per
follower, keyed by the repost's own URI and time, in the repost collection. `subject` is the
reposted record's URI (NULL on every other row). The read joins that row to the reposted
record and shows a record once, at its newest row (its own, or the newest repost of it), so the
feed's order and its keyset cursor stay what they were.

`feed_items_subject (subject, actor)` is partial: only repost rows carry a subject, so posts pay
no index write for it. It serves the read's "is there a newer repost of this record for this
reader" probe, a deleted record's removal from every feed, and the records sweep's "is this
record still reposted into someone's feed" check.
"""


def up(m):
    m.execute(f"ALTER TABLE feed_items ADD COLUMN subject {m.d.byte_text}")
    m.execute("CREATE INDEX feed_items_subject ON feed_items (subject, actor) WHERE subject IS NOT NULL")
