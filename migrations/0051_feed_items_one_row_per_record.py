"""feed_items holds a record once per feed: the uri index becomes unique on (uri, actor).

The page key (actor, collection, time_us DESC, uri) is unique, but it lets one (actor, uri) sit
there twice at two times; only the time resync before every fan-out kept that from happening
(0049), and no test said so. A path that inserts at a record's new time without resyncing first
(a new statement, a backfill from a record stored again at another time) would show the post
twice in a timeline. Now the database refuses it: every insert is ON CONFLICT DO NOTHING, so
such a row is skipped instead.

It costs no new B-tree: (uri, actor) serves the record's deletes and time resyncs as (uri) did.
On SQLite its entries are the same bytes (an index of a WITHOUT ROWID table already stores the
rest of the primary key, actor included), and 300,000 fan-out rows took as long to insert
either way. On PostgreSQL a second unique index made each insert check both (18 % slower), so
feed_items_page stops being unique there: (uri, actor) unique implies it, and inserts took as
long as before. What PostgreSQL pays is disk: a non-unique (uri) index stores a post's followers
as one deduplicated entry, a unique one cannot (at six followers a post, 9 MB → 73 MB of index
per 300,000 rows, beside a 50 MB table and an 81 MB page index).

Rows a missed resync may have left twice keep the later time: the record's current time lives
in a records table the operator's config names, which a migration cannot read, so this is a
rule rather than a guess; the next edit of that record resyncs the row anyway.
"""


def up(m):
    m.execute("DELETE FROM feed_items WHERE EXISTS (SELECT 1 FROM feed_items n"
              " WHERE n.uri = feed_items.uri AND n.actor = feed_items.actor"
              " AND (n.time_us > feed_items.time_us"
              " OR (n.time_us = feed_items.time_us AND n.collection > feed_items.collection)))")
    m.execute("DROP INDEX feed_items_uri")
    m.execute("CREATE UNIQUE INDEX feed_items_uri ON feed_items (uri, actor)")
    if not m.d.is_sqlite:
        m.execute("DROP INDEX feed_items_page")
        m.execute("CREATE INDEX feed_items_page ON feed_items (actor, collection, time_us DESC, uri)")
