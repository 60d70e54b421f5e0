"""Moderation labels on the timeline: a cache of what each labeler says about a post or an account.

feed_labels: the labels in effect (negations already applied) that a labeler (`src`) put on a
subject (`uri`: a post's at:// URI, or an account's DID), as the labeler sent them (`label`, JSON),
with the expiry (`exp_us`, applied when read) and when they were fetched. feed_label_checks: when
each (labeler, subject) was last asked, so "no labels" is cached too. Both are a cache: rows older
than a day are dropped as new ones are written, and losing them only costs a fetch.
"""


def up(m):
    t = m.d.byte_text
    b = m.d.bigint
    m.execute(
        f"CREATE TABLE feed_labels ("
        f" src {t} NOT NULL,"
        f" uri {t} NOT NULL,"
        f" val {t} NOT NULL,"
        f" label TEXT NOT NULL,"
        f" exp_us {b},"
        f" fetched_us {b} NOT NULL,"
        f" PRIMARY KEY (src, uri, val))"
    )
    m.execute("CREATE INDEX feed_labels_fetched ON feed_labels (fetched_us)")
    m.execute(
        f"CREATE TABLE feed_label_checks ("
        f" src {t} NOT NULL,"
        f" uri {t} NOT NULL,"
        f" checked_us {b} NOT NULL,"
        f" PRIMARY KEY (src, uri))"
    )
    m.execute("CREATE INDEX feed_label_checks_checked ON feed_label_checks (checked_us)")
