"""Lane leases: at most eight sync lanes run across the cluster, not per process (issue 9).

Each lane here is one owner's bluesky lane holding unfollow rows (the shortest path through the
runner: one PDS delete per row). Lane i's head row is older than lane i+1's, so "oldest first"
has exact expected values.
"""
from __future__ import annotations

import gevent
import gevent.event
import pytest

from feather import sql
from tests.conftest import PG_URL
from tests.test_sync_kit import T0, Clock

BSKY = "app.bsky.graph.follow"


def owner(i: int) -> str:
    return f"did:plc:owner{i:02d}"


def make_lanes(n: int, rows_per_lane: int = 1, now: int = T0) -> None:
    from feather.db import db

    with db.atomic():
        for i in range(n):
            sql.execute("INSERT INTO sync_sets (owner_did, apps, enabled, created_at, updated_at)"
                        " VALUES (?, 'bluesky,tangled', 1, ?, ?)", (owner(i), now, now))
        for j in range(rows_per_lane):  # row j of every lane, so lane i's head is older than lane i+1's
            for i in range(n):
                rkey = f"r{i:02d}x{j}"
                sql.execute("INSERT INTO sync_follow_mirror (owner_did, app, rkey, subject, last_seen_at)"
                            " VALUES (?, 'bluesky', ?, ?, ?)", (owner(i), rkey, f"did:plc:subject{j}", now))
                sql.execute("INSERT INTO sync_queue (owner_did, app, kind, subject, rkey, origin,"
                            " created_at, updated_at)"
                            " VALUES (?, 'bluesky', 'unfollow', ?, ?, 'event', ?, ?)",
                            (owner(i), f"did:plc:subject{j}", rkey, now, now))


def leases():
    return sql.rows("SELECT owner_did, leased_by, lease_until FROM sync_lanes WHERE leased_by IS NOT NULL"
                    " ORDER BY owner_did")


def pending() -> int:
    return sql.scalar("SELECT COUNT(*) FROM sync_queue WHERE status = 'pending'", default=0)


class Tracker:
    """Shared by the writers of several runners: which lanes are inside a PDS call right now."""

    def __init__(self):
        self.in_flight: set[str] = set()
        self.peak = 0
        self.deleted: list[str] = []
        self.overlap = False


class SlowWriter:
    """A FollowWriter whose delete takes a while (yielding to other greenlets)."""

    def __init__(self, tracker: Tracker, name: str, delay=lambda owner: 0.02, during=None, hold_until: int = 0):
        self.tracker, self.name, self.delay, self.during = tracker, name, delay, during
        self.hold_until = hold_until  # stay in the call until this many lanes are in flight (or 5 s)
        self.lanes: list[str] = []

    def delete_follow(self, owner_did, collection, rkey):
        t = self.tracker
        if owner_did in t.in_flight:
            t.overlap = True
        t.in_flight.add(owner_did)
        t.peak = max(t.peak, len(t.in_flight))
        self.lanes.append(owner_did)
        try:
            if self.during is not None:
                self.during(owner_did, rkey)
            gevent.sleep(self.delay(owner_did))
            with gevent.Timeout(5, False):
                while t.peak < self.hold_until:
                    gevent.sleep(0.01)
            t.deleted.append(rkey)
        finally:
            t.in_flight.discard(owner_did)


@pytest.fixture
def ctx(make_app):
    from feather.db import db

    app = make_app()
    with app.app_context(), db.connection_context():
        yield app


def runner(app, writer, holder, clock):
    from feather.sync.runner import Runner

    return Runner(writer, app.config["FEATHER"], clock, holder=holder)


def tick_in_greenlet(app, r, start: gevent.event.Event, **kw):
    """r.tick() in a greenlet of its own, on a connection already open, once start is set (so two
    ticks begin their lease transactions at the same moment). The greenlet's `.ready_to_start`
    is set once its connection is open."""
    from feather.db import db

    opened = gevent.event.Event()

    def go():
        with app.app_context(), db.connection_context():
            db.execute_sql("SELECT 1")
            opened.set()
            start.wait()
            return r.tick(**kw)
    greenlet = gevent.spawn(go)
    greenlet.ready_to_start = opened
    return greenlet


# --- leasing


