"""Grants at rest and the refresh lease, with a fake refresher (SQLite and PostgreSQL)."""
from __future__ import annotations


import gevent
import pytest

from feather.atproto.pds import ServerError
from feather.auth.dpop import new_key
from feather.auth.grants import LEASE_SECS, Grant, GrantStore, NeedsReauth
from feather.auth.oauth import InvalidGrant
from feather.auth.seal import SealError, Sealer
from feather.db import db

DID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
NOW = 1_800_000_000
K1, K2 = b"1" * 32, b"2" * 32


class FakeRefresher:
    def __init__(self, delay: float = 0.0, dead: bool = False):
        self.calls: list[str] = []
        self.delay, self.dead = delay, dead

    def __call__(self, grant: Grant):
        self.calls.append(grant.refresh)
        gevent.sleep(self.delay)  # the HTTP round trip, during which others must wait
        if self.dead:
            raise InvalidGrant("refresh token replayed", "invalid_grant")
        n = len(self.calls)
        return f"access-{n}", f"refresh-{n}", NOW + 3600, grant.scope, f"nonce-{n}"


def grant(**overrides) -> Grant:
    values = dict(did=DID, kind="oauth", handle="alice.test", pds_url="https://pds.example.com",
                  issuer="https://as.example.com", scope="atproto", access="access-0", refresh="refresh-0",
                  expires_at=NOW + 3600, dpop_key=new_key(), as_nonce=None, pds_nonce=None, client_kid="k1")
    values.update(overrides)
    return Grant(**values)


@pytest.fixture
def store(app):
    refresher = FakeRefresher()
    s = GrantStore(Sealer([K1]), {"oauth": refresher, "password": refresher}, clock=lambda: NOW)
    s.refresher = refresher
    with app.app_context(), db.connection_context():
        yield s


def test_tokens_and_dpop_key_are_sealed_at_rest(store):
    g = grant()
    store.save(g)
    row = db.execute_sql("SELECT access_enc, refresh_enc, dpop_key_enc FROM auth_grant").fetchone()
    assert all(v.startswith("v1.") for v in row)
    assert "access-0" not in "".join(row) and g.dpop_key.as_dict(private=True)["d"] not in row[2]
    loaded = store.load(DID)
    assert (loaded.access, loaded.refresh, loaded.dpop_key.thumbprint()) == ("access-0", "refresh-0",
                                                                             g.dpop_key.thumbprint())


def test_sealed_values_open_after_key_rotation_but_not_in_another_row():
    old, rotated = Sealer([K1]), Sealer([K2, K1])
    sealed = old.seal("secret", "did:a:access")
    assert rotated.open(sealed, "did:a:access") == "secret"
    assert rotated.seal("x", "aad").split(".")[1] != sealed.split(".")[1]
    with pytest.raises(SealError):
        old.open(sealed, "did:b:access")
    with pytest.raises(SealError):
        Sealer([K2]).open(sealed, "did:a:access")


def test_a_grant_no_key_opens_reads_as_needs_reauth(store):
    store.save(grant())
    store.sealer = Sealer([K2])
    assert store.load(DID).status == "needs_reauth"
    with pytest.raises(NeedsReauth, match="has expired or was revoked"):
        store.usable(DID)


def test_ensure_fresh_leaves_a_token_with_time_left_alone(store):
    store.save(grant(expires_at=NOW + 301))
    assert store.ensure_fresh(DID).access == "access-0"
    assert store.refresher.calls == []


def test_ensure_fresh_refreshes_early_within_five_minutes_of_expiry(store):
    store.save(grant(expires_at=NOW + 299))
    fresh = store.ensure_fresh(DID)
    assert (fresh.access, fresh.refresh, fresh.expires_at, fresh.as_nonce) == ("access-1", "refresh-1",
                                                                               NOW + 3600, "nonce-1")
    assert store.refresher.calls == ["refresh-0"]
    assert db.execute_sql("SELECT lease_owner, lease_until FROM auth_grant").fetchone() == (None, None)


def test_two_greenlets_refreshing_after_one_rejection_spend_the_refresh_token_once(app, store):
    store.save(grant())
    store.refresher.delay = 0.3

    def refresh():
        with app.app_context(), db.connection_context():
            return store.refresh_after_rejection(DID, "access-0").access

    results = [g.value for g in gevent.joinall([gevent.spawn(refresh) for _ in range(3)], raise_error=True)]
    assert results == ["access-1"] * 3
    assert store.refresher.calls == ["refresh-0"]


def test_a_rejection_of_an_already_replaced_token_does_not_refresh(store):
    store.save(grant())
    store.refresh_after_rejection(DID, "access-0")
    assert store.refresh_after_rejection(DID, "access-0").access == "access-1"
    assert store.refresher.calls == ["refresh-0"]


