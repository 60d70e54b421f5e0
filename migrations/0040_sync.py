"""Graph sync: the six tables (docs/design.md, "Graph sync").

Everything hangs off sync_sets and cascades from it. sync_sets is keyed by the owner's DID: the
users table (sign-in, 0020-0029) did not exist when this was written, so the FK from the user
row to sync_sets is for a later migration in 0041-0049 to add; deleting a user must delete the
set, and the set's delete cascades to the other five tables.
Flags are INTEGER 0/1 and times are Unix seconds on both databases, so the SQL is written once.
"""


def up(m):
    b = m.d.bigint
    m.execute(
        f"CREATE TABLE sync_sets ("
        f" owner_did TEXT PRIMARY KEY,"
        f" apps TEXT NOT NULL DEFAULT '',"  # comma-separated registry keys, registry order
        f" enabled INTEGER NOT NULL DEFAULT 0,"
        f" paused INTEGER NOT NULL DEFAULT 0,"
        f" paused_at {b},"
        f" pause_reason TEXT,"
        f" auth_failures INTEGER NOT NULL DEFAULT 0,"  # 401s in a row
        f" parked_until {b} NOT NULL DEFAULT 0,"  # 429: the whole account waits until then
        f" backfill_run INTEGER NOT NULL DEFAULT 0,"
        f" backfill_total INTEGER NOT NULL DEFAULT 0,"  # listings in the current run
        f" union_run INTEGER NOT NULL DEFAULT 0,"  # the run whose union step has been taken
        f" next_sweep_at {b} NOT NULL DEFAULT 0,"
        f" created_at {b} NOT NULL,"
        f" updated_at {b} NOT NULL)"
    )
    m.execute("CREATE INDEX sync_sets_enabled ON sync_sets (enabled, owner_did)")
    fk = "REFERENCES sync_sets (owner_did) ON DELETE CASCADE"
    # One row per follow record the owner has on an app in the set; state: live | pending (sync
    # wrote or is writing it, not yet confirmed) | deleting (sync is deleting it) | gone (tombstone:
    # a late echo of a record sync already deleted must not look like a new follow).
    m.execute(
        f"CREATE TABLE sync_follow_mirror ("
        f" owner_did TEXT NOT NULL {fk},"
        f" app TEXT NOT NULL,"
        f" rkey TEXT NOT NULL,"
        f" subject TEXT NOT NULL,"
        f" created_by_sync INTEGER NOT NULL DEFAULT 0,"
        f" state TEXT NOT NULL DEFAULT 'live',"
        f" last_seen_at {b} NOT NULL,"
        f" PRIMARY KEY (owner_did, app, rkey))"
    )
    m.execute("CREATE INDEX sync_mirror_subject ON sync_follow_mirror (owner_did, subject, app)")
    m.execute("CREATE INDEX sync_mirror_tombstones ON sync_follow_mirror (state, last_seen_at)")  # cleanup
    m.execute(
        f"CREATE TABLE sync_waiting ("
        f" owner_did TEXT NOT NULL {fk},"
        f" app TEXT NOT NULL,"
        f" subject TEXT NOT NULL,"
        f" since {b} NOT NULL,"
        f" next_check_at {b} NOT NULL,"
        f" PRIMARY KEY (owner_did, app, subject))"
    )
    m.execute("CREATE INDEX sync_waiting_subject ON sync_waiting (subject, app)")
    m.execute("CREATE INDEX sync_waiting_due ON sync_waiting (next_check_at)")
    # Every write sync will make, in event order (id). kind: follow | unfollow.
    # status: pending | done | skipped | waiting | failed | cancelled.
    m.execute(
        f"CREATE TABLE sync_queue ("
        f" id {m.d.id_pk},"
        f" owner_did TEXT NOT NULL {fk},"
        f" app TEXT NOT NULL,"
        f" kind TEXT NOT NULL,"
        f" subject TEXT NOT NULL,"
        f" rkey TEXT,"  # unfollow: the record to delete; follow: the TID chosen before the first attempt
        f" record_created_at TEXT,"  # so a retry sends a byte-identical record
        f" origin TEXT NOT NULL,"  # event | backfill | sweep | waitlist | recheck
        f" status TEXT NOT NULL DEFAULT 'pending',"
        f" attempts INTEGER NOT NULL DEFAULT 0,"
        f" not_before {b} NOT NULL DEFAULT 0,"
        f" last_error TEXT,"
        f" created_at {b} NOT NULL,"
        f" updated_at {b} NOT NULL)"
    )
    m.execute("CREATE INDEX sync_queue_lane ON sync_queue (status, owner_did, app, id)")
    m.execute("CREATE INDEX sync_queue_subject ON sync_queue (owner_did, subject, status)")
    m.execute("CREATE INDEX sync_queue_history ON sync_queue (status, updated_at)")  # cleanup
    m.execute(
        f"CREATE TABLE sync_backfill_tasks ("
        f" id {m.d.id_pk},"
        f" owner_did TEXT NOT NULL {fk},"
        f" run INTEGER NOT NULL,"
        f" app TEXT NOT NULL,"
        f" kind TEXT NOT NULL,"  # backfill | sweep
        f" cursor TEXT,"
        f" listed INTEGER NOT NULL DEFAULT 0,"
        f" status TEXT NOT NULL DEFAULT 'pending',"  # pending | done | failed
        f" attempts INTEGER NOT NULL DEFAULT 0,"
        f" not_before {b} NOT NULL DEFAULT 0,"
        f" started_at {b} NOT NULL,"
        f" finished_at {b},"
        f" last_error TEXT)"
    )
    m.execute("CREATE INDEX sync_tasks_owner_app ON sync_backfill_tasks (owner_did, app, id)")
    m.execute("CREATE INDEX sync_tasks_due ON sync_backfill_tasks (status, not_before)")
    m.execute(
        f"CREATE TABLE sync_activity ("
        f" id {m.d.id_pk},"
        f" owner_did TEXT NOT NULL {fk},"
        f" at {b} NOT NULL,"
        f" app TEXT NOT NULL DEFAULT '',"
        f" kind TEXT NOT NULL,"
        f" subject TEXT,"
        f" points INTEGER NOT NULL DEFAULT 0,"
        f" detail TEXT)"
    )
    # The pacer sums points over the last hour and day per owner; the page lists newest first.
    m.execute("CREATE INDEX sync_activity_owner_at ON sync_activity (owner_did, at)")
    m.execute("CREATE INDEX sync_activity_at ON sync_activity (at)")  # cleanup
