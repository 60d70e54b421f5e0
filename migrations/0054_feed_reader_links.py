"""Private feed-reader links: a person's timeline as Atom and JSON Feed at an unguessable URL.

One row per link. Only the SHA-256 of the token is stored, so the database (a backup, /admin, a
leaked dump) can never be turned back into a working URL; the token itself is shown once, when
it is made. A link belongs to one (person, feed); making a new one for the same feed (rotating)
revokes the old one. A revoked link stays as a row with `revoked_us` set: it answers 404, exactly
as a token that never existed.
"""


def up(m):
    t = m.d.byte_text
    m.execute(
        f"CREATE TABLE feed_reader_links ("
        f" token_hash TEXT PRIMARY KEY,"
        f" did {t} NOT NULL,"
        f" feed TEXT NOT NULL,"
        f" created_us {m.d.bigint} NOT NULL,"
        f" revoked_us {m.d.bigint})"
    )
    # The person's live link per feed (the page shows whether one exists; rotating revokes it).
    m.execute("CREATE INDEX feed_reader_links_did ON feed_reader_links (did, feed)")
