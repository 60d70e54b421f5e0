"""One machine-readable line per headline figure, so `make bench` can end with one table of them.

A script prints its human lines as before and, for each figure the table carries, one
`FIGURE {json}` line: the measure, Feather's value, the bare baseline measured in the same run,
the ratio between them and the goal. bench/run_all.py collects these lines from every script.
"""
from __future__ import annotations

import json

PREFIX = "FIGURE "
# The ingest goal (at least a quarter of the bare socket's rate) is for the service as shipped, every
# feature on and FEED_SERVE at its default. A full index (FEED_SERVE=all) is an operator's opt-in
# whose cost follows the network's follow fan-in, not the event count; its goal is absolute: the
# public Jetstream sends at most 5,000 events/s to one address, so a catch-up after an outage is
# bounded by the stream, not by Feather, only when Feather applies at least that many
# (docs/performance.md, "Ingest cost").
INGEST_GOAL = ">= 0.25"
CATCH_UP_RATE = 5_000


def full_index_goal(rate: float) -> str:
    return f">= {CATCH_UP_RATE:,} events/s ({'met' if rate >= CATCH_UP_RATE else 'not met'})"


def figure(measure: str, feather: float, bare: float | None, unit: str, goal: str = "") -> None:
    ratio = feather / bare if bare else None
    print(PREFIX + json.dumps({"measure": measure, "unit": unit, "feather": feather, "bare": bare,
                               "ratio": ratio, "goal": goal}), flush=True)


def collect(text: str) -> list[dict]:
    return [json.loads(line[len(PREFIX):]) for line in text.splitlines() if line.startswith(PREFIX)]


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "events/s":
        return f"{value:,.0f}"
    if unit == "MiB":
        return f"{value:.0f}"
    return f"{value:.2f}"


def table(figures: list[dict]) -> list[str]:
    """The headline table: one row per figure, in the order the scripts printed them."""
    rows = [("measure", "Feather", "bare baseline", "ratio", "goal")]
    for f in figures:
        ratio = "–" if f["ratio"] is None else f"{f['ratio']:.2f}"
        rows.append((f"{f['measure']} ({f['unit']})", _number(f["feather"], f["unit"]),
                     _number(f["bare"], f["unit"]), ratio, f["goal"] or "–"))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
            for row in rows]
