"""bench/hostile.py's table: one row per parser of outside bytes, beside a baseline measured in the
same run, and the FIGURE `make bench` puts in its headline table."""
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PARSERS = ["baseline str.count", "loads_limited", "json_depth_ok", "FetchResponse.json", "Flask JSON provider",
           "feeds.auth.verify", "auth.service _jwt_exp", "DID document key", "syntax.did_web_host",
           "syntax.parse_at_uri", "syntax.parse_datetime", "cursor.decode", "query.parse_limit", "jetstream decode",
           "ascii_int", "sync parse_apps", "publish check_text", "feeds config load"]
ROW = re.compile(r"(?P<parser>.{24}) (?P<shape>.{18}) +(?P<n>[0-9.]+) +(?P<n2>[0-9.]+) +(?P<ratio>[0-9.]+)×")


def test_the_hostile_bench_prints_a_row_per_parser_and_its_figure():
    out = subprocess.run([sys.executable, "bench/hostile.py", "--kib", "2", "--repeat", "1", "--target-ms", "1"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == ("hostile input at n = 2 KiB and 2n, best of 1: ratio t(2n)/t(n), "
                        "linear about 2×, quadratic about 4×")
    assert lines[1].split() == ["parser", "shape", "t(n)", "ms", "t(2n)", "ms", "ratio"]
    rows = [ROW.fullmatch(line) for line in lines[2:-1]]
    assert all(rows), lines[2:-1]
    assert [r["parser"].strip() for r in rows] == PARSERS
    assert all(float(r["ratio"]) > 0 for r in rows)
    assert lines[-1].startswith("FIGURE ")
    figure = json.loads(lines[-1][len("FIGURE "):])
    assert (figure["measure"], figure["unit"], figure["goal"]) == ("hostile parsers, worst t(2n)/t(n) at 2 KiB",
                                                                   "×", "<= 1.5")
    assert f"{figure['feather']:.2f}" == max((r["ratio"] for r in rows[1:]), key=float)  # the worst parser's
    assert f"{figure['bare']:.2f}" == rows[0]["ratio"]  # against the baseline row's
    assert figure["ratio"] == figure["feather"] / figure["bare"]
