"""From what the workers published to "is the service doing its work?": shared by /health and /admin.

Pure: it takes the saved cursors, the published rows (feather.process.status.read) and the settings, and
returns each stream's and job's facts plus the reasons the service is degraded, worded for an
operator. A stream that is not connected, lags, or a job failing its last N runs is degraded;
a stream with no account to follow (an empty sync shard) is idle by design, not degraded, and
one whose reader has not taken its first step yet (just started) is not judged yet.

Two audiences. /admin (operators) gets everything: which process owns each piece and the full
last error, in the facts and appended to each reason (`detailed`). /health is public, and a raw
error string can name a private host, a port, a path or an account, and an owner names a machine
and a pid: `reasons` never carries error text, and `public()` copies only the listed fields of a
fact, so a field added here later stays off /health until someone decides it is safe there.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

DISCONNECTED_GRACE_SECS = 60.0


@dataclass
class Verdict:
    streams: dict = field(default_factory=dict)
    jobs: dict = field(default_factory=dict)
    tasks: dict = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)  # public: no error text
    detailed: list[str] = field(default_factory=list)  # the same reasons with their last error, for /admin

    def add(self, reason: str, error: str | None = None) -> None:
        self.reasons.append(reason)
        self.detailed.append(f"{reason} (last error: {error})" if error else reason)


# What /health may show of a stream or a job: no owner, no error text (`had_error` and
# `last_error_at` say that there was one, and when).
PUBLIC_STREAM_FIELDS = ("cursor_time_us", "last_applied_at", "paused", "state", "host", "connected",
                        "connected_since", "lag_secs", "events_per_sec", "last_error_at", "restarts", "idle")
PUBLIC_JOB_FIELDS = ("state", "last_run_at", "last_duration_ms", "last_ok_at", "last_error_at", "runs",
                     "failures", "streak", "every_secs")


def public(facts: dict, fields: tuple[str, ...]) -> dict:
    out = {k: facts[k] for k in fields if k in facts}
    if "last_error" in facts:
        out["had_error"] = bool(facts["last_error"])
    return out


def _ago(seconds: float) -> str:
    seconds = int(max(0, seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def saved_streams(cursors) -> dict:
    """judge()'s `saved` from the saved cursors (jetstream/store.py's cursor_rows): {name: facts}."""
    return {c.name: {"cursor_time_us": c.time_us, "last_applied_at": c.last_applied_at, "paused": c.paused_reason}
            for c in cursors}


def judge(saved: dict, published: dict, settings, now: float | None = None) -> Verdict:
    now = time.time() if now is None else now
    out = Verdict()
    max_lag = settings.featherreader_health_max_lag_secs
    max_failures = settings.featherreader_health_job_failures
    streams = {name: rows[0] for name, rows in published.get("stream", {}).items()}
    tasks = {name: rows[0] for name, rows in published.get("task", {}).items()}
    expected: set[str] = set()
    for row in published.get("task", {}).get("jetstream-engine", []):
        expected.update(row.get("subscriptions") or [])

    if not published:
        if settings.featherreader_disable_scheduler:
            out.add("background workers are disabled (FEATHERREADER_DISABLE_SCHEDULER=1): "
                    "nothing is ingested and no job runs")
        else:
            out.add("no process is running the background workers (or none has reported in the "
                    "last 30 s): nothing is ingested and no job runs")

    for name in sorted(set(saved) | set(streams) | expected):
        facts = dict(saved.get(name) or {"cursor_time_us": None, "last_applied_at": None, "paused": None})
        row = streams.get(name)
        if row is None:
            if name in expected:
                out.add(f"stream {name}: no process is running it")
            if name in saved or name in expected:
                facts["state"] = "not running"
                out.streams[name] = facts
            continue
        facts.update(
            state=row.get("state"), host=row.get("host"), connected=row.get("connected"),
            connected_since=row.get("connected_since"), lag_secs=row.get("lag_secs"),
            events_per_sec=row.get("events_per_sec"), last_error=row.get("last_error"),
            last_error_at=row.get("last_error_at"), restarts=row.get("restarts", 0), idle=row.get("idle"),
            owner=row.get("owner"), subscribed=row.get("subscribed"),
        )
        if row.get("cursor_time_us") and (facts["cursor_time_us"] or 0) < row["cursor_time_us"]:
            facts["cursor_time_us"] = row["cursor_time_us"]  # applied, not saved yet
        out.streams[name] = facts
        for reason, error in _stream_reasons(name, row, facts, max_lag, now):
            out.add(reason, error)

    for name, rows in sorted(published.get("job", {}).items()):
        # A job claimed=False runs in every worker: judge each; show the freshest.
        row = rows[0]
        out.jobs[name] = {k: row.get(k) for k in ("state", "last_run_at", "last_duration_ms", "last_ok_at",
                                                 "last_error", "last_error_at", "runs", "failures",
                                                 "streak", "every_secs", "owner")}
        for one in rows:
            if (one.get("streak") or 0) >= max_failures:
                out.add(f"job {name} failed its last {one['streak']} runs", one.get("last_error"))
                break

    for name, row in sorted(tasks.items()):
        out.tasks[name] = {k: row.get(k) for k in ("state", "restarts", "last_error", "last_error_at", "owner")}
        if row.get("state") == "retrying":
            out.add(f"background task {name} is failing and being restarted", row.get("last_error"))
    return out


def _stream_reasons(name: str, row: dict, facts: dict, max_lag: int,
                    now: float) -> list[tuple[str, str | None]]:
    """(reason, the last error behind it or None) for one published stream."""
    paused = facts.get("paused") or (row.get("paused") and "paused")
    if paused:
        return [(f"stream {name}: paused by the disk watermark ({paused})", None)]
    if row.get("idle") or row.get("starting"):
        return []
    error = row.get("last_error")
    if not row.get("connected"):
        if not row.get("ever_connected"):
            return [(f"stream {name} has not connected to Jetstream", error)]
        since = row.get("disconnected_since") or now
        if now - since > DISCONNECTED_GRACE_SECS:
            return [(f"stream {name} has been disconnected for {_ago(now - since)}", error)]
        return []
    lag = row.get("lag_secs")
    if lag is not None and lag > max_lag:
        return [(f"stream {name} is {_ago(lag)} behind the live stream (more than {max_lag} s)", None)]
    return []
