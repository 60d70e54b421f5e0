"""The guards make test runs first, and the live tests: nightly and only nightly: a scheduled workflow runs `make nightly`, which
selects exactly the `live` tests with FEATHER_LIVE_NETWORK=1; every other run deselects them."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.once


def test_the_nightly_workflow_is_scheduled_never_on_pull_requests_and_runs_make_nightly():
    text = (REPO / ".github/workflows/nightly.yml").read_text()
    triggers = text.split("\non:", 1)[1].split("\njobs:", 1)[0]
    assert re.search(r'^\s+- cron: "[0-9]+ [0-9]+ \* \* \*"$', triggers, re.M)
    assert "pull_request" not in triggers and "push" not in triggers
    assert re.findall(r"^\s+- run: (.+)$", text, re.M) == ["make nightly"]


def test_make_nightly_selects_the_live_tests_with_the_network_switch_on():
    dry = subprocess.run(["make", "-n", "nightly"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "FEATHER_LIVE_NETWORK=1 .venv/bin/pytest -m live" in dry


def collected(env_live: bool, *args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "FEATHER_LIVE_NETWORK"}
    if env_live:
        env["FEATHER_LIVE_NETWORK"] = "1"
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args,
                          "tests/test_network_portability.py"], cwd=REPO, env=env, capture_output=True, text=True).stdout
    return sorted(line.split("::")[-1] for line in out.splitlines() if "::" in line)


def test_only_the_nightly_switch_selects_the_live_tests():
    live = ["test_live_the_portability_did_is_discoverable_readable_and_reconstructed"]
    assert collected(True, "-m", "live") == live
    everyday = collected(False)
    assert everyday and not set(live) & set(everyday)


def test_make_test_runs_the_lint_guards_before_the_suite():
    dry = subprocess.run(["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    # Install steps are listed too when pyproject.toml is newer than the virtualenv's stamp.
    lines = [line for line in dry.splitlines() if line.startswith(".venv/bin/") and " install " not in line]
    assert lines == [".venv/bin/ruff check .", ".venv/bin/lint-imports", ".venv/bin/pytest "]
