"""records.record_time_us reads the canonical createdAt shape on a fast path; every string must get
exactly the answer of the general parser (parse_datetime), valid or not."""
from __future__ import annotations

import random

from feather.atproto.syntax import InvalidSyntax, parse_datetime
from feather.feeds.store import records

SOURCE_US = 1_900_000_000_000_000  # later than every valid claim below, so the claim is what shows


def reference(created: str) -> int:
    try:
        stamp = parse_datetime(created)
    except (InvalidSyntax, ValueError, OverflowError):
        return SOURCE_US
    return min(int(stamp.timestamp()) * 1_000_000 + stamp.microsecond, SOURCE_US)


def near_canonical(rng: random.Random) -> str:
    """Mostly the canonical shape, with field values at and past their limits, odd fractions
    and the occasional other zone or mangled character."""
    year = rng.choice([0, 1, 1969, 1970, 2000, 2024, 2025, 2100, 9999, rng.randrange(10000)])
    fields = [f"{year:04d}", f"{rng.choice([0, 1, 2, 9, 12, 13, rng.randrange(100)]):02d}",
              f"{rng.choice([0, 1, 28, 29, 30, 31, 32, rng.randrange(100)]):02d}"]
    clock = [f"{rng.choice([0, 23, 24, rng.randrange(100)]):02d}", f"{rng.choice([0, 59, 60, rng.randrange(100)]):02d}",
             f"{rng.choice([0, 59, 60, 61, rng.randrange(100)]):02d}"]
    frac = rng.choice(["", ".", ".0", ".5", ".123", ".123456", ".1234567", ".999999999", ".000001", ".0123456", ".00000019"])
    zone = rng.choice(["Z"] * 8 + ["z", "+00:00", "-00:00", "+05:30", ""])
    text = "-".join(fields) + "T" + ":".join(clock) + frac + zone
    if rng.random() < 0.05:
        i = rng.randrange(len(text))
        text = text[:i] + rng.choice(["٣", " ", "x", "t", ""]) + text[i + 1:]
    return text


def canonical(rng: random.Random) -> str:
    """A valid canonical stamp anywhere in years 1..9999 (day up to 31: some overflow a month)."""
    frac = rng.choice(["", "." + str(rng.randrange(1000)).zfill(3), "." + str(rng.randrange(10**6)).zfill(6)])
    return (f"{rng.randrange(1, 10000):04d}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 32):02d}"
            f"T{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}{frac}Z")


def test_the_fast_path_gives_the_general_parsers_answer_for_every_string():
    rng = random.Random(19)
    samples = [near_canonical(rng) for _ in range(30_000)] + [canonical(rng) for _ in range(20_000)] + [
        "2025-01-01T00:00:00.000Z", "2024-02-29T12:00:00Z", "2023-02-29T12:00:00Z", "1969-12-31T23:59:59.5Z",
        "0000-01-01T00:00:00Z", "2025-01-01T24:00:00Z", "2025-01-01T00:00:60Z", "٢٠٢٥-01-01T00:00:00Z",
        "2025-01-01t00:00:00Z", "2025-01-01T00:00:00z", "2025-01-01 00:00:00Z", "2025-01-01T00:00:00.1234567Z", "2025-01-01T00:00:00.0123456Z",
        "2025-01-01T00:00:00.Z", "2025-1-01T00:00:00Z", "2025-01-01T00:00Z", "+2025-01-01T00:00:00Z"]
    fast_taken = 0
    for created in samples:
        fast_taken += records._canonical_stamp(created) is not None
        assert records.record_time_us({"createdAt": created}, SOURCE_US) == reference(created), created
    assert fast_taken > 15_000  # the comparison covered the fast path, not only the fallback


def test_a_canonical_stamp_keeps_its_microseconds_and_a_future_one_takes_the_source_time():
    assert records.record_time_us({"createdAt": "2025-10-09T08:53:20.123456Z"}, SOURCE_US) == 1_760_000_000_123_456
    assert records.record_time_us({"createdAt": "2025-10-09T08:53:20.1Z"}, SOURCE_US) == 1_760_000_000_100_000
    assert records.record_time_us({"createdAt": "2099-01-01T00:00:00Z"}, 1_760_000_000_000_000) == 1_760_000_000_000_000


def test_a_stored_record_that_is_not_json_reads_back_as_its_raw_text():
    assert records.parse_value('{"text":"hi"}') == {"text": "hi"}
    assert records.parse_value('{"text":') == '{"text":'
    assert records.parse_value(None) is None
