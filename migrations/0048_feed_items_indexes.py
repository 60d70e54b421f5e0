"""feed_items keeps only the indexes a query uses; each one costs every fan-out row a page write.

`feed_items_actor_time (actor, time_us DESC)` served no statement: getFeed, the cutoff delete and
the hybrid union all filter on (actor, collection) and use `feed_items_actor_coll_time`. It made
every fan-out row one more random index insert (a quarter of the table's index writes). What
stays, and the statement that needs it (tests/test_feeds_explain.py pins each plan):
- the primary key (actor, uri): ON CONFLICT, the unfollow range, an unserved actor's delete,
  the prune sweep's actor pages;
- feed_items_actor_coll_time (actor, collection, time_us DESC, uri): the getFeed page, the
  cutoff delete, the hybrid union;
- feed_items_uri (uri): a deleted record leaves every feed (`WHERE uri IN (…)`), an edit's time resync.
"""


def up(m):
    m.execute("DROP INDEX IF EXISTS feed_items_actor_time")
