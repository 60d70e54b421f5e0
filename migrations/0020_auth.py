"""Sign-in: pending OAuth requests, per-account grants (tokens sealed), browser sessions, login rate.

auth_grant holds one row per account: the tokens features use to act for it (OAuth or app
password), the DPoP key and nonces, and the refresh lease (lease_owner/lease_until) that makes
sure only one greenlet or process spends a single-use refresh token. Browser sessions point at
an account; signing out removes the session, not the grant.
"""


def up(m):
    big = m.d.bigint
    m.execute(
        f"CREATE TABLE auth_oauth_request ("
        f" state TEXT PRIMARY KEY,"
        f" issuer TEXT NOT NULL,"
        f" did TEXT,"
        f" handle TEXT,"
        f" scope TEXT NOT NULL,"
        f" verifier_enc TEXT NOT NULL,"
        f" dpop_key_enc TEXT NOT NULL,"
        f" as_nonce TEXT,"
        f" expect_did TEXT,"
        f" next_url TEXT,"
        f" created_at {big} NOT NULL)"
    )
    m.execute("CREATE INDEX auth_oauth_request_created ON auth_oauth_request (created_at)")
    m.execute(
        f"CREATE TABLE auth_grant ("
        f" did TEXT PRIMARY KEY,"
        f" kind TEXT NOT NULL,"
        f" handle TEXT,"
        f" pds_url TEXT NOT NULL,"
        f" issuer TEXT,"
        f" scope TEXT NOT NULL DEFAULT '',"
        f" access_enc TEXT NOT NULL,"
        f" refresh_enc TEXT NOT NULL,"
        f" expires_at {big} NOT NULL,"
        f" dpop_key_enc TEXT,"
        f" as_nonce TEXT,"
        f" pds_nonce TEXT,"
        f" client_kid TEXT,"
        f" status TEXT NOT NULL DEFAULT 'active',"
        f" status_reason TEXT,"
        f" lease_owner TEXT,"
        f" lease_until {big},"
        f" created_at {big} NOT NULL,"
        f" updated_at {big} NOT NULL)"
    )
    m.execute(
        f"CREATE TABLE auth_web_session ("
        f" id_hash TEXT PRIMARY KEY,"
        f" did TEXT NOT NULL,"
        f" created_at {big} NOT NULL,"
        f" expires_at {big} NOT NULL)"
    )
    m.execute("CREATE INDEX auth_web_session_did ON auth_web_session (did)")
    m.execute("CREATE INDEX auth_web_session_expires ON auth_web_session (expires_at)")
    m.execute(
        f"CREATE TABLE auth_rate ("
        f" bucket TEXT PRIMARY KEY,"
        f" hits INTEGER NOT NULL,"
        f" expires_at {big} NOT NULL)"
    )
    m.execute("CREATE INDEX auth_rate_expires ON auth_rate (expires_at)")