def test_two_holders_never_lease_the_same_lane_and_the_total_is_capped_at_eight(ctx):
    from feather.sync.lanes import MAX_LANES, lease_lanes

    assert MAX_LANES == 8
    make_lanes(12)
    a = lease_lanes("proc-a", T0, 5)
    b = lease_lanes("proc-b", T0, 8)
    c = lease_lanes("proc-c", T0, 8)
    assert a == [(owner(i), "bluesky") for i in range(5)]  # oldest heads first
    assert b == [(owner(i), "bluesky") for i in range(5, 8)]  # 8 − 5 live leases
    assert c == []  # eight live leases cluster-wide: nothing more
    assert leases() == ([(owner(i), "proc-a", T0 + 60) for i in range(5)]
                        + [(owner(i), "proc-b", T0 + 60) for i in range(5, 8)])


def test_an_expired_lease_is_taken_over_and_its_old_holder_cannot_renew_it(ctx):
    from feather.sync.lanes import lease_lanes, release_lease, renew_lease

    make_lanes(12)
    assert len(lease_lanes("dead", T0, 8)) == 8
    assert lease_lanes("live", T0 + 30, 8) == []  # still eight live leases
    assert lease_lanes("live", T0 + 60, 8) == []  # lease_until == now is still live
    taken = lease_lanes("live", T0 + 61, 8)
    assert taken == [(owner(i), "bluesky") for i in range(8)]  # the dead process's lanes, oldest first
    assert not renew_lease("dead", owner(0), "bluesky", T0 + 62)
    assert renew_lease("live", owner(0), "bluesky", T0 + 62)
    release_lease("dead", owner(1), "bluesky")  # a late release by the old holder frees nothing
    assert (owner(1), "live", T0 + 121) in leases()
    release_lease("live", owner(1), "bluesky")
    assert (owner(1), "live", T0 + 121) not in leases()
    assert lease_lanes("other", T0 + 62, 8) == [(owner(1), "bluesky")]  # the one freed slot


def test_a_lease_ending_this_second_is_not_handed_to_another_holder_with_slots_free(ctx):
    from feather.sync.lanes import lease_lanes

    make_lanes(2)
    assert lease_lanes("first", T0, 1) == [(owner(0), "bluesky")]
    # A free slot at T0 + 60, when lane 0's lease ends but has not lapsed: lane 1 gets it, not lane 0.
    assert lease_lanes("second", T0 + 60, 2) == [(owner(1), "bluesky")]
    assert leases() == [(owner(0), "first", T0 + 60), (owner(1), "second", T0 + 120)]


def test_a_paused_owners_lanes_take_no_slot(ctx):
    from feather.sync.lanes import lease_lanes

    make_lanes(2)  # owner 0's head row is the older one
    sql.execute("UPDATE sync_sets SET paused = 1 WHERE owner_did = ?", (owner(0),))
    assert lease_lanes("a", T0, 1) == [(owner(1), "bluesky")]
    assert lease_lanes("b", T0, 8) == []


def test_a_dead_processes_lanes_are_run_by_another_runner_after_the_lease_expires(ctx):
    from feather.sync.lanes import lease_lanes

    make_lanes(12)
    lease_lanes("dead", T0, 8)
    clock = Clock(T0 + 10)
    tracker = Tracker()
    r = runner(ctx, SlowWriter(tracker, "b", delay=lambda o: 0), "proc-b", clock)
    assert r.tick() == 0  # eight live leases held by the dead process
    clock.advance(51)  # T0 + 61: expired
    assert r.tick() == 8
    assert sorted(tracker.deleted) == [f"r{i:02d}x0" for i in range(8)]
    assert r.tick() == 4
    assert pending() == 0

    assert sql.rows("SELECT COUNT(*) FROM sync_lanes") == [(0,)]  # finished lanes leave no row behind


def test_a_lease_is_renewed_while_its_lane_runs_and_released_after(ctx):
    from feather.sync.lanes import lease_lanes

    make_lanes(1, rows_per_lane=3)
    clock = Clock()
    seen = []

    def during(owner_did, rkey):
        seen.append((sql.scalar("SELECT lease_until FROM sync_lanes WHERE owner_did = ?", (owner_did,)),
                     lease_lanes("intruder", clock(), 8)))
        clock.advance(40)  # a slow PDS: the run outlives the first lease

    r = runner(ctx, SlowWriter(Tracker(), "a", delay=lambda o: 0, during=during), "proc-a", clock)
    assert r.tick() == 3
    assert seen == [(T0 + 60, []), (T0 + 100, []), (T0 + 140, [])]
    assert sql.rows("SELECT COUNT(*) FROM sync_lanes") == [(0,)]


