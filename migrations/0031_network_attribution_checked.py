"""When an attribution handle was last verified both ways (µs; 0: never, or an #identity event
since). /network names an opted-in account by handle only while that check is fresh, so a
handle that moved to someone else is never shown next to the wrong account."""


def up(m):
    m.execute(f"ALTER TABLE net_attribution ADD COLUMN handle_checked_us {m.d.bigint} NOT NULL DEFAULT 0")
