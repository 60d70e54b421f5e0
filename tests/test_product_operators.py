"""Issue 18, operators: a configuration error is one line naming the variable, the key command works
while the configuration is incomplete, `make run` binds loopback, `make demo` takes both ports."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PUBLIC_URL_LINE = ("feather: configuration error: FEATHERREADER_PUBLIC_URL: production needs the https origin users "
                   "reach this instance at, e.g. https://feather.example.com (it becomes the OAuth client_id)")


def production_env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FEATHERREADER_", "SECRET_KEY", "DATABASE_URL"))}
    env.update(FEATHERREADER_ENV="production", SECRET_KEY="a-long-enough-secret-for-this-test-0123456789",
               DATABASE_URL=f"sqlite:///{tmp_path}/feather.db", FEATHERREADER_DATA_DIR=str(tmp_path / "data"), **extra)
    return env


def test_importing_the_app_with_a_missing_production_setting_prints_one_line_and_exits_3(tmp_path):
    r = subprocess.run([sys.executable, "-c", "import app"], cwd=REPO, env=production_env(tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr.strip(), r.stdout) == (3, PUBLIC_URL_LINE, "")


def test_a_malformed_setting_is_named_with_what_it_accepts(tmp_path):
    r = subprocess.run([sys.executable, "-c", "import app"], cwd=REPO, env=production_env(tmp_path, PORT="eighty"),
                       capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr.strip()) == (3, "feather: configuration error: PORT: expected a whole number; got 'eighty'")


def test_the_oauth_key_command_works_and_is_listed_while_the_configuration_is_incomplete(tmp_path):
    import json

    env = production_env(tmp_path)
    listed = subprocess.run([str(BIN / "flask"), "--app", "app", "--help"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0 and "new-oauth-client-key" in listed.stdout
    assert "Traceback" not in listed.stderr and PUBLIC_URL_LINE in listed.stderr
    made = subprocess.run([str(BIN / "flask"), "--app", "app", "new-oauth-client-key"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    (key,) = json.loads(made.stdout)["keys"]
    assert (made.returncode, key["kty"], key["crv"], "d" in key) == (0, "EC", "P-256", True)


def make_dry_run(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("HOST", "PORT", "JETSTREAM_PORT")}
    return subprocess.run(["make", "-n", "-W", "pyproject.toml", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60).stdout


def test_make_run_binds_loopback_unless_told_otherwise():
    assert "--bind 127.0.0.1:8000 app:app" in make_dry_run("run")
    assert "--bind 0.0.0.0:9000 app:app" in make_dry_run("run", "HOST=0.0.0.0", "PORT=9000")


def test_make_demo_takes_both_ports():
    assert "demo/run.py --port 8000 --jetstream-port 6008" in make_dry_run("demo")
    assert "demo/run.py --port 9000 --jetstream-port 7008" in make_dry_run("demo", "PORT=9000", "JETSTREAM_PORT=7008")


def test_the_docs_list_every_setting_production_requires_and_the_key_command():
    for doc, end in (("docs/operating.md", "## Behind a proxy"), ("README.md", "## Code map")):
        text = (REPO / doc).read_text()
        section = text[text.index("## Running it for real"):text.index(end)]
        for needed in ("`SECRET_KEY`", "`FEATHERREADER_PUBLIC_URL`", "`FEATHERREADER_OAUTH_CLIENT_KEYS`",
                       "flask --app app new-oauth-client-key"):
            assert needed in section, f"{doc}: {needed}"


def test_no_file_in_the_repository_names_a_path_outside_it():
    """Docstrings, pages and docs point at the repository only (docs/design.md explains the designs)."""
    # Derived from where this checkout sits, so the test names no outside path itself: the folder
    # that holds the repository, and `../<name>` for every folder beside it.
    beside = [d.name for d in REPO.parent.iterdir() if d.is_dir() and d != REPO]
    needles = [re.compile(rf"\.\./{re.escape(n)}\b") for n in beside]
    if REPO.parent != REPO.parent.parent:  # a checkout at the root (/repo) has no enclosing folder to name
        needles.append(re.compile(re.escape(f"{REPO.parent}/")))
    outside = []
    for folder in ("feather", "templates", "migrations", "tests", "docs", "demo", "bench", "static/css"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".html", ".md", ".css", ".mjs") and "node_modules" not in path.parts:
                text = path.read_text(errors="replace")
                outside += [f"{path.relative_to(REPO)}: {n.pattern}" for n in needles if n.search(text)]
    assert outside == []