def test_a_runner_stops_a_lane_whose_lease_another_process_took(ctx):
    from feather.sync.lanes import lease_lanes

    make_lanes(1, rows_per_lane=3)
    clock = Clock()
    taken = []

    def during(owner_did, rkey):
        clock.advance(61)  # this process stalls past its lease; another takes the lane
        if not taken:
            taken.append(lease_lanes("proc-b", clock(), 8))

    r = runner(ctx, SlowWriter(Tracker(), "a", delay=lambda o: 0, during=during), "proc-a", clock)
    assert r.tick() == 1  # the row in flight finishes; the next one is left to proc-b
    assert taken == [[(owner(0), "bluesky")]]
    assert leases() == [(owner(0), "proc-b", T0 + 61 + 60)]
    assert pending() == 2


# --- two runners at once


def test_two_runners_ticking_at_once_run_eight_lanes_between_them_not_sixteen(ctx):
    from feather.sync.lanes import lease_lanes

    make_lanes(12)
    # The lane rows exist already (the steady state), so neither tick's INSERT of new lane rows
    # waits on the other's: only the leasing itself keeps the two ticks apart.
    assert lease_lanes("nobody", T0, 0) == []
    clock = Clock()
    tracker = Tracker()
    # Each call waits (up to 5 s) until eight lanes are in flight, so the peak is exact whatever the
    # connection set-up times; a ninth lane anywhere would show as a peak above eight.
    wa, wb = (SlowWriter(tracker, name, delay=lambda o: 0.05, hold_until=8) for name in ("a", "b"))
    start = gevent.event.Event()
    ga = tick_in_greenlet(ctx, runner(ctx, wa, "proc-a", clock), start)
    gb = tick_in_greenlet(ctx, runner(ctx, wb, "proc-b", clock), start)
    for greenlet in (ga, gb):
        assert greenlet.ready_to_start.wait(10), "a tick's connection did not open"
    start.set()
    gevent.joinall([ga, gb], raise_error=True, timeout=30)
    assert ga.value + gb.value == 8
    assert tracker.peak == 8
    assert not set(wa.lanes) & set(wb.lanes)
    assert len(tracker.deleted) == len(set(tracker.deleted)) == 8
    assert pending() == 4


def test_two_runners_ticking_in_loops_share_the_lanes_and_never_exceed_eight(ctx):
    from feather.db import db

    make_lanes(12, rows_per_lane=2)
    clock = Clock()
    tracker = Tracker()
    delays = {owner(i): 0.01 * (1 + i % 4) for i in range(12)}
    writers = [SlowWriter(tracker, name, delay=delays.__getitem__) for name in ("a", "b")]
    runners = [runner(ctx, w, f"proc-{w.name}", clock) for w in writers]

    def loop(r):
        with ctx.app_context(), db.connection_context():
            done = 0
            for _ in range(500):
                done += r.tick(rows_per_lane=1)
                if not pending():
                    return done
                gevent.sleep(0.005)
            raise AssertionError("the queue never drained")

    greenlets = [gevent.spawn(loop, r) for r in runners]
    gevent.joinall(greenlets, raise_error=True, timeout=60)
    assert sum(g.value for g in greenlets) == 24
    assert sorted(tracker.deleted) == sorted(f"r{i:02d}x{j}" for i in range(12) for j in range(2))
    assert 1 <= tracker.peak <= 8
    assert not tracker.overlap  # a lane never ran in two places at once
    assert writers[0].lanes and writers[1].lanes  # both processes did work
    assert leases() == []


# --- PostgreSQL: SKIP LOCKED, not just the lease column


@pytest.mark.skipif(not PG_URL, reason="FOR UPDATE SKIP LOCKED is PostgreSQL's")
def test_a_lane_row_locked_by_another_transaction_is_skipped_not_waited_for(ctx, database_url):
    import psycopg2

    from feather.sync.lanes import lease_lanes

    make_lanes(3)
    assert lease_lanes("proc-a", T0, 0) == []  # adds the lane rows, leases nothing
    other = psycopg2.connect(database_url)
    try:
        with other.cursor() as cur:  # an open transaction holding the oldest lane's row
            cur.execute("SELECT * FROM sync_lanes WHERE owner_did = %s FOR UPDATE", (owner(0),))
            assert cur.rowcount == 1
        with gevent.Timeout(5):  # FOR UPDATE without SKIP LOCKED would wait here for ever
            got = lease_lanes("proc-a", T0, 8)
        assert got == [(owner(1), "bluesky"), (owner(2), "bluesky")]  # the free lease on lane 0 is passed over
        other.rollback()
        assert lease_lanes("proc-b", T0, 8) == [(owner(0), "bluesky")]
    finally:
        other.close()


