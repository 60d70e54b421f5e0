"""An in-memory PDS that speaks the FollowWriter protocol, for tests and offline development.

It keeps each owner's follow records per collection, the profiles that exist, a commit log that
can be replayed as Jetstream events (the echo of every write, in repo order), and a queue of
faults the next write calls consume: "429", "500", "401", "timeout" (nothing written) and
"timeout_after_success" (written, then the caller sees a network error). Like the reference PDS,
a create at an rkey that already exists answers 500.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable

from feather.atproto.syntax import encode_tid
from feather.jetstream.events import CommitEvent
from feather.sync.follow_writer import AuthExpired, NetworkError, RateLimited, ServerError, SessionGone

FAULTS = ("429", "500", "401", "timeout", "timeout_after_success")


class MemoryPds:
    def __init__(self, clock: Callable[[], float] | None = None):
        self.clock = clock or (lambda: 0)
        self.repos: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)  # (did, collection) -> rkey -> subject
        self.profiles: set[tuple[str, str]] = set()
        self.log: list[CommitEvent] = []  # every commit, in order
        self.faults: list[str] = []
        self.writes: list[tuple] = []  # (op, owner, collection, rkey, subject) of calls that changed the repo
        self.signed_out: set[str] = set()
        self.page_size = 100
        self._time_us = 0  # event times follow the clock (seconds), strictly increasing like Jetstream's

    # --- what users (not sync) do
    def user_follow(self, owner: str, collection: str, subject: str, rkey: str | None = None) -> CommitEvent:
        return self._create(owner, collection, rkey or self._tid(), subject)

    def user_unfollow(self, owner: str, collection: str, rkey: str) -> CommitEvent | None:
        return self._delete(owner, collection, rkey)

    def add_profile(self, did: str, collection: str) -> CommitEvent:
        self.profiles.add((did, collection))
        return self._event(did, "create", collection, "self", {"$type": collection})

    def records(self, owner: str, collection: str) -> dict[str, str]:
        return dict(self.repos[(owner, collection)])

    # --- FollowWriter
    def profile_exists(self, subject: str, collection: str) -> bool:
        return (subject, collection) in self.profiles

    def get_follow(self, owner: str, collection: str, rkey: str) -> str | None:
        return self.repos[(owner, collection)].get(rkey)

    def create_follow(self, owner: str, collection: str, rkey: str, subject: str, created_at: str) -> None:
        fault = self._fault(owner)
        if fault == "timeout":
            raise NetworkError("timed out")
        if rkey in self.repos[(owner, collection)]:
            raise ServerError("duplicate rkey", status=500)
        self._create(owner, collection, rkey, subject)
        self.writes.append(("create", owner, collection, rkey, subject))
        if fault == "timeout_after_success":
            raise NetworkError("timed out after the write")

    def delete_follow(self, owner: str, collection: str, rkey: str) -> None:
        fault = self._fault(owner)
        if fault == "timeout":
            raise NetworkError("timed out")
        subject = self.repos[(owner, collection)].get(rkey)
        if self._delete(owner, collection, rkey) is not None:
            self.writes.append(("delete", owner, collection, rkey, subject))
        if fault == "timeout_after_success":
            raise NetworkError("timed out after the write")

    def list_follows(self, owner: str, collection: str, cursor: str | None):
        items = sorted(self.repos[(owner, collection)].items())
        if cursor is not None:
            items = [item for item in items if item[0] > cursor]
        page = items[: self.page_size]
        more = len(items) > self.page_size
        return page, (page[-1][0] if more else None)

    # --- internals
    def _fault(self, owner: str) -> str | None:
        if owner in self.signed_out:
            raise SessionGone(f"{owner} signed out", status=401)
        fault = self.faults.pop(0) if self.faults else None
        if fault == "429":
            raise RateLimited("rate limited", reset_at=self.clock() + 120)
        if fault == "500":
            raise ServerError("internal error", status=500)
        if fault == "401":
            raise AuthExpired("token expired", status=401)
        return fault

    def _create(self, owner, collection, rkey, subject) -> CommitEvent:
        self.repos[(owner, collection)][rkey] = subject
        return self._event(owner, "create", collection, rkey, {"$type": collection, "subject": subject,
                                                                 "createdAt": "2026-01-01T00:00:00.000Z"})

    def _delete(self, owner, collection, rkey) -> CommitEvent | None:
        if self.repos[(owner, collection)].pop(rkey, None) is None:
            return None
        return self._event(owner, "delete", collection, rkey, None)

    def _tick_us(self) -> int:
        self._time_us = max(self._time_us + 1, int(self.clock() * 1_000_000))
        return self._time_us

    def _tid(self) -> str:
        """A record key minted now, like a PDS does: its time is the record's birth."""
        return encode_tid(self._tick_us(), 0)

    def _event(self, did, op, collection, rkey, record) -> CommitEvent:
        self._tick_us()
        event = CommitEvent(did, self._time_us, op, collection, rkey, record,
                            None if record is None else f"bafy{self._time_us}")
        self.log.append(event)
        return event
