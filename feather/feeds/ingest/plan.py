"""A batch's events decided in memory, in stream order, before any write.

Ingest used to run a few statements per event. Now the batch is first replayed here against
what the database held when it started (its priors, read with two SELECTs per collection):
each event becomes a Step (what it writes, and what it found), or nothing when it is a
replay (Contrail's rule: a create/update whose CID is stored, a delete of a URI that is not)
or older than the URI's tombstone. apply.py then writes the steps with a fixed number of
statements per collection and kind (batch.py).

Set-based statements do not see the batch's own order, so a step goes to the *ordered* path
when order could change its result:

- a follow event and a target write or delete that meet on the same account in one batch (F
  follows S and S posts: the post's fan-out and the follow's backfill each depend on which came
  first);
- a follow gained and a follow dropped for the same (follower, subject) in one batch (a create,
  a delete, or an edit that moves a follow's subject: whether an unfollow leaves the subject's
  rows depends on which follows remain at that moment).

Everything else commutes: the rows one step writes in feed_items are (follower, record) pairs
whose author no other kind of step in the batch touches. Every step of a URI goes the same
way, so a URI's own steps stay in order. The ordered steps are then put in the fewest runs in
which the same rule holds, each step after every earlier one it meets (segments), and each run
is written set-based too: a busy account followed and posting in every batch costs a few
runs, not a few statements per event. tests/test_feeds_batch.py checks all of it by applying
random batches both ways and comparing every table.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from feather.atproto.syntax import is_valid_did
from feather.feeds.config import Collection, FeedsConfig
from feather.feeds.store import records
from feather.jetstream.events import CommitEvent


def subject_of(value) -> str | None:
    if isinstance(value, str):
        value = records.parse_value(value)
    subject = value.get("subject") if isinstance(value, dict) else None
    return subject if is_valid_did(subject) else None


@dataclass
class Step:
    """One event that changes something. `prior` is what the URI held just before it."""
    event: CommitEvent
    coll: Collection
    prior: tuple | None  # (cid, record JSON text, time_us) or None
    text: str | None = None  # the record as stored (writes)
    time_us: int = 0  # the record's time (writes) or the event's (deletes)
    arrival: int = 0  # stored order, strictly increasing in stream order (hybrid compares it)
    is_follow: bool = False
    is_target: bool = False
    subject_before: str | None = None  # a follow's subject before this step (set by decide)
    subject_after: str | None = None  # and after it
    uri: str = ""  # the event's, computed once: net_effect and plan read it several times a step

    def __post_init__(self) -> None:
        if not self.uri:
            self.uri = self.event.uri

    @property
    def deletes(self) -> bool:
        return self.event.operation == "delete"

    @property
    def backfills(self) -> str | None:
        """The subject a follow create backfills from (only a first create, never an update)."""
        if self.is_follow and self.event.operation == "create" and self.prior is None:
            return self.subject_after
        return None

    @property
    def moves_time(self) -> bool:
        """A write whose feed rows, if any exist, may carry another time than this step's: an
        edit that moved it, or a record not stored here (feed rows can outlive a trimmed record)."""
        return self.prior is None or self.prior[2] != self.time_us

    @property
    def unfollows(self) -> str | None:
        """The subject this step stops following: a delete's, or an edit's that moved the subject."""
        if self.subject_before is not None and self.subject_before != self.subject_after:
            return self.subject_before
        return None

    @property
    def gains(self) -> str | None:
        """The subject this step starts following (a first create, or an edit that moved it)."""
        if self.subject_after is not None and self.subject_after != self.subject_before:
            return self.subject_after
        return None


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)  # every applied step, in stream order
    ordered: list[Step] = field(default_factory=list)  # the ones that keep their own statements
    grouped: list[Step] = field(default_factory=list)  # the rest, written set-based


def load_priors(config: FeedsConfig, events) -> tuple[dict, dict]:
    """({uri: (cid, text, time_us) or None}, {uri: latest delete time}) for every URI the batch
    touches: two SELECTs per collection."""
    wanted: dict = {}
    for event in events:
        coll = config.by_nsid(event.collection)
        if coll is not None:
            wanted.setdefault(coll.table, (coll, set()))[1].add(event.uri)
    stored: dict = {}
    stones: dict = {}
    for coll, uris in wanted.values():
        ordered = sorted(uris)
        found = records.load_many(coll, ordered)
        stored.update((uri, found.get(uri)) for uri in uris)
        stones.update(records.tombstones(ordered))
    return stored, stones


def decide(config: FeedsConfig, commits: list[CommitEvent]) -> list[Step]:
    """The steps, in stream order; each event sees the ones before it."""
    stored, stones = load_priors(config, commits)
    follow_nsids, target_nsids = config.follow_nsids, config.target_nsids
    steps: list[Step] = []
    for event in commits:
        coll = config.by_nsid(event.collection)
        if coll is None:
            continue
        uri = event.uri
        prior = stored[uri]
        step = Step(event, coll, prior, is_follow=event.collection in follow_nsids,
                    is_target=event.collection in target_nsids, uri=uri)
        if step.is_follow:
            step.subject_before = subject_of(prior[1]) if prior is not None else None
            step.subject_after = subject_of(event.record) if event.operation != "delete" else None
        if event.operation == "delete":
            if prior is None:
                continue  # a replayed delete of a URI that is not stored
            step.time_us = event.time_us
            stored[uri] = None
            stones[uri] = max(event.time_us, stones.get(uri, -1))
        else:
            if event.time_us <= stones.get(uri, -1):
                continue  # a replayed write from before the record's delete: never resurrect it
            if prior is not None and prior[0] == event.cid:
                continue
            step.text = records.dumps(event.record)
            if not records.fits(step.text):
                continue  # never stored: as if the write had not been made (the earlier version stays)
            step.time_us = records.record_time_us(event.record, event.time_us)
            stored[uri] = (event.cid, step.text, step.time_us)
        step.arrival = records.next_arrival()
        steps.append(step)
    return steps


def plan(config: FeedsConfig, commits: list[CommitEvent]) -> Plan:
    steps = decide(config, commits)
    authors = {s.event.did for s in steps if s.is_target}
    subjects: set[str] = set()
    gained, dropped = set(), set()
    for s in steps:
        if s.is_follow:
            subjects.update(x for x in (s.subject_before, s.subject_after) if x)
            if s.gains:
                gained.add((s.event.did, s.gains))
            if s.unfollows:
                dropped.add((s.event.did, s.unfollows))
    meet = (authors & subjects) | {subject for _, subject in gained & dropped}
    if meet:
        ordered_uris = {s.uri for s in steps if (s.is_target and s.event.did in meet)
                        or (s.is_follow and {s.subject_before, s.subject_after} & meet)}
    else:
        ordered_uris = set()
    out = Plan(steps)
    for s in steps:
        (out.ordered if s.uri in ordered_uris else out.grouped).append(s)
    return out


def segments(steps: list[Step]) -> list[list[Step]]:
    """Ordered steps in the fewest runs written one after another: each step goes to the first run
    after every earlier step it must follow, so steps that commute share a run whatever lies
    between them in the stream, and each run keeps stream order.

    A step must come strictly after an earlier one (a "meeting", which a run must not hold):
    - a target step by an account and a follow step touching it (either first);
    - a follow of a pair gained after one was dropped, or dropped after one was gained.
    It may share the earlier one's run, but never come before it: a step of the same URI. Any
    other two steps commute: their feed rows are of other (follower, author) pairs and neither
    reads what the other writes, or they are follows of one pair that both gain it (each
    backfill reads the same records) or both drop it (the rows go after the last, either way).

    Within a run a pair's follows then only grow and then shrink, so "no follow of it remains
    after the run" (what batch.write's unfollow delete checks) holds exactly when one of its
    unfollows left none at its own moment (what each event alone would have checked).

    Cutting the stream greedily into consecutive runs instead (the first version) made a new run
    at every meeting: a busy account followed and posting through a batch cost a run per meeting
    even when its meetings and another account's could share runs (the ingest bench: 961 runs in
    200 batches against 577 this way; each run costs its own statements)."""
    after: dict[tuple, int] = {}  # (kind, value) -> the latest run a step of that kind went to
    runs: list[list[Step]] = []
    for s in steps:
        kinds = _kinds(s)
        run = after.get(("uri", s.uri), 0)
        for kind, value in kinds:  # strictly after every earlier step this one meets
            met = after.get((MEETS[kind], value))
            if met is not None:
                run = max(run, met + 1)
        if run == len(runs):
            runs.append([])
        runs[run].append(s)
        for key in [("uri", s.uri), *kinds]:
            after[key] = max(after.get(key, 0), run)
    return runs


# A step of each kind meets the earlier steps of the other kind with the same value.
MEETS = {"target": "touches", "touches": "target", "gained": "dropped", "dropped": "gained"}


def _kinds(s: Step) -> list[tuple[str, object]]:
    """What a step is, for the meetings: a target step by an account, a follow step touching one,
    a pair (follower, subject) gained or dropped."""
    out: list[tuple[str, object]] = [("target", s.event.did)] if s.is_target else []
    if s.is_follow:
        out += [("touches", x) for x in {s.subject_before, s.subject_after} if x]
    if s.gains:
        out.append(("gained", (s.event.did, s.gains)))
    if s.unfollows:
        out.append(("dropped", (s.event.did, s.unfollows)))
    return out