def test_dialect_claiming_sql():
    from feather.dialect import POSTGRESQL, SQLITE

    assert SQLITE.skip_locked("l") == ""
    assert POSTGRESQL.skip_locked("l") == " FOR UPDATE OF l SKIP LOCKED"
    assert SQLITE.xact_lock_sql(7) is None
    assert POSTGRESQL.xact_lock_sql(7) == "SELECT pg_advisory_xact_lock(7)"


# --- scheduling: every worker process ticks its runner


def test_the_runner_job_is_not_claimed_so_every_worker_process_runs_it(app):
    from feather.features import Job
    from feather.process.scheduler import guarded
    from feather.sync import jobs

    by_id = {j.id: j for j in jobs(app.config["FEATHER"])}
    assert by_id["sync-runner"].claimed is False
    assert all(j.claimed for name, j in by_id.items() if name != "sync-runner")
    calls = []
    guarded(app, Job("free", lambda: calls.append("free"), 60, claimed=False), claim=lambda name: False)()
    guarded(app, Job("held", lambda: calls.append("held"), 60), claim=lambda name: False)()
    assert calls == ["free"]


# --- holders that are gone (feather/locks.py)

@pytest.fixture
def exited_holder():
    """A holder name for a process of this machine that has exited (and was reaped)."""
    import subprocess

    from feather.locks import holder_name

    proc = subprocess.Popen(["sleep", "30"])
    name = holder_name(proc.pid)
    proc.kill()
    proc.wait()
    return name


@pytest.fixture
def running_holder():
    """A holder name for a process of this machine that still runs."""
    import subprocess

    from feather.locks import holder_name

    proc = subprocess.Popen(["sleep", "30"])
    yield holder_name(proc.pid)
    proc.kill()
    proc.wait()


def test_the_leases_of_a_process_that_is_gone_are_taken_at_once_and_the_rest_wait_for_expiry(
        ctx, exited_holder, running_holder, caplog):
    from feather.sync.lanes import lease_lanes

    make_lanes(8)
    assert len(lease_lanes(running_holder, T0, 2)) == 2  # lanes 0-1
    assert len(lease_lanes("peer-on-another-machine", T0, 4)) == 2  # lanes 2-3, a name with no mark
    assert len(lease_lanes(exited_holder, T0, 7)) == 3  # lanes 4-6
    # One second later, long before the leases expire: the gone process's three lanes are free and
    # taken (seven at most: exactly the three freed slots); the others stay their holders'.
    with caplog.at_level("WARNING", logger="feather.sync.lanes"):
        taken = lease_lanes("restarted", T0 + 1, 7)
    assert taken == [(owner(i), "bluesky") for i in (4, 5, 6)]
    assert leases() == ([(owner(i), running_holder, T0 + 60) for i in (0, 1)]
                        + [(owner(i), "peer-on-another-machine", T0 + 60) for i in (2, 3)]
                        + [(owner(i), "restarted", T0 + 61) for i in (4, 5, 6)])
    assert [r.getMessage() for r in caplog.records] == [
        f"sync: freed 3 lane lease(s) of {exited_holder} at once: that process is gone"]


def test_a_gone_holders_lease_in_its_last_second_is_freed_too(ctx, exited_holder):
    from feather.sync.lanes import lease_lanes

    make_lanes(1)
    assert lease_lanes(exited_holder, T0, 8) == [(owner(0), "bluesky")]
    assert lease_lanes("restarted", T0 + 60, 8) == [(owner(0), "bluesky")]  # lease_until == now: still live


_ZOMBIE_KEEPER = """
import os, subprocess, sys, time
sys.path.insert(0, os.getcwd())
from feather.locks import holder_name
child = subprocess.Popen(["sleep", "30"])
name = holder_name(child.pid)
child.kill()
while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
    time.sleep(0.01)
print(name, flush=True)
time.sleep(30)
"""


