"""Graph sync: lane leases, so at most eight lanes run across the cluster (issue 9).

One row per lane (owner, app) that has had pending work. A runner process leases a lane by
writing its process id and an expiry (Unix seconds); it renews the lease while the lane runs and
clears it when the lane finishes. A dead process's leases simply expire and another process takes
the lanes. Rows are (re)created from sync_queue by the runner itself, so no writer of sync_queue
needs to know about this table.
"""


def up(m):
    b = m.d.bigint
    m.execute(
        f"CREATE TABLE sync_lanes ("
        f" owner_did TEXT NOT NULL REFERENCES sync_sets (owner_did) ON DELETE CASCADE,"
        f" app TEXT NOT NULL,"
        f" leased_by TEXT,"  # the runner process holding the lease, NULL when free
        f" lease_until {b} NOT NULL DEFAULT 0,"  # the lease is live while lease_until >= now
        f" PRIMARY KEY (owner_did, app))"
    )
    m.execute("CREATE INDEX sync_lanes_lease ON sync_lanes (lease_until)")