def test_invalid_grant_marks_needs_reauth_with_a_clear_message(store):
    store.save(grant())
    store.refresher.dead = True
    message = "Your sign-in with pds.example.com has expired or was revoked. Please sign in again."
    with pytest.raises(NeedsReauth) as err:
        store.refresh_after_rejection(DID, "access-0")
    assert str(err.value) == message
    loaded = store.load(DID)
    assert (loaded.status, loaded.status_reason) == ("needs_reauth", message)
    with pytest.raises(NeedsReauth):
        store.ensure_fresh(DID)
    assert len(store.refresher.calls) == 1  # a dead grant is never refreshed again


def test_a_stale_lease_from_a_crashed_worker_is_taken_over(store):
    store.save(grant())
    db.execute_sql(store_q("UPDATE auth_grant SET lease_owner = 'ghost', lease_until = ?"), (NOW - 1,))
    assert store.refresh_after_rejection(DID, "access-0").access == "access-1"


def test_the_lease_of_a_process_killed_on_this_machine_is_taken_at_once_not_waited_out(store, caplog):
    import subprocess

    from feather.locks import holder_name

    killed = subprocess.Popen(["sleep", "30"])
    holder = holder_name(killed.pid)
    killed.kill()
    killed.wait()
    store.save(grant())
    db.execute_sql(store_q("UPDATE auth_grant SET lease_owner = ?, lease_until = ?"), (holder, NOW + LEASE_SECS))
    with caplog.at_level("WARNING", logger="feather.auth.grants"):
        assert store.refresh_after_rejection(DID, "access-0").access == "access-1"
    assert store.refresher.calls == ["refresh-0"]
    assert [r.getMessage() for r in caplog.records] == [
        f"took the session refresh lease of {DID} from {holder} at once: that process is gone"]
    assert db.execute_sql("SELECT lease_owner, lease_until FROM auth_grant").fetchone() == (None, None)


def test_two_waiters_taking_a_killed_processs_lease_at_once_refresh_only_once(app, store, monkeypatch):
    """Both see the dead holder; the take is a compare-and-swap on it, so only one wins. The other
    waits and reads the winner's token. (gone() yields after answering, so the two interleave.)"""
    import subprocess

    from feather import locks

    killed = subprocess.Popen(["sleep", "30"])
    holder = locks.holder_name(killed.pid)
    killed.kill()
    killed.wait()
    real_gone = locks.gone

    def gone_then_yield(name):
        answer = real_gone(name)
        gevent.sleep(0)
        return answer
    monkeypatch.setattr(locks, "gone", gone_then_yield)
    store.save(grant())
    store.refresher.delay = 0.1
    db.execute_sql(store_q("UPDATE auth_grant SET lease_owner = ?, lease_until = ?"), (holder, NOW + LEASE_SECS))

    def waiter():
        with app.app_context(), db.connection_context():
            return store.refresh_after_rejection(DID, "access-0").access
    jobs = [gevent.spawn(waiter) for _ in range(2)]
    gevent.joinall(jobs, raise_error=True)
    assert [j.value for j in jobs] == ["access-1", "access-1"]
    assert store.refresher.calls == ["refresh-0"]


def test_a_running_processs_lease_is_waited_for_and_never_taken(app, store, monkeypatch):
    import subprocess

    from feather.locks import holder_name

    running = subprocess.Popen(["sleep", "30"])
    try:
        store.save(grant())
        monkeypatch.setattr("feather.auth.grants.LEASE_SECS", 0)  # the wait gives up at once (5 s)
        db.execute_sql(store_q("UPDATE auth_grant SET lease_owner = ?, lease_until = ?"),
                       (holder_name(running.pid), NOW + 90))
        with pytest.raises(ServerError, match="Timed out waiting for another worker"):
            store.refresh_after_rejection(DID, "access-0")
        assert store.refresher.calls == []
    finally:
        running.kill()
        running.wait()


def test_a_live_lease_makes_others_wait_then_read_the_new_token(app, store, monkeypatch):
    store.save(grant())
    monkeypatch.setattr("feather.auth.grants.LEASE_SECS", 1)
    db.execute_sql(store_q("UPDATE auth_grant SET lease_owner = 'other', lease_until = ?"), (NOW + LEASE_SECS,))

    def other_worker_finishes():
        gevent.sleep(0.2)
        with app.app_context(), db.connection_context():
            store.save(grant(access="access-from-other"))

    gevent.spawn(other_worker_finishes)
    assert store.refresh_after_rejection(DID, "access-0").access == "access-from-other"  # it waited for the save
    assert store.refresher.calls == []


def test_saving_a_new_grant_reactivates_the_account(store):
    store.save(grant())
    db.execute_sql(store_q("UPDATE auth_grant SET status = 'needs_reauth', status_reason = 'gone' WHERE did = ?"),
                   (DID,))
    store.save(grant(access="access-new"))
    assert (store.load(DID).status, store.load(DID).access) == ("active", "access-new")


def store_q(sql: str) -> str:
    from feather.db import current_dialect

    return current_dialect().q(sql)