def test_a_holder_is_gone_only_on_this_machine_and_namespace_with_its_pid_and_start_time_absent(
        exited_holder, running_holder):
    import subprocess
    import sys

    from feather.locks import gone, holder_name

    assert gone(exited_holder) is True
    assert gone(running_holder) is False
    assert gone(holder_name()) is False  # this very process
    # A process killed but not yet reaped by its parent (a zombie) runs no more. This process's
    # gevent reaps its children at once, so a plain Python child makes and keeps one.
    keeper = subprocess.Popen([sys.executable, "-c", _ZOMBIE_KEEPER], stdout=subprocess.PIPE, text=True)
    try:
        name = keeper.stdout.readline().strip()
        assert name.count("@") == 1, name
        with open(f"/proc/{name.split(':')[1]}/stat") as f:
            assert f.read().rsplit(")", 1)[1].split()[0] == "Z"  # still there, as a zombie
        assert gone(name) is True
    finally:
        keeper.kill()
        keeper.wait()
    name, mark = running_holder.split("@")
    where, started = mark.rsplit(".", 1)
    # The pid runs but started at another time: the pid was reused, the holder is gone.
    assert gone(f"{name}@{where}.{int(started) + 1}") is True
    # Another boot or another pid namespace (a container): never known to be gone.
    boot, ns = where.split(".")
    assert gone(f"{exited_holder.split('@')[0]}@{'0' * 16}.{ns}.1") is False
    assert gone(f"{exited_holder.split('@')[0]}@{boot}.1.1") is False
    assert gone(exited_holder.split("@")[0]) is False  # no mark: an older name, or no /proc
    assert gone(None) is False and gone("") is False and gone("host:x:tok@" + mark) is False


def test_start_time_is_the_processes_start_in_ticks_since_boot():
    import os
    import subprocess
    import time

    from feather.locks import start_time

    time.sleep(0.05)  # a clock tick is 10 ms: the child starts at least a few ticks after this process
    child = subprocess.Popen(["sleep", "30"])
    try:
        ours, theirs = int(start_time(os.getpid())), int(start_time(child.pid))
        assert 0 < ours < theirs
        ticks = os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        assert abs(theirs / ticks - uptime) < 5  # the child started just now, `uptime` seconds after boot
    finally:
        child.kill()
        child.wait()
    assert start_time(child.pid) is None


def test_the_runner_of_a_restarted_process_writes_the_lanes_a_killed_one_held_at_its_first_tick(
        ctx, exited_holder):
    """The runner (not just lease_lanes) of the new process frees and runs the dead holder's lanes
    at once: all their rows are deleted at the first tick, one second after the old leases began."""
    from feather.sync.lanes import lease_lanes, process_id

    make_lanes(3)
    assert len(lease_lanes(exited_holder, T0, 8)) == 3
    tracker = Tracker()
    r = runner(ctx, SlowWriter(tracker, "new", delay=lambda owner: 0), process_id(), Clock(T0 + 1))
    assert r.tick() == 3
    assert sorted(tracker.deleted) == ["r00x0", "r01x0", "r02x0"]
    assert pending() == 0 and leases() == []


def test_a_holder_name_for_a_pid_that_runs_nothing_carries_no_mark_and_is_never_called_gone():
    import subprocess

    from feather.locks import gone, holder_name

    proc = subprocess.Popen(["sleep", "30"])
    proc.kill()
    proc.wait()
    name = holder_name(proc.pid)  # no start time to record: nothing could later prove it gone
    assert "@" not in name and name.split(":")[1] == str(proc.pid)
    assert gone(name) is False


def test_start_time_counts_fields_from_the_last_parenthesis_of_the_command_name(tmp_path):
    import os
    import shutil
    import subprocess

    from feather.locks import start_time

    odd = tmp_path / "a) b"  # the command name (field 2) holds ") ": fields shift if cut at the first ")"
    shutil.copy(shutil.which("sleep"), odd)
    child = subprocess.Popen([str(odd), "30"])
    try:
        with open(f"/proc/{child.pid}/stat") as f:
            assert "(a) b)" in f.read()
        assert int(start_time(child.pid)) >= int(start_time(os.getpid())) > 0
    finally:
        child.kill()
        child.wait()


def test_without_a_boot_id_holder_names_carry_no_mark(tmp_path, monkeypatch):
    """A /proc without sys/kernel/random/boot_id (some sandboxes): pids cannot be tied to a boot."""
    import os

    from feather import locks

    (tmp_path / "self" / "ns").mkdir(parents=True)
    os.symlink("pid:[4026531836]", tmp_path / "self" / "ns" / "pid")
    (tmp_path / str(os.getpid())).mkdir()
    (tmp_path / str(os.getpid()) / "stat").write_text(
        f"{os.getpid()} (python) S" + " 0" * 18 + " 12345 0 0")
    monkeypatch.setattr(locks, "_PROC", tmp_path)
    assert locks.start_time(os.getpid()) == "12345"
    name = locks.holder_name()
    assert "@" not in name and locks.gone(name) is False
