"""`make bench`: run every benchmark at full size and print one table of their ratio lines, then
the headline figures (bench/report.py) as one table: measure, Feather, bare baseline, ratio, goal.

Each script measures its own bare baseline in the same run; this only collects what they print.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.report import PREFIX, collect, table

BENCHES = [
    ("ingest", [sys.executable, "bench/ingest.py", "--events", "100000"]),
    ("service", [sys.executable, "bench/service.py", "--events", "100000"]),
    ("admission", [sys.executable, "bench/admission.py", "--events", "1000000"]),
    ("narrow", [sys.executable, "bench/narrow.py"]),
    ("scale", [sys.executable, "bench/scale.py"]),
    ("fanout", [sys.executable, "bench/fanout.py"]),
    ("getfeed", [sys.executable, "bench/getfeed.py"]),
    ("load", [sys.executable, "bench/load.py"]),
    ("load-split", [sys.executable, "bench/load.py", "--split"]),
    ("chaos", [sys.executable, "-m", "pytest", "-q", "tests/test_chaos.py", "-p", "no:cacheprovider"]),
    ("hostile", [sys.executable, "bench/hostile.py"]),
]
if os.environ.get("DATABASE_URL", "").startswith("postgres"):  # on scratch databases beside it
    BENCHES.insert(1, ("ingest-pg", [sys.executable, "bench/ingest.py", "--events", "100000",
                                     "--postgres", os.environ["DATABASE_URL"]]))
    BENCHES.insert(3, ("service-pg", [sys.executable, "bench/service.py", "--events", "100000",
                                      "--postgres", os.environ["DATABASE_URL"]]))
    BENCHES.insert(BENCHES.index(next(b for b in BENCHES if b[0] == "scale")) + 1,
                   ("scale-pg", [sys.executable, "bench/scale.py", "--postgres", os.environ["DATABASE_URL"]]))
    BENCHES.insert(11, ("load-pg", [sys.executable, "bench/load.py", "--split", "--postgres", os.environ["DATABASE_URL"],
                                   "--web-procs", "2", "--worker-procs", "2"]))


def main() -> int:
    rows, failed, figures = [], 0, []
    env = dict(os.environ, FEATHER_CHAOS_EVENTS=os.environ.get("FEATHER_CHAOS_EVENTS", "100000"))
    for name, cmd in BENCHES:
        started = time.time()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        took = time.time() - started
        figures += collect(proc.stdout)
        lines = [line.strip() for line in proc.stdout.splitlines() if not line.startswith(PREFIX)
                 and any(word in line for word in ("ratio", "5xx", "RSS", "passed", "failed", "×", "events/s", "narrow/whole",
                                                   "skipped", "DIFFER", "ERROR"))]
        if proc.returncode != 0:
            failed += 1
            lines.append(f"FAILED (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
        rows.append((name, took, lines))
        print(f"... {name} done in {took:.0f}s", file=sys.stderr)
    print(f"\n{'bench':8s} {'secs':>5s}  figures")
    for name, took, lines in rows:
        for i, line in enumerate(lines or ["(no output)"]):
            print(f"{name if i == 0 else '':8s} {f'{took:.0f}' if i == 0 else '':>5s}  {line}")
    print("\nHeadline figures (each against its bare baseline from the same run):")
    for line in table(figures):
        print("  " + line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
