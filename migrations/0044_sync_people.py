"""Graph sync: what the owner's page needs to name people and to say "of about N" (issue 13).

- sync_people: a cache of each DID's verified handle and display name, so pages show
  "Ada (@ada.example)" instead of a DID. Pages only read it and mark a DID as wanted; the
  sync-people job fills it in the background (feather/sync/people.py). Public data, shared by
  every owner, so it hangs off no sync set. fetched_at 0: never looked up.
- sync_app_counts: how many follows the owner had on each app when they last looked at the
  preview (a PDS listing does not say how many records there are), so a backfill listing can show
  "3,200 of about 20,000 follows listed". Written by the preview before any sync set exists, so
  it references none either; `complete` 0 means the preview stopped listing early (more than that).
"""


def up(m):
    b = m.d.bigint
    m.execute(
        f"CREATE TABLE sync_people ("
        f" did TEXT PRIMARY KEY,"
        f" handle TEXT,"  # verified both ways (alsoKnownAs -> handle -> the same DID), else NULL
        f" display_name TEXT,"
        f" wanted_at {b} NOT NULL,"  # last time a page named this DID; unwanted rows are dropped
        f" fetched_at {b} NOT NULL DEFAULT 0,"
        f" next_fetch_at {b} NOT NULL DEFAULT 0,"
        f" failures INTEGER NOT NULL DEFAULT 0,"
        f" last_error TEXT)"
    )
    m.execute("CREATE INDEX sync_people_due ON sync_people (next_fetch_at)")
    m.execute("CREATE INDEX sync_people_wanted ON sync_people (wanted_at)")
    m.execute(
        f"CREATE TABLE sync_app_counts ("
        f" owner_did TEXT NOT NULL,"
        f" app TEXT NOT NULL,"
        f" following INTEGER NOT NULL,"
        f" complete INTEGER NOT NULL,"
        f" measured_at {b} NOT NULL,"
        f" PRIMARY KEY (owner_did, app))"
    )
