"""Feed generators this instance publishes (issue 16).

feed_generators: one row per `app.bsky.feed.generator` record written by an operator through
Feather, so describeFeedGenerator can list it and getFeedSkeleton can tell which configured feed
an at:// feed URI means. The record itself lives in the publisher's repo; this is our memory of it.
"""


def up(m):
    t = m.d.byte_text
    b = m.d.bigint
    m.execute(
        f"CREATE TABLE feed_generators ("
        f" uri {t} PRIMARY KEY,"
        f" publisher_did {t} NOT NULL,"
        f" rkey TEXT NOT NULL,"
        f" feed TEXT NOT NULL,"
        f" cid TEXT,"
        f" display_name TEXT NOT NULL,"
        f" description TEXT NOT NULL DEFAULT '',"
        f" published_us {b} NOT NULL)"
    )
