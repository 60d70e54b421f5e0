"""Who holds what across processes: the advisory-lock key of a claim, and lease holders that can be
proven dead, so their leases need not wait out their expiry.

`lock_key` is the one mapping from a claim name to a PostgreSQL advisory-lock key: the process
runtime's claims (feather/process/workers.py), sync's capacity and lane locks and the feeds' write
lock (feather/feeds/serial.py) take their locks through it, so one name is one lock everywhere.

A lease names its holder. After a `kill -9` nobody clears the lease, and the work behind it (a
sync lane, a token refresh) waits until the lease expires: a minute during which the owner's
page says "writing now" and nothing is written. A holder name made here carries where its pid
means something: the kernel's boot id, the pid namespace and the process's start time. Another
process calls the holder gone only when the boot and the namespace are its own and /proc has no
process with that pid and that start time. Anything else (another machine, another container, a
name without the mark, a system without /proc) is "not known to be gone", and the lease expires
as it always did. So a live holder is never robbed: at worst a dead one waits out its lease.
"""
from __future__ import annotations

import hashlib
import os
import secrets
import socket
from pathlib import Path

_PROC = Path("/proc")


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for a claim name."""
    return int.from_bytes(hashlib.sha256(f"feather:{name}".encode()).digest()[:8], "big", signed=True)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _namespace() -> str | None:
    """This machine's boot and this process's pid namespace, as `boot.ns`; None without /proc."""
    boot = _read(_PROC / "sys/kernel/random/boot_id")
    try:
        ns = os.readlink(_PROC / "self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    if not boot:
        return None
    return f"{boot.replace('-', '')[:16]}.{ns.removeprefix('pid:[').removesuffix(']')}"


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat, field 22); None if no
    such process runs. A zombie (state Z or X: killed, not yet reaped by its parent) runs no more.
    The command name (field 2) may hold spaces and parentheses: fields are counted from its
    closing parenthesis."""
    stat = _read(_PROC / str(pid) / "stat")
    if stat is None or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if len(fields) <= 19 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def holder_name(pid: int | None = None) -> str:
    """`host:pid:token` plus, where it can be checked, `@boot.ns.start` for process pid (default
    this one). The token tells apart two holders that share a pid across machines or restarts."""
    pid = os.getpid() if pid is None else pid
    name = f"{socket.gethostname()}:{pid}:{secrets.token_hex(4)}"
    where, started = _namespace(), start_time(pid)
    return f"{name}@{where}.{started}" if where and started else name


def gone(holder: str | None) -> bool:
    """Whether holder (a holder_name) is provably a process that no longer runs (see the module)."""
    if not holder or "@" not in holder:
        return False
    name, _, mark = holder.rpartition("@")
    where, _, started = mark.rpartition(".")
    parts = name.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or not where or where != _namespace():
        return False
    return start_time(int(parts[1])) != started
